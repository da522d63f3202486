#!/usr/bin/env bash
# Fails if the shared library exports any symbol that is not part of the C API (cohort_*).
set -euo pipefail
lib=$1
extra=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^cohort_' | grep -v '^$' || true)
count=$(nm -D --defined-only "$lib" | awk '$3 ~ /^cohort_/' | wc -l)
if [ -n "$extra" ]; then
  echo "symbols exported by $lib that are not cohort_*:"
  echo "$extra"
  exit 1
fi
[ "$count" -gt 10 ] || { echo "only $count cohort_* symbols exported: is the C API missing?"; exit 1; }
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
case "$soname" in libcohort.so.[0-9]*) ;; *) echo "unexpected SONAME '$soname'"; exit 1;; esac
echo "exports: $count cohort_* symbols, nothing else; SONAME $soname"
