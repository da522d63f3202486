"""Training-step images/sec of cohort's CPU backend against TensorFlow 2.x and PyTorch
2.x (from the venv scripts/bench makes under build/), measured in the same run: for
each (model, threads, precision), ROUNDS interleaved rounds of cohort then each peer;
the table shows the median of the rounds and cohort's ratio to each peer and to the
best of them, and the goals: every row (f32 and bf16) at least the best peer, and bf16
ResNet-50 at least 1.2x PyTorch autocast; a row that could not be measured misses its
goal. bf16 rows run only where the CPU has bf16 instructions. Without the venv, Debian's
PyTorch 1.13 is the peer.
Usage: compare.py TRAIN_BENCH [--venv DIR] [--lock FILE] [--quick] [--models a,b]
  --lock FILE  hold an exclusive flock on FILE while a row is measured (a quiet machine
               for the numbers, without holding it for the whole run)"""
import argparse
import fcntl
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from processor import cpu_flags, describe  # noqa: E402

CASES = [  # model, batch, steps, warm-up
    ("mnist_cnn", 512, 6, 2),
    ("resnet20", 128, 6, 2),
    ("resnet50", 16, 4, 1),
]
THREADS = [1, 2]
ROUNDS = 3
GOAL_BEST = 1.0  # cohort / best peer, every row, f32 and bf16 alike
GOAL_BF16 = 1.2  # cohort / PyTorch autocast, resnet50 at bf16


def has_bf16():
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def peers(venv):
    py = os.path.join(venv, "bin", "python") if venv else ""
    if py and os.path.exists(py):
        ok = subprocess.run([py, "-c", "import tensorflow, torch"], capture_output=True).returncode == 0
        if ok:
            return [("tensorflow", [py, os.path.join(HERE, "tf_bench.py")]),
                    ("pytorch", [py, os.path.join(HERE, "torch_bench.py")])]
    print(f"no peer venv at {venv or '(none)'} (scripts/bench makes it): falling back to Debian's PyTorch",
          flush=True)
    return [("pytorch-debian", ["/usr/bin/python3", os.path.join(HERE, "torch_bench.py")])]


def rate(cmd, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p = subprocess.run(["timeout", "1800"] + cmd, env=env, capture_output=True, text=True)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines or not lines[-1].startswith("images/sec:"):
        print(f"  {' '.join(cmd[:3])}... failed (exit {p.returncode}): {(p.stderr or p.stdout)[-400:]}", flush=True)
        return None
    return float(lines[-1].split()[1])


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "—"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench")
    ap.add_argument("--venv", default="")
    ap.add_argument("--lock", default="")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--models", default="")
    a = ap.parse_args()
    who = peers(a.venv)
    names = [n for n, _ in who]
    precisions = ["f32"] + (["bf16"] if has_bf16() else [])
    if "bf16" not in precisions:
        print("this CPU has no bf16 instructions: f32 rows only", flush=True)
    cases = [c for c in CASES if not a.models or c[0] in a.models.split(",")]
    rows = []
    print("processor:", describe(), flush=True)
    print("load average before:", " ".join(open("/proc/loadavg").read().split()[:3]), flush=True)
    for model, batch, steps, warmup in cases:
        if a.quick:
            steps, warmup = 2, 1
        for threads in THREADS:
            for prec in precisions:
                args = [model, str(batch), str(threads), str(steps), str(warmup), prec]
                lock = open(a.lock, "w") if a.lock else None
                if lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                got = {n: [] for n in ["cohort"] + names}
                for _ in range(1 if a.quick else ROUNDS):
                    got["cohort"].append(rate([a.bench] + args, threads))
                    for n, cmd in who:
                        got[n].append(rate(cmd + args, threads))
                if lock:
                    lock.close()
                med = {n: statistics.median(v) if v and None not in v else None for n, v in got.items()}
                rows.append((model, batch, threads, prec, med))
                print(f"{model} batch {batch} threads {threads} {prec}: {got}", flush=True)
    print("load average after:", " ".join(open("/proc/loadavg").read().split()[:3]))
    print()
    head = f"{'model':<10} {'batch':>5} {'thr':>3} {'prec':<5} {'cohort':>9}"
    for n in names:
        head += f" {n:>14}"
    for n in names:
        head += f" {'/' + n:>15}"
    head += f" {'/best':>6}"
    print(f"images/sec (median of rounds) and cohort's ratio to each peer; {describe()}")
    print(head)
    met = []
    for model, batch, threads, prec, med in rows:
        line = f"{model:<10} {batch:>5} {threads:>3} {prec:<5} {med['cohort'] or 0:>9.2f}"
        for n in names:
            line += f" {med[n] or 0:>14.2f}"
        for n in names:
            line += f" {ratio(med['cohort'], med[n]):>15}"
        peer_rates = [med[n] for n in names if med[n]]
        best = max(peer_rates) if peer_rates else None
        line += f" {ratio(med['cohort'], best):>6}"
        print(line)
        if not (best and med["cohort"]):
            met.append((f"{prec} {model} {threads} thr measured (cohort and at least one peer)", False))
        else:
            met.append((f"{prec} {model} {threads} thr >= {GOAL_BEST}x best peer", med["cohort"] / best >= GOAL_BEST))
        torch_name = next((n for n in names if n.startswith("pytorch")), None)
        if prec == "bf16" and model == "resnet50" and torch_name and med[torch_name] and med["cohort"]:
            met.append((f"bf16 resnet50 {threads} thr >= {GOAL_BF16}x {torch_name} autocast",
                        med["cohort"] / med[torch_name] >= GOAL_BF16))
    print()
    for what, ok in met:
        print(f"goal {'met' if ok else 'NOT met'}: {what}")


main()
