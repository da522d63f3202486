#!/usr/bin/env bash
# scripts/test --under-load N: N busy processes run beside the stages and are gone when
# it ends. The format stage runs with a stand-in clang-format that only takes a snapshot
# of the processes (so the check is quick and independent of the tree's formatting).
# usage: check_under_load.sh SOURCE_DIR
set -uo pipefail
src=$1
if ! git -C "$src" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  echo "SKIPPED: scripts/format needs a git checkout"; exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
cat > "$work/bin/clang-format" <<STANDIN
#!/bin/sh
[ -f "$work/ps" ] || ps -eo pid=,stat= > "$work/ps"
exit 0
STANDIN
chmod +x "$work/bin/clang-format"
fail=0
out=$(PATH="$work/bin:$PATH" "$src/scripts/test" --under-load 2 --only format 2>&1)
status=$?
echo "$out"
[ "$status" = 0 ] || { echo "FAIL: scripts/test --under-load 2 --only format: status $status"; fail=1; }
pids=$(echo "$out" | sed -n 's/^=== under load: 2 busy processes beside the stages (pids \(.*\))$/\1/p')
[ "$(echo $pids | wc -w)" = 2 ] || { echo "FAIL: no line naming the 2 busy processes"; fail=1; }
for pid in $pids; do
  grep -qE "^ *$pid R" "$work/ps" || { echo "FAIL: busy process $pid was not running during the stage"; fail=1; }
  if kill -0 "$pid" 2> /dev/null; then echo "FAIL: busy process $pid outlived scripts/test"; kill "$pid"; fail=1; fi
done
echo "$out" | grep -q "^=== durations (under load: 2 busy processes)$" || { echo "FAIL: no note of the load"; fail=1; }
out=$("$src/scripts/test" --under-load two 2>&1)
[ $? = 2 ] && [[ $out == *"--under-load 'two': expected a number of busy processes"* ]] ||
  { echo "FAIL: a bad count: $out"; fail=1; }
out=$("$src/scripts/test" --only relase 2>&1)
[ $? = 2 ] && [[ $out == *"--only relase: unknown stage"* ]] || { echo "FAIL: an unknown stage: $out"; fail=1; }
exit $fail
