#!/usr/bin/env python3
"""cohort-check: grades the course exercises and says what to fix.

    cohort-check accelerate train_single.c      # or train_single.py
    cohort-check add-model trainer.c

accelerate: builds the program (C, with cc) or loads it (Python), runs it under
cohortrun at np=1 and np=2 on a Fashion-MNIST subset with one compute thread per rank,
each run saving a checkpoint, then once more at np=2 resuming from that checkpoint for
one more epoch, and reports PASS/FAIL per item with a hint for each failure. Everything
it grades comes back from the program's run summary (its --json line on rank 0), from
each rank's output, and from cohort's instrumentation (the option instrument_dir:
parameter checksums at the first step and at the end, the samples each rank's pipeline
read, learning rates, steps, losses, step times, and each rank's progress while it
runs). It never reads the program's source.

A distributed run may take 2 x the np=1 run's wall time + 30 s (and --timeout at most),
and a collective that waits stall_shutdown_s (--stall-seconds, 20) for the other ranks
fails the run: an answer whose ranks deadlock is reported at most 3 x T1 + 30 s after
the checker starts its runs, T1 the np=1 run's time, and the items that its records
support are still graded.

add-model: builds the trainer variant, asks it for alexnet_owt, and checks the model's
parameter count (61,100,840, torchvision's alexnet) and that it trains.

Exit status: 0 when every item passes (or is skipped), 1 when one fails, 2 for bad usage
or when the program cannot be built.
"""
import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import cohort
import cohort.labs

FASHION_MNIST = cohort.labs.FASHION_MNIST
ALEXNET_OWT_PARAMS = 61_100_840

# ---- results ----


class Item:
    def __init__(self, key, title):
        self.key, self.title = key, title
        self.status, self.detail, self.hint = "FAIL", "", ""

    def passed(self, detail=""):
        self.status, self.detail = "PASS", detail
        return self

    def failed(self, detail, hint):
        self.status, self.detail, self.hint = "FAIL", detail, hint
        return self

    def skipped(self, detail):
        self.status, self.detail = "SKIP", detail
        return self

    def as_dict(self):
        return {"item": self.key, "title": self.title, "status": self.status, "detail": self.detail,
                "hint": self.hint}


def report(title, items, out=sys.stdout):
    out.write(f"{title}\n")
    width = max(len(i.title) for i in items)
    for i in items:
        out.write(f"  {i.status}  {i.title.ljust(width)}  {i.detail}\n")
    failed = [i for i in items if i.status == "FAIL"]
    if failed:
        out.write("\nHints:\n")
        hints = {}
        for i in failed:
            hints.setdefault(i.hint, []).append(i.title)
        for hint, titles in hints.items():
            out.write(f"  - {'; '.join(titles)}:\n      " + hint.replace("\n", "\n      ") + "\n")
    passed = sum(i.status == "PASS" for i in items)
    skipped = sum(i.status == "SKIP" for i in items)
    out.write(f"\n{passed} passed, {len(failed)} failed" + (f", {skipped} skipped" if skipped else "") + "\n")
    out.flush()


class UsageError(Exception):
    pass


# ---- building or loading the program ----


def _build_flags():
    """Compiler and linker flags for a C program on cohort's public API."""
    if os.environ.get("COHORT_CFLAGS") is not None or os.environ.get("COHORT_LIBS") is not None:
        return shlex.split(os.environ.get("COHORT_CFLAGS", "")), shlex.split(os.environ.get("COHORT_LIBS", ""))
    try:
        from cohort import _build_config as config
        library = config.LIBRARIES[0]
        cflags = [f"-I{d}" for d in config.INCLUDE_DIRS]
        libdir = os.path.dirname(library)
        return cflags, [library, f"-Wl,-rpath,{libdir}"]
    except (ImportError, AttributeError, IndexError):
        pass
    try:
        out = subprocess.run(["pkg-config", "--cflags", "--libs", "cohort"], capture_output=True, text=True,
                             check=True).stdout
        return shlex.split(out), []
    except (OSError, subprocess.CalledProcessError):
        raise UsageError("cannot find cohort's headers and library: set COHORT_CFLAGS and COHORT_LIBS, use "
                         "cohort-check from a build tree or an install prefix, or make `pkg-config cohort` work")


def prepare(path, workdir):
    """The command that runs the student's program: a C file is compiled, a Python file
    runs with this interpreter, anything else executable runs as it is."""
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file")
    if path.endswith(".c"):
        cflags, libs = _build_flags()
        exe = os.path.join(workdir, "program")
        cc = shlex.split(os.environ.get("CC", "cc"))
        cmd = cc + ["-std=c99", "-O2", "-Wall", path, "-o", exe] + cflags + libs + ["-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise UsageError(f"{os.path.basename(path)} does not compile:\n  {' '.join(cmd)}\n{proc.stderr}")
        return [exe]
    if path.endswith(".py"):
        return [sys.executable, path]
    if os.access(path, os.X_OK):
        return [path]
    raise UsageError(f"{path}: expected a .c or .py file, or an executable")


def _env_for_children():
    """The environment ranks run in: the cohort package importable (Python programs)."""
    env = dict(os.environ)
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(cohort.__file__)))
    env["PYTHONPATH"] = package_dir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def make_dataset(directory, train, test, source=FASHION_MNIST):
    """The first `train` and `test` samples of Fashion-MNIST, as IDX files in `directory`."""
    try:
        return cohort.labs.fashion_mnist_subset(directory, train, test, source)
    except FileNotFoundError as e:
        raise UsageError(f"{e}; or --data-source DIR") from None


