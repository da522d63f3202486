"""Scaling of cohort-train (mnist_cnn, synthetic data, 1 compute thread per rank) from 1
to 2 ranks, beside PyTorch DDP (gloo) on the same network and batch, measured in the
same run: 3 interleaved repetitions, medians. Prints the labs' scaling table, and the
machine's own ceiling: two independent 1-rank runs at the same time, which share the
cores' caches, memory and clock but never communicate.
Usage: scaling.py COHORT_TRAIN COHORTRUN [batch] [steps]"""
import json
import os
import socket
import statistics
import subprocess
import sys

train, cohortrun = sys.argv[1], sys.argv[2]
batch = int(sys.argv[3]) if len(sys.argv) > 3 else 64
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 60
warmup = 10
peer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_peer.py")
if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode != 0:
    sys.exit("scaling.py: the peer, PyTorch DDP, is not importable by /usr/bin/python3 (Debian's python3-torch): "
             "scripts/bench installs it before it runs the benchmarks")


def cohort(np):
    out = subprocess.run([cohortrun, "-np", str(np), "--", train, "--model=mnist_cnn", f"--batch_size={batch}",
                          f"--num_iter={steps}", f"--num_warmup_batches={warmup}", "--compute_threads=1",
                          "--threads_per_rank=1", "--progress=plain", "--json"],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(out.strip().split("\n")[-1])["images_per_sec"]["mean"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_ddp(np):
    env = dict(os.environ, WORLD_SIZE=str(np), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               OMP_NUM_THREADS="1")
    procs = [subprocess.Popen(["timeout", "300", "/usr/bin/python3", peer, str(batch), str(steps), str(warmup)],
                              env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, text=True) for r in range(np)]
    outs = [p.communicate()[0] for p in procs]
    return json.loads(outs[0].strip().split("\n")[-1])["images_per_sec"]


def cohort_twice():
    cmd = [cohortrun, "-np", "1", "--", train, "--model=mnist_cnn", f"--batch_size={batch}", f"--num_iter={steps}",
           f"--num_warmup_batches={warmup}", "--compute_threads=1", "--threads_per_rank=1", "--progress=plain", "--json"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for _ in range(2)]
    return sum(json.loads(p.communicate(timeout=600)[0].strip().split("\n")[-1])["images_per_sec"]["mean"]
               for p in procs)


rates = {("cohort", 1): [], ("cohort", 2): [], ("torch", 1): [], ("torch", 2): [], ("ceiling", 2): []}
for rep in range(3):
    for np in (1, 2):
        rates[("cohort", np)].append(cohort(np))
        rates[("torch", np)].append(torch_ddp(np))
    rates[("ceiling", 2)].append(cohort_twice())
print(f"mnist_cnn, batch {batch} per rank, {steps} steps ({warmup} warm-up), 1 thread per rank, median of 3")
print(f"{'peer':<14}{'ranks':>6}{'images/sec':>12}{'speedup':>9}{'efficiency':>12}")
for name in ("cohort", "torch"):
    r1 = statistics.median(rates[(name, 1)])
    for np in (1, 2):
        r = statistics.median(rates[(name, np)])
        label = "cohort" if name == "cohort" else "torch DDP gloo"
        print(f"{label:<14}{np:>6}{r:>12.1f}{r / r1:>8.2f}x{100 * r / r1 / np:>11.1f}%")
c1 = statistics.median(rates[("cohort", 1)])
ceiling = statistics.median(rates[("ceiling", 2)])
print(f"two independent 1-rank cohort runs at once (no communication): {ceiling:.1f} images/sec = "
      f"{100 * ceiling / c1 / 2:.1f}% of 2 x 1 rank: the machine's ceiling for 2-rank efficiency")
