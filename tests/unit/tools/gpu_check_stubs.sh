#!/usr/bin/env bash
# scripts/gpu-check judges each stage from its programs' output: run here on a build of
# stub programs (a cohortrun that reports one GPU, a cohort-train that prints a run
# summary and a loss log, tools that print their tables, GoogleTest executables that
# pass), it must pass every stage; and it must fail the MNIST stages whose GPU top-1 is
# more than 1 point (1.5 in f16 and bf16) from the CPU's f32, or whose GPU run computed
# on the CPU. With --perf
# (a stub Python for the PyTorch reference; each stub run's images/sec taken in turn
# from a list) it must interleave the runs, take their medians, judge the ratio against
# 0.98, report a precision cohort refuses as N/A, and do without PyTorch. The sanitizer
# stages (a stub compute-sanitizer) pass clean runs, fail a hazard found, and are N/A
# without compute-sanitizer. Under --time-limit (stub runs that sleep) it must skip the
# rounds that would not fit, stop a run at the limit (CUT), leave later stages UNRUN,
# and keep the summary in LOGS/summary.txt.
#   gpu_check_stubs.sh SCRIPTS/gpu-check
set -uo pipefail
gpu_check=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
b=$work/build
mkdir -p "$b/launcher" "$b/samples/trainer" "$b/samples/gpu_tools" "$b/samples/allreduce_perf" "$work/data"
export STUB_STATE=$work/state  # the stubs' run counters, and the order they ran in

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
# next KEY LIST: the next of LIST's words for KEY (the first on KEY's first call, …).
cat >"$work/next.sh" <<'EOF'
next() {
  local n words
  mkdir -p "$STUB_STATE"
  n=$(( $(cat "$STUB_STATE/$1" 2>/dev/null || echo 0) + 1 ))
  echo "$n" >"$STUB_STATE/$1"
  read -ra words <<<"$2"
  echo "${words[$(( (n - 1) % ${#words[@]} ))]}"
}
EOF
stub "$b/samples/trainer/cohort-train" <<EOF
#!/usr/bin/env bash
source "$work/next.sh"
EOF
cat >>"$b/samples/trainer/cohort-train" <<'EOF'
dev=cpu csv="" model="" precision=f32 profile=0
for a; do
  case $a in
    --device=*) dev=${a#*=} ;; --log_csv=*) csv=${a#*=} ;; --model=*) model=${a#*=} ;; --precision=*) precision=${a#*=} ;;
    --profile) profile=1 ;;
  esac
done
if (( profile )); then
  fmt='%-28s %-16s %10s %10s %10s %10s\n'
  echo "profile: 10 steps, milliseconds per step"
  printf "$fmt" layer kind forward backward reorder total
  echo "-----------------------------------------------------------------------------------------"
  printf "$fmt" conv1 conv 1.000 2.000 0.100 3.100
  printf "$fmt" bn1 batch_norm 0.500 0.700 0.000 1.200
  printf "$fmt" conv2 conv 2.000 3.000 0.000 5.000
  printf "$fmt" pool1 max_pool 0.300 0.400 0.000 0.700
  printf '%-45s %10s %10s %10s %10s\n' "all layers" 3.800 6.100 0.100 10.000
  printf '%-78s %10s\n' optimizer 0.500 "profiled total" 10.500
  printf '%-78s %10s   (the profile accounts for 95%%)\n' "measured step time" 11.000
fi
ips=1001.5
if [ "$model" = resnet50 ]; then
  echo "cohort $precision $*" >>"$STUB_STATE/order"
  if [[ " ${STUB_REFUSE:-} " == *" $precision "* ]]; then
    echo "cohort-train: building the model: the CUDA backend trains in f32 (precision=$precision is not available on it yet)" >&2
    exit 1
  fi
  list=STUB_COHORT_$precision
  [ -z "${!list:-}" ] || ips=$(next "cohort-$precision" "${!list}")
  [ "$ips" != fail ] || { echo "cohort-train: step 3: cudaErrorIllegalAddress" >&2; exit 1; }
  sleep_for=STUB_SLEEP_$precision
  if [ -n "${!sleep_for:-}" ]; then  # a sleep that ends with the run when the limit stops it
    sleep "${!sleep_for}" & trap 'kill $! 2>/dev/null; exit 143' TERM; wait $!; trap - TERM
  fi