# ---- running under cohortrun ----

# stall_shutdown_s of the distributed check runs. In a correct program a rank waits for
# the others a fraction of a second at most (a step's skew, rank 0 writing a
# checkpoint), so a collective that has waited this long never completes: the ranks took
# different paths (different numbers of steps, a collective call made on some ranks
# only). The engine then fails it on every rank and the run ends.
STALL_SECONDS = 20.0


def run_limit(t1, timeout):
    """The most seconds a distributed run may take: 2 x the np=1 run's wall time t1 plus
    30 s (a correct answer takes less than t1 there), and never more than --timeout.
    With the np=1 run first, a verdict on any answer comes at most 3 x t1 + 30 s after
    the checker starts its runs; a deadlock in a collective ends the run sooner, at most
    stall_shutdown_s (--stall-seconds) after the ranks stop meeting."""
    return min(timeout, 2 * t1 + 30)


def resume_limit(t1, timeout):
    """The most seconds the resumed run (one epoch at np=N) may take."""
    return min(timeout, t1 + 30)


class Run:
    """One run of the program: exit status, each rank's output, rank 0's run summary and
    each rank's instrumentation records and progress."""

    def __init__(self, np, name=None):
        self.np = np
        self.name = name or f"np={np}"
        self.status = None  # the exit status, or "timeout"
        self.limit = None  # the seconds it was allowed
        self.wall_s = 0.0
        self.ended_at = 0.0  # time.time() at its end
        self.output = ""
        self.stdout = {}  # rank → text
        self.stderr = {}  # rank → text
        self.summary = None
        self.records = {}  # rank → list of dicts
        self.progress = {}  # rank → its progress record (instrument_dir/rank-R.progress.json)
        self.saved_checkpoint = False  # rank 0's checkpoint_dir holds one after the run

    def events(self, kind, split=None):
        """rank → records of one kind (the last one per rank; for pipelines, of `split`)."""
        out = {}
        for rank, records in self.records.items():
            for r in records:
                if r.get("event") == kind and (split is None or r.get("split") == split):
                    out[rank] = r
        return out

    def printers(self):
        return sorted(r for r, text in self.stdout.items() if text.strip())

    def steps_started(self):
        """rank → training steps it started (its progress record, else its end record)."""
        out = {r: p["steps_started"] for r, p in self.progress.items()}
        for r, end in self.events("end").items():
            out.setdefault(r, end.get("steps_started", end["steps"]))
        return out

    def idle_s(self):
        """Seconds between each rank's last step start or end and the end of the run."""
        return {r: self.ended_at - p["time"] for r, p in self.progress.items()}

    def tail(self, lines=2):
        """The last lines each rank wrote to stderr (its error, without cohort's log and
        indented lines when it has others), else the job's output."""
        out = []
        for r in sorted(self.stderr):
            mine = [line for line in self.stderr[r].strip().splitlines() if not line.startswith("cohortrun:")]
            errors = [line for line in mine if line[:1].strip() and not line.startswith("[cohort ")]
            out += [f"rank {r}: {line}" if self.np > 1 else line for line in (errors or mine)[-lines:]]
        return "\n".join(out) if out else "\n".join(self.output.strip().splitlines()[-8:])

    def describe_end(self):
        """How the run ended, for a run that did not end well."""
        if self.status == "timeout":
            return f"the {self.name} run was stopped after {self.limit:.0f} s, its limit"
        return f"the {self.name} run failed (exit status {self.status})"


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _stop(proc):
    """Ends a job that ran past its limit: mpirun, then anything of its process group."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            pass


def execute(command, np, workdir, settings, timeout, cohortrun=None, name=None, checkpoints=None):
    """Runs `command` on np ranks under cohortrun for at most `timeout` seconds. With
    `checkpoints`, rank R's checkpoint_dir is checkpoints/rank-R: a correct program writes
    and reads only rank 0's (the checkpoint calls use rank 0's directory), and copies
    that ignore each other (TODO 1 undone) do not write into one directory at once."""
    run = Run(np, name)
    outdir = os.path.join(workdir, (name or f"np{np}").replace("=", ""))
    instrument = os.path.join(outdir, "instrument")
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(instrument)
    settings = dict(settings, instrument_dir=instrument)
    launcher = cohortrun or cohort.find_cohortrun()
    if checkpoints:
        command = ["/bin/sh", "-c", 'COHORT_CHECKPOINT_DIR="$0/rank-${OMPI_COMM_WORLD_RANK:-0}" exec "$@"',
                   checkpoints] + command
    cmd = [launcher, "-np", str(np), "--output-dir", os.path.join(outdir, "ranks")]
    cmd += cohort.options_to_args(settings) + ["--"] + command
    run.limit = timeout
    start = time.monotonic()
    with tempfile.TemporaryFile("w+", errors="replace") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_env_for_children(),
                                start_new_session=True)
        try:
            run.status = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            run.status = "timeout"
        run.wall_s, run.ended_at = time.monotonic() - start, time.time()
        out.seek(0)
        run.output = out.read()
    for rank in range(np):
        for stream in ("stdout", "stderr"):
            path = os.path.join(outdir, "ranks", "1", f"rank.{rank}", stream)
            getattr(run, stream)[rank] = open(path, errors="replace").read() if os.path.exists(path) else ""
        recfile = os.path.join(instrument, f"rank-{rank}.jsonl")
        if os.path.exists(recfile):
            with open(recfile) as f:
                run.records[rank] = [json.loads(line) for line in f if line.strip()]
        progress = _read_json(os.path.join(instrument, f"rank-{rank}.progress.json"))
        if progress:
            run.progress[rank] = progress
    for line in run.stdout.get(0, "").splitlines():
        if cohort.is_summary_line(line):
            run.summary = json.loads(line)
    if checkpoints:
        run.saved_checkpoint = os.path.exists(os.path.join(checkpoints, "rank-0", "latest"))
    return run


# ---- grading the accelerate exercise ----

ACCELERATE_ITEMS = [
    ("runtime", "one runtime over all ranks"),
    ("init_params", "initial parameters identical across ranks"),
    ("final_params", "parameters identical after training"),
    ("shards", "disjoint shards covering the dataset"),
    ("one_printer", "exactly one rank prints"),
    ("lr_scaled", "learning rate scaled, with warm-up"),
    ("steps_divided", "steps per epoch divided"),
    ("metrics_averaged", "metrics averaged across ranks"),
    ("checkpoint", "checkpoint saved and resumed on every rank"),
    ("accuracy", "np=2 accuracy within {points} points of np=1"),
    ("throughput", "np=2 computes an epoch >= {speedup}x faster than np=1"),
]

COLLECTIVE_CHECKPOINT_HINT = (
    "every rank calls cohort_optimizer_save_checkpoint and cohort_optimizer_load_checkpoint (Python: "
    "opt.save_checkpoint, opt.load_checkpoint): they are collective, and rank 0 alone writes or reads the "
    "file. Unlike Horovod's, they do not go under `if (rank == 0)`: TODO 6 is about printing only")


def _close(a, b, rel=1e-4, abs_=1e-6):
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def _near(value, target, rel):
    return abs(value - target) <= rel * abs(target)


def _rate(end):
    return end["measured_images"] / end["measured_s"] if end.get("measured_s") else 0.0


def _skipped_checkpoint_call(output):
    """'save' or 'load' when a checkpoint call failed because some rank never made it."""
    for what in ("save", "load"):
        if f"every rank must call cohort_optimizer_{what}_checkpoint" in output:
            return what
    return None


class _Job:
    """What the runs recorded, and how far the np=N run got: the items grade from this."""

    def __init__(self, one, two, resumed, titles):
        self.one, self.two, self.resumed, self.n, self.titles = one, two, resumed, two.np, titles
        self.first1, self.end1 = one.events("first_step"), one.events("end")
        self.first, self.end = two.events("first_step"), two.events("end")
        self.steps = two.steps_started()
        self.separate = any(self.first[r]["runtime_size"] != self.n for r in self.first)
        # Rank 0 prints its run summary after training and evaluating: with it and every
        # rank's end record, the training's records are complete, even when the run
        # failed afterwards (saving its checkpoint).
        self.complete = two.summary is not None and all(r in self.end for r in range(self.n))
        self.mismatch = self._mismatch()
        self.cause = None  # the item that says why the run stopped, once one does
        if _skipped_checkpoint_call(two.output):
            self.cause = "checkpoint"
        elif self.mismatch:
            self.cause = "steps_divided"

    def _mismatch(self):
        """True when the ranks took different numbers of steps, and the run shows it: it
        ended, or was stopped while no rank was stepping (killed at a random moment, a
        progressing run can be a step apart)."""
        if len(set(self.steps.values())) <= 1 or len(self.steps) < self.n:
            return False
        if self.two.status != "timeout":
            return True
        idle = self.two.idle_s()
        return bool(idle) and min(idle.values()) >= 5

    def not_graded(self, item):
        """Fails `item` for want of records: the np=N run did not get that far."""
        if self.cause:
            hint = f"the np={self.n} run did not reach its end: see '{self.titles[self.cause]}' for why"
        else:
            hint = f"it must run to the end at np={self.n}; its last lines:\n{self.two.tail()}"
        return item.failed(f"not graded: {self.two.describe_end()} before the end of training", hint)


def grade_accelerate(one, two, resumed=None, points=1.5, min_speedup=1.5, throughput=True):
    """The items, graded from the np=1 run `one`, the np=N run `two` (N > 1; None when
    np=1 failed) and the run `resumed` from two's checkpoint (None when not run)."""
    n = two.np if two else 2
    items = {key: Item(key, title.format(points=points, speedup=min_speedup)) for key, title in ACCELERATE_ITEMS}
    titles = {key: item.title for key, item in items.items()}
    if one.status != 0:
        for item in items.values():
            item.failed(one.describe_end(), f"it must run to the end at np=1; its last lines:\n{one.tail()}")
        return list(items.values())
    job = _Job(one, two, resumed, titles)
    missing = [r for r in range(n) if r not in job.first or (two.status == 0 and r not in job.end)]
    if 0 not in job.end1 or (two.status == 0 and missing):
        for item in items.values():
            item.failed("no training was recorded" + (f" on rank(s) {missing}" if missing else " at np=1"),
                        "train with cohort_optimizer_train_step() (Python: model.train_step) and destroy the "
                        "optimizer at the end (Python: close it, or leave its `with` block)")
        return list(items.values())

    if missing:  # the np=N run failed before every rank's first step
        for key in ("runtime", "init_params", "final_params", "lr_scaled", "accuracy", "throughput"):
            job.not_graded(items[key])
    else:
        _grade_runtime(items["runtime"], job)
        _grade_init_params(items["init_params"], job)
        _grade_final_params(items["final_params"], job)
        _grade_lr(items["lr_scaled"], job)
        _grade_accuracy(items["accuracy"], job, points)
        if not throughput:
            items["throughput"].skipped("not measured (--throughput=skip)")
        else:
            _grade_throughput(items["throughput"], job, min_speedup)
    _grade_shards(items["shards"], job)
    _grade_printers(items["one_printer"], job)
    _grade_steps(items["steps_divided"], job)
    _grade_metrics(items["metrics_averaged"], job)
    _grade_checkpoint(items["checkpoint"], job)
    return list(items.values())


