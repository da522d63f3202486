#!/usr/bin/env python3
"""cohort-check: grades the course exercises and says what to fix.

    cohort-check accelerate train_single.c      # or train_single.py
    cohort-check add-model trainer.c

accelerate: builds the program (C, with cc) or loads it (Python), runs it under
cohortrun at np=1 and np=2 on a Fashion-MNIST subset with one compute thread per rank,
and reports PASS/FAIL per item with a hint for each failure. Everything it grades comes
back from the program's run summary (its --json line on rank 0), from each rank's
output, and from cohort's instrumentation (the option instrument_dir: parameter
checksums at the first step and at the end, the samples each rank's pipeline read,
learning rates, steps, losses, step times). It never reads the program's source.

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
import subprocess
import sys
import tempfile

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


class Run:
    """One run of the program: exit status, each rank's output, rank 0's run summary and
    each rank's instrumentation records."""

    def __init__(self, np):
        self.np = np
        self.status = None
        self.output = ""
        self.stdout = {}  # rank → text
        self.summary = None
        self.records = {}  # rank → list of dicts

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


def execute(command, np, workdir, settings, timeout, cohortrun=None):
    run = Run(np)
    outdir = os.path.join(workdir, f"np{np}")
    instrument = os.path.join(outdir, "instrument")
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(instrument)
    settings = dict(settings, instrument_dir=instrument)
    launcher = cohortrun or cohort.find_cohortrun()
    cmd = [launcher, "-np", str(np), "--output-dir", os.path.join(outdir, "ranks")]
    cmd += cohort.options_to_args(settings) + ["--"] + command
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                              timeout=timeout, env=_env_for_children())
        run.status, run.output = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as e:
        run.status, run.output = "timeout", (e.stdout or b"").decode("utf-8", "replace") if isinstance(
            e.stdout, bytes) else (e.stdout or "")
    for rank in range(np):
        path = os.path.join(outdir, "ranks", "1", f"rank.{rank}", "stdout")
        run.stdout[rank] = open(path, errors="replace").read() if os.path.exists(path) else ""
        recfile = os.path.join(instrument, f"rank-{rank}.jsonl")
        if os.path.exists(recfile):
            with open(recfile) as f:
                run.records[rank] = [json.loads(line) for line in f if line.strip()]
    for line in run.stdout.get(0, "").splitlines():
        if cohort.is_summary_line(line):
            run.summary = json.loads(line)
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
    ("accuracy", "np=2 accuracy within {points} points of np=1"),
    ("throughput", "np=2 throughput >= {speedup}x np=1"),
]


def _close(a, b, rel=1e-4, abs_=1e-6):
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def _rate(end):
    return end["measured_images"] / end["measured_s"] if end.get("measured_s") else 0.0