fi
top1=${STUB_TOP1_CPU:-0.8312} device=cpu memory=""
if [ "$dev" = cuda ]; then
  top1=${STUB_TOP1_CUDA:-0.8290} device=${STUB_GPU_DEVICE:-cuda:0}
  memory=", \"device_memory\": {\"peak_in_use_bytes\": ${STUB_COHORT_PEAK:-21474836480}, \"peak_reserved_bytes\": 23622320128}"
fi
if [ -n "$csv" ]; then
  echo "step,epoch,loss,lr,step_time_s,data_wait_s,comm_exposed_s,images_per_sec" >"$csv"
  awk 'BEGIN { for (i = 1; i <= 300; i++) printf "%d,0.01,%.4f,0.1,0.01,0,0,5000\n", i, 2.3 - 1.7 * i / 300 }' >>"$csv"
fi
echo "total images/sec: 1001.50"
echo "Accuracy @ 1 = $top1 Accuracy @ 5 = 0.9900 [10000 examples], loss 0.5000"
echo "{\"schema\": \"cohort.run/1\", \"model\": \"$model\", \"ranks\": 1, \"device\": \"$device\", \"precision\": \"$precision\", \"images_per_sec\": {\"median\": 1000.5, \"mean\": $ips, \"stderr\": 1.0, \"jitter\": 1.0}, \"loss\": 0.5, \"top1\": $top1, \"top5\": 0.99, \"wall_s\": 1.0, \"skipped\": 0$memory}"
EOF
stub "$b/samples/gpu_tools/cohort-topo" <<'EOF'
#!/usr/bin/env bash
echo "CPU (hwloc): 1 socket, 1 NUMA node, 16 cores, 32 hardware threads"
echo "GPUs (CUDA): 1"
echo "  GPU 0: Stub GPU, sm_90, 132 SMs, 79.1 GiB, PCI 0000:17:00.0"
EOF
stub "$b/samples/gpu_tools/cohort-bandwidth" <<EOF
#!/usr/bin/env bash
source "$work/next.sh"
EOF
cat >>"$b/samples/gpu_tools/cohort-bandwidth" <<'EOF'
h2d=54.61
[ -z "${STUB_H2D:-}" ] || h2d=$(next h2d "$STUB_H2D")
fmt='%-5s %-9s %-7s %-7s %9.2f %9.3f %9.3f %9.3f  %s\n'
printf "$fmt" H2D pinned host cuda:0 "$h2d" 4.916 4.900 4.950 ""
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
# The packed build's library path, which the PyTorch reference must not get.
echo 'export LD_LIBRARY_PATH="/packed/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"' >"$b/env.sh"
# The Python that runs the PyTorch reference: torch imports unless STUB_NO_TORCH is set.
stub "$work/python3" <<EOF
#!/usr/bin/env bash
source "$work/next.sh"
EOF
cat >>"$work/python3" <<'EOF'
[[ ${LD_LIBRARY_PATH:-} != */packed/lib* ]] || { echo "stub python3: run with the packed build's LD_LIBRARY_PATH" >&2; exit 3; }
if [ "$1" = -c ]; then
  [ -z "${STUB_NO_TORCH:-}" ] || { echo "ModuleNotFoundError: No module named 'torch'" >&2; exit 1; }
  exit 0
