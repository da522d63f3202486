"""Scaling of cohort-train on one node against its ceiling, beside PyTorch DDP (gloo).

For each rank count N (--np 1,8,16) it runs, 3 times each, interleaved:
  - the cohort job: `cohortrun -np N cohort-train ...` (median images/sec of the run);
  - the ceiling: one `cohortrun -np N cohort-train ... --world=process` run, N independent
    copies placed as the job's ranks are, sharing the node's cores, caches and memory but
    never communicating: the sum of the copies' median images/sec;
  - PyTorch DDP (gloo) on the same network, batch and thread count, when PyTorch imports
    (mnist_cnn only: ddp_peer.py is that network).
and prints the medians: cohort / ceiling is the share of the node the job keeps. The
cohort job's run summary also says where its ranks' time went (CPU per step of the
compute and engine threads, and the spread of compute time across ranks per step).

Usage: scaling.py --train COHORT_TRAIN --cohortrun COHORTRUN [--np 1,8,16] [--model mnist_cnn]
                  [--batch_size 128] [--num_iter 60] [--warmup 10] [--threads_per_rank 1]
                  [--repeats 3] [--bind-cores] [--venv DIR]"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from processor import describe  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--train", required=True, help="the cohort-train executable")
    p.add_argument("--cohortrun", required=True, help="the cohortrun executable")
    p.add_argument("--np", default="1,2", help="rank counts, comma-separated (default 1,2)")
    p.add_argument("--model", default="mnist_cnn")
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--num_iter", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--threads_per_rank", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--bind-cores", action="store_true", help="bind each rank (cohortrun --bind-cores), the ceiling's "
                   "copies and DDP's ranks alike, to cores of its own")
    p.add_argument("--venv", default="", help="the peers' venv (scripts/bench makes build/peers): its Python runs "
                   "PyTorch DDP when torch imports there, else /usr/bin/python3 (Debian's python3-torch) does")
    a = p.parse_args()
    try:
        a.np = [int(n) for n in a.np.split(",")]
    except ValueError:
        p.error(f"--np {a.np}: expected rank counts separated by commas, such as 1,8,16")
    if not a.np or min(a.np) < 1:
        p.error(f"--np {a.np}: every rank count must be at least 1")
    for path in (a.train, a.cohortrun):
        if not os.access(path, os.X_OK):
            p.error(f"{path}: not an executable")
    return a


def summaries(stdout):
    """The run summaries (cohort.run/1) in a run's output, one per process that printed one."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"schema": "cohort.run/')]


def train_command(a, np, world):
    placement = ["--bind-cores"] if a.bind_cores else []
    return [a.cohortrun, "-np", str(np)] + placement + [
        "--", a.train, f"--model={a.model}", f"--batch_size={a.batch_size}", f"--num_iter={a.num_iter}",
        f"--num_warmup_batches={a.warmup}", f"--threads_per_rank={a.threads_per_rank}", f"--world={world}",
        "--progress=plain", "--json"]