def grade_accelerate(one, two, points=1.5, min_speedup=1.6, throughput=True):
    """The items, graded from the np=1 run `one` and the np=N run `two` (N > 1)."""
    n = two.np
    items = {key: Item(key, title.format(points=points, speedup=min_speedup)) for key, title in ACCELERATE_ITEMS}
    for run in (one, two):
        if run.status != 0:
            tail = "\n".join(run.output.strip().splitlines()[-8:])
            for item in items.values():
                item.failed(f"the program failed at np={run.np} (exit status {run.status})",
                            f"it must run to the end at np={run.np}; its last lines:\n{tail}")
            return list(items.values())

    first1, first = one.events("first_step"), two.events("first_step")
    end1, end = one.events("end"), two.events("end")
    missing = [r for r in range(n) if r not in first or r not in end]
    if missing or 0 not in end1:
        for item in items.values():
            item.failed("no training was recorded" + (f" on rank(s) {missing}" if missing else " at np=1"),
                        "train with cohort_optimizer_train_step() (Python: model.train_step) and destroy the "
                        "optimizer at the end (Python: close it, or leave its `with` block)")
        return list(items.values())

    # TODO 1: the runtime spans the job.
    sizes = sorted({first[r]["runtime_size"] for r in range(n)})
    threads = {r: first[r]["compute_threads"] for r in range(n)}
    if sizes != [n]:
        items["runtime"].failed(f"at np={n} the ranks' runtimes have {sizes} rank(s)",
                                "create the runtime over the whole job (world=job, the default), not this "
                                "process alone (world=process); then each rank uses its local rank's device")
    else:
        devices = sorted({first[r]["device"] for r in range(n)})
        items["runtime"].passed(f"{n} ranks, device {', '.join(devices)}")

    # TODO 4 (and 3): the parameters agree.
    init = {r: first[r]["params_crc32c"] for r in range(n)}
    final = {r: end[r]["params_crc32c"] for r in range(n)}
    if len(set(init.values())) == 1:
        items["init_params"].passed(f"checksum {init[0]} on every rank")
    else:
        items["init_params"].failed(f"checksums at the first step: {init}",
                                    "broadcast rank 0's parameters before training: "
                                    "cohort_optimizer_broadcast(opt, 0) (Python: opt.broadcast(0))")
    if len(set(final.values())) == 1:
        items["final_params"].passed(f"checksum {final[0]} on every rank")
    elif len(set(init.values())) > 1:
        items["final_params"].failed(f"checksums at the end: {final}",
                                     "the ranks started from different parameters: broadcast them from rank 0 "
                                     "before the first step")
    else:
        items["final_params"].failed(f"checksums at the end: {final}",
                                     "the ranks started alike but their updates differed: the gradients were "
                                     "not averaged. Create the optimizer on a model of the job's runtime, so "
                                     "that it averages the gradients over every rank")

    # TODO 2: disjoint shards that cover the dataset.
    items["shards"] = _grade_shards(items["shards"], two.events("pipeline", "train"), n)

    # TODO 6: one rank prints.
    printers = two.printers()
    if printers == [0]:
        items["one_printer"].passed("only rank 0 wrote to stdout")
    else:
        items["one_printer"].failed(f"rank(s) {printers} wrote to stdout" if printers else "no rank printed",
                                    "print (and write checkpoints) on rank 0 only: `if (rank == 0)`; the other "
                                    "ranks stay silent" if printers else
                                    "rank 0 must print its report and the run summary (--json)")

    # TODO 3: the learning rate is scaled by the ranks, after a warm-up.
    lr1, lr2 = end1[0]["max_lr"], end[0]["max_lr"]
    ratio = lr2 / lr1 if lr1 > 0 else float("inf")
    warm = end[0]["first_lr"] < 0.9 * lr2
    if abs(ratio - n) > 0.05 * n:
        items["lr_scaled"].failed(f"peak lr {lr1:g} at np=1, {lr2:g} at np={n} ({ratio:.2f}x; expected {n}x)",
                                  "scale the learning rate by the number of ranks: lr_scaling=linear with "
                                  "base_batch_size = the batch of one rank (or lr x ranks), and warm up to it "
                                  "(warmup_epochs)")
    elif not warm:
        items["lr_scaled"].failed(f"lr {end[0]['first_lr']:g} from the first step at np={n}: no warm-up",
                                  "warm up from the unscaled lr to the scaled one: warmup_epochs (Goyal et al.)")
    else:
        items["lr_scaled"].passed(f"peak lr {lr1:g} -> {lr2:g} ({ratio:.2f}x), warm-up from {end[0]['first_lr']:g}")

    # TODO 7: steps per epoch divided by the ranks.
    steps1, steps2 = end1[0]["steps"], end[0]["steps"]
    if steps2 > 0 and abs(steps1 / steps2 - n) <= 0.1 * n:
        items["steps_divided"].passed(f"{steps1} steps at np=1, {steps2} per rank at np={n}")
    else:
        items["steps_divided"].failed(f"{steps1} steps at np=1, {steps2} per rank at np={n} (expected about "
                                      f"{steps1 // n})",
                                      "each rank takes one batch per step: divide the steps per epoch by the "
                                      "number of ranks")

    # TODO 5: the report's metrics are the ranks' together.
    items["metrics_averaged"] = _grade_metrics(items["metrics_averaged"], two, end, n)

    # Accuracy and throughput.
    items["accuracy"] = _grade_accuracy(items["accuracy"], one, two, points)
    if not throughput:
        items["throughput"].skipped("not measured (--throughput=skip)")
    elif any(t != 1 for t in threads.values()) or first1[0]["compute_threads"] != 1:
        items["throughput"].failed(f"compute threads per rank: {threads}",
                                   "leave compute_threads at its default: the checker gives each rank one thread")
    else:
        r1 = _rate(end1[0])
        r2 = sum(_rate(end[r]) for r in range(n))
        speedup = r2 / r1 if r1 > 0 else 0.0
        detail = f"{r1:.0f} -> {r2:.0f} images/sec ({speedup:.2f}x)"
        if speedup >= min_speedup:
            items["throughput"].passed(detail)
        else:
            items["throughput"].failed(detail, "check that the ranks share the work (sharded data, divided steps) "
                                       "and that nothing else runs on the machine; rerun to see if it was noise")
    return list(items.values())