def _grade_runtime(item, job):  # TODO 1: the runtime spans the job.
    sizes = sorted({job.first[r]["runtime_size"] for r in range(job.n)})
    if sizes != [job.n]:
        return item.failed(f"at np={job.n} the ranks' runtimes have {sizes} rank(s)",
                           "create the runtime over the whole job (world=job, the default), not this process "
                           "alone (world=process); then each rank uses its local rank's device")
    devices = sorted({job.first[r]["device"] for r in range(job.n)})
    return item.passed(f"{job.n} ranks, device {', '.join(devices)}")


def _grade_init_params(item, job):  # TODO 4: rank 0's parameters everywhere.
    init = {r: job.first[r]["params_crc32c"] for r in range(job.n)}
    if len(set(init.values())) == 1:
        return item.passed(f"checksum {init[0]} on every rank")
    return item.failed(f"checksums at the first step: {init}", "broadcast rank 0's parameters before training: "
                       "cohort_optimizer_broadcast(opt, 0) (Python: opt.broadcast(0))")


def _modes(job):
    """The variable_update modes of the np=N run's ranks, other than replicated."""
    return sorted({job.first[r].get("variable_update", "replicated") for r in job.first} - {"replicated"})


def _apart_cause(job):
    """Why ranks that started alike ended with different parameters (a hint)."""
    modes = _modes(job)
    if job.separate:
        return ("the ranks are separate programs, each training its own model (see 'one runtime over all ranks'): "
                "create the runtime over the whole job, so that the optimizer averages the gradients over it")
    if modes:
        return (f"the gradients were not averaged: variable_update={'/'.join(modes)} trains one model per rank. "
                "Leave variable_update at replicated (the default; Horovod: hvd.DistributedOptimizer), so that "
                "every rank applies the same averaged update")
    return ("the ranks started alike but their updates differed: the gradients were not averaged. Create the "
            "optimizer on a model of the job's runtime, so that it averages the gradients over every rank")


