"""The cost of a lost rank: mnist_cnn on Fashion-MNIST at np=2 for EPOCHS epochs, once
undisturbed and once with rank 1 killed (SIGKILL) at a random step under
`cohortrun --max-restarts=1`, which resumes from the latest checkpoint (one every
CHECKPOINT_EVERY steps). Prints both runs' top-1 and wall time, their difference, and
the time lost split into the restart (kill to resumed training) and the steps trained
again (from the checkpoint to the kill).

Usage: kill_a_rank.py COHORT_TRAIN COHORTRUN [EPOCHS [CHECKPOINT_EVERY [SEED]]]"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from process_tree import ranks_of  # noqa: E402

train, cohortrun = sys.argv[1], sys.argv[2]
epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
every = int(sys.argv[4]) if len(sys.argv) > 4 else 100
rng = random.Random(int(sys.argv[5]) if len(sys.argv) > 5 else time.time_ns())
DATA = "/usr/share/datasets/fashion-mnist"
if not os.path.isdir(DATA):
    print(f"SKIP: no {DATA}")
    sys.exit(0)


def command(ckpt, restarts):
    return [cohortrun, "-np", "2", f"--max-restarts={restarts}", train, "--model=mnist_cnn", f"--data_dir={DATA}",
            "--batch_size=64", f"--num_epochs={epochs}", "--augment=none", "--eval", "--display_every=10",
            "--progress=plain", "--json", f"--checkpoint_dir={ckpt}", f"--checkpoint_every={every}"]


def run(ckpt, kill_at=None):
    """Runs the job; returns (wall seconds, summary, events), killing rank 1 once the
    progress reaches step kill_at."""
    start = time.monotonic()
    p = subprocess.Popen(command(ckpt, 1 if kill_at else 0), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    events, summary = {}, None
    for raw in p.stdout:
        line = raw.decode(errors="replace")
        now = time.monotonic() - start
        m = re.match(r"(\d+)\timages/sec", line)
        if m and kill_at and "kill" not in events and int(m[1]) >= kill_at:
            pid = ranks_of(p.pid).get(1)
            if pid:
                os.kill(pid, 9)
                events["kill"] = (now, int(m[1]))
        if m and "kill" in events and "resumed_step" in events and "first_step_after" not in events:
            events["first_step_after"] = (now, int(m[1]))
        r = re.match(r"Resumed from step (\d+)", line)
        if r:
            events["resumed_step"] = (now, int(r[1]))
        if line.startswith("cohortrun: restart"):
            events["restart_line"] = line.strip()
        if line.startswith('{"schema": "cohort.run/1"'):
            summary = json.loads(line)
        if m:
            events["last_step"] = (now, int(m[1]))
    p.wait()
    return time.monotonic() - start, summary, events, p.returncode


with tempfile.TemporaryDirectory() as d:
    wall0, s0, e0, rc0 = run(f"{d}/undisturbed")
    if rc0 != 0 or not s0:
        sys.exit(f"the undisturbed run failed (exit status {rc0})")
    total = s0["steps"]
    step_s = wall0 / total
    kill_at = rng.randrange(20, total - 20)
    wall1, s1, e1, rc1 = run(f"{d}/killed", kill_at)
    print(f"undisturbed: top-1 {100 * s0['top1']:.2f}%, {total} steps, wall {wall0:.1f} s")
    if rc1 != 0 or not s1 or "kill" not in e1:
        sys.exit(f"the killed run failed (exit status {rc1}, events {e1})")
    t_kill, step_kill = e1["kill"]
    t_resumed, step_resumed = e1["resumed_step"]
    print(f"killed:      top-1 {100 * s1['top1']:.2f}%, wall {wall1:.1f} s; rank 1 killed at step {step_kill} "
          f"(target {kill_at}), resumed from step {step_resumed}")
    print(f"  {e1.get('restart_line', '')}")
    delta = 100 * (s1["top1"] - s0["top1"])
    redone = step_kill - step_resumed
    print(f"top-1 difference: {delta:+.2f} points ({'within' if abs(delta) <= 0.5 else 'OUTSIDE'} 0.5)")
    print(f"time lost: {wall1 - wall0:+.1f} s of wall time; restart (kill to the resumed run's first line) "
          f"{t_resumed - t_kill:.1f} s, then {redone} steps trained again (~{redone * step_s:.1f} s at "
          f"{step_s * 1000:.0f} ms/step)")
    sys.exit(0 if abs(delta) <= 0.5 else 1)
