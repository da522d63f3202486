"""Training-step images/sec of cohort's CPU backend against PyTorch CPU, measured in
the same run: for each (model, batch, threads), 3 interleaved rounds of cohort then
PyTorch; the table shows the median of the rounds and the ratio cohort / PyTorch, for
wall-clock images/sec and for images per second of process CPU time (steadier when
other jobs share the machine; the load average is printed before and after).
Usage: compare.py TRAIN_BENCH [--quick]"""
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [  # model, batch, steps, warm-up
    ("mnist_cnn", 512, 6, 2),
    ("resnet50", 16, 4, 1),
]
THREADS = [1, 2]
ROUNDS = 3


def rate(cmd, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=1800).stdout
    wall, cpu = out.strip().splitlines()[-1].split()[-2:]
    return float(wall), float(cpu)


def main():
    bench = sys.argv[1]
    quick = "--quick" in sys.argv
    rows = []
    print("load average before:", " ".join(open("/proc/loadavg").read().split()[:3]), flush=True)
    for model, batch, steps, warmup in CASES:
        if quick:
            steps, warmup = 2, 1
        for threads in THREADS:
            ours, peer = [], []
            for _ in range(1 if quick else ROUNDS):
                args = [model, str(batch), str(threads), str(steps), str(warmup)]
                ours.append(rate([bench] + args, threads))
                peer.append(rate(["/usr/bin/python3", os.path.join(HERE, "torch_bench.py")] + args, threads))
            o = statistics.median(r[0] for r in ours)
            p = statistics.median(r[0] for r in peer)
            oc = statistics.median(r[1] for r in ours)
            pc = statistics.median(r[1] for r in peer)
            rows.append((model, batch, threads, o, p, oc, pc))
            print(f"{model} batch {batch} threads {threads}: cohort {ours} pytorch {peer}", flush=True)
    print("load average after:", " ".join(open("/proc/loadavg").read().split()[:3]))
    print()
    print(f"{'model':<10} {'batch':>5} {'threads':>7} {'cohort img/s':>13} {'pytorch img/s':>14} {'ratio':>6}"
          f" {'cohort img/cpu-s':>17} {'pytorch img/cpu-s':>18} {'cpu ratio':>9}")
    for model, batch, threads, o, p, oc, pc in rows:
        print(f"{model:<10} {batch:>5} {threads:>7} {o:>13.2f} {p:>14.2f} {o / p:>6.2f}"
              f" {oc:>17.2f} {pc:>18.2f} {oc / pc:>9.2f}")


main()