def _grade_final_params(item, job):  # TODO 3 and 4: the parameters still agree.
    if not job.complete:
        return job.not_graded(item)
    init = {r: job.first[r]["params_crc32c"] for r in range(job.n)}
    final = {r: job.end[r]["params_crc32c"] for r in range(job.n)}
    if len(set(final.values())) == 1:
        return item.passed(f"checksum {final[0]} on every rank")
    if len(set(init.values())) > 1:
        return item.failed(f"checksums at the end: {final}", "the ranks started from different parameters: "
                           "broadcast them from rank 0 before the first step")
    return item.failed(f"checksums at the end: {final}", _apart_cause(job))


def _grade_shards(item, job):  # TODO 2: disjoint shards that cover the dataset.
    n, pipelines = job.n, job.two.events("pipeline", "train")
    if sorted(pipelines) != list(range(n)):
        if job.two.status != 0:
            return job.not_graded(item)
        return item.failed("no training pipeline was recorded on every rank",
                           "read the training data through a cohort pipeline (data_split=train)")
    sizes = {p["runtime_size"] for p in pipelines.values()}
    dataset = pipelines[0]["dataset_size"]
    bitmaps = [int.from_bytes(bytes.fromhex(pipelines[r]["first_epoch_bitmap"]), "little") for r in range(n)]
    union, overlap = 0, 0
    for b in bitmaps:
        overlap |= union & b
        union |= b
    seen, overlapping = bin(union).count("1"), bin(overlap).count("1")
    if overlapping:
        hint = ("each rank read the whole dataset: create the pipelines with the runtime, which gives each rank "
                "its share" if sizes == {1} else "the ranks' pipelines overlap: create them with the same runtime "
                "and the same seed on every rank")
        return item.failed(f"{overlapping} of {dataset} samples were read by more than one rank in the first epoch",
                           hint)
    if seen < dataset:
        if job.two.status != 0 and not job.complete:
            return job.not_graded(item)
        return item.failed(f"the ranks read {seen} of {dataset} samples ({seen / dataset:.0%}) in their first epoch",
                           "each rank's epoch ended before its share did: run every step of the epoch, steps per "
                           "epoch = dataset size / (batch x ranks)")
    return item.passed(f"{n} disjoint shards cover all {dataset} samples")


def _grade_printers(item, job):  # TODO 6: one rank prints.
    printers = job.two.printers()
    if printers == [0]:
        return item.passed("only rank 0 wrote to stdout")
    if printers:
        return item.failed(f"rank(s) {printers} wrote to stdout",
                           "print on rank 0 only: `if (rank == 0)` (Python: `if self.rank == 0`) around the "
                           "printing; the other ranks stay silent. Only the printing: the checkpoint calls stay on "
                           "every rank")
    if job.two.status != 0:
        return job.not_graded(item)
    return item.failed("no rank printed", "rank 0 must print its report and the run summary (--json)")


def _scaling(ratio, n):
    """What a measured lr ratio np=N / np=1 says about how it was scaled (or None: as it
    should be)."""
    if _near(ratio, n, 0.05):
        return None
    if _near(ratio, 1, 0.05):
        return "not scaled"
    if _near(ratio, n * n, 0.05):
        return "scaled twice"
    if _near(ratio, 1 / n, 0.05):
        return "divided by the ranks instead of multiplied"
    return f"scaled by {ratio:.2f} instead of {n}"


