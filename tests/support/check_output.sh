#!/usr/bin/env bash
# Runs a program and judges it by its exit status and its output, for tests of tools.
#   check_output.sh [--status N] [--skip-if REGEX] [--expect REGEX]… [--reject REGEX]… -- COMMAND…
# Prints the output, then exits 0 when COMMAND exited N (default 0), every --expect
# pattern matches a line of its output (stdout and stderr) and no --reject pattern does;
# 1 otherwise, naming what was wrong. With --skip-if, output that matches REGEX (the
# program says it has no GPU) exits 77, which ctest reports as skipped (SKIP_RETURN_CODE).
set -uo pipefail
want=0 skip_if="" expect=() reject=()
while [ $# -gt 0 ]; do
  case $1 in
    --status) want=$2; shift 2 ;;
    --skip-if) skip_if=$2; shift 2 ;;
    --expect) expect+=("$2"); shift 2 ;;
    --reject) reject+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "check_output.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "check_output.sh: no command after --" >&2; exit 2; }
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
echo "-- exit status $status"
if [ -n "$skip_if" ] && grep -Eq -- "$skip_if" <<<"$out"; then
  echo "-- skipped: the output matches '$skip_if'"
  exit 77
fi
bad=0
if [ "$status" != "$want" ]; then echo "-- FAIL: exit status $status, expected $want"; bad=1; fi
for re in "${expect[@]}"; do
  grep -Eq -- "$re" <<<"$out" || { echo "-- FAIL: no line matches '$re'"; bad=1; }
done
for re in "${reject[@]}"; do
  grep -Eq -- "$re" <<<"$out" && { echo "-- FAIL: a line matches '$re'"; bad=1; }
done
exit $bad
