# Two real hosts on this machine for the multi-host tests, sourced by them: each host
# is a network namespace (its own hostname, /dev/shm and address 10.77.0.N, joined by a
# bridge in a third namespace), and Open MPI reaches the second one through
# plm_rsh_agent instead of ssh. Exits 77 (skipped) without root, iproute2 and unshare.
# Everything it creates is removed on exit. It defines:
#   H1 H2 SW   the namespaces      WORK      a temporary folder
#   MPI_ARGS   what mpirun needs   on_h1 …   runs a command on h1 with a clean environment
#   check NAME STATUS EXPECTED PATTERN…      checks $WORK/out; sets fail=1 on a mismatch
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

# Runs a command line inside a host: its namespace, its hostname, its own /dev/shm; bash
# reads it, since on_h1 quotes with printf %q (which writes $'\n' for a newline).
cat > "$WORK/on-host" <<AGENT
#!/bin/sh
case "\$1" in
  10.77.0.1|h1) ns=$H1 name=h1 ;;
  10.77.0.2|h2) ns=$H2 name=h2 ;;
  *) echo "on-host: unknown host \$1" >&2; exit 1 ;;
esac
shift
exec ip netns exec \$ns unshare --uts sh -c 'hostname "\$0" && mount -t tmpfs none /dev/shm && exec bash -c "\$*"' \$name "\$@"
AGENT
chmod +x "$WORK/on-host"

# How fast a lost host ends a job is cohortrun's own setting (--link-timeout): nothing here
# changes Open MPI's keepalive.
MPI_ARGS="-mca plm_rsh_agent $WORK/on-host -mca plm_rsh_no_tree_spawn 1 -mca btl_tcp_if_include 10.77.0.0/24 \
-mca oob_tcp_if_include 10.77.0.0/24"
# cohortrun runs on h1 with a clean environment: whatever the ranks need must come by -x
# (only the sanitizers' settings of a sanitizer build are kept).
KEEP=(PATH=/usr/bin:/bin HOME=/root)
for v in ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS LD_PRELOAD; do
  if [ -n "${!v:-}" ]; then KEEP+=("$v=${!v}"); fi
done
on_h1() {
  timeout "${ON_H1_TIMEOUT:-60}" "$WORK/on-host" h1 "$(printf '%q ' env -i "${KEEP[@]}" "$@")"
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

