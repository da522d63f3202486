#!/usr/bin/env bash
# The variable_update comparison: MODEL trained for the same epochs in every mode at 2 and
# 3 ranks (and with a dedicated parameter server at 3), images/sec and top-1 from each
# run's summary, through `cohortrun sweep --over variable_update=…`.
# Usage: variable_update.sh COHORT_TRAIN COHORTRUN COHORT_DATA MODEL [OUT_DIR]
#   MODEL: mnist_cnn (Fashion-MNIST, first 6000 training and 1000 test images, 1 epoch),
#          resnet20 or alexnet (the first 2000 / 500 of them as 32x32 RGB JPEGs in TFRecord
#          shards; resnet20 2 epochs, alexnet at 96x96 5 epochs).
# Run it on a quiet machine (flock -x /tmp/cohort-cpu.lock …): it prints the sweep tables
# and leaves OUT_DIR/MODEL-*.csv and .json.
set -euo pipefail
train=$1 cohortrun=$2 data_tool=$3 model=$4 out=${5:-$(mktemp -d)}
src=/usr/share/datasets/fashion-mnist
[ -d "$src" ] || { echo "SKIP: no $src"; exit 0; }
mkdir -p "$out"
data=$out/data
if [ ! -d "$data/idx" ] || [ ! -d "$data/tfr" ]; then
  /usr/bin/python3 - "$src" "$data" <<'PY'
import gzip, os, sys
import numpy as np
from PIL import Image
src, data = sys.argv[1:]
def load(kind):
    with gzip.open(f"{src}/{kind}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(f"{src}/{kind}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return x, y
def write_idx(kind, x, y):
    os.makedirs(f"{data}/idx", exist_ok=True)
    with open(f"{data}/idx/{kind}-images-idx3-ubyte", "wb") as f:
        f.write(np.array([0x803, len(x), 28, 28], ">i4").tobytes() + x.tobytes())
    with open(f"{data}/idx/{kind}-labels-idx1-ubyte", "wb") as f:
        f.write(np.array([0x801, len(y)], ">i4").tobytes() + y.tobytes())
def write_jpegs(split, x, y):
    for i, (image, label) in enumerate(zip(x, y)):
        d = f"{data}/jpeg/{split}/c{label}"
        os.makedirs(d, exist_ok=True)
        Image.fromarray(image).convert("RGB").resize((32, 32), Image.BILINEAR).save(f"{d}/{i:05d}.jpg", quality=90)
(xt, yt), (xv, yv) = load("train"), load("t10k")
write_idx("train", xt[:6000], yt[:6000])
write_idx("t10k", xv[:1000], yv[:1000])
write_jpegs("train", xt[:2000], yt[:2000])
write_jpegs("validation", xv[:500], yv[:500])
PY
  "$data_tool" pack "$data/jpeg/train" "$data/tfr" --shards 2 >/dev/null
  "$data_tool" pack "$data/jpeg/validation" "$data/tfr" --shards 1 --data_split=validation >/dev/null
fi
case $model in
  mnist_cnn) args=(--model=mnist_cnn --data_dir="$data/idx" --batch_size=64 --num_epochs=1) ;;
  resnet20) args=(--model=resnet20 --data_dir="$data/tfr" --batch_size=64 --num_epochs=2) ;;
  alexnet) args=(--model=alexnet --image_size=96 --num_classes=10 --data_dir="$data/tfr" --batch_size=32
                 --num_epochs=5 --lr=0.005) ;;
  *) echo "unknown model $model (mnist_cnn, resnet20 or alexnet)" >&2; exit 2 ;;
esac
common=("${args[@]}" --num_warmup_batches=5 --eval --display_every=1000 --progress=plain)
"$cohortrun" sweep -np 2,3 --over variable_update=replicated,parameter_server,async_parameter_server,independent \
  --sweep-out "$out/$model" -- "$train" "${common[@]}" 2>/dev/null | grep -v '^\[' || true
"$cohortrun" sweep -np 3 --ps_dedicated --over variable_update=parameter_server,async_parameter_server \
  --sweep-out "$out/$model-dedicated" -- "$train" "${common[@]}" 2>/dev/null | grep -v '^\[' || true
/usr/bin/python3 - "$out/$model.json" "$out/$model-dedicated.json" <<'PY'
import json, sys
# images/sec: the run summary's (median of the measured steps; the workers' own rates
# summed where they do not move in lockstep). end to end: images trained / the run's wall
# time, start-up and evaluation included, a check on the first.
print(f"{'ranks':>5}  {'variable_update':<34} {'images/sec':>10} {'end to end':>10} {'top-1':>7} {'staleness':>10}")
for path, suffix in zip(sys.argv[1:], ("", " (dedicated)")):
    for r in json.load(open(path))["runs"]:
        s = r["summary"] or {}
        st = s.get("staleness")
        rate = f"{r['images_per_sec']:.1f}" if r["images_per_sec"] is not None else "failed"
        e2e = f"{s['steps'] * s['global_batch'] / s['wall_s']:.1f}" if s.get("wall_s") else "-"
        top1 = f"{100 * r['top1']:.1f}%" if r["top1"] is not None else "-"
        print(f"{r['ranks']:>5}  {r['settings']['variable_update'] + suffix:<34} {rate:>10} {e2e:>10} {top1:>7} "
              f"{'%.2f/%d' % (st['mean'], st['max']) if st else '-':>10}")
PY