def _grade_lr(item, job):  # TODO 3: the learning rate is scaled by the ranks, after a warm-up.
    if not job.complete:
        return job.not_graded(item)
    n = job.n
    lr1, lr2 = job.end1[0]["max_lr"], job.end[0]["max_lr"]
    ratio = lr2 / lr1 if lr1 > 0 else float("inf")
    first_lr = job.end[0]["first_lr"]
    how = _scaling(ratio, n)
    detail = f"peak lr {lr1:g} at np=1, {lr2:g} at np={n}: {ratio:.2f}x"
    if how is None:
        if first_lr < 0.9 * lr2:
            return item.passed(f"peak lr {lr1:g} -> {lr2:g} ({ratio:.2f}x), warm-up from {first_lr:g}")
        return item.failed(f"lr {first_lr:g} from the first step at np={n}: no warm-up",
                           "warm up from the unscaled lr to the scaled one: warmup_epochs (Goyal et al.)")
    if how == "scaled twice":
        hint = (f"the learning rate was multiplied by the ranks twice ({n} x {n}): lr_scaling=linear already "
                "multiplies lr by global batch / base_batch_size (the ranks, with base_batch_size = the batch of "
                "one rank), so do not also multiply lr by the ranks yourself; keep one of the two")
    elif how == "not scaled" and job.separate:
        hint = ("each rank's runtime has 1 rank (see 'one runtime over all ranks'), so scaling by the ranks "
                "scales by 1: create the runtime over the whole job")
    elif how == "not scaled" and _modes(job):
        hint = (f"variable_update={'/'.join(_modes(job))} trains one model per rank, on one rank's batch, so "
                "lr_scaling=linear leaves lr as it is: leave variable_update at replicated (see 'parameters "
                "identical after training')")
    elif how == "not scaled":
        hint = ("scale the learning rate by the number of ranks: lr_scaling=linear with base_batch_size = the "
                "batch of one rank (or lr x ranks), and warm up to it (warmup_epochs)")
    else:
        hint = ("the learning rate must grow with the global batch, by the number of ranks: lr_scaling=linear "
                "multiplies lr by global batch / base_batch_size, so set base_batch_size to the batch of one rank "
                "(or multiply lr by the ranks yourself, without lr_scaling)")
    return item.failed(f"{detail}, {how} (expected {n}x)", hint)


def _steps_shape(s1, s2, n):
    """What per-rank steps s2 at np=N against s1 at np=1 say (or None: divided once)."""
    if s2 > 0 and _near(s1 / s2, n, 0.1):
        return None
    if _near(s2, s1, 0.1):
        return "not divided"
    if s2 > 0 and _near(s1 / s2, n * n, 0.1):
        return "divided twice"
    if _near(s2, s1 * n, 0.1):
        return "multiplied by the ranks instead of divided"
    return f"divided by {s1 / s2:.2f} instead of {n}" if s2 > 0 else "no step"


def _grade_steps(item, job):  # TODO 7: steps per epoch divided by the ranks.
    n, steps = job.n, job.steps
    if job.mismatch:
        counts = ", ".join(f"rank {r} {steps[r]}" for r in sorted(steps))
        waiting = [r for r, p in sorted(job.two.progress.items()) if p.get("in_step")]
        where = (f"rank {waiting[0]} was waiting in its step {steps[waiting[0]]} for the others when "
                 if len(waiting) == 1 else "")
        return item.failed(
            f"the ranks took different numbers of steps: {counts} ({where}{job.two.describe_end()})",
            "every rank must take the same number of steps: each step's gradient allreduce waits for every rank, "
            "so a rank with a step more than the others waits for ever. Compute the steps per epoch from the "
            "whole dataset, the same on every rank: dataset_size / (batch x ranks) (pipeline info's "
            "dataset_size is the whole dataset, not this rank's share). (Unless a rank stopped on an error of "
            f"its own.) The ranks' last lines:\n{job.two.tail()}")
    if not job.complete:
        return job.not_graded(item)
    s1, s2 = job.end1[0]["steps"], job.end[0]["steps"]
    how = _steps_shape(s1, s2, n)
    if how is None:
        return item.passed(f"{s1} steps at np=1, {s2} per rank at np={n}")
    detail = f"{s1} steps at np=1, {s2} per rank at np={n}: {how} (expected about {s1 // n})"
    if how == "divided twice":
        hint = (f"the steps per epoch were divided by the ranks twice (np=1's {s1} / {n} / {n}): pipeline info's "
                "dataset_size is already the whole dataset, so divide it by batch x ranks once")
    elif how == "not divided" and job.separate:
        hint = ("each rank's runtime has 1 rank (see 'one runtime over all ranks'), so dividing by the ranks "
                "divides by 1: create the runtime over the whole job")
    else:
        hint = "each rank takes one batch per step: divide the steps per epoch by the number of ranks"
    return item.failed(detail, hint)


