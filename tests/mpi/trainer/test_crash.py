"""Crash consistency of checkpoints at np=2, with cohort-train under cohortrun.

Usage: test_crash.py Kills N      SIGKILL the job at N random moments during checkpoint
                                  writes; after every kill the latest checkpoint loads
                                  and training resumes on the loss curve of a run that
                                  was never killed.
       test_crash.py FullDisk     a full file system (a small tmpfs, in a private mount
                                  namespace) fails the save on every rank with a clear
                                  error and leaves the previous checkpoint loadable.

The binaries come from the environment (COHORT_TRAIN, COHORTRUN; FullDisk also
CHECKPOINT_AGREE and MPIEXEC). Every process runs with a timeout."""
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from process_tree import descendants, ranks_of  # noqa: E402

TRAIN = os.environ["COHORT_TRAIN"]
COHORTRUN = os.environ["COHORTRUN"]
# A model whose checkpoint (~9.6 MB with momentum) takes a while to write, a step each.
ARGS = ["--model=mnist_cnn", "--batch_size=8", "--synthetic_samples=4096", "--compute_threads=1",
        "--decode_threads=1", "--num_warmup_batches=1", "--display_every=1", "--progress=plain",
        "--checkpoint_every=1", "--keep_checkpoints=2", "--lr=0.05", "--json"]
failures = []


def check(cond, what, out=""):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
        if out:
            print(out[-4000:])


def job(ckpt, steps, extra=()):
    return [COHORTRUN, "-np", "2", TRAIN] + ARGS + [f"--num_iter={steps}", f"--checkpoint_dir={ckpt}", "--resume"] + \
        list(extra)


def losses(stdout):
    """{step: loss text} of the progress lines ("STEP<TAB>images/sec: …<TAB>LOSS")."""
    return {int(m[0]): m[1] for m in re.findall(r"(?m)^(\d+)\timages/sec:[^\t]*\t(\S+)$", stdout)}


def kill_ranks(pid):
    """SIGKILL every cohort-train process of the job (the ranks); returns how many."""
    killed = 0
    for p in ranks_of(pid).values():
        try:
            os.kill(p, signal.SIGKILL)
            killed += 1
        except OSError:
            pass
    return killed


def temporaries(ckpt):
    try:
        return {e.name: e.stat().st_size for e in os.scandir(ckpt) if e.name.startswith(".tmp-")}
    except OSError:
        return {}


