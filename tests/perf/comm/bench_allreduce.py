"""Allreduce benchmark of cohort against raw Open MPI and torch gloo, np=2.

Runs, three times interleaved: allreduce_perf --raw over 64 KiB..512 MiB (cohort and
plain MPI_Allreduce in the same process), the 8-byte latency, the ResNet-50 gradient
set step, and torch gloo on the same sizes. Prints the median of the runs and the
ratios. Usage (from the build tree):
  /usr/bin/python3 bench_allreduce.py --tool samples/allreduce_perf/allreduce_perf
"""
import argparse
import os
import random
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from processor import describe  # noqa: E402

MPI_FLAGS = ["-bind-to", "none", "--oversubscribe", "-mca", "pml", "ob1", "-mca", "btl", "self,vader"]


def run(cmd, timeout):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", COHORT_LOG_LEVEL="warn")
    out = subprocess.run(["timeout", "-s", "KILL", str(timeout)] + cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        raise SystemExit(f"command failed ({out.returncode}): {' '.join(cmd)}")
    return out.stdout


def sweep(args):
    out = run([args.mpiexec, "-np", str(args.np)] + MPI_FLAGS +
              [args.tool, "-b", "64K", "-e", "512M", "-f", "2", "-n", str(args.iters), "-w", "1", "-c", "0",
               "--raw"], 900)
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 16 and f[0].isdigit():
            # 0 size 1 count 2 type 3 redop 4 root | 5-8 out-of-place time algbw busbw wrong |
            # 9-12 in-place time algbw busbw wrong | 13 raw time 14 raw busbw 15 ratio
            rows[int(f[0])] = {"cohort": float(f[11]), "raw": float(f[14])}  # both in place
    return rows


def latency(args):
    out = run([args.mpiexec, "-np", str(args.np)] + MPI_FLAGS +
              [args.tool, "-b", "8", "-e", "8", "-n", "2000", "-w", "200", "-c", "0", "--raw"], 300)
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 16 and f[0] == "8":
            return {"cohort": float(f[9]), "raw": float(f[13])}  # both in place
    raise SystemExit("no 8-byte row in allreduce_perf output:\n" + out)


def resnet(args):
    out = run([args.mpiexec, "-np", str(args.np)] + MPI_FLAGS + [args.tool, "--resnet50", "--steps", "5"], 600)
    m = re.search(r"cohort step ([\d.]+) ms.*raw MPI_Allreduce ([\d.]+) ms", out)
    if not m:
        raise SystemExit("no resnet50 line:\n" + out)
    return {"cohort": float(m.group(1)), "raw": float(m.group(2))}


def gloo(args, sizes):
    port = str(random.randint(20000, 40000))
    procs = []
    for r in range(args.np):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.np), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(["timeout", "-s", "KILL", "600", "/usr/bin/python3",
                                       os.path.join(HERE, "gloo_allreduce.py"), ",".join(map(str, sizes))],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate() for p in procs]
    times = {}
    for line in outs[0][0].splitlines():
        f = line.split()
        if len(f) == 3 and f[0] == "gloo":
            times[int(f[1])] = float(f[2])
    if not times:
        sys.stderr.write(outs[0][1])
    return times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tool", required=True)
    p.add_argument("--mpiexec", default="mpirun")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--no-gloo", action="store_true")
    args = p.parse_args()
    have_torch = not args.no_gloo and subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                                                     capture_output=True).returncode == 0
    sweeps, lats, nets, gloos = [], [], [], []
    gloo_sizes = [8, 65536, 1 << 20, 64 << 20, 256 << 20]
    for i in range(args.runs):
        print(f"# run {i + 1}/{args.runs}", flush=True)
        sweeps.append(sweep(args))
        lats.append(latency(args))
        nets.append(resnet(args))
        if have_torch:
            gloos.append(gloo(args, gloo_sizes))
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    # a ratio of a measurement that printed as 0 (a tiny size's busbw at two decimals) is unknown
    ratio = lambda a, b: a / b if b > 0 else float("nan")
    n = args.np
    print(f"\n# processor: {describe()}")
    print(f"# allreduce f32 sum, np={n}, busbw GB/s = S/t * 2(n-1)/n, median of {args.runs} interleaved runs")
    print(f"{'size(B)':>11} {'cohort':>8} {'rawMPI':>8} {'x raw':>7} {'gloo':>8} {'x gloo':>7}")
    factor = 2 * (n - 1) / n
    for size in sorted(sweeps[0]):
        c = med([s[size]["cohort"] for s in sweeps if size in s])
        r = med([s[size]["raw"] for s in sweeps if size in s])
        g = med([x[size] for x in gloos if size in x]) if gloos else float("nan")
        gbw = size / (g * 1e-6) / 1e9 * factor if g == g else float("nan")
        print(f"{size:>11} {c:>8.2f} {r:>8.2f} {ratio(c, r):>7.2f} {gbw:>8.2f} {ratio(c, gbw):>7.2f}")
    lc, lr = med([x["cohort"] for x in lats]), med([x["raw"] for x in lats])
    lg = med([x[8] for x in gloos if 8 in x]) if gloos else float("nan")
    print(f"\n# 8-byte allreduce latency (us): cohort {lc:.2f}, raw MPI {lr:.2f}, gloo {lg:.2f}; "
          f"cohort/gloo = {ratio(lc, lg):.3f} (goal <= 0.1), cohort/raw = {ratio(lc, lr):.1f}")
    nc, nr = med([x["cohort"] for x in nets]), med([x["raw"] for x in nets])
    print(f"# ResNet-50 gradient set (161 f32 tensors, 25,557,032 values, backward order): cohort step {nc:.2f} ms, "
          f"one raw MPI_Allreduce {nr:.2f} ms, ratio {ratio(nc, nr):.3f} (goal <= 1.0)")


if __name__ == "__main__":
    main()