def _grade_metrics(item, job):  # TODO 5: the report's metrics are the ranks' together.
    s, n = job.two.summary, job.n
    if not s:
        if job.two.status != 0:
            return job.not_graded(item)
        return item.failed("rank 0 printed no run summary",
                           "print the run summary on rank 0 (cohort_run_summary_json; the checker passes --json)")
    if not job.complete:
        return job.not_graded(item)
    losses = [job.end[r]["last_loss"] for r in range(n)]
    mean_loss = sum(losses) / n
    reported = s.get("loss")
    rates = sum(_rate(job.end[r]) for r in range(n))
    reported_rate = (s.get("images_per_sec") or {}).get("mean") or 0.0
    problems = []
    if reported is None or not _close(reported, mean_loss, rel=1e-3):
        problems.append(f"loss {reported} in the summary, mean of the ranks' last losses {mean_loss:.6g} "
                        f"(rank 0 alone: {losses[0]:.6g})")
    if rates > 0 and reported_rate < 0.7 * rates:
        problems.append(f"{reported_rate:.0f} images/sec in the summary, the ranks together {rates:.0f}")
    if problems:
        return item.failed("; ".join(problems),
                           "average the loss over the ranks (cohort_allreduce with COHORT_REDUCE_AVERAGE, or "
                           "a sum divided by the ranks) and add up their images/sec before rank 0 reports them")
    return item.passed(f"loss {reported:.4f} = mean of {n} ranks; {reported_rate:.0f} images/sec for all ranks")


def _grade_checkpoint(item, job):  # TODO 6: the checkpoint calls stay collective.
    two, resumed, n = job.two, job.resumed, job.n
    skipped = _skipped_checkpoint_call(two.output)
    if skipped:
        return item.failed(f"the np={n} run failed in cohort_optimizer_{skipped}_checkpoint, which some rank never "
                           "called", COLLECTIVE_CHECKPOINT_HINT)
    if two.status != 0:
        return job.not_graded(item)
    if not two.saved_checkpoint:
        return item.failed(f"the np={n} run wrote no checkpoint into checkpoint_dir",
                           "save the trained model at the end when checkpoint_dir is set (the exercise does): "
                           "every rank calls cohort_optimizer_save_checkpoint")
    if resumed is None:
        return item.skipped("not resumed")
    skipped = _skipped_checkpoint_call(resumed.output)
    if skipped:
        return item.failed(f"the run resumed with --resume failed in cohort_optimizer_{skipped}_checkpoint, which "
                           "some rank never called", COLLECTIVE_CHECKPOINT_HINT)
    if resumed.status != 0:
        return item.failed(f"{resumed.describe_end()} (np={n}, --resume, one more epoch)",
                           f"a run with --resume continues from the checkpoint; its last lines:\n{resumed.tail()}")
    first = resumed.events("first_step")
    missing = [r for r in range(n) if r not in first]
    if missing:
        return item.failed(f"the resumed run took no step on rank(s) {missing}",
                           "after loading the checkpoint, train the epochs that remain (the checker asks for one "
                           "more)")
    saved = job.end[0]["params_crc32c"]
    got = {r: first[r]["params_crc32c"] for r in range(n)}
    wrong = [r for r in range(n) if got[r] != saved]
    if wrong:
        hint = ("the ranks are separate programs, each loading a checkpoint of its own (see 'one runtime over all "
                "ranks')" if job.separate else
                "every rank calls cohort_optimizer_load_checkpoint (Python: opt.load_checkpoint): rank 0 reads the "
                "file and its values reach every rank")
        return item.failed(f"rank(s) {wrong} resumed from other parameters than the np={n} run saved (saved "
                           f"{saved}; at the first step after loading: {got})", hint)
    return item.passed(f"saved after {job.end[0]['steps']} steps, every rank resumed from it ({saved})")


def _grade_accuracy(item, job, points):
    if not job.complete:
        return job.not_graded(item)
    a1 = (job.one.summary or {}).get("top1")
    a2 = (job.two.summary or {}).get("top1")
    if a1 is None or a2 is None:
        return item.failed("no test accuracy in rank 0's run summary",
                           "evaluate the test set (cohort_model_evaluate) and put top1 in the run summary")
    n = job.n
    detail = f"{100 * a1:.2f}% at np=1, {100 * a2:.2f}% at np={n}"
    final = {job.end[r]["params_crc32c"] for r in range(n)}
    if job.separate or len(final) > 1:
        # Rank 0's model is not the job's: the comparison would say nothing.
        cause = ("the ranks are separate programs (see 'one runtime over all ranks')" if job.separate else
                 "the ranks ended with different parameters (see 'parameters identical after training')")
        return item.failed(f"{detail}, but of rank 0's model only: {cause}",
                           f"the ranks did not train one model: {cause}; rank 0's accuracy is that of a model "
                           f"trained without the others'")
    if 100 * (a1 - a2) <= points:
        return item.passed(detail)
    lr1, lr2 = job.end1[0]["max_lr"], job.end[0]["max_lr"]
    how = _scaling(lr2 / lr1, n) if lr1 > 0 else None
    steps = _steps_shape(job.end1[0]["steps"], job.end[0]["steps"], n)
    if how:
        hint = f"the learning rate was {how} (see '{job.titles['lr_scaled']}')"
    elif steps:
        hint = f"the steps per epoch were {steps} (see '{job.titles['steps_divided']}')"
    else:
        hint = ("the distributed run trains a worse model: scale the learning rate with warm-up, and make sure "
                "every rank trains on its own data")
    return item.failed(detail, hint)


