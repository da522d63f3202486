#!/usr/bin/env bash
# Installs cohort into a temporary prefix, then builds and runs a C program against it
# from outside the source tree: with pkg-config, and with CMake's find_package(cohort).
# usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d /tmp/cohort-install.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
cp "$src/consumer.c" "$work/"
cd "$work"

echo "== pkg-config"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig:$prefix/lib/x86_64-linux-gnu/pkgconfig
cc -std=c99 -Wall -Werror consumer.c $(pkg-config --cflags --libs cohort) -o consumer-pc
./consumer-pc

echo "== find_package(cohort)"
mkdir -p cm && cp "$src/CMakeLists.txt" "$src/consumer.c" cm/
cmake -S cm -B cm/build -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build cm/build >/dev/null
cm/build/consumer

echo "== installed files"
test -f "$prefix/include/cohort/cohort.h"
test -f "$prefix/include/cohort/version.h"
ls "$prefix"/lib*/libcohort.so.0* >/dev/null 2>&1 || ls "$prefix"/lib/*/libcohort.so.0* >/dev/null
echo "install test passed"
