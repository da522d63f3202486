#!/usr/bin/env bash
# mnist_cnn on Fashion-MNIST, EPOCHS epochs (default 5) on one rank, trained at f32 and at
# bf16 from the same seed: the test top-1 of each and their difference (goal: bf16
# within 0.5 point of f32). Skips where the data or the CPU's bf16 instructions are
# missing. Usage: bf16_convergence.sh COHORT_TRAIN [EPOCHS [TRAINER FLAGS...]]
set -euo pipefail
train=$1 epochs=${2:-5}
extra=("${@:3}")
data=/usr/share/datasets/fashion-mnist
[ -d "$data" ] || { echo "SKIP: no $data"; exit 77; }
grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo || { echo "SKIP: this CPU has no bf16 instructions"; exit 77; }
common=(--model=mnist_cnn --data_dir="$data" --batch_size=64 --num_epochs="$epochs" --augment=none --eval
        --display_every=1000 --progress=plain --json "${extra[@]}")
top1() { tail -n 1 | /usr/bin/python3 -c 'import json,sys; s=json.loads(sys.stdin.read()); print("%.2f %.0f" % (100 * s["top1"], s["images_per_sec"]["mean"]))'; }
read -r a32 r32 < <("$train" "${common[@]}" --precision=f32 | top1)
echo "f32:  top-1 ${a32}% after $epochs epochs (${r32} images/sec)"
read -r a16 r16 < <("$train" "${common[@]}" --precision=bf16 | top1)
echo "bf16: top-1 ${a16}% after $epochs epochs (${r16} images/sec)"
/usr/bin/python3 - "$a32" "$a16" <<'PY'
import sys
a32, a16 = map(float, sys.argv[1:])
ok = a16 >= a32 - 0.5
print(("OK" if ok else "BELOW TARGET") + f": bf16 {a16:.2f}% vs f32 {a32:.2f}% ({a16 - a32:+.2f} points; goal >= -0.5)")
sys.exit(0 if ok else 1)
PY
