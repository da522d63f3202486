#!/usr/bin/env bash
# A program that exits without destroying its runtime ends with its own exit status:
# cohort shuts the runtime down at exit, with a warning, before MPI is finalized under
# its running engine (which crashed the process before). On one rank, on every rank,
# and with only one rank leaving that way while the others go on into a collective.
# usage: exit_without_destroy.sh PROGRAM MPIEXEC
set -u
prog=$1
mpiexec=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT

fail() {
  echo "FAIL: $*"
  echo "--- output:"
  cat "$out"
  exit 1
}

# run EXPECTED_STATUS COMMAND...: the status, and no sign of a crash at exit.
run() {
  local expected=$1
  shift
  timeout 120 "$@" >"$out" 2>&1
  local rc=$?
  [ "$rc" = "$expected" ] || fail "'$*' exited with $rc, expected $expected"
  if grep -q -E "after MPI_FINALIZE|Segmentation fault|Process received signal" "$out"; then
    fail "'$*' crashed at exit"
  fi
  echo "ok: '$*' exited with $rc"
}

run 3 "$prog" leak
grep -q "1 runtime was not destroyed before the process exited" "$out" || fail "no warning names the leaked runtime"

run 3 "$mpiexec" -np 2 --oversubscribe -bind-to none "$prog" leak
[ "$(grep -c "runtime was not destroyed" "$out")" = 2 ] || fail "not every rank warned"

run 3 "$mpiexec" -np 3 --oversubscribe -bind-to none "$prog" leak-one
[ "$(grep -c "failed with COHORT_ERR_PEER_SHUTDOWN" "$out")" = 2 ] || fail "the other ranks did not see the shutdown"

run 0 "$prog" finalize
grep -q "still alive" "$out" || fail "the refusal does not say a runtime is alive"
echo "exit without destroy: every case passed"
