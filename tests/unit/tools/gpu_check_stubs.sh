#!/usr/bin/env bash
# scripts/gpu-check judges each stage from its programs' output: run here on a build of
# stub programs (a cohortrun that reports one GPU, a cohort-train that prints a run
# summary and a loss log, tools that print their tables, GoogleTest executables that
# pass), it must pass every stage; and it must fail the MNIST stages whose GPU top-1 is
# more than 1 point from the CPU's, or whose GPU run computed on the CPU.
#   gpu_check_stubs.sh SCRIPTS/gpu-check
set -uo pipefail
gpu_check=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
b=$work/build
mkdir -p "$b/launcher" "$b/samples/trainer" "$b/samples/gpu_tools" "$b/samples/allreduce_perf" "$work/data"

stub() {  # stub PATH: the script on stdin, made executable
  mkdir -p "$(dirname "$1")"
  cat >"$1"
  chmod +x "$1"
}
stub "$b/launcher/cohortrun" <<'EOF'
#!/usr/bin/env bash
if [ "$1" = --check-build ]; then
  printf '%-15s%s\n' cohort 0.1.0 CUDA "runtime 13.0, driver 13.0" GPUs "1 (stub)"
  echo "  0: Stub GPU, sm_90, 79.1 GiB, 132 SMs, PCI 0000:17:00.0"
  exit 0
fi
shift 2; [ "$1" = -- ] && shift  # -np N -- PROGRAM ARGS: PROGRAM once
exec "$@"
EOF
stub "$b/samples/trainer/cohort-train" <<'EOF'
#!/usr/bin/env bash
dev=cpu csv="" model=""
for a; do case $a in --device=*) dev=${a#*=} ;; --log_csv=*) csv=${a#*=} ;; --model=*) model=${a#*=} ;; esac; done
top1=${STUB_TOP1_CPU:-0.8312} device=cpu
if [ "$dev" = cuda ]; then top1=${STUB_TOP1_CUDA:-0.8290} device=${STUB_GPU_DEVICE:-cuda:0}; fi
if [ -n "$csv" ]; then
  echo "step,epoch,loss,lr,step_time_s,data_wait_s,comm_exposed_s,images_per_sec" >"$csv"
  awk 'BEGIN { for (i = 1; i <= 300; i++) printf "%d,0.01,%.4f,0.1,0.01,0,0,5000\n", i, 2.3 - 1.7 * i / 300 }' >>"$csv"
fi
echo "total images/sec: 1001.50"
echo "Accuracy @ 1 = $top1 Accuracy @ 5 = 0.9900 [10000 examples], loss 0.5000"
echo "{\"schema\": \"cohort.run/1\", \"model\": \"$model\", \"ranks\": 1, \"device\": \"$device\", \"precision\": \"f32\", \"images_per_sec\": {\"median\": 1000.5, \"mean\": 1001.5, \"stderr\": 1.0, \"jitter\": 1.0}, \"loss\": 0.5, \"top1\": $top1, \"top5\": 0.99, \"wall_s\": 1.0}"
EOF
stub "$b/samples/gpu_tools/cohort-topo" <<'EOF'
#!/usr/bin/env bash
echo "CPU (hwloc): 1 socket, 1 NUMA node, 16 cores, 32 hardware threads"
echo "GPUs (CUDA): 1"
echo "  GPU 0: Stub GPU, sm_90, 132 SMs, 79.1 GiB, PCI 0000:17:00.0"
EOF
stub "$b/samples/gpu_tools/cohort-bandwidth" <<'EOF'
#!/usr/bin/env bash
fmt='%-5s %-9s %-7s %-7s %9.2f %9.3f %9.3f %9.3f  %s\n'
printf "$fmt" H2D pinned host cuda:0 54.61 4.916 4.900 4.950 ""
printf "$fmt" H2D pageable host cuda:0 7.50 35.8 35.0 36.0 ""
printf "$fmt" D2H pinned cuda:0 host 54.10 4.961 4.950 4.970 ""
printf "$fmt" D2H pageable cuda:0 host 11.50 23.3 23.0 24.0 ""
printf "$fmt" D2D device cuda:0 cuda:0 1450.00 0.185 0.180 0.190 "each byte read and written: 2900.00 GB/s of memory traffic"
echo "# not measured: peer copies between GPUs: one GPU is visible (they need two)"
EOF
stub "$b/samples/allreduce_perf/allreduce_perf" <<'EOF'
#!/usr/bin/env bash
echo "# one rank on one GPU: NCCL only copies within the GPU, so this proves the path"
echo "   268435456      67108864     float     sum     -1   180.00 1491.31    0.00      0   170.00 1579.00    0.00      0"
echo "# Out of bounds values : 0 OK"
EOF
# The GoogleTest executables gpu-check looks for, each with one passing test.
while read -r path; do
  stub "$path" <<'EOF'
#!/usr/bin/env bash
if [ "${1:-}" = --gtest_list_tests ]; then printf 'Stub.\n  Passes\n'; fi
exit 0
EOF
done < <("$gpu_check" --list --only tests "$b" | sed -n 's/^  missing: //p')

fails=0
check() {  # check WHAT EXPECTED_STATUS REGEX… -- ENV…: gpu-check on the stubs
  local what=$1 want=$2 out status re
  shift 2
  local res=()
  while [ "$1" != -- ]; do res+=("$1"); shift; done
  shift
  out=$(env "$@" "$gpu_check" "$b" --data "$work/data" --logs "$work/logs" 2>&1)
  status=$?
  if [ "$status" != "$want" ]; then
    echo "FAIL ($what): gpu-check exited $status, expected $want"; echo "$out"; fails=1; return
  fi
  for re in "${res[@]}"; do
    grep -Eq -- "$re" <<<"$out" || { echo "FAIL ($what): no line matches '$re'"; echo "$out"; fails=1; return; }
  done
  echo "ok: $what"
}
check "every stage passes" 0 \
  '^tests +PASS +[0-9]+ s +[1-9][0-9]* of [1-9][0-9]* test cases passed' \
  '^topo +PASS +[0-9]+ s +1 socket, 1 NUMA node, 16 cores, 32 hardware threads; 1 GPU' \
  '^mnist-np1 +PASS .*GPU: loss 2\.269 -> 0\.626 .*top-1 82\.90%.*CPU: top-1 83\.12%.*difference -0\.22 points' \
  '^mnist-np2 +PASS ' \
  '^resnet50 +PASS .*1001\.5 images/sec' \
  '^bandwidth +PASS .*H2D pinned 54\.61, D2H pinned 54\.10, H2D pageable 7\.50, D2H pageable 11\.50, D2D 1450\.00' \
  '^allreduce +PASS .*one GPU: the path works' \
  '^== gpu-check summary: 1 GPU\(s\), Stub GPU' -- STUB=1
check "a GPU top-1 2 points below the CPU's fails" 1 \
  '^mnist-np1 +FAIL .*difference -2\.00 points: more than 1 point apart' \
  '^resnet50 +PASS ' -- STUB_TOP1_CUDA=0.8112
check "a GPU run that computed on the CPU fails" 1 \
  "^mnist-np1 +FAIL .*the GPU run computed on 'cpu'" -- STUB_GPU_DEVICE=cpu
exit $fails