def run(cmd, what):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit(f"scaling.py: {what} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p.stdout


def cohort_job(a, np):
    """The job's global median images/sec and its summary."""
    s = summaries(run(train_command(a, np, "job"), f"the {np}-rank cohort job"))
    if len(s) != 1:
        sys.exit(f"scaling.py: the {np}-rank job printed {len(s)} run summaries, expected 1 (rank 0's)")
    return s[0]["images_per_sec"]["median"], s[0]


def ceiling(a, np):
    """N independent copies started as one job (world=process): the sum of their medians."""
    s = summaries(run(train_command(a, np, "process"), f"{np} independent copies"))
    if len(s) != np:
        sys.exit(f"scaling.py: {np} independent copies printed {len(s)} run summaries, expected {np}")
    return sum(x["images_per_sec"]["median"] for x in s)


def torch_python(a):
    """The Python that imports torch: the venv's, else Debian's; None when neither does."""
    candidates = ([os.path.join(a.venv, "bin", "python")] if a.venv else []) + ["/usr/bin/python3"]
    for py in candidates:
        if os.path.exists(py) and subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
            return py
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_ddp(a, np):
    """DDP's global images/sec, its ranks placed as cohortrun places the job's (with
    --bind-cores, a share of the cores each)."""
    cores = os.cpu_count() or 1
    per_rank = cores // np if a.bind_cores and np <= cores else 0
    env = dict(os.environ, WORLD_SIZE=str(np), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               OMP_NUM_THREADS=str(a.threads_per_rank))
    procs = []
    for r in range(np):
        cmd = ["timeout", "900", a.python, os.path.join(HERE, "ddp_peer.py"), str(a.batch_size), str(a.num_iter),
               str(a.warmup)]
        if per_rank:
            cmd = ["taskset", "-c", f"{r * per_rank}-{(r + 1) * per_rank - 1}"] + cmd
        procs.append(subprocess.Popen(cmd, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, text=True))
    outs = [p.communicate()[0] for p in procs]
    lines = [line for line in outs[0].splitlines() if line.startswith("{")]
    if not lines:
        sys.exit(f"scaling.py: the {np}-rank PyTorch DDP run printed no result")
    return json.loads(lines[-1])["images_per_sec"]


def main():
    a = parse_args()
    a.python = torch_python(a) if a.model == "mnist_cnn" else None
    peer = a.python is not None
    if not peer:
        why = (f"ddp_peer.py has mnist_cnn only, not {a.model}" if a.model != "mnist_cnn" else
               f"PyTorch imports neither in {a.venv or '(no --venv)'} nor in /usr/bin/python3 (Debian's "
               "python3-torch; scripts/bench makes the venv)")
        print(f"scaling.py: no PyTorch DDP column: {why}", file=sys.stderr)
    job, roof, ddp, last = {}, {}, {}, {}
    for rep in range(a.repeats):
        for np in a.np:
            rate, last[np] = cohort_job(a, np)
            job.setdefault(np, []).append(rate)
            roof.setdefault(np, []).append(ceiling(a, np))
            if peer:
                ddp.setdefault(np, []).append(torch_ddp(a, np))
    print(f"{a.model}, batch {a.batch_size} per rank, {a.num_iter} steps ({a.warmup} warm-up), "
          f"{a.threads_per_rank} thread(s) per rank, synthetic data, median of {a.repeats}; "
          f"{describe()}; ranks {'bound to cores of their own' if a.bind_cores else 'unbound'}"
          + (f"; DDP: {a.python}" if peer else ""))
    print("ceiling: N independent copies started as one job (cohortrun -np N ... --world=process), "
          "the sum of their median images/sec")
    head = f"{'ranks':>5} {'cohort':>10} {'ceiling':>10} {'cohort/ceil':>11}"
    if peer:
        head += f" {'DDP gloo':>10} {'cohort/DDP':>10}"
    head += f" {'compute ms':>10} {'engine ms':>9} {'spread ms':>9} {'p90 ms':>7}"
    print(head)
    for np in a.np:
        c, r = statistics.median(job[np]), statistics.median(roof[np])
        line = f"{np:>5} {c:>10.1f} {r:>10.1f} {c / r if r else 0:>11.2f}"
        if peer:
            d = statistics.median(ddp[np])
            line += f" {d:>10.1f} {c / d if d else 0:>10.2f}"
        t = last[np].get("threads", {})
        spread = last[np].get("compute_spread_s", {})
        line += (f" {1e3 * t.get('compute', {}).get('median', 0):>10.1f}"
                 f" {1e3 * t.get('engine', {}).get('median', 0):>9.2f}"
                 f" {1e3 * spread.get('median', 0):>9.1f} {1e3 * spread.get('p90', 0):>7.1f}")
        print(line)
    print("compute/engine ms: CPU per step of the median rank's compute and engine threads; spread: per step, "
          "the slowest rank's compute minus the fastest's (median, p90 over steps); from the last job of each row")


if __name__ == "__main__":
    main()
