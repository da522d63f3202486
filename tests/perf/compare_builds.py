"""Two builds of cohort side by side on this machine: the CPU training step
(compute_train_bench: the mnist_cnn, resnet20 and resnet50 rows of compute/compare.py)
and the allreduce (allreduce_perf at np=2, in-place bus bandwidth), each measured in
ROUNDS interleaved rounds (old, new, old, new, ...), with the median of each and the
ratio new / old. For checking that a change costs nothing on the CPU.

Each allreduce run repeats its size until about 4 GB have been reduced (at least 10,
at most 50,000 times): on a shared VM a run's first tens of milliseconds can be several
times slower than the rest, and a short run measures that transient, not the code.
--models "" leaves out the training rows, --sizes "" the allreduce; --precisions lists
those of the training rows (f32, bf16, f16 where the CPU has them).

Usage: compare_builds.py OLD_BUILD NEW_BUILD [--rounds 5] [--threads 1,2]
                         [--models mnist_cnn,resnet20,resnet50] [--sizes 64K,4M,64M,256M]
                         [--precisions f32[,bf16]] [--lock FILE]
  --lock FILE  hold an exclusive flock on FILE while a row is measured"""
import argparse
import fcntl
import os
import statistics
import subprocess
import sys

CASES = {  # model: batch, steps, warm-up (compute/compare.py's rows)
    "mnist_cnn": (512, 6, 2),
    "resnet20": (128, 6, 2),
    "resnet50": (16, 4, 1),
}


def bench_rate(build, model, threads, precision):
    batch, steps, warmup = CASES[model]
    exe = os.path.join(build, "tests/perf/compute/compute_train_bench")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    p = subprocess.run(["timeout", "1800", exe, model, str(batch), str(threads), str(steps), str(warmup),
                        precision],
                       env=env, capture_output=True, text=True)
    last = (p.stdout.strip().splitlines() or [""])[-1]
    if p.returncode != 0 or not last.startswith("images/sec:"):
        sys.exit(f"{exe} {model} failed (exit {p.returncode}): {(p.stderr or p.stdout)[-400:]}")
    fields = last.split()
    return float(fields[1]), float(fields[2])  # wall, per CPU second


def size_bytes(size):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    digits, unit = (size[:-1], units[size[-1]]) if size and size[-1] in units else (size, 1)
    if not digits.isdigit() or int(digits) == 0:
        sys.exit(f"--sizes: '{size}' is not a byte count (a positive integer, optionally with K, M or G)")
    return int(digits) * unit


def allreduce_busbw(build, sizes):
    exe = os.path.join(build, "samples/allreduce_perf/allreduce_perf")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl="self,vader", OMPI_MCA_pml="ob1",
               COHORT_LOG_LEVEL="warn")
    out = {}
    for size in sizes:
        iters = str(max(10, min(50000, 4 * 10**9 // size_bytes(size))))
        p = subprocess.run(["timeout", "600", "mpirun", "-np", "2", exe, "-b", size, "-e", size, "-n", iters, "-w", "5"],
                           env=env, capture_output=True, text=True)
        rows = [line.split() for line in p.stdout.splitlines() if line.strip() and not line.startswith("#")]
        if p.returncode != 0 or not rows:
            sys.exit(f"{exe} -b {size} failed (exit {p.returncode}): {(p.stderr or p.stdout)[-400:]}")
        # nccl-tests' columns: ... out-of-place time algbw busbw #wrong, in-place time algbw busbw #wrong
        out[size] = float(rows[-1][-2])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", default="mnist_cnn,resnet20,resnet50")
    ap.add_argument("--sizes", default="64K,4M,64M,256M")
    ap.add_argument("--precisions", default="f32")
    ap.add_argument("--lock", default="")
    a = ap.parse_args()
    builds = {"old": a.old, "new": a.new}
    threads = [int(t) for t in a.threads.split(",")]
    sizes = [s for s in a.sizes.split(",") if s]
    print("load average before:", " ".join(open("/proc/loadavg").read().split()[:3]), flush=True)
    rows = []
    cases = [(m, p, t) for m in filter(None, a.models.split(",")) for p in a.precisions.split(",") for t in threads]
    for model, precision, t in cases:
        lock = open(a.lock, "w") if a.lock else None
        if lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
        got = {k: [] for k in builds}
        for _ in range(a.rounds):
            for k, b in builds.items():
                got[k].append(bench_rate(b, model, t, precision))
        if lock:
            lock.close()
        wall = {k: statistics.median(r[0] for r in v) for k, v in got.items()}
        cpu = {k: statistics.median(r[1] for r in v) for k, v in got.items()}
        name = f"{model} b{CASES[model][0]} {precision} {t} thr"
        rows.append((f"{name} (img/s)", wall["old"], wall["new"]))
        rows.append((f"{name} (img/CPU-s)", cpu["old"], cpu["new"]))
        print(f"{name}: {got}", flush=True)
    got = {k: [] for k in builds}
    for _ in range(a.rounds if sizes else 0):
        for k, b in builds.items():
            got[k].append(allreduce_busbw(b, sizes))
    for size in sizes:
        med = {k: statistics.median(r[size] for r in v) for k, v in got.items()}
        rows.append((f"allreduce np=2 {size} in-place busbw (GB/s)", med["old"], med["new"]))
    print("load average after:", " ".join(open("/proc/loadavg").read().split()[:3]))
    print(f"\nmedians of {a.rounds} interleaved rounds; new / old")
    print(f"{'row':<46} {'old':>10} {'new':>10} {'new/old':>8}")
    worst = None
    for name, old, new in rows:
        r = new / old if old else float("nan")
        worst = r if worst is None else min(worst, r)
        print(f"{name:<46} {old:>10.2f} {new:>10.2f} {r:>8.3f}")
    print(f"\nworst ratio: {worst:.3f} (within 5%: {'yes' if worst >= 0.95 else 'no'})")


main()
