"""cohort-train run for real: flags and error messages, the labs' header, the JSON run
summary, plain progress output, checkpoint resume, and a cohortrun sweep over it.

Usage: test_trainer.py GROUP (Flags, Run, Resume, SaveFailure, Sweep, Fashion, Skipped, OneRankFails,
Every, ResumeResized, Modes, Logs); the binaries come from the environment (COHORT_TRAIN,
COHORTRUN). Tiny models and few steps keep each group to a few seconds."""
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time

TRAIN = os.environ["COHORT_TRAIN"]
COHORTRUN = os.environ.get("COHORTRUN", "")
TINY = ["--model=trivial", "--image_size=16", "--batch_size=8", "--num_warmup_batches=2",
        "--compute_threads=1", "--decode_threads=1", "--progress=plain"]
SUMMARY_FIELDS = {
    "schema": str, "model": str, "ranks": int, "local_ranks": int, "device": str, "precision": str,
    "data": str, "batch_per_rank": int, "global_batch": int, "steps": int, "warmup_steps": int,
    "images_per_sec": dict, "time_fraction": dict, "epochs": (int, float), "loss": (int, float),
    "top1": (type(None), int, float), "top5": (type(None), int, float), "wall_s": (int, float),
}
failures = []


def run(args, cmd=None, timeout=120, env=None):
    # Bytes, decoded here: text mode would turn the \r of a progress line into \n.
    p = subprocess.run((cmd or [TRAIN]) + args, capture_output=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def check(cond, what, out=""):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
        if out:
            print(out[-3000:])


def summary_of(stdout):
    last = stdout.rstrip("\n").split("\n")[-1]
    s = json.loads(last)
    for k, t in SUMMARY_FIELDS.items():
        check(k in s and isinstance(s[k], t), f"summary field {k} missing or of the wrong type", last)
    check(list(s)[: len(SUMMARY_FIELDS)] == list(SUMMARY_FIELDS), "summary fields in DESIGN order", last)
    check(set(s["images_per_sec"]) >= {"median", "mean", "stderr", "jitter"}, "images_per_sec fields", last)
    check(set(s["time_fraction"]) >= {"data_wait", "comm_exposed", "compute"}, "time_fraction fields", last)
    return s


def group_flags():
    rc, out, err = run(["--help"])
    check(rc == 0 and "--batch_size" in out and "--lr_schedule" in out, "--help lists registry keys", out)
    rc, out, err = run(["--model=nosuchnet"])
    check(rc != 0 and "Invalid model type: nosuchnet" in err and "mnist_cnn" in err
          and "resnet50" in err, "unknown model lists the valid ones", err)
    for p in ("f16", "fp16"):
        rc, out, err = run(TINY + [f"--precision={p}", "--num_iter=1"])
        check(rc != 0 and "precision=" in err and "--precision=f32" in err,
              f"precision {p} on the CPU says what would work", err)
    # A CPU without bf16 instructions, as oneDNN sees one when its ISA is capped.
    rc, out, err = run(TINY + ["--precision=bf16", "--num_iter=1"], env={"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"})
    check(rc != 0 and "AVX512-BF16" in err and "--precision=f32" in err,
          "precision bf16 without bf16 instructions names them and what works", err)
    flags = open("/proc/cpuinfo").read().split()
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        rc, out, err = run(TINY + ["--precision=bf16", "--num_iter=2"])
        check(rc == 0 and "Data type:   bf16" in out, "precision bf16 trains on a CPU with bf16", out + err)
    rc, out, err = run(["--batch_size=abc"])
    check(rc == 2 and "batch_size" in err and "abc" in err, "bad value names the key and value", err)
    rc, out, err = run(["--no_such_flag=1"])
    check(rc == 2 and "no_such_flag" in err, "unknown flag is named", err)
    rc, out, err = run(["--optimizer=rmsprop"])
    check(rc == 2 and "rmsprop" in err and "momentum" in err, "bad optimizer lists the choices", err)
    rc, out, err = run(["--model=mnist_cnn", "--summary"])
    check(rc == 0 and "1199882" in out and "conv" in out and "[10]" in out, "--summary prints the table", out)
    rc, out, err = run(TINY + ["--summary"])
    layers = [ln.split()[0] for ln in out.splitlines()[2:] if ln and not ln.startswith(("-", "total"))]
    rc, out, err = run(TINY + ["--profile", "--num_iter=5"])
    check(rc == 0 and "profile: 3 steps" in out and "measured step time" in out and "optimizer" in out
          and layers and all(n in out for n in layers), "--profile lists every layer beside the step time", out + err)
    rc, out, err = run(TINY + ["--resume", "--num_iter=1"])
    check(rc == 2 and "--checkpoint_dir" in err, "--resume without a directory", err)
    rc, out, err = run(TINY + ["--data_dir=/nonexistent/data", "--num_iter=1"])
    check(rc != 0 and "/nonexistent/data" in err, "missing data_dir is named", err)


def group_run():
    rc, out, err = run(TINY + ["--num_iter=6", "--display_every=2", "--json"])
    check(rc == 0, "tiny run succeeds", out + err)
    header = ["Cmd line args:", "  --model=trivial", "  --image_size=16", "  --batch_size=8"]
    lines = out.split("\n")
    check(lines[:4] == header, "header starts with the command-line flags", out)
    for prefix in ("Num ranks:   1", "Num images:  ", "Model:       trivial", "Batch size:  8 per device",
                   "             8 total", "Data format: NCHW", "Data type:   fp32"):
        check(any(l.startswith(prefix) for l in lines), f"header line '{prefix}'", out)
    steps = [l for l in lines if l[:1].isdigit() and "images/sec" in l]
    check([l.split("\t")[0] for l in steps] == ["2", "4", "6"], "a line every display_every steps", out)
    check(any(l.startswith("images/sec: ") and "+/-" in l and "(jitter = " in l for l in lines), "final rate", out)
    check(any(l.startswith("total images/sec: ") for l in lines), "total images/sec", out)
    check("\r" not in out and "\033" not in out, "progress=plain has no \\r or ANSI codes", repr(out[-500:]))
    s = summary_of(out)
    check(s["schema"] == "cohort.run/1" and s["model"] == "trivial" and s["steps"] == 6 and s["warmup_steps"] == 2
          and s["batch_per_rank"] == 8 and s["global_batch"] == 8 and s["data"] == "synthetic"
          and s["top1"] is None, "summary values", out)
    on_gpu = s["device"].startswith("cuda")
    check(("device_memory" in s) == on_gpu and ("device memory (the largest of the ranks): peak " in out) == on_gpu,
          "the device memory's peaks are reported where a GPU computed, and only there", out)
    if on_gpu:
        m = s["device_memory"]
        check(0 < m["peak_in_use_bytes"] <= m["peak_reserved_bytes"], "peaks in bytes, in use within reserved", out)
    rc, out, err = run(TINY + ["--num_iter=3", "--progress=tty"])
    check(rc == 0 and "\r" in out, "progress=tty draws a live line", repr(out[-300:]))
    rc, out, err = run(TINY + ["--num_iter=2", "--eval", "--synthetic_samples=24", "--json"])
    s = summary_of(out)
    check(rc == 0 and isinstance(s["top1"], (int, float)) and "Accuracy @ 1" in out, "--eval fills top1/top5", out + err)


def group_resume():
    with tempfile.TemporaryDirectory() as d:
        # The interrupted run stops early through a shorter --num_iter: a constant rate keeps
        # its schedule the same as the full run's (cosine decays over the run's length).
        base = TINY + ["--synthetic_samples=32", "--json", "--lr=0.01", "--lr_schedule=constant"]
        rc, out, err = run(base + ["--num_iter=8"])
        full = summary_of(out)
        rc, out, err = run(base + ["--num_iter=4", f"--checkpoint_dir={d}/ck"])
        check(rc == 0 and os.path.exists(f"{d}/ck/latest"), "checkpoint written", out + err)
        rc, out, err = run(base + ["--num_iter=8", f"--checkpoint_dir={d}/ck", "--resume"])
        check(rc == 0 and "Resumed from step 4" in out, "resume announces the step", out + err)
        resumed = summary_of(out)
        check(resumed["loss"] == full["loss"], f"resumed loss {resumed['loss']} == uninterrupted {full['loss']}",
              out)
        rc, out, err = run(["--model=mnist_cnn", "--batch_size=2", "--num_iter=1", f"--checkpoint_dir={d}/ck",
                            "--resume", "--progress=plain"])
        check(rc != 0 and "trivial" in err and "mnist_cnn" in err, "another model's checkpoint is refused", err)
        with open(f"{d}/ck/latest") as f:
            name = f.read().strip()
        with open(os.path.join(f"{d}/ck", name), "r+b") as f:
            f.seek(100)
            f.write(b"\xff\xfe")
        rc, out, err = run(base + ["--num_iter=9", f"--checkpoint_dir={d}/ck", "--resume"])
        check(rc != 0 and name in err, "a corrupt checkpoint is a clear error naming the file", err)


def group_save_failure():
    # Rank 0 cannot create its checkpoint directory (a path through a regular file): the
    # save is agreed, so both ranks stop with rank 0's error, said once, instead of rank 1
    # waiting forever in its next step.
    if not COHORTRUN:
        print("SKIP: no cohortrun")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as d:
        open(f"{d}/F", "w").close()
        try:
            rc, out, err = run(["-np", "2", "--", TRAIN, "--model=mnist_cnn", "--num_iter=20",
                                f"--checkpoint_dir={d}/F/ck", "--compute_threads=1", "--progress=plain"],
                               cmd=[COHORTRUN], timeout=90)
        except subprocess.TimeoutExpired:
            check(False, "a failed checkpoint save ends the job instead of hanging")
            return
        check(rc != 0, "a failed checkpoint save fails the job", out + err)
        said = [l for l in err.split("\n") if "Not a directory" in l]
        check(len(said) == 1 and "rank 0 could not save a checkpoint" in said[0],
              "rank 0's error is said once, for every rank", err)


def group_sweep():
    with tempfile.TemporaryDirectory() as d:
        rc, out, err = run(["sweep", "-np", "1,2", "--output-dir", d, "--", TRAIN] + TINY +
                           ["--num_iter=5", "--json"], cmd=[COHORTRUN], timeout=300)
        check(rc == 0, "cohortrun sweep over cohort-train succeeds", out + err)
        check("efficiency" in out.lower(), "sweep prints the scaling table", out)
        rows = [l.split() for l in out.split("\n") if l.split()[:1] in (["1"], ["2"])]
        check([r[0] for r in rows] == ["1", "2"], "a row per rank count", out)


def group_fashion():
    data = "/usr/share/datasets/fashion-mnist"
    if not os.path.isdir(data):
        print("SKIP: no Fashion-MNIST")
        sys.exit(77)
    rc, out, err = run(["--model=mnist_cnn", f"--data_dir={data}", "--batch_size=16", "--num_iter=3",
                        "--augment=none", "--num_warmup_batches=1", "--progress=plain", "--json"])
    check(rc == 0, "mnist_cnn trains on Fashion-MNIST", out + err)
    s = summary_of(out)
    check("Num images:  60000" in out and s["data"] == data, "the IDX training split is read", out)


NOT_A_JPEG = b"GIF89a, not a JPEG"


def tiny_jpeg(i):
    """A small JPEG made by cjpeg, different for each i."""
    w, h = 20, 16
    ppm = b"P6\n%d %d\n255\n" % (w, h) + bytes((x * 7 + y * 3 + i * 11) % 256
                                               for y in range(h) for x in range(w) for _ in range(3))
    return subprocess.run(["cjpeg", "-quality", "90"], input=ppm, capture_output=True, check=True).stdout


def image_folder(root, good, bad):
    """root/{a,b}/NNN.jpg: `good` small JPEGs made by cjpeg, then `bad` files that are not JPEGs."""
    for i in range(good + bad):
        d = os.path.join(root, "ab"[i % 2])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "%03d.jpg" % i), "wb") as f:
            f.write(tiny_jpeg(i) if i < good else NOT_A_JPEG)