def _grade_throughput(item, job, min_speedup):
    """Compute time per epoch: each rank's steps x its median step in the CPU time of its
    training thread (start to start, after the first five), the slowest rank for np=N.
    Only sharing each epoch's steps (TODOs 1, 2 and 7) makes it shorter: copies that
    ignore each other (the exercise as written) take all of np=1's steps. Wall time is
    reported too, but not graded: on a machine with other work it says more about that
    work than about the program."""
    if not job.complete:
        return job.not_graded(item)
    n, one_end = job.n, job.end1[0]
    threads = {r: job.first[r]["compute_threads"] for r in range(n)}
    if any(t != 1 for t in threads.values()) or job.first1[0]["compute_threads"] != 1:
        return item.failed(f"compute threads per rank: {threads}",
                           "leave compute_threads at its default: the checker gives each rank one thread")
    ends = [one_end] + [job.end[r] for r in range(n)]
    if any(e.get("step_intervals", 0) < 5 for e in ends):
        return item.failed("too few steps to time", "train more steps: --epochs or --train-samples")

    def per_epoch(end, key):
        return end[key] * end["steps_started"] / epochs

    epochs = (job.one.summary or {}).get("epochs") or 1
    c1 = per_epoch(one_end, "step_cpu_median_s")
    slowest = max(range(n), key=lambda r: per_epoch(job.end[r], "step_cpu_median_s"))
    end2 = job.end[slowest]
    c2 = per_epoch(end2, "step_cpu_median_s")
    w1 = per_epoch(one_end, "step_interval_median_s")
    w2 = max(per_epoch(job.end[r], "step_interval_median_s") for r in range(n))
    speedup = c1 / c2 if c2 > 0 else 0.0
    ms1, ms2 = 1000 * one_end["step_cpu_median_s"], 1000 * end2["step_cpu_median_s"]
    detail = (f"compute per epoch {c1:.2f} s at np=1, {c2:.2f} s per rank at np={n} ({speedup:.2f}x): "
              f"{one_end['steps_started']} steps of {ms1:.0f} ms, {end2['steps_started']} of {ms2:.0f} ms per rank; "
              f"wall time per epoch {w1:.2f} s -> {w2:.2f} s ({w1 / w2 if w2 > 0 else 0:.2f}x)")
    if speedup >= min_speedup:
        return item.passed(detail)
    if end2["steps_started"] >= 0.9 * one_end["steps_started"]:
        hint = ("each rank still takes all of np=1's steps, so an epoch costs each rank as much as at np=1: shard "
                "the data and divide the steps per epoch by the ranks (TODOs 2 and 7)")
    else:
        hint = (f"a step costs {ms2 / ms1:.1f}x the compute at np={n} that it costs at np=1: the ranks do more per "
                "step than np=1 does (a larger batch, or work of their own between steps)")
    return item.failed(detail, hint)


def accelerate(args):
    with tempfile.TemporaryDirectory(prefix="cohort-check-") as scratch:
        workdir = args.keep or scratch
        os.makedirs(workdir, exist_ok=True)
        command = prepare(args.file, workdir)
        data = os.path.join(workdir, "data")
        make_dataset(data, args.train_samples, args.test_samples, args.data_source)
        settings = {"data_dir": data, "num_epochs": args.epochs, "threads_per_rank": 1, "json": True,
                    "log_level": "warn", "progress": "plain", "stall_shutdown_s": args.stall_seconds,
                    "stall_warning_s": args.stall_seconds / 2}
        if args.batch_size:
            settings["batch_size"] = args.batch_size
        name = os.path.basename(args.file)

        def say(text):
            if not args.quiet:
                print(f"cohort-check: {text}", flush=True)

        def checkpoints(np):
            path = os.path.join(workdir, "checkpoints", f"np{np}")
            shutil.rmtree(path, ignore_errors=True)
            return path

        say(f"running {name} at np=1 ...")
        one = execute(command, 1, workdir, settings, args.timeout, args.cohortrun, checkpoints=checkpoints(1))
        two = resumed = None
        if one.status == 0:
            limit = run_limit(one.wall_s, args.timeout)
            say(f"running {name} at np={args.np} (at most {limit:.0f} s) ...")
            ck = checkpoints(args.np)
            two = execute(command, args.np, workdir, settings, limit, args.cohortrun, checkpoints=ck)
            if two.status == 0 and two.saved_checkpoint:
                limit = resume_limit(one.wall_s, args.timeout)
                say(f"resuming {name} from its checkpoint at np={args.np}, one more epoch (at most {limit:.0f} s) ...")
                more = dict(settings, resume=True, num_epochs=args.epochs + 1)
                resumed = execute(command, args.np, workdir, more, limit, args.cohortrun, name="resumed",
                                  checkpoints=ck)
        items = grade_accelerate(one, two, resumed, args.accuracy_points, args.min_speedup,
                                 args.throughput == "check")
    return items, [r for r in (one, two, resumed) if r]


# ---- the add-model exercise ----

ADD_MODEL_ITEMS = [
    ("model_known", "the trainer knows alexnet_owt"),
    ("param_count", f"alexnet_owt has {ALEXNET_OWT_PARAMS:,} parameters"),
    ("output", "it takes 3x224x224 images and gives 1000 classes"),
    ("trains", "it trains (two steps on synthetic data)"),
]


