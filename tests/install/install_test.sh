#!/usr/bin/env bash
# Installs cohort into a temporary prefix, then builds and runs a C program against it
# from outside the source tree: with pkg-config, and with CMake's find_package(cohort);
# and a C++17 program on cohort.hpp, with pkg-config.
# usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d /tmp/cohort-install.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
cp "$src/consumer.c" "$src/consumer.cc" "$work/"
cd "$work"

echo "== pkg-config"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig:$prefix/lib/x86_64-linux-gnu/pkgconfig
read -ra pc_flags <<<"$(pkg-config --cflags --libs cohort)"
cc -std=c99 -Wall -Werror consumer.c "${pc_flags[@]}" -o consumer-pc
./consumer-pc
c++ -std=c++17 -Wall -Wextra -Werror consumer.cc "${pc_flags[@]}" -o consumer-cxx
./consumer-cxx

echo "== find_package(cohort)"
mkdir -p cm && cp "$src/CMakeLists.txt" "$src/consumer.c" cm/
cmake -S cm -B cm/build -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build cm/build >/dev/null
cm/build/consumer

echo "== installed programs start from the prefix (RUNPATH \$ORIGIN/../lib)"
# Outputs are captured first: with pipefail, grep -q closing a pipe early fails it.
programs=(cohort-train cohort-data cohortrun cohort-options cohort-hello allreduce_perf)
# The GPU machine's tools, where this build has them (the CUDA backend; hwloc for cohort-topo).
for prog in cohort-bandwidth cohort-topo; do
  if [ -x "$build/samples/gpu_tools/$prog" ]; then programs+=("$prog"); fi
done
for prog in "${programs[@]}"; do
  exe="$prefix/bin/$prog"
  test -x "$exe" || { echo "$prog was not installed"; exit 1; }
  dynamic=$(readelf -d "$exe")
  grep -q 'RUNPATH.*\$ORIGIN/\.\./lib' <<<"$dynamic" || { echo "$prog has no RUNPATH \$ORIGIN/../lib"; exit 1; }
  # The loader must find libcohort in the prefix, with no help from the environment.
  libs=$(env -u LD_LIBRARY_PATH ldd "$exe")
  grep -q "libcohort.so.0 => $prefix/" <<<"$libs" || { echo "$prog does not load $prefix's libcohort:"; echo "$libs"; exit 1; }
done
out=$(env -u LD_LIBRARY_PATH "$prefix/bin/cohort-train" --help)
grep -q -- "--batch_size" <<<"$out"
env -u LD_LIBRARY_PATH "$prefix/bin/cohort-data" --help >/dev/null 2>&1
env -u LD_LIBRARY_PATH "$prefix/bin/cohortrun" --help >/dev/null
out=$(env -u LD_LIBRARY_PATH "$prefix/bin/cohort-options")
grep -q -- "--batch_size" <<<"$out"
out=$(env -u LD_LIBRARY_PATH "$prefix/bin/cohort-hello" --device=cpu --threads_per_rank=1)
grep -q "rank 0 of 1" <<<"$out"

echo "== cohort.pc names DLPack"
grep -q "dlpack" "$(pkg-config --variable=pcfiledir cohort)/cohort.pc"
test -f "$(pkg-config --variable=dlpack_includedir cohort)/dlpack/dlpack.h"

echo "== installed files"
test -f "$prefix/include/cohort/cohort.h"
test -f "$prefix/include/cohort/cohort.hpp"
test -f "$prefix/include/cohort/version.h"
ls "$prefix"/lib*/libcohort.so.0* >/dev/null 2>&1 || ls "$prefix"/lib/*/libcohort.so.0* >/dev/null
echo "install test passed"