fi
[[ $1 == */tests/perf/gpu/torch_resnet50.py ]] || { echo "stub python3: unexpected script '$1'" >&2; exit 2; }
shift
while [ $# -gt 0 ]; do case $1 in --precision) p=$2 ;; --warmup) w=$2 ;; --steps) n=$2 ;; esac; shift 2; done
echo "torch $p --warmup $w --steps $n" >>"$STUB_STATE/order"
list=STUB_TORCH_$p
ips=$(next "torch-$p" "${!list:-2519}")
printf '{"schema": "cohort.torch_resnet50/1", "model": "resnet50", "precision": "%s", "images_per_sec": %s, "peak_memory_bytes": %s, "peak_reserved_bytes": 27917287424, "device_name": "%s", "torch": "2.11.0+cu130", "torchvision": "0.26.0+cu130", "cudnn": "9.19.0", "cuda": "13.0"}\n' \
  "$p" "$ips" "${STUB_TORCH_PEAK:-25769803776}" "${STUB_TORCH_CARD:-Stub GPU}"
EOF

# The GoogleTest executables gpu-check looks for, each with one passing test (that takes
# STUB_GTEST_SLEEP seconds).
while read -r path; do
  stub "$path" <<'EOF'
#!/usr/bin/env bash
if [ "${1:-}" = --gtest_list_tests ]; then printf 'Stub.\n  Passes\n'; exit 0; fi
if [ -n "${STUB_GTEST_SLEEP:-}" ]; then sleep "$STUB_GTEST_SLEEP" & trap 'kill $! 2>/dev/null; exit 143' TERM; wait $!; fi
exit 0
EOF
done < <("$gpu_check" --list --only tests "$b" | sed -n 's/^  missing: //p')

fails=0
out=""
check() {  # check WHAT EXPECTED_STATUS REGEX… -- ENV… [-- ARGS…]: gpu-check on the stubs
  local what=$1 want=$2 status re
  shift 2
  local res=() envs=()
  while [ "$1" != -- ]; do res+=("$1"); shift; done
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ $# -eq 0 ] || shift
  rm -rf "$STUB_STATE" "$work/logs"
  mkdir -p "$STUB_STATE"
  out=$(env "${envs[@]}" "$gpu_check" "$b" --data "$work/data" --logs "$work/logs" "$@" 2>&1)
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
  '^mnist-np1 +PASS .*GPU f32: loss 2\.269 -> 0\.626 .*top-1 82\.90% \(-0\.22 points\).*CPU f32: top-1 83\.12%' \
  '^mnist-np2 +PASS ' \
  '^mnist-mixed +PASS .*GPU f16: loss 2\.269 -> 0\.626 .*top-1 82\.90% \(-0\.22 points\).*GPU bf16: .*CPU f32: top-1 83\.12%' \
  '^mnist-graphs +PASS .*GPU f16: loss 2\.269 -> 0\.626 .*CPU f32: top-1 83\.12%' \
  '^resnet50 +PASS .*1001\.5 images/sec .*, peak 20\.00 GiB of device memory in use$' \
  '^bandwidth +PASS .*H2D pinned 54\.61, D2H pinned 54\.10, H2D pageable 7\.50, D2H pageable 11\.50, D2D 1450\.00' \
  '^allreduce +PASS .*one GPU: the path works' \
  '^== gpu-check summary: 1 GPU\(s\), Stub GPU' -- STUB=1
check "a GPU top-1 2 points below the CPU's fails" 1 \
  '^mnist-np1 +FAIL .*GPU f32: .*top-1 81\.12% \(-2\.00 points\).*: more than 1 point\(s\) from the CPU.s f32 run' \
  '^mnist-mixed +FAIL .*GPU f16: .*\(-2\.00 points\).*: more than 1\.5 point\(s\) from the CPU.s f32 run' \
  '^resnet50 +PASS ' -- STUB_TOP1_CUDA=0.8112
check "mixed precision may be 1.5 points from the CPU's f32, f32 only 1" 1 \
  '^mnist-np1 +FAIL .*\(-1\.40 points\).*more than 1 point' \
  '^mnist-mixed +PASS .*GPU f16: .*\(-1\.40 points\).*GPU bf16: .*\(-1\.40 points\)' -- STUB_TOP1_CUDA=0.8172
check "a GPU run that computed on the CPU fails" 1 \
  "^mnist-np1 +FAIL .*the GPU's f32 run computed on 'cpu'" -- STUB_GPU_DEVICE=cpu

# --perf: f32 far below PyTorch, f16 refused by cohort, bf16 at exactly 0.98 (met).
check "--perf reports medians, ratios and goals, and a refused precision as N/A" 0 \
  '^perf-f32 +PASS .*cohort 1000\.0 images/sec \(median of 3\), PyTorch 2500\.0 images/sec \(median of 3\): ratio 0\.400, goal \(>= 0\.98\) not met' \
  '^perf-f16 +N/A .*cohort refuses precision=f16 on the GPU \(cohort-train: .*precision=f16 is not available.*PyTorch 4742\.0 images/sec \(1 run\)' \
  '^perf-bf16 +PASS .*cohort 980\.0 .*PyTorch 1000\.0 .*ratio 0\.980, goal \(>= 0\.98\) met; peak GiB in use \(cohort / PyTorch\) 20\.00 / 24\.00$' \
  '^    cohort run 1: 980 images/sec, peak 20\.00 GiB in use$' '^    PyTorch run 1: 1000 images/sec, peak 24\.00 GiB in use$' \
  '^perf-h2d +PASS .*H2D pinned 53\.10 GB/s \(median of 3\), goal \(>= 52 GB/s\) met' \
  '^== speed on Stub GPU: ResNet-50, synthetic data, NHWC, batch 256; median of 3 runs of 30 steps after 10 warm-up' \
  '^   reference: .*PyTorch 2\.11\.0\+cu130, torchvision 0\.26\.0\+cu130, cuDNN 9\.19\.0' \
  '^precision +cohort img/s +PyTorch img/s +ratio +time \(cohort/PT\) +peak GiB \(cohort/PT\) +goal \(ratio >= 0\.98\)$' \
  '^f32 +1000\.0 +2500\.0 +0\.400 +[0-9]+ s / [0-9]+ s +20\.00 / 24\.00 +not met$' \
  '^f16 +- +4742\.0 \(1 run\) +- +[0-9]+ s / [0-9]+ s +- / 24\.00 +not available on the GPU in this build$' \
  '^bf16 +980\.0 +1000\.0 +0\.980 +[0-9]+ s / [0-9]+ s +20\.00 / 24\.00 +met$' \
  '^f16-graphs +- +4742\.0 \(1 run\) +- +[0-9]+ s / [0-9]+ s +- / 24\.00 +not available on the GPU in this build$' \
  '^   \(peak GiB: the most device memory each program.s caching allocator handed out' \
  '^H2D pinned, 256 MiB \(cohort-bandwidth, median of 3\): 53\.10 GB/s; goal >= 52 GB/s: met' \
  -- STUB_COHORT_f32="900 1100 1000" STUB_TORCH_f32="2600 2400 2500" STUB_REFUSE=f16 STUB_TORCH_f16="4742" \
     STUB_COHORT_bf16="980 975 990" STUB_TORCH_bf16="1000 990 1010" STUB_H2D="53.1 51.0 54.6" \
  -- --perf --python "$work/python3"
# Each precision: cohort, PyTorch, cohort, PyTorch, …; a refused one stops after its first try;
# a variant of a precision measured before runs cohort alone.
order=$(cut -d' ' -f1,2 "$STUB_STATE/order" | tr '\n' ,)
want="cohort f32,torch f32,cohort f32,torch f32,cohort f32,torch f32,cohort f16,torch f16,"
want+="cohort bf16,torch bf16,cohort bf16,torch bf16,cohort bf16,torch bf16,cohort f16,"  # f16-graphs: perf-f16's PyTorch run
if [ "$order" = "$want" ]; then echo "ok: the runs interleave"; else echo "FAIL: runs in the order $order, expected $want"; fails=1; fi
check "--only perf-f32: that stage alone; a ratio of 0.979 misses the goal" 0 \
  '^perf-f32 +PASS .*cohort 979\.0 images/sec \(median of 1\), PyTorch 1000\.0 images/sec \(median of 1\): ratio 0\.979, goal \(>= 0\.98\) not met' \
  '^== speed on Stub GPU: .*median of 1 runs of 5 steps after 2 warm-up' \
  -- STUB_COHORT_f32=979 STUB_TORCH_f32=1000 \
  -- --only perf-f32 --perf-runs 1 --perf-steps 5 --perf-warmup 2 --python "$work/python3"
if grep -Eq '^== (tests|resnet50|perf-f16|perf-h2d)$' <<<"$out" ||
   ! grep -q -- '--num_iter=7 --num_warmup_batches=2 ' "$STUB_STATE/order" ||
   ! grep -q -- '^torch f32 --warmup 2 --steps 5$' "$STUB_STATE/order"; then
  echo "FAIL: --only perf-f32 --perf-steps 5 --perf-warmup 2 ran other stages or other step counts:"
  cat "$STUB_STATE/order"; echo "$out"; fails=1
else
  echo "ok: the step counts reach both programs"
fi
check "a variant compares with its precision's PyTorch runs of the same call" 0 \
  '^perf-f16 +PASS .*cohort 4700\.0 images/sec \(median of 3\), PyTorch 4800\.0 images/sec \(median of 3\): ratio 0\.979' \
  "^perf-f16-bn-kernels +PASS .*cohort 4750\.0 images/sec \(median of 3\), PyTorch 4800\.0 images/sec \(median of 3, perf-f16's PyTorch runs of this call\): ratio 0\.990, goal \(>= 0\.98\) met" \
  "^    time: cohort [0-9]+ s for 3 runs; PyTorch: perf-f16's PyTorch runs of this call" \
  '^f16-bn-kernels +4750\.0 +4800\.0 +0\.990 +[0-9]+ s / [0-9]+ s +20\.00 / 24\.00 +met$' \
  -- STUB_COHORT_f16="4700 4690 4710 4750 4740 4760" STUB_TORCH_f16="4800 4790 4810" \
  -- --only perf-f16,perf-f16-bn-kernels --python "$work/python3"
order=$(cut -d' ' -f1,2 "$STUB_STATE/order" | tr '\n' ,)
want="cohort f16,torch f16,cohort f16,torch f16,cohort f16,torch f16,cohort f16,cohort f16,cohort f16,"
if [ "$order" = "$want" ] && [ "$(grep -c -- '--cuda_algorithm_cache=.*/logs/conv-algorithms.tsv' "$STUB_STATE/order")" = 6 ] &&
   [ "$(grep -c -- '--cuda_batch_norm=kernels' "$STUB_STATE/order")" = 3 ]; then
  echo "ok: the variant runs cohort alone, every cohort run with one algorithm cache"
else
  echo "FAIL: runs in the order $order, expected $want, each cohort run with the algorithm cache:"
  cat "$STUB_STATE/order"; fails=1
fi
check "a variant without its precision's stage runs PyTorch itself" 0 \
  '^perf-f16-bn-cudnn +PASS .*cohort 4700\.0 images/sec \(median of 1\), PyTorch 4800\.0 images/sec \(median of 1\): ratio 0\.979' \
  -- STUB_COHORT_f16="4700" STUB_TORCH_f16="4800" \
  -- --only perf-f16-bn-cudnn --perf-runs 1 --python "$work/python3"
check "a profile stage sums the table by layer kind, heaviest first" 0 \
  '^    kind \(ms/step\) +forward +backward +reorder +total$' \
  '^    conv +3\.000 +5\.000 +0\.100 +8\.100$' '^    batch_norm +0\.500 +0\.700 +0\.000 +1\.200$' \
  '^    measured step time +11\.000' \
  '^profile-f16-bn-kernels +PASS .*ResNet-50 f16: 11\.000 ms per step measured; .*/logs/profile-f16-bn-kernels\.log' \
  -- -- --only profile-f16-bn-kernels
if ! grep -q -- '--profile --cuda_algorithm_cache=.*/logs/conv-algorithms.tsv --cuda_batch_norm=kernels$' "$STUB_STATE/order" ||
   [ "$(grep -A1 'kind (ms/step)' <<<"$out" | tail -n 1 | awk '{ print $1 }')" != conv ]; then
  echo "FAIL: the profile stage's run or its order:"; cat "$STUB_STATE/order"; echo "$out"; fails=1
else
  echo "ok: the profile run takes the variant's options, and the heaviest kind leads"
fi
check "--perf without PyTorch measures cohort alone" 0 \
  '^perf-f32 +PASS .*cohort 1000\.0 images/sec \(median of 3\); no PyTorch reference: .*cannot import torch' \
  '^f32 +1000\.0 +- +- +[0-9]+ s / [0-9]+ s +20\.00 / - +no reference$' \
  '^   no PyTorch reference: .*python3 cannot import torch \(ModuleNotFoundError' \
  -- STUB_COHORT_f32="1000" STUB_NO_TORCH=1 -- --perf --only perf-f32 --python "$work/python3"
check "--perf fails a PyTorch run on another card" 1 \
  "^perf-f32 +FAIL .*the PyTorch reference ran on 'Other GPU', cohort on 'Stub GPU'" \
  -- STUB_TORCH_CARD="Other GPU" -- --perf --only perf-f32 --python "$work/python3"
check "--perf fails a cohort run that fails for another reason than its precision" 1 \
  '^perf-bf16 +FAIL .*cohort-train run 2 exited 1' '^perf-f32 +PASS' \
  -- STUB_COHORT_bf16="990 fail 990" -- --perf --only perf-f32,perf-bf16 --python "$work/python3"

# --time-limit 20 (no command starts with less than 2 s left), each cohort f32 ResNet-50
# run 7 s: perf-f32's third round would not fit after two (t = 14 s); a bf16 run takes
# 60 s, so perf-bf16's first is stopped at the limit (t = 20 s); perf-h2d never starts.
check "--time-limit: rounds that would not fit are skipped, a run is stopped at the limit, later stages are UNRUN" 1 \
  '^    rounds 3 to 3 not started: the last took [0-9]+ s' \
  '^perf-f32 +PASS .*cohort 1000\.0 images/sec \(median of 2\), PyTorch 2500\.0 images/sec \(median of 2\): ratio 0\.400, .*; the time limit left room for 2 runs of 3$' \
  '^perf-bf16 +CUT .*the 20 s time limit stopped it: cohort-train run 1 exited 124' \
  '^perf-h2d +UNRUN .*not started: [0-9]+ s of the 20 s time limit left' \
  '^== gpu-check summary: .* s in all \(time limit 20 s\)' \
  '^f32 +1000\.0 \(2 runs\) +2500\.0 \(2 runs\) +0\.400 ' \
  -- STUB_SLEEP_f32=7 STUB_SLEEP_bf16=60 STUB_COHORT_f32="900 1100 1000" STUB_TORCH_f32="2600 2400 2500" \
  -- --only perf-f32,perf-bf16,perf-h2d --time-limit 20 --python "$work/python3"
if ! grep -Eq '^perf-h2d +UNRUN' "$work/logs/summary.txt" || ! grep -Eq '^f32 +1000\.0 \(2 runs\)' "$work/logs/summary.txt"; then
  echo "FAIL: LOGS/summary.txt lacks the summary or the speed table:"; cat "$work/logs/summary.txt"; fails=1
else
  echo "ok: the summary and the speed table are in LOGS/summary.txt"
fi
took=$(sed -n 's/^== gpu-check summary: .*; \([0-9]*\) s in all (time limit 20 s).*/\1/p' <<<"$out")
if [ -n "$took" ] && (( took <= 20 + 5 )); then
  echo "ok: the check took $took s under a 20 s time limit"
else
  echo "FAIL: the check took '${took:-?}' s under a 20 s time limit (a stopped command is killed 5 s later at most)"; fails=1
fi
check "--time-limit: a test case stopped at the limit cuts the tests stage" 1 \
  '^tests +CUT .*the 10 s time limit stopped it: .*failed: Stub\.Passes \(and the cases after it\)' \
  -- STUB_GTEST_SLEEP=60 -- --only tests --time-limit 10
check "--only runs its stages in the order given, each once" 0 '^perf-bf16 +PASS' '^perf-f32 +PASS' \
  -- -- --only perf-bf16,perf-f32,perf-bf16 --perf-runs 1 --python "$work/python3"
order=$(cut -d' ' -f1,2 "$STUB_STATE/order" | tr '\n' ,)
if [ "$order" = "cohort bf16,torch bf16,cohort f32,torch f32," ]; then
  echo "ok: the stages run in --only's order"
else
  echo "FAIL: runs in the order $order, expected bf16's before f32's, once each"; fails=1
fi
check "--time-limit needs at least 10 s" 2 'gpu-check: --time-limit needs a whole number >= 10' -- -- --time-limit 5

# compute-sanitizer: a stub on PATH that runs the test and reports as found what
# STUB_SANITIZER_ERRORS names (tools).
stub "$work/sanitizer/compute-sanitizer" <<'EOF'
#!/usr/bin/env bash
if [ "$1" = --version ]; then printf 'NVIDIA (R) Compute Sanitizer\nVersion 2025.3.0 build 1\n'; exit 0; fi
tool=memcheck code=0 args=()
while [ $# -gt 1 ]; do
  case $1 in --tool) tool=$2 ;; --error-exitcode) code=$2 ;; esac
  args+=("$1"); shift
done
echo "sanitizer ${args[*]} ${1##*/}" >>"$STUB_STATE/order"
"$1" || exit
if [[ " ${STUB_SANITIZER_ERRORS:-} " == *" $tool "* ]]; then
  echo "========= Error: Race reported between Write access at channel_sums_kernel+0x1a0"
  echo "========= ERROR SUMMARY: 1 error"
  exit "$code"
fi
echo "========= ERROR SUMMARY: 0 errors"
EOF
check "the sanitize stages run the GPU tests under each tool" 0 \
  '^sanitize +PASS .*Version 2025\.3\.0; clean: memcheck compute_cuda_backend_test memcheck gpu_device_test memcheck gpu_train_test$' \
  '^sanitize-sync +PASS .*clean: racecheck compute_cuda_backend_test synccheck compute_cuda_backend_test racecheck gpu_train_test synccheck gpu_train_test$' \
  -- "PATH=$work/sanitizer:$PATH" -- --only sanitize,sanitize-sync
if [ "$(grep -c -- '--kernel-name kns=cohort' "$STUB_STATE/order")" != 4 ] || grep -q 'nccl' "$STUB_STATE/order" ||
   [ "$(grep -c -- '--tool memcheck .*--report-api-errors no' "$STUB_STATE/order")" != 3 ]; then
  echo "FAIL: racecheck and synccheck follow cohort's kernels only, and NCCL's test is left out:"; cat "$STUB_STATE/order"; fails=1
else
  echo "ok: racecheck and synccheck follow cohort's kernels only"
fi
check "a hazard the sanitizer finds fails its stage" 1 \
  '^sanitize-sync +FAIL .*racecheck found errors in compute_cuda_backend_test racecheck found errors in gpu_train_test' \
  '^    ========= Error: Race reported' \
  -- "PATH=$work/sanitizer:$PATH" STUB_SANITIZER_ERRORS=racecheck -- --only sanitize-sync
if compgen -G '/usr/local/cuda*/bin/compute-sanitizer' >/dev/null || command -v compute-sanitizer >/dev/null; then
  echo "skipped: a sanitizer stage without compute-sanitizer (this machine has one)"
else
  check "without compute-sanitizer the sanitize stages are N/A" 0 \
    '^sanitize +N/A .*no compute-sanitizer here' -- CUDA_HOME=/nonexistent -- --only sanitize
fi
exit $fails