def grade_add_model(summary_run, train_run):
    items = {key: Item(key, title) for key, title in ADD_MODEL_ITEMS}
    text = summary_run.output
    if summary_run.status != 0 or "Invalid model type" in text:
        line = next((l for l in text.splitlines() if "Invalid model type" in l), text.strip()[-300:])
        for item in items.values():
            item.failed(line.strip(), "add alexnet_owt to the trainer's model table, built layer by layer with "
                        "cohort_model_create_custom() and cohort_model_add_layer() (see the instructions)")
        return list(items.values())
    items["model_known"].passed("--model=alexnet_owt builds")
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        found[key.strip()] = value.strip()
    params = found.get("parameters", "").replace(",", "")
    if not params.isdigit():
        items["param_count"].failed("the trainer printed no 'parameters: N' line",
                                    "keep the trainer's --summary output as it is")
    elif int(params) == ALEXNET_OWT_PARAMS:
        items["param_count"].passed(f"{int(params):,}")
    else:
        diff = int(params) - ALEXNET_OWT_PARAMS
        items["param_count"].failed(f"{int(params):,} ({diff:+,})",
                                    "compare your layers with torchvision's alexnet: convolutions 64 (11x11, "
                                    "stride 4, pad 2), 192 (5x5, pad 2), 384, 256, 256 (3x3, pad 1), max pools "
                                    "3x3 stride 2 after the 1st, 2nd and 5th, then dense 4096, 4096, 1000 with "
                                    "dropout; biases everywhere, no LRN, no groups")
    shape = found.get("input", "")
    if shape == "3x224x224" and found.get("classes") == "1000":
        items["output"].passed("3x224x224 -> 1000")
    else:
        items["output"].failed(f"input {shape or '?'}, classes {found.get('classes', '?')}",
                               "the model takes 3x224x224 images (cohort_model_create_custom's input shape) "
                               "and ends in a dense layer of 1000 outputs before the loss")
    summary = None
    for line in train_run.output.splitlines():
        if cohort.is_summary_line(line):
            summary = json.loads(line)
    if train_run.status == 0 and summary and summary.get("loss") is not None and summary.get("steps") == 2:
        items["trains"].passed(f"loss {summary['loss']:.3f} after 2 steps")
    else:
        tail = "\n".join(train_run.output.strip().splitlines()[-5:])
        items["trains"].failed(f"exit status {train_run.status}", f"training alexnet_owt failed:\n{tail}")
    return list(items.values())


def add_model(args):
    with tempfile.TemporaryDirectory(prefix="cohort-check-") as scratch:
        workdir = args.keep or scratch
        os.makedirs(workdir, exist_ok=True)
        command = prepare(args.file, workdir)
        env = _env_for_children()
        env.setdefault("COHORT_LOG_LEVEL", "warn")

        def run(extra):
            r = Run(1)
            proc = subprocess.run(command + ["--model=alexnet_owt"] + extra, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, errors="replace", timeout=args.timeout,
                                  env=env)
            r.status, r.output = proc.returncode, proc.stdout
            return r

        summary_run = run(["--summary"])
        train_run = run(["--num_iter=2", "--batch_size=2", "--num_warmup_batches=0", "--lr=0.001", "--json"]) \
            if summary_run.status == 0 else summary_run
        return grade_add_model(summary_run, train_run), []


# ---- command line ----


def parse(argv):
    p = argparse.ArgumentParser(prog="cohort-check", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="exercise", required=True)
    a = sub.add_parser("accelerate", help="the assessment exercise: accelerate a single-device program")
    a.add_argument("file", help="train_single.c, train_single.py, or an executable")
    a.add_argument("--np", type=int, default=2, help="ranks of the distributed run (default 2)")
    a.add_argument("--epochs", type=int, default=2, help="epochs of each run (default 2)")
    a.add_argument("--train-samples", type=int, default=12000, help="training images (default 12000)")
    a.add_argument("--test-samples", type=int, default=2000, help="test images (default 2000)")
    a.add_argument("--batch-size", type=int, default=0, help="batch per rank (default: the program's)")
    a.add_argument("--data-source", default=FASHION_MNIST, help="where Fashion-MNIST's IDX files are")
    a.add_argument("--accuracy-points", type=float, default=1.5,
                   help="largest drop of test accuracy from np=1 to np=N, in points (default 1.5)")
    a.add_argument("--min-speedup", type=float, default=1.5,
                   help="smallest np=1 / np=N compute time per epoch (default 1.5)")
    a.add_argument("--stall-seconds", type=float, default=STALL_SECONDS,
                   help=f"stall_shutdown_s of the runs: how long a collective may wait for the other ranks before "
                   f"the run fails (default {STALL_SECONDS:g})")
    a.add_argument("--throughput", choices=["check", "skip"], default="check",
                   help="skip: do not grade throughput (busy or shared machines, tests)")
    for q in (a, sub.add_parser("add-model", help="the add-a-model exercise: alexnet_owt in the trainer")):
        if q is not a:
            q.add_argument("file", help="the trainer variant (.c) or an executable")
        q.add_argument("--timeout", type=float, default=600,
                       help="seconds per run at most (default 600); accelerate's distributed runs get less: "
                       "2 x the np=1 run's time + 30 s")
        q.add_argument("--keep", metavar="DIR", help="keep the build, data and records in DIR")
        q.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
        q.add_argument("--cohortrun", help="the cohortrun to use (default: found like cohort.run finds it)")
        q.add_argument("--quiet", action="store_true", help="print only the report")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    try:
        items, runs = accelerate(args) if args.exercise == "accelerate" else add_model(args)
    except (UsageError, FileNotFoundError) as e:
        print(f"cohort-check: {e}", file=sys.stderr)
        return 2
    report(f"cohort-check {args.exercise} {args.file}", items)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"exercise": args.exercise, "file": args.file, "items": [i.as_dict() for i in items],
                       "runs": [{"name": r.name, "ranks": r.np, "status": r.status, "wall_s": round(r.wall_s, 1),
                                 "limit_s": r.limit} for r in runs]}, f, indent=1)
    return 1 if any(i.status == "FAIL" for i in items) else 0


if __name__ == "__main__":
    sys.exit(main())
