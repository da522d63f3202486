#!/bin/bash
# cohortrun across two real hosts on this machine: each host is a network namespace
# (its own hostname, /dev/shm and address 10.77.0.N, joined by a bridge), and Open MPI
# reaches the second one through plm_rsh_agent instead of ssh. Needs root and iproute2;
# exits 77 (skipped) without them. Everything it creates is removed on exit.
# With the last two arguments it also checks allreduce across hosts: two ranks per host
# reduce hierarchically (shared segment per host, then across hosts), hosts with unequal
# rank counts fall back to MPI, and both agree with MPI_Allreduce.
# usage: multihost.sh COHORTRUN COHORT_HELLO LAUNCHER_PROBE [TRANSPORT_TEST ALLREDUCE_PERF]
set -u
COHORTRUN=$1 HELLO=$2 PROBE=$3 TRANSPORT_TEST=${4:-} ALLREDUCE_PERF=${5:-}
. "$(dirname "$0")/netns_hosts.sh"

on_h1 "$COHORTRUN" -np 4 -H 10.77.0.1:2,10.77.0.2:2 --mpi-args "$MPI_ARGS" "$HELLO" > "$WORK/out" 2>&1
check hello 0 $? "^rank 0 of 4: local 0 of 2, node 0 of 2" "^rank 1 of 4: local 1 of 2, node 0 of 2" \
  "^rank 2 of 4: local 0 of 2, node 1 of 2" "^rank 3 of 4: local 1 of 2, node 1 of 2"

on_h1 "$COHORTRUN" -np 2 -H 10.77.0.1:1,10.77.0.2:1 --mpi-args "$MPI_ARGS" --fusion-threshold-mb 64 \
  --env "A=x y;\$(z)" "$PROBE" --print-env COHORT_FUSION_THRESHOLD_MB --print-env A --print-env COHORT_PROGRESS \
  > "$WORK/out" 2>&1
check settings 0 $? "^rank 1 COHORT_FUSION_THRESHOLD_MB=64$" '^rank 1 A=x y;\$\(z\)$' "^rank 1 COHORT_PROGRESS=plain$"

# Arguments no shell may see reach the remote rank unchanged, and run nothing.
on_h1 "$COHORTRUN" -np 2 -H 10.77.0.1:1,10.77.0.2:1 --mpi-args "$MPI_ARGS" "$PROBE" --args "a b" ";" \
  "\$(touch $WORK/pwned)" "\`touch $WORK/pwned\`" "it's \"q\"" $'x\ny' > "$WORK/out" 2>&1
check hostile-arguments 0 $? '^rank 1 arg 0=a b\|$' '^rank 1 arg 1=;\|$' '^rank 1 arg 2=\$\(touch [^|]*/pwned\)\|$' \
  '^rank 1 arg 3=`touch [^|]*/pwned`\|$' "^rank 1 arg 4=it's \"q\"\\|\$" '^rank 1 arg 5=x$' '^y\|$'
if [ -e "$WORK/pwned" ]; then echo "FAIL hostile-arguments: an argument was run by a shell"; fail=1; fi

on_h1 "$COHORTRUN" -np 2 -H 10.77.0.1:1,10.77.0.2:1 --mpi-args "$MPI_ARGS" "$PROBE" --fail-rank 1 --exit-code 3 \
  > "$WORK/out" 2>&1
check failing-remote-rank 3 $? "cohortrun: job failed \(exit status 3\): rank 1 \(on h2\) exited with status 3"

if [ -n "$TRANSPORT_TEST" ]; then
  on_h1 "$COHORTRUN" -np 4 -H 10.77.0.1:2,10.77.0.2:2 --mpi-args "$MPI_ARGS" "$TRANSPORT_TEST" > "$WORK/out" 2>&1
  check hierarchical-allreduce 0 $? "^transport: 4 ranks, 2 on node 0, shared segment 1, hierarchical 1$" "PASSED"
  on_h1 "$COHORTRUN" -np 3 -H 10.77.0.1:2,10.77.0.2:1 --mpi-args "$MPI_ARGS" "$TRANSPORT_TEST" > "$WORK/out" 2>&1
  check uneven-hosts-allreduce 0 $? "^transport: 3 ranks, 2 on node 0, shared segment 0, hierarchical 0$" "PASSED"
  on_h1 "$COHORTRUN" -np 4 -H 10.77.0.1:2,10.77.0.2:2 --mpi-args "$MPI_ARGS" "$ALLREDUCE_PERF" -b 8 -e 4M -f 8 -n 2 \
    -w 1 -c 1 > "$WORK/out" 2>&1
  check allreduce-perf-across-hosts 0 $? "Out of bounds values : 0 OK"
fi
exit $fail