def need_cjpeg():
    if subprocess.run(["sh", "-c", "command -v cjpeg"], capture_output=True).returncode != 0:
        print("SKIP: no cjpeg (libjpeg-turbo-progs)")
        sys.exit(77)


def group_skipped():
    need_cjpeg()
    base = ["--model=trivial", "--image_size=16", "--batch_size=4", "--num_warmup_batches=1", "--compute_threads=1",
            "--decode_threads=1", "--progress=plain", "--error_log_limit=0"]
    with tempfile.TemporaryDirectory() as d:
        image_folder(f"{d}/some", 20, 1)
        rc, out, err = run(base + [f"--data_dir={d}/some", "--num_epochs=2", "--max_skipped_fraction=0.1", "--json"])
        check(rc == 0 and "skipped samples: 2 of 42 read" in out, "the skipped count is printed at the end", out + err)
        s = summary_of(out)
        check(s.get("skipped") == 2, "the run summary carries the skipped count", out)
        # Where the pipeline spent its CPU: every stage present, summing to the total, in
        # the summary and in the report; and the stage that limits.
        cpu = s.get("input", {}).get("cpu_s_per_image", {})
        stages = ("read", "decode", "augment", "assemble")
        check(all(k in cpu for k in stages + ("total",)) and cpu["decode"] > 0
              and abs(sum(cpu[k] for k in stages) - cpu["total"]) <= 1e-9 * cpu["total"],
              "the summary's per-stage CPU per image sums to the total", out)
        check(s["input"]["limiting_stage"] in stages and s["input"]["read_bytes_per_s"] > 0,
              "the summary names the limiting stage and the read rate", out)
        line = next((l for l in out.split("\n") if l.startswith("input pipeline CPU per image:")), "")
        shares = [int(p.split("(")[1].rstrip("%)")) for p in line.split(";")[0].split(",")]
        check(len(shares) == 4 and 98 <= sum(shares) <= 102 and "MB/s read from storage" in line,
              "the report gives each stage's share, summing to 100%", out)
        rc, out, err = run(base + [f"--data_dir={d}/some", "--num_epochs=2"])
        check(rc != 0 and "max_skipped_fraction=0.01" in err and "cohort-data verify" in err,
              "more skipped than max_skipped_fraction fails the run", out + err)
        image_folder(f"{d}/none", 0, 12)
        for fraction in ("0.01", "1"):
            rc, out, err = run(base + [f"--data_dir={d}/none", "--num_epochs=1", f"--max_skipped_fraction={fraction}"])
            check(rc != 0 and "not a JPEG" in err and "images/sec:" not in out,
                  f"an all-corrupt folder fails (max_skipped_fraction={fraction})", out + err)
        if COHORTRUN:
            rc, out, err = run(["-np", "2", TRAIN] + base + [f"--data_dir={d}/none", "--num_epochs=1"], cmd=[COHORTRUN],
                               timeout=120)
            check(rc != 0 and "not a JPEG" in out + err, "an all-corrupt folder fails on 2 ranks", out + err)


