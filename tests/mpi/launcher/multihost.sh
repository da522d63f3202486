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
if [ "$(id -u)" != 0 ] || ! command -v ip > /dev/null || ! command -v unshare > /dev/null; then
  echo "SKIPPED: needs root, ip (iproute2) and unshare"; exit 77
fi
TAG=cl$$
SW=${TAG}sw H1=${TAG}h1 H2=${TAG}h2
WORK=$(mktemp -d)
cleanup() {
  for ns in $H1 $H2; do
    for pid in $(ip netns pids $ns 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  done
  for ns in $H1 $H2 $SW; do ip netns del $ns 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
if ! ip netns add $SW 2>/dev/null; then echo "SKIPPED: cannot create network namespaces here"; exit 77; fi
ip -n $SW link add br0 type bridge && ip -n $SW link set br0 up || exit 1
n=1
for ns in $H1 $H2; do
  ip netns add $ns && ip -n $ns link set lo up &&
    ip link add eth0 netns $ns type veth peer name port$n netns $SW &&
    ip -n $ns addr add 10.77.0.$n/24 dev eth0 && ip -n $ns link set eth0 up &&
    ip -n $SW link set port$n master br0 && ip -n $SW link set port$n up || exit 1
  n=$((n + 1))
done

# Runs a command line inside a host: its namespace, its hostname, its own /dev/shm.
cat > "$WORK/on-host" <<AGENT
#!/bin/sh
case "\$1" in
  10.77.0.1|h1) ns=$H1 name=h1 ;;
  10.77.0.2|h2) ns=$H2 name=h2 ;;
  *) echo "on-host: unknown host \$1" >&2; exit 1 ;;
esac
shift
exec ip netns exec \$ns unshare --uts sh -c 'hostname "\$0" && mount -t tmpfs none /dev/shm && exec sh -c "\$*"' \$name "\$@"
AGENT
chmod +x "$WORK/on-host"

MPI_ARGS="-mca plm_rsh_agent $WORK/on-host -mca plm_rsh_no_tree_spawn 1 -mca btl_tcp_if_include 10.77.0.0/24 \
-mca oob_tcp_if_include 10.77.0.0/24 -mca oob_tcp_keepalive_time 5 -mca oob_tcp_keepalive_intvl 1 \
-mca oob_tcp_keepalive_probes 3"
# cohortrun runs on h1 with a clean environment: whatever the ranks need must come by -x
# (only the sanitizers' settings of a sanitizer build are kept).
KEEP=(PATH=/usr/bin:/bin HOME=/root)
for v in ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS LD_PRELOAD; do
  if [ -n "${!v:-}" ]; then KEEP+=("$v=${!v}"); fi
done
on_h1() {
  timeout 60 "$WORK/on-host" h1 "$(printf '%q ' env -i "${KEEP[@]}" "$@")"
}
fail=0
check() {  # check NAME EXPECTED-STATUS PATTERN... -- output in $WORK/out
  local name=$1 want=$2 status=$3; shift 3
  if [ "$status" != "$want" ]; then echo "FAIL $name: status $status, expected $want"; fail=1; fi
  for pattern in "$@"; do
    grep -qE -- "$pattern" "$WORK/out" || { echo "FAIL $name: no line matching '$pattern'"; fail=1; }
  done
  echo "--- $name (status $status)"; cat "$WORK/out"
}

on_h1 "$COHORTRUN" -np 4 -H 10.77.0.1:2,10.77.0.2:2 --mpi-args "$MPI_ARGS" "$HELLO" > "$WORK/out" 2>&1
check hello 0 $? "^rank 0 of 4: local 0 of 2, node 0 of 2" "^rank 1 of 4: local 1 of 2, node 0 of 2" \
  "^rank 2 of 4: local 0 of 2, node 1 of 2" "^rank 3 of 4: local 1 of 2, node 1 of 2"

on_h1 "$COHORTRUN" -np 2 -H 10.77.0.1:1,10.77.0.2:1 --mpi-args "$MPI_ARGS" --fusion-threshold-mb 64 \
  --env "A=x y;\$(z)" "$PROBE" --print-env COHORT_FUSION_THRESHOLD_MB --print-env A --print-env COHORT_PROGRESS \
  > "$WORK/out" 2>&1
check settings 0 $? "^rank 1 COHORT_FUSION_THRESHOLD_MB=64$" '^rank 1 A=x y;\$\(z\)$' "^rank 1 COHORT_PROGRESS=plain$"

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
