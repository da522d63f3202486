#!/usr/bin/env bash
# mnist_cnn on Fashion-MNIST with the trainer's default optimizer settings: test accuracy
# after EPOCHS epochs on 1 rank, then on 2 ranks with the linear scaling rule (a
# default of the trainer) and one epoch of warm-up (the labs' large-batch problem).
# Usage: convergence.sh COHORT_TRAIN COHORTRUN [EPOCHS [TRAINER FLAGS...]], e.g.
#   convergence.sh … 5 --lr=0.2 --lr_schedule=step   (flags go to both runs)
set -euo pipefail
train=$1 cohortrun=$2 epochs=${3:-5}
extra=("${@:4}")
data=/usr/share/datasets/fashion-mnist
[ -d "$data" ] || { echo "SKIP: no $data"; exit 0; }
common=(--model=mnist_cnn --data_dir="$data" --batch_size=64 --num_epochs="$epochs" --augment=none --eval
        --display_every=200 --progress=plain --json "${extra[@]}")
top1() { tail -n 1 | /usr/bin/python3 -c 'import json,sys; s=json.loads(sys.stdin.read()); print("%.2f %.0f" % (100 * s["top1"], s["images_per_sec"]["mean"]))'; }
read -r a1 r1 < <("$cohortrun" -np 1 -- "$train" "${common[@]}" | top1)
echo "np=1: top-1 ${a1}% after $epochs epochs (${r1} images/sec)"
read -r a2 r2 < <("$cohortrun" -np 2 -- "$train" "${common[@]}" --lr_scaling=linear --warmup_epochs=1 | top1)
echo "np=2 (linear scaling, 1 epoch warm-up): top-1 ${a2}% (${r2} images/sec)"
/usr/bin/python3 - "$a1" "$a2" <<'PY'
import sys
a1, a2 = map(float, sys.argv[1:])
ok = a1 >= 90 and a2 >= a1 - 1
print(("OK" if ok else "BELOW TARGET") + f": np=1 {a1:.2f}% (target >= 90), np=2 {a2:.2f}% (target >= {a1 - 1:.2f})")
sys.exit(0 if ok else 1)
PY