def run_job(args, timeout):
    """cohortrun ARGS in a session of its own: (rc, output, seconds), rc None when it had to
    be killed after `timeout` seconds (with every rank, so no rank outlives the test)."""
    start = time.monotonic()
    p = subprocess.Popen([COHORTRUN] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        rc = None
    return rc, out.decode(errors="replace"), time.monotonic() - start


def group_one_rank_fails():
    # Only rank 1's shard holds a corrupt image (no shuffle: rank r reads positions r, r+2, …),
    # so only rank 1's pipeline fails, at its second batch, while rank 0 waits in the gradient
    # allreduce of that step. Rank 0 must learn that rank 1 shut down and stop too: the job
    # fails within seconds, not after stall_shutdown_s (60 s here), and each rank says why.
    if not COHORTRUN:
        print("SKIP: no cohortrun")
        sys.exit(77)
    need_cjpeg()
    base = ["--model=trivial", "--image_size=16", "--batch_size=4", "--num_warmup_batches=1", "--compute_threads=1",
            "--decode_threads=1", "--progress=plain", "--shuffle=false", "--num_epochs=3", "--stall_shutdown_s=60"]
    with tempfile.TemporaryDirectory() as d:
        for i in range(16):  # positions 0-7 in class a, 8-15 in class b; position 9 is corrupt
            os.makedirs(f"{d}/{'ab'[i // 8]}", exist_ok=True)
            with open(f"{d}/{'ab'[i // 8]}/{i:03d}.jpg", "wb") as f:
                f.write(NOT_A_JPEG if i == 9 else tiny_jpeg(i))
        for mode, rank1_says in ((["--on_error=fail"], "not a JPEG"),
                                 (["--on_error=skip", "--max_skipped_fraction=0.01"], "max_skipped_fraction=0.01")):
            rc, out, took = run_job(["-np", "2", TRAIN] + base + [f"--data_dir={d}"] + mode, timeout=120)
            what = " ".join(mode)
            check(rc is not None and rc != 0, f"{what}: the job fails (rc {rc}) instead of hanging", out)
            check(took < 30, f"{what}: the job ended after {took:.1f} s, not within seconds", out)
            rank1 = [l for l in out.split("\n") if l.startswith("cohort-train: rank 1: reading a batch:")]
            check(len(rank1) == 1 and rank1_says in rank1[0] and "009.jpg" in rank1[0],
                  f"{what}: rank 1 names the corrupt file", out)
            rank0 = [l for l in out.split("\n") if l.startswith("cohort-train: rank 0: training step:")]
            check(len(rank0) == 1 and "rank 1 has shut down its collective engine" in rank0[0]
                  and "rank 1's own error output" in rank0[0], f"{what}: rank 0 says rank 1 shut down", out)
            check("cohortrun: job failed" in out, f"{what}: cohortrun reports the failed job", out)


def group_every():
    # --checkpoint_every and --eval_every: a checkpoint and an evaluation every 3 steps.
    with tempfile.TemporaryDirectory() as d:
        rc, out, err = run(TINY + ["--num_iter=7", "--synthetic_samples=80", "--eval", "--eval_every=3",
                                   f"--checkpoint_dir={d}", "--checkpoint_every=3", "--keep_checkpoints=10"])
        check(rc == 0, "periodic checkpoints and evaluations", out + err)
        evals = [l.split(":")[0] for l in out.split("\n") if l.startswith("Step ") and "Accuracy @ 1" in l]
        check(evals == ["Step 3", "Step 6"], f"an evaluation every 3 steps: {evals}", out)
        saved = sorted(f for f in os.listdir(d) if f.startswith("ckpt-"))
        check(saved == ["ckpt-000000000003.cohort", "ckpt-000000000006.cohort", "ckpt-000000000007.cohort"],
              f"a checkpoint every 3 steps and at the end: {saved}", out + err)


def group_resume_resized():
    # A checkpoint of 2 ranks resumed on 1: the same sample, twice the steps, half the rate.
    if not COHORTRUN:
        print("SKIP: no cohortrun")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as d:
        base = TINY + ["--synthetic_samples=64", f"--checkpoint_dir={d}", "--lr_scaling=linear",
                       "--lr_schedule=constant"]
        rc, out, err = run(["-np", "2", TRAIN] + base + ["--num_iter=3"], cmd=[COHORTRUN])
        check(rc == 0, "2 ranks save a checkpoint", out + err)
        rc, out, err = run(base + ["--num_iter=10", "--resume"])
        check(rc == 0 and "Resumed from step 6 (epoch 0)" in out, "step 3 of 2 ranks is step 6 of 1", out + err)
        check("Saved by 2 ranks, resumed on 1: global batch 8, 8 steps per epoch, learning rate 0.003125" in out,
              "the rank count, epoch length and learning rate of the new size are printed", out)


def group_modes():
    # Every variable_update mode through cohortrun: the header and the run summary name it,
    # dedicated servers leave the data to the workers, the asynchronous mode reports its
    # staleness, and a dedicated-server run resumed from a checkpoint ends where an
    # uninterrupted one does.
    if not COHORTRUN:
        print("SKIP: no cohortrun")
        sys.exit(77)
    base = TINY + ["--synthetic_samples=48", "--json"]
    cases = [("replicated", 2, False), ("parameter_server", 2, False), ("async_parameter_server", 2, False),
             ("independent", 2, False), ("parameter_server", 3, True), ("async_parameter_server", 3, True)]
    for mode, np, dedicated in cases:
        extra = [f"--variable_update={mode}"] + (["--ps_dedicated"] if dedicated else [])
        rc, out, err = run(["-np", str(np), "--", TRAIN] + base + extra + ["--num_iter=6"], cmd=[COHORTRUN])
        what = f"{mode} on {np} ranks{' (dedicated server)' if dedicated else ''}"
        check(rc == 0, f"{what} trains", out + err)
        if rc != 0:
            continue
        workers = np - 1 if dedicated else np
        servers = 1 if "parameter_server" in mode else 0
        s = summary_of(out)
        check(s.get("variable_update") == mode and s.get("workers") == workers and s.get("servers") == servers,
              f"{what}: the summary names the mode, workers and servers", out)
        check(s["global_batch"] == 8 * workers and f"             {8 * workers} total" in out,
              f"{what}: the global batch counts the workers", out)
        check(any(l.startswith(f"Variables:   {mode}") for l in out.split("\n")), f"{what}: header line", out)
        async_ = mode == "async_parameter_server"
        if mode in ("async_parameter_server", "independent"):
            own = [float(l.split()[1]) for l in out.split("\n") if l.startswith("images/sec: ")]
            total = [l for l in out.split("\n") if l.startswith("total images/sec: ")]
            check(len(own) == 1 and len(total) == 1 and total[0].endswith("(the workers' own rates summed)")
                  and float(total[0].split()[2]) > own[0] and s["images_per_sec"]["mean"] > own[0],
                  f"{what}: the total sums the workers' own rates", out)
        check(("staleness" in s) == async_ and ("staleness: " in out) == async_,
              f"{what}: staleness reported exactly for the asynchronous mode", out)
        if async_:
            check(0 <= s["staleness"]["mean"] <= s["staleness"]["max"] <= (workers - 1) * 9,
                  f"{what}: staleness within (workers - 1)(2 ps_max_lead + 1)", out)
    with tempfile.TemporaryDirectory() as d:
        ps = ["-np", "3", "--", TRAIN] + base + ["--variable_update=parameter_server", "--ps_dedicated", "--lr=0.01",
                                                 "--lr_schedule=constant", "--synthetic_samples=32"]
        rc, out, err = run(ps + ["--num_iter=8"], cmd=[COHORTRUN])
        full = summary_of(out)
        rc, out, err = run(ps + ["--num_iter=4", f"--checkpoint_dir={d}/ck"], cmd=[COHORTRUN])
        check(rc == 0 and os.path.exists(f"{d}/ck/latest"), "a dedicated-server run saves checkpoints", out + err)
        rc, out, err = run(ps + ["--num_iter=8", f"--checkpoint_dir={d}/ck", "--resume"], cmd=[COHORTRUN])
        check(rc == 0 and "Resumed from step 4" in out, "a dedicated-server run resumes", out + err)
        check(summary_of(out)["loss"] == full["loss"], "resumed parameter-server loss == uninterrupted", out)


# ---- an independent reader of TensorBoard event files, written here from the formats:
# TFRecord framing (length, masked CRC32C of it, data, masked CRC32C of the data) around
# tensorflow.Event protocol buffers (wall_time = 1 double, step = 2 int64, file_version = 3
# string, summary = 5; Summary.value = 1; Value.tag = 1, Value.simple_value = 2 float).
CRC32C_TABLE = []
for n in range(256):
    c = n
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    CRC32C_TABLE.append(c)


def masked_crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC32C_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecords(path):
    with open(path, "rb") as f:
        data = f.read()
    pos, out = 0, []
    while pos < len(data):
        header = data[pos:pos + 8]
        length = int.from_bytes(header, "little")
        if int.from_bytes(data[pos + 8:pos + 12], "little") != masked_crc32c(header):
            raise ValueError(f"length CRC mismatch at {pos}")
        body = data[pos + 12:pos + 12 + length]
        if int.from_bytes(data[pos + 12 + length:pos + 16 + length], "little") != masked_crc32c(body):
            raise ValueError(f"data CRC mismatch at {pos}")
        out.append(body)
        pos += 16 + length
    return out


def proto_fields(buf):
    """(field number, wire type, value) of a protocol buffer message."""
    pos, out = 0, []

    def varint():
        nonlocal pos
        shift = value = 0
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value
    while pos < len(buf):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        elif wire == 2:
            n = varint()
            value, pos = buf[pos:pos + n], pos + n
        else:
            raise ValueError(f"wire type {wire}")
        out.append((field, wire, value))
    return out


def read_events(path):
    """[(wall_time, step, file_version or None, {tag: value})]"""
    events = []
    for record in tfrecords(path):
        wall, step, version, scalars = None, 0, None, {}
        for field, wire, value in proto_fields(record):
            if field == 1 and wire == 1:
                wall = struct.unpack("<d", value)[0]
            elif field == 2 and wire == 0:
                step = value
            elif field == 3 and wire == 2:
                version = value.decode()
            elif field == 5 and wire == 2:
                for f, w, v in proto_fields(value):
                    if f == 1 and w == 2:
                        fields = {ff: vv for ff, ww, vv in proto_fields(v)}
                        scalars[fields[1].decode()] = struct.unpack("<f", fields[2])[0]
        events.append((wall, step, version, scalars))
    return events


def group_logs():
    # --tensorboard_dir and --log_csv on two ranks (rank 0 writes), with an evaluation after
    # every epoch: the event file parses with the reader above and agrees with the CSV.
    if not COHORTRUN:
        print("SKIP: no cohortrun")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as d:
        rc, out, err = run(["-np", "2", "--", TRAIN] + TINY + [
            "--synthetic_samples=64", "--num_epochs=2", "--eval", "--eval_every_epochs=1",
            f"--tensorboard_dir={d}/tb", f"--log_csv={d}/steps.csv"], cmd=[COHORTRUN])
        check(rc == 0, "a logged run succeeds", out + err)
        files = os.listdir(f"{d}/tb")
        check(len(files) == 1 and files[0].startswith("events.out.tfevents."), f"one event file: {files}")
        events = read_events(os.path.join(f"{d}/tb", files[0]))
        check(events[0][2] == "brain.Event:2", "the first event carries the file version", str(events[:1]))
        steps = [e for e in events if "loss" in e[3]]
        evals = [e for e in events if "eval/top1" in e[3]]
        check([e[1] for e in steps] == list(range(1, 9)), "one scalar event per step, in order",
              str([e[1] for e in steps]))
        check(all(set(e[3]) == {"loss", "learning_rate", "images_per_sec", "data_wait_fraction"} for e in steps),
              "each step has loss, learning rate, images/sec and data-wait fraction", str(steps[:1]))
        check(all(0 <= e[3]["data_wait_fraction"] <= 1 and e[3]["images_per_sec"] > 0 for e in steps),
              "fractions and rates in range", str(steps))
        check([e[1] for e in evals] == [4, 8] and all(0 <= e[3]["eval/top1"] <= e[3]["eval/top5"] <= 1 for e in evals),
              "top-1/top-5 at each evaluation (after each epoch)", str(evals))
        check(all(e[0] is not None and e[0] > 1.5e9 for e in events), "wall times in seconds", str(events[:2]))
        with open(f"{d}/steps.csv") as f:
            rows = [l.rstrip("\n").split(",") for l in f]
        check(rows[0] == ["step", "epoch", "loss", "lr", "step_time_s", "data_wait_s", "comm_exposed_s",
                          "images_per_sec"], "the CSV header", str(rows[:1]))
        check([int(r[0]) for r in rows[1:]] == list(range(1, 9)) and float(rows[-1][1]) == 2.0,
              "a CSV line per step, epochs counted", str(rows))
        check(all(abs(float(r[2]) - e[3]["loss"]) <= 1e-5 * max(1.0, abs(float(r[2]))) for r, e in zip(rows[1:], steps)),
              "the CSV's loss is the event files'", str(rows))
        rc, out, err = run(TINY + ["--num_iter=1", "--tensorboard_dir=/proc/no/such/dir"])
        check(rc != 0 and "/proc/no/such/dir" in err, "an unwritable tensorboard_dir is named", err)


groups = {"Flags": group_flags, "Run": group_run, "Resume": group_resume, "SaveFailure": group_save_failure,
          "Sweep": group_sweep, "Fashion": group_fashion, "Skipped": group_skipped,
          "OneRankFails": group_one_rank_fails, "Every": group_every, "ResumeResized": group_resume_resized,
          "Modes": group_modes, "Logs": group_logs}
groups[sys.argv[1]]()
print("FAILED:" if failures else "OK", *failures, sep="\n  ")
sys.exit(1 if failures else 0)
