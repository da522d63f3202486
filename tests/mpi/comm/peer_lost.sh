#!/bin/bash
# Runs peer_lost on NP ranks; passes when the job ends (non-zero) within 30 s of one
# rank being SIGKILLed and no rank process is left behind. Hard limit: 60 s.
set -u
mpiexec=$1 exe=$2 np=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
start=$(date +%s)
timeout -s KILL 60 "$mpiexec" -np "$np" --oversubscribe -bind-to none "$exe" "$dir"
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "job exit status $rc after ${elapsed}s"
[ "$rc" -ne 0 ] || { echo "FAIL: the job reported success although a rank was killed"; exit 1; }
[ "$elapsed" -lt 60 ] || { echo "FAIL: the job hung and was killed by the 60 s limit"; exit 1; }
[ "$elapsed" -le 30 ] || { echo "FAIL: the job took ${elapsed}s (> 30 s) to end"; exit 1; }
alive() {  # running or sleeping; a zombie waiting to be reaped is gone
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "${st#Z}" = "$st" ]
}
for f in "$dir"/pid.*; do
  pid=$(cat "$f")
  for _ in 1 2 3 4 5 6 7 8 9 10; do alive "$pid" || break; sleep 0.5; done
  if alive "$pid"; then
    echo "FAIL: rank process $pid ($f) is still alive"
    kill -KILL "$pid"
    exit 1
  fi
done
n=$(ls "$dir" | wc -l)
[ "$n" -eq "$np" ] || { echo "FAIL: only $n of $np ranks started"; exit 1; }
echo "PASS: every rank is gone"
