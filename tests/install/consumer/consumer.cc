// A C++ program outside the source tree, built against an installed cohort's cohort.hpp.
#include <cohort/cohort.hpp>
#include <cstdio>

int main() {
  try {
    cohort::Config cfg;
    cfg.set("device", "cpu");
    cohort::Runtime rt(cfg);
    std::printf("consumer (C++): cohort %s, %d rank\n", cohort::version_string().c_str(), rt.size());
    return rt.size() == 1 ? 0 : 1;
  } catch (const cohort::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
