/* Preloaded into sanitizer test runs only: makes dlclose() a no-op so that modules
 * loaded with dlopen (Open MPI's components) stay mapped until exit. LeakSanitizer can
 * then name the module an allocation came from, and lsan.supp can suppress Open MPI's
 * allocations by library name instead of showing "<unknown module>" frames. */
int dlclose(void* handle) {
  (void)handle;
  return 0;
}