def _grade_shards(item, pipelines, n):
    if sorted(pipelines) != list(range(n)):
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
        return item.failed(f"the ranks read {seen} of {dataset} samples in the first epoch",
                           "run every step of the epoch: steps per epoch = dataset size / (batch x ranks)")
    return item.passed(f"{n} disjoint shards cover all {dataset} samples")


def _grade_metrics(item, two, end, n):
    s = two.summary
    if not s:
        return item.failed("rank 0 printed no run summary",
                           "print the run summary on rank 0 (cohort_run_summary_json; the checker passes --json)")
    losses = [end[r]["last_loss"] for r in range(n)]
    mean_loss = sum(losses) / n
    reported = s.get("loss")
    rates = sum(_rate(end[r]) for r in range(n))
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


def _grade_accuracy(item, one, two, points):
    a1 = (one.summary or {}).get("top1")
    a2 = (two.summary or {}).get("top1")
    if a1 is None or a2 is None:
        return item.failed("no test accuracy in rank 0's run summary",
                           "evaluate the test set (cohort_model_evaluate) and put top1 in the run summary")
    drop = 100 * (a1 - a2)
    detail = f"{100 * a1:.2f}% at np=1, {100 * a2:.2f}% at np={two.np}"
    if drop <= points:
        return item.passed(detail)
    return item.failed(detail, "the distributed run trains a worse model: scale the learning rate with warm-up, "
                       "and make sure every rank trains on its own data")


def accelerate(args):
    with tempfile.TemporaryDirectory(prefix="cohort-check-") as scratch:
        workdir = args.keep or scratch
        os.makedirs(workdir, exist_ok=True)
        command = prepare(args.file, workdir)
        data = os.path.join(workdir, "data")
        make_dataset(data, args.train_samples, args.test_samples, args.data_source)
        settings = {"data_dir": data, "num_epochs": args.epochs, "threads_per_rank": 1, "json": True,
                    "log_level": "warn", "progress": "plain"}
        if args.batch_size:
            settings["batch_size"] = args.batch_size
        runs = {}
        for np in (1, args.np):
            if not args.quiet:
                print(f"cohort-check: running {os.path.basename(args.file)} at np={np} ...", flush=True)
            runs[np] = execute(command, np, workdir, settings, args.timeout, args.cohortrun)
        items = grade_accelerate(runs[1], runs[args.np], args.accuracy_points, args.min_speedup,
                                 args.throughput == "check")
    return items


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
        return grade_add_model(summary_run, train_run)


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
    a.add_argument("--min-speedup", type=float, default=1.6, help="smallest np=N / np=1 throughput (default 1.6)")
    a.add_argument("--throughput", choices=["check", "skip"], default="check",
                   help="skip: do not grade throughput (busy or shared machines, tests)")
    for q in (a, sub.add_parser("add-model", help="the add-a-model exercise: alexnet_owt in the trainer")):
        if q is not a:
            q.add_argument("file", help="the trainer variant (.c) or an executable")
        q.add_argument("--timeout", type=float, default=600, help="seconds per run (default 600)")
        q.add_argument("--keep", metavar="DIR", help="keep the build, data and records in DIR")
        q.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
        q.add_argument("--cohortrun", help="the cohortrun to use (default: found like cohort.run finds it)")
        q.add_argument("--quiet", action="store_true", help="print only the report")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    try:
        items = accelerate(args) if args.exercise == "accelerate" else add_model(args)
    except (UsageError, FileNotFoundError) as e:
        print(f"cohort-check: {e}", file=sys.stderr)
        return 2
    report(f"cohort-check {args.exercise} {args.file}", items)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"exercise": args.exercise, "file": args.file, "items": [i.as_dict() for i in items]}, f,
                      indent=1)
    return 1 if any(i.status == "FAIL" for i in items) else 0


if __name__ == "__main__":
    sys.exit(main())