def kill_during_a_write(ckpt, steps, size, rng):
    """Starts the job and SIGKILLs it in the middle of a checkpoint write: after `skip`
    whole writes, when the next checkpoint's temporary file reaches a random fraction of
    its size, or when the "latest" pointer's temporary appears. Returns (output, where)."""
    skip = rng.randrange(3)
    pointer = rng.random() < 0.2
    fraction = rng.random()
    left_before = set(temporaries(ckpt))  # an earlier kill's, removed by the next save
    p = subprocess.Popen(job(ckpt, steps), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen, where, deadline = set(), None, time.monotonic() + 120
    while where is None and p.poll() is None and time.monotonic() < deadline:
        for name, got in temporaries(ckpt).items():
            if name in left_before:
                continue
            is_pointer = name.startswith(".tmp-latest-")
            if not is_pointer:
                seen.add(name)
            if len(seen) <= skip:
                continue
            if pointer and is_pointer:
                where = "writing the latest pointer"
            elif not pointer and not is_pointer and got >= fraction * size:
                where = f"at byte {got} of {size} of a checkpoint"
            if where and kill_ranks(p.pid) < 2:
                print(f"a kill found fewer than 2 ranks: {descendants(p.pid)}", flush=True)
            if where:
                break
        time.sleep(0.0005)
    out = p.communicate(timeout=120)[0].decode(errors="replace")
    return out, where


def group_kills(n):
    rng = random.Random(int(os.environ.get("CRASH_SEED", str(time.time_ns()))))
    steps = 3 * n + 12
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run(job(f"{d}/reference", steps), capture_output=True, timeout=600)
        reference_out = r.stdout.decode(errors="replace")
        reference = losses(reference_out)
        check(r.returncode == 0 and len(reference) == steps, "the run without kills", reference_out[-2000:])
        size = max(os.path.getsize(f"{d}/reference/{f}") for f in os.listdir(f"{d}/reference") if f.startswith("ckpt"))
        ckpt, kills, mid_write, resumed_at = f"{d}/killed", 0, 0, []
        for i in range(n):
            saved = os.path.exists(f"{ckpt}/latest")
            out, where = kill_during_a_write(ckpt, steps, size, rng)
            if where is None:
                print(f"kill {i + 1}: the job ended before a kill landed")
                break
            kills += 1
            left = temporaries(ckpt)
            mid_write += 1 if left else 0
            m = re.search(r"(?m)^Resumed from step (\d+)", out)
            resumed_at.append(int(m[1]) if m else 0)
            got = losses(out)
            wrong = {s: (l, reference.get(s)) for s, l in got.items() if reference.get(s) != l}
            check(not wrong, f"kill {i + 1}: losses (this run, uninterrupted) differ: {wrong}", out)
            check(bool(m) == saved, f"kill {i + 1}: the job resumed from the latest checkpoint, if one was saved", out)
            print(f"kill {i + 1}: {where}; resumed at step {resumed_at[-1]}, trained to step "
                  f"{max(got) if got else '-'}; temporary left: {sorted(left) or 'none'}", flush=True)
        if where is not None:  # the last kill landed: one more run finishes the job
            r = subprocess.run(job(ckpt, steps), capture_output=True, timeout=600)
            out = r.stdout.decode(errors="replace")
        got = losses(out)
        wrong = {s: (l, reference.get(s)) for s, l in got.items() if reference.get(s) != l}
        check(max(got, default=0) == steps and not wrong,
              f"the last run resumes and finishes on the same curve: {wrong}", out)
        final = [final_loss(o) for o in (out, reference_out)]
        check(final[0] is not None and final[0] == final[1],
              f"the final loss {final[0]} equals the uninterrupted run's {final[1]}", out)
        print(f"{kills} kills, {mid_write} left a half-written temporary file; resumed at steps {resumed_at}")
        check(kills == n, f"{kills} of {n} kills landed during a write")


def final_loss(stdout):
    """The "loss" of the run summary line (full precision), or None."""
    m = re.findall(r'(?m)^\{"schema": "cohort\.run/1".*"loss": ([^,]+),', stdout)
    return m[-1] if m else None


def group_full_disk():
    if os.geteuid() != 0 or not shutil.which("unshare"):
        print("SKIP: needs root and unshare (a tmpfs in a private mount namespace)")
        sys.exit(77)
    if os.environ.get("IN_PRIVATE_MOUNTS") != "1":
        env = dict(os.environ, IN_PRIVATE_MOUNTS="1")
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable] + sys.argv, env=env,
                           timeout=600)
        sys.exit(r.returncode)
    with tempfile.TemporaryDirectory() as d:
        # One checkpoint's size, then a file system with room for one and a half.
        r = subprocess.run(job(f"{d}/probe", 1), capture_output=True, timeout=300)
        check(r.returncode == 0, "a one-step run", r.stdout.decode()[-2000:])
        size = max(os.path.getsize(f"{d}/probe/{f}") for f in os.listdir(f"{d}/probe") if f.startswith("ckpt"))
        small = f"{d}/small"
        os.mkdir(small)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size * 3 // 2}", "none", small], check=True)
        try:
            r = subprocess.run(job(small, 5), capture_output=True, timeout=300)
            err = r.stderr.decode(errors="replace")
            check(r.returncode != 0, "a save that fills the disk fails the job", err)
            said = [l for l in err.split("\n") if "No space left on device" in l]
            print("\n".join(said))
            check(len(said) == 1 and "rank 0 could not save a checkpoint in" in said[0] and ".tmp-ckpt-" in said[0],
                  "the error names the file and says the disk is full, once for every rank", err)
            names = sorted(os.listdir(small))
            check(names == ["ckpt-000000000001.cohort", "latest"], f"only the previous checkpoint is left: {names}")
            r = subprocess.run(job(small, 1), capture_output=True, timeout=300)
            out = r.stdout.decode(errors="replace")
            check(r.returncode == 0 and "Resumed from step 1 (epoch 0)" in out, "the previous checkpoint loads",
                  out + r.stderr.decode(errors="replace"))
            # The C API on every rank: the same error, no temporary file, the previous one loads.
            tiny = f"{d}/tiny"
            os.mkdir(tiny)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "none", tiny], check=True)
            r = subprocess.run([os.environ["MPIEXEC"], "-np", "2", "--oversubscribe", "-bind-to", "none",
                                os.environ["CHECKPOINT_AGREE"], tiny], capture_output=True, timeout=120)
            check(r.returncode == 0, "every rank gets the full disk's error (C API)",
                  r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace"))
        finally:
            for mount in (f"{d}/tiny", small):
                subprocess.run(["umount", mount], capture_output=True)


if sys.argv[1] == "Kills":
    group_kills(int(sys.argv[2]))
else:
    group_full_disk()
print("FAILED:" if failures else "OK", *failures, sep="\n  ")
sys.exit(1 if failures else 0)
