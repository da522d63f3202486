"""Training-step images/sec of cohort's CPU backend against PyTorch CPU, measured in
the same run: for each (model, batch, threads), 3 interleaved rounds of cohort then
PyTorch; the table shows the median of the rounds and the ratio cohort / PyTorch.
Usage: compare.py TRAIN_BENCH [--quick]"""
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [  # model, batch, steps, warm-up
    ("mnist_cnn", 512, 6, 2),
    ("resnet50", 16, 3, 1),
]
THREADS = [1, 2]
ROUNDS = 3


def rate(cmd, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=1800).stdout
    return float(out.strip().splitlines()[-1].split()[-1])


def main():
    bench = sys.argv[1]
    quick = "--quick" in sys.argv
    rows = []
    for model, batch, steps, warmup in CASES:
        if quick:
            steps, warmup = 2, 1
        for threads in THREADS:
            ours, peer = [], []
            for _ in range(1 if quick else ROUNDS):
                args = [model, str(batch), str(threads), str(steps), str(warmup)]
                ours.append(rate([bench] + args, threads))
                peer.append(rate(["/usr/bin/python3", os.path.join(HERE, "torch_bench.py")] + args, threads))
            o, p = statistics.median(ours), statistics.median(peer)
            rows.append((model, batch, threads, o, p, o / p, ours, peer))
            print(f"{model} batch {batch} threads {threads}: cohort {ours} pytorch {peer}", flush=True)
    print()
    print(f"{'model':<10} {'batch':>5} {'threads':>7} {'cohort img/s':>13} {'pytorch img/s':>14} {'ratio':>6}")
    for model, batch, threads, o, p, r, _, _ in rows:
        print(f"{model:<10} {batch:>5} {threads:>7} {o:>13.2f} {p:>14.2f} {r:>6.2f}")


main()
