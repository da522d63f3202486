#!/bin/bash
# Faults across two real hosts (network namespaces, see netns_hosts.sh) during a real
# training job: a remote rank killed, and the remote host's link taken down for good
# (also with mpirun's keepalive out of the way, so that cohortrun's own watch must end
# the job). Each ends the job within cohortrun's --link-timeout (nothing else sets Open
# MPI's keepalive), cohortrun names the rank or host, and nothing is left running in
# any namespace. With --max-restarts --exclude-failed-hosts --min-np 1 the training then
# resumes from its checkpoint on the remaining host and finishes.
# usage: multihost_faults.sh COHORTRUN COHORT_TRAIN
set -u
COHORTRUN=$1 TRAIN=$2
. "$(dirname "$0")/netns_hosts.sh"
# shellcheck disable=SC2034
ON_H1_TIMEOUT=120  # read by on_h1 (netns_hosts.sh)
# cohortrun's least link timeout, and how long a fault may take to end the job: the
# timeout plus a margin for a loaded machine (mpirun tearing the job down, processes
# exiting), far below the minutes Open MPI takes by itself.
LINK_TIMEOUT=10
BOUND=$((LINK_TIMEOUT + 20))
HOSTS=10.77.0.1:1,10.77.0.2:1
TRAIN_ARGS=(--model=trivial --image_size=16 --batch_size=8 --synthetic_samples=256 --compute_threads=1
  --decode_threads=1 --num_warmup_batches=1 --display_every=100 --checkpoint_every=10 --lr_schedule=constant)

# Waits (up to 100 s, for a loaded machine) for the job to have written a checkpoint.
wait_for_checkpoint() {
  local dir=$1
  for _ in $(seq 1000); do
    [ -f "$dir/latest" ] && return 0
    sleep 0.1
  done
  echo "FAIL: no checkpoint in $dir after 100 s"; fail=1; return 1
}

# The cohort-train process running in namespace $1.
trainer_in() {
  local pid
  for pid in $(ip netns pids "$1"); do
    [ "$(cat /proc/$pid/comm 2>/dev/null)" = cohort-train ] && { echo "$pid"; return 0; }
  done
  return 1
}

# Every namespace is empty soon after the job has ended: at once on h1 (cohortrun kills
# what is left there), within 20 s on h2 (its ranks stop when they lose cohortrun, Open
# MPI's daemon when it loses mpirun or hears that mpirun is gone).
check_nothing_left() {
  local name=$1 ns left
  sleep 0.5
  for ns in $H1 $H2; do
    for _ in $(seq 40); do
      left=$(ip netns pids "$ns")
      [ -z "$left" ] || [ "$ns" = "$H1" ] || { sleep 0.5; continue; }
      break
    done
    if [ -n "$left" ]; then
      echo "FAIL $name: still running in $ns:"; ps -o pid,comm,args -p "$(echo $left | tr ' ' ,)"; fail=1
    fi
  done
}

# fault NAME HOW [COHORTRUN OPTIONS…]: starts training on both hosts, injects the fault
# (kill: SIGKILL the rank on h2; link: take h2's link down; link-held: the same, and
# keep it down until the rank on h2 has stopped by itself) once a checkpoint exists,
# waits for cohortrun and leaves its status in $status and the seconds from the fault
# to its end in $took.
fault() {
  local name=$1 how=$2 job
  shift 2
  rm -rf "$WORK/ck"
  on_h1 "$COHORTRUN" -np 2 -H $HOSTS --mpi-args "$MPI_ARGS" --link-timeout=$LINK_TIMEOUT "$@" \
    -- "$TRAIN" "${TRAIN_ARGS[@]}" --num_iter="$ITERS" --checkpoint_dir="$WORK/ck" > "$WORK/out" 2>&1 &
  job=$!
  wait_for_checkpoint "$WORK/ck" || { kill $job; return; }
  local start=$SECONDS
  if [ "$how" = kill ]; then
    kill -9 "$(trainer_in $H2)" || { echo "FAIL $name: no cohort-train on h2"; fail=1; }
  else
    ip -n $H2 link set eth0 down
  fi
  wait $job
  status=$?
  took=$((SECONDS - start))
  if [ "$how" = link-held ]; then
    # Nothing on h2 hears from h1: the rank's monitor stops it once cohortrun is out of reach.
    for _ in $(seq 40); do trainer_in $H2 > /dev/null || break; sleep 0.5; done
    if trainer_in $H2 > /dev/null; then echo "FAIL $name: the rank on h2 still runs 20 s after the job ended"; fail=1; fi
  fi
  ip -n $H2 link set eth0 up
  echo "--- $name: the job ended $took s after the fault"
  if [ $took -gt $BOUND ] && [ "$status" != 0 ]; then echo "FAIL $name: took $took s (more than $BOUND)"; fail=1; fi
  check_nothing_left "$name"
}

# Without restarts the job fails, naming the rank and host. A lost host is found by
# mpirun (its keepalive) or by cohortrun's own watch, whichever comes first.
LOST="(mpirun|cohortrun) lost its connection to host (h2|10\.77\.0\.2) \(a link down or the host gone\), where rank 1 ran"
ITERS=1000000
fault remote-rank-killed kill
check remote-rank-killed 137 $status "cohortrun: job failed \(exit status 137\): rank 1 \(on h2\) was killed by SIGKILL"
fault link-down link
check link-down-for-good 205 $status "cohortrun: job failed \(exit status 205\): $LOST"
# With mpirun's keepalive set far beyond the link timeout (as when mpirun has a message
# in flight, which keepalive never covers), cohortrun's watch alone ends the job in time.
fault link-down-watch link-held --mpi-args "-mca oob_tcp_keepalive_time 600"
check link-down-watch 205 $status \
  "cohortrun: job failed \(exit status 205\): cohortrun lost its connection to host h2 \(a link down or the host gone\), where rank 1 ran"

# With restarts the training finishes on h1, from the checkpoint the two hosts saved.
# The fault comes right after the first checkpoint (step 10); ITERS keeps the end of
# the job, whose messages between mpirun and its daemons keepalive does not watch (see
# docs/guides/fault-tolerance.md), hundreds of steps away on any machine's speed.
ITERS=4000
fault remote-rank-killed-restart kill --max-restarts=1 --exclude-failed-hosts --min-np=1
check remote-rank-killed-restart 0 $status \
  "cohortrun: restart 1 of 1 after rank 1 \(on h2\) was killed by SIGKILL \(Killed\); leaving out host 10\.77\.0\.2: 1 rank on 10\.77\.0\.1:1" \
  "^Resumed from step [1-9]" "^Saved by 2 ranks, resumed on 1" "^total images/sec" "succeeded after 1 restart"
fault link-down-restart link --max-restarts=1 --exclude-failed-hosts --min-np=1
check link-down-restart 0 $status \
  "cohortrun: restart 1 of 1 after $LOST; leaving out host 10\.77\.0\.2: 1 rank on 10\.77\.0\.1:1" \
  "^Resumed from step [1-9]" "^Saved by 2 ranks, resumed on 1" "^total images/sec" "succeeded after 1 restart"
exit $fail
