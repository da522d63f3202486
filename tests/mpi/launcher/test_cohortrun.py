"""Runs the real cohortrun binary: dry-run lines, bad input, real jobs of 2 and 3 ranks,
signal forwarding without orphans, failing ranks named, --check-build and sweep.

ctest passes the binaries in COHORTRUN, COHORT_HELLO and LAUNCHER_PROBE and names the
test class to run. Every process is started with a timeout."""
import json
import os
import pty
import re
import select
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

COHORTRUN = os.environ["COHORTRUN"]
HELLO = os.environ["COHORT_HELLO"]
PROBE = os.environ["LAUNCHER_PROBE"]
MPI_FAIL = os.environ["LAUNCHER_MPI_FAIL"]
ROOT = os.geteuid() == 0
TIMEOUT = 60


def run(args, env=None, timeout=TIMEOUT):
    return subprocess.run([COHORTRUN] + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def fake_mpirun(directory, body):
    """An executable `mpirun` in directory: a shell script that ignores TERM, INT and HUP, then runs body."""
    path = os.path.join(directory, "mpirun")
    with open(path, "w") as f:
        f.write("#!/bin/sh\ntrap '' TERM INT HUP\n" + body)
    os.chmod(path, 0o755)
    return path


def wait_for(predicate, seconds, what):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


def read_pids(directory, n, seconds):
    """The pids that n ranks of launcher_probe --pid-file wrote to directory, once every
    file is whole (a rank creates its file before it writes the line)."""
    def whole():
        names = os.listdir(directory)
        texts = []
        for name in names:
            with open(os.path.join(directory, name)) as f:
                texts.append(f.read())
        return texts if len(texts) == n and all(t.endswith("\n") for t in texts) else None

    wait_for(lambda: whole() is not None, seconds, f"{n} ranks to write their pids")
    return [int(t) for t in whole()]


class DryRun(unittest.TestCase):
    def test_exact_line_and_it_pastes_back_into_a_shell(self):
        env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/x", "NCCL_IB_DISABLE": "1"}
        program = [PROBE, "two words", "it's", '"q"', ";", "$(touch /tmp/cohortrun-pwned)", "`id`", ""]
        r = run(["-np", "4", "-H", "localhost:4", "--dry-run", "--tag-output", "--nccl-debug", "info",
                 "--env", "A=x y;$(z)", "--fusion-threshold-mb=64", "--cycle_time_ms", "2",
                 "--timeline-file", "/tmp/t l.json", "--mpi-args", "-mca btl self,vader", "--"] + program, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        expected = (["/usr/bin/mpirun", "-np", "4", "-H", "localhost:4"] + (["--allow-run-as-root"] if ROOT else []) +
                    ["-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca",
                     "orte_base_help_aggregate", "0", "-mca", "oob_tcp_keepalive_time", "10", "-mca",
                     "oob_tcp_keepalive_intvl", "3", "-mca", "oob_tcp_keepalive_probes", "3", "--tag-output",
                     "-x", "PATH", "-x", "LD_LIBRARY_PATH", "-x", "NCCL_IB_DISABLE", "-x", "OMP_WAIT_POLICY=PASSIVE",
                     "-x", "COHORT_PROGRESS=plain", "-x", "NCCL_DEBUG=INFO", "-x", "A=x y;$(z)",
                     "-x", "COHORT_FUSION_THRESHOLD_MB=64", "-x", "COHORT_CYCLE_TIME_MS=2",
                     "-x", "COHORT_TIMELINE_FILE=/tmp/t l.json", "-mca", "btl", "self,vader",
                     os.path.join(os.path.dirname(os.path.realpath(COHORTRUN)), "cohortrun-monitor"), "--"] + program)
        line = r.stdout.rstrip("\n")
        self.assertNotIn("\n", line)
        self.assertEqual(shlex.split(line), expected)
        # A real shell reads the printed line back into the same vector, expanding nothing.
        shell = subprocess.run(["sh", "-c", "printf '%s\\0' " + line.split(" ", 1)[1]], stdout=subprocess.PIPE,
                               timeout=TIMEOUT)
        self.assertEqual(shell.stdout.decode().split("\0")[:-1], expected[1:])
        self.assertFalse(os.path.exists("/tmp/cohortrun-pwned"))
        self.assertEqual(r.stderr.count("--allow-run-as-root"), 1 if ROOT else 0)


class BadInput(unittest.TestCase):
    """Each bad input: exit status 2, a message naming it, and no rank started."""

    def check(self, args, message, env=None):
        with tempfile.TemporaryDirectory() as pids:
            r = run(args[:-1] + [args[-1], "--pid-file", pids] if args and args[-1] == PROBE else args, env=env)
            self.assertEqual(r.returncode, 2, f"{args}: {r.stderr}")
            self.assertIn(message, r.stderr)
            self.assertTrue(r.stderr.startswith("cohortrun: "), r.stderr)
            self.assertEqual(os.listdir(pids), [])

    def test_each_bad_input(self):
        self.check(["-np", "2", "no-such-program-xyz"], "program 'no-such-program-xyz' was not found on PATH")
        self.check(["-np", "0", PROBE], "the number of ranks must be at least 1")
        self.check(["-np", "2", "-H", "a:2,,b", PROBE], "empty entry")
        self.check(["-np", "2", "-H", "a:zero", PROBE], "slot count 'zero'")
        self.check(["-np", "2", "-H", "a", "--hostfile", "/etc/hosts", PROBE], "-H and --hostfile cannot be combined")
        self.check(["-np", "2", "--batch_size", "0", PROBE], "[1, 1048576]")
        self.check(["-np", "2", "--mpi-args", "-np 3", PROBE], "conflicts with cohortrun's own options")
        self.check(["-np", "2", "--bogus-option", PROBE], "unknown option '--bogus-option'")
        self.check(["-np", "2", PROBE], "mpirun was not found on PATH", env={"PATH": "/nonexistent"})


class Hello(unittest.TestCase):
    def hello(self, np):
        r = run(["-np", str(np), HELLO])
        self.assertEqual(r.returncode, 0, r.stderr)
        # Each rank's stdout reaches mpirun through its own pipe: lines may interleave.
        lines = sorted((l for l in r.stdout.splitlines() if l.startswith("rank ")), key=lambda l: int(l.split()[1]))
        self.assertEqual(len(lines), np, r.stdout)
        for rank, line in enumerate(lines):
            self.assertRegex(line, rf"^rank {rank} of {np}: local {rank} of {np}, node 0 of 1, device cpu, ")

    def test_two_ranks(self):
        self.hello(2)

    def test_three_ranks(self):
        self.hello(3)

    def test_settings_and_env_reach_every_rank_untouched(self):
        r = run(["-np", "2", "--env", "A=x y;$(z) 'q'", "--fusion-threshold-mb", "64", "--json", PROBE,
                 "--print-env", "A", "--print-env", "COHORT_FUSION_THRESHOLD_MB", "--print-env", "COHORT_JSON",
                 "--print-env", "COHORT_PROGRESS", "--print-env", "OMP_WAIT_POLICY"])
        self.assertEqual(r.returncode, 0, r.stderr)
        for rank in (0, 1):
            for text in ("A=x y;$(z) 'q'", "COHORT_FUSION_THRESHOLD_MB=64", "COHORT_JSON=true",
                         "COHORT_PROGRESS=plain", "OMP_WAIT_POLICY=PASSIVE"):
                self.assertIn(f"rank {rank} {text}\n", r.stdout)

    def test_output_dir_has_one_log_per_rank(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(["-np", "2", "--output-dir", d + "/logs", PROBE])
            self.assertEqual(r.returncode, 0, r.stderr)
            for rank in (0, 1):
                with open(f"{d}/logs/1/rank.{rank}/stdout") as f:
                    self.assertEqual(f.read(), f"rank {rank} of 2 ready\n")

    def test_tag_output(self):
        r = run(["-np", "2", "--tag-output", PROBE])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("[1,1]<stdout>:rank 1 of 2 ready", r.stdout)


class Signals(unittest.TestCase):
    def start_job(self, pids):
        proc = subprocess.Popen([COHORTRUN, "-np", "2", PROBE, "--pid-file", pids, "--sleep", "60"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ranks = read_pids(pids, 2, 20)
        mpirun = children(proc.pid)
        self.assertEqual(len(mpirun), 1)
        monitors = children(mpirun[0])
        self.assertEqual(len(monitors), 2)
        return proc, ranks + monitors, mpirun[0]

    def forwarded(self, sig, status):
        with tempfile.TemporaryDirectory() as pids:
            proc, ranks, mpirun = self.start_job(pids)
            start = time.time()
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=TIMEOUT)
            self.assertEqual(proc.returncode, status, err)
            self.assertLess(time.time() - start, 10)
            self.assertIn("the job was stopped by", err)
            for pid in ranks + [mpirun]:
                self.assertFalse(alive(pid), f"process {pid} outlived cohortrun")

    def test_sigint_tears_the_job_down(self):
        self.forwarded(signal.SIGINT, 130)

    def test_sigterm_tears_the_job_down(self):
        self.forwarded(signal.SIGTERM, 143)

    def test_ctrl_c_on_a_terminal(self):
        """On a terminal the ranks are told COHORT_PROGRESS=tty, and Ctrl-C stops the job."""
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(COHORTRUN, [COHORTRUN, "-np", "2", PROBE, "--print-env", "COHORT_PROGRESS", "--sleep", "60"])
        out = b""
        deadline = time.time() + 20
        while out.count(b"COHORT_PROGRESS=tty") < 2 and time.time() < deadline:
            if select.select([fd], [], [], 0.1)[0]:
                out += os.read(fd, 4096)
        self.assertEqual(out.count(b"COHORT_PROGRESS=tty"), 2, out)
        os.write(fd, b"\x03")  # the terminal turns it into SIGINT for the foreground group
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                data = os.read(fd, 4096)
            except OSError:  # EIO: the terminal's last user is gone
                break
            if not data:
                break
            out += data
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        self.assertEqual(os.waitstatus_to_exitcode(status), 130, out)
        self.assertIn(b"the job was stopped by SIGINT", out)

    def test_killed_cohortrun_takes_the_job_with_it(self):
        with tempfile.TemporaryDirectory() as pids:
            proc, ranks, mpirun = self.start_job(pids)
            proc.kill()
            proc.communicate(timeout=TIMEOUT)
            wait_for(lambda: not any(alive(p) for p in ranks + [mpirun]), 15, "mpirun and the ranks to exit")


class FailingRank(unittest.TestCase):
    # Open MPI 4.1 drops its own "which process" report in about a quarter of these
    # jobs; the rank monitor's line makes the answer certain: repeat to show it.
    def test_exit_status_names_the_rank(self):
        for _ in range(5):
            r = run(["-np", "2", PROBE, "--fail-rank", "1", "--exit-code", "3"])
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertRegex(r.stderr, r"cohortrun: job failed \(exit status 3\): rank 1 \(on \S+\) exited with status 3")

    def test_signal_names_the_rank(self):
        for _ in range(5):
            r = run(["-np", "3", PROBE, "--signal-rank", "2", "--signal", str(int(signal.SIGSEGV))])
            self.assertEqual(r.returncode, 128 + signal.SIGSEGV, r.stderr)
            self.assertRegex(r.stderr,
                             r"cohortrun: job failed \(exit status 139\): rank 2 \(on \S+\) was killed by SIGSEGV")

    def test_without_the_monitor_mpirun_alone_decides(self):
        r = run(["-np", "2", "--no-rank-monitor", PROBE, "--fail-rank", "1", "--exit-code", "4"])
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertRegex(r.stderr, r"cohortrun: job (failed \(exit status 4\): rank 1 exited with status 4|"
                                   r"of 2 ranks failed with exit status 4 \(mpirun did not say which rank\))")

    def test_program_that_cannot_start_on_a_rank(self):
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "bad-interpreter")
            with open(script, "w") as f:
                f.write("#!/no/such/interpreter\n")
            os.chmod(script, 0o755)
            r = run(["-np", "2", script])
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("cannot execute " + script, r.stderr)


    def test_mpi_abort_names_the_rank_and_code(self):
        # The MPI_ABORT message travels from the rank to mpirun while the job is torn
        # down; Open MPI 4.1 loses it in ~1 of 20 runs ("ORTE_ERROR_LOG: Out of resource
        # in file …show_help.c"), and then nobody can name the rank. Retry those.
        for _ in range(5):
            r = run(["-np", "2", MPI_FAIL, "abort", "1", "7"])
            self.assertEqual(r.returncode, 7, r.stderr)
            if "show_help.c" not in r.stderr:
                break
            self.assertIn("mpirun did not say which rank", r.stderr)
        self.assertIn("cohortrun: job failed (exit status 7): rank 1 called MPI_Abort on MPI_COMM_WORLD with error "
                      "code 7", r.stderr)

    def test_exit_without_finalize_names_the_rank(self):
        r = run(["-np", "3", MPI_FAIL, "no-finalize", "2"])
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stderr, r"rank 2 \(on \S+\) exited without finalizing MPI")

    def test_a_lost_host_ends_the_job_even_when_mpirun_does_not(self):
        # An mpirun that reports a lost daemon, as Open MPI 4.1 words it, then never ends
        # (tearing a job down can wait on the host that is gone), nor does its child.
        with tempfile.TemporaryDirectory() as d:
            fake = fake_mpirun(d, "printf '%s\\n' '----' 'ORTE has lost communication with a remote daemon.' '' "
                               "'  HNP daemon   : [[4711,0],0] on node h1' "
                               "'  Remote daemon: [[4711,0],1] on node h2' '' "
                               "'This is usually due to either a failure of the TCP network' >&2\n"
                               f"sleep 600 & echo $! > {d}/child\nwait\n")
            start = time.monotonic()
            r = run(["-np", "2", "--link-timeout=10", "--mpirun", fake, PROBE])
            took = time.monotonic() - start
            with open(os.path.join(d, "child")) as f:
                child = int(f.read())
        self.assertEqual(r.returncode, 205, r.stderr)
        self.assertIn("cohortrun: job failed (exit status 205): mpirun lost its connection to host h2 (a link down or "
                      "the host gone); mpirun had not ended 4 s later, so cohortrun stopped it\n", r.stderr)
        self.assertFalse(alive(child), "the child mpirun left is still running")
        self.assertLess(took, TIMEOUT / 2)  # 10 s at most, much less than the fake's 600

    def test_a_host_that_falls_silent_ends_the_job_through_cohortruns_own_watch(self):
        # An mpirun that never notices anything: it starts rank 1's monitor (which beats to
        # cohortrun) and waits. The monitor is then stopped, its connection left open, as
        # behind a link that went down: only cohortrun's watch can end the job.
        with tempfile.TemporaryDirectory() as d:
            fake = fake_mpirun(d, "for a in \"$@\"; do case \"$a\" in */cohortrun-monitor) monitor=$a ;; esac; done\n"
                               f"OMPI_COMM_WORLD_RANK=1 \"$monitor\" -- sleep 600 & echo $! > {d}/monitor\nwait\n")
            job = subprocess.Popen([COHORTRUN, "-np", "2", "-H", "localhost:2", "--link-timeout=10", "--mpirun", fake,
                                    PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            wait_for(lambda: os.path.exists(os.path.join(d, "monitor")), 10, "the fake mpirun to start the monitor")
            time.sleep(1)  # a beat or two heard
            with open(os.path.join(d, "monitor")) as f:
                monitor = int(f.read())
            os.kill(monitor, signal.SIGSTOP)
            start = time.monotonic()
            _, stderr = job.communicate(timeout=TIMEOUT)
            took = time.monotonic() - start
        self.assertEqual(job.returncode, 205, stderr)
        self.assertIn(f"cohortrun: job failed (exit status 205): cohortrun lost its connection to host "
                      f"{socket.gethostname()} (a link down or the host gone), where rank 1 ran\n", stderr)
        self.assertGreater(took, 5)  # 7 s of silence (10 s timeout), less the beat before the stop
        self.assertLess(took, 15)  # SIGKILL at 10 s: the fake ignores SIGTERM
        self.assertFalse(alive(monitor), "the stopped monitor is still there")


class Restarts(unittest.TestCase):
    def test_a_failed_rank_restarts_the_job_which_resumes(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(["-np", "2", "--max-restarts=2", PROBE, "--fail-once", d, "--fail-rank", "1", "--exit-code", "3",
                     "--print-env", "COHORT_RESUME"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stderr, r"cohortrun: restart 1 of 2 after rank 1 \(on \S+\) exited with status 3; "
                                       r"on the same hosts\n")
            self.assertIn("cohortrun: the job succeeded after 1 restart\n", r.stderr)
            self.assertIn("--max-restarts: the program gets no --checkpoint_dir", r.stderr)
            # The failing rank's own lines: it prints before it exits, while the other rank
            # may be killed before it prints anything.
            resume = re.findall(r"rank 1 COHORT_RESUME=(\S+)", r.stdout)
            self.assertEqual(resume, ["unset", "true"], r.stdout)

    def test_restarts_are_bounded(self):
        r = run(["-np", "2", "--max-restarts=2", PROBE, "--signal-rank", "0", "--signal", str(int(signal.SIGKILL)),
                 "--checkpoint_dir=unused"])
        self.assertEqual(r.returncode, 128 + signal.SIGKILL, r.stderr)
        self.assertEqual(r.stderr.count("cohortrun: job failed (exit status 137): rank 0"), 3, r.stderr)
        self.assertIn("restart 2 of 2 after rank 0", r.stderr)
        self.assertIn("cohortrun: giving up after 2 restarts", r.stderr)
        self.assertNotIn("--max-restarts: the program gets no --checkpoint_dir", r.stderr)

    def test_the_failed_host_is_left_out_down_to_min_np(self):
        # Two names of this machine make two hosts for mpirun; the failure of the rank on
        # the second leaves one slot, enough for --min-np 1.
        host = socket.gethostname()
        with tempfile.TemporaryDirectory() as d:
            r = run(["-np", "2", "-H", f"localhost:1,{host}:1", "--max-restarts=1", "--exclude-failed-hosts",
                     "--min-np=1", PROBE, "--fail-once", d, "--fail-rank", "1", "--exit-code", "5"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stderr, rf"restart 1 of 1 after rank 1 \(on \S+\) exited with status 5; leaving out "
                                       rf"host {re.escape(host)}: 1 rank on localhost:1\n")
            self.assertIn("rank 0 of 1 ready", r.stdout)
            r = run(["-np", "2", "-H", f"localhost:1,{host}:1", "--max-restarts=1", "--exclude-failed-hosts",
                     PROBE, "--fail-rank", "1", "--exit-code", "5"])
            self.assertEqual(r.returncode, 5, r.stderr)
            self.assertIn("on the same hosts (the other hosts have 1 slot, fewer than the 2 ranks a restart needs "
                          "(-np; --min-np allows fewer))", r.stderr)

    def test_an_interrupted_job_is_not_restarted(self):
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.Popen([COHORTRUN, "-np", "2", "--max-restarts=3", PROBE, "--pid-file", d, "--sleep", "30"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            wait_for(lambda: len(os.listdir(d)) == 2, 30, "both ranks")
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=TIMEOUT)
            self.assertEqual(p.returncode, 128 + signal.SIGINT, err)
            self.assertNotIn("restart 1", err)


class UserText(unittest.TestCase):
    HOSTILE = ["two words", "it's", '"q"', ";", "a;b", "$(touch {d}/pwned)", "`touch {d}/pwned2`", "x\ny", "",
               "${{HOME}}", "'; touch {d}/pwned3 #", "\\", "*"]

    def test_hostile_arguments_reach_every_rank_unchanged(self):
        with tempfile.TemporaryDirectory() as d:
            args = [a.format(d=d) for a in self.HOSTILE]
            r = run(["-np", "2", "--env", f"A=$(touch {d}/pwned4);x", PROBE, "--print-env", "A", "--args"] + args)
            self.assertEqual(r.returncode, 0, r.stderr)
            for rank in (0, 1):
                got = re.findall(rf"(?ms)^rank {rank} arg (\d+)=(.*?)\|$", r.stdout)
                self.assertEqual([a for _, a in got], args, r.stdout)
                self.assertIn(f"rank {rank} A=$(touch {d}/pwned4);x\n", r.stdout)
            self.assertEqual(sorted(os.listdir(d)), [], "nothing the arguments name was run")

    def test_hostile_host_names_are_refused_before_anything_runs(self):
        with tempfile.TemporaryDirectory() as d:
            for hosts in (f"a;touch {d}/p:1", f"$(touch {d}/p):1", "a b:1", "'a':1", "a\nb:1", "`id`:2"):
                r = run(["-np", "1", "-H", hosts, PROBE])
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("is not a host name", r.stderr)
            hostfile = os.path.join(d, "hosts")
            with open(hostfile, "w") as f:
                f.write(f"h1 slots=1\nh2;$(touch\t{d}/p) slots=1\n")
            r = run(["-np", "1", "--hostfile", hostfile, PROBE])
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"{hostfile}:2: 'h2;$(touch' is not a host name", r.stderr)
            self.assertEqual(os.listdir(d), ["hosts"])

    def test_files_cohortrun_writes_honour_the_umask(self):
        with tempfile.TemporaryDirectory() as d:
            for mask in (0o022, 0o077):
                old = os.umask(mask)
                try:
                    r = run(["sweep", "-np", "1", "--sweep-out", f"{d}/s{mask:o}", "--", PROBE, "--summary", "10"])
                finally:
                    os.umask(old)
                self.assertEqual(r.returncode, 0, r.stderr)
                for ext in ("csv", "json"):
                    self.assertEqual(os.stat(f"{d}/s{mask:o}.{ext}").st_mode & 0o777, 0o666 & ~mask)


class CheckBuild(unittest.TestCase):
    def test_reports_each_library(self):
        r = run(["--check-build"])
        self.assertEqual(r.returncode, 0, r.stderr)
        for label in ("cohort", "MPI", "mpirun", "CUDA", "cuDNN", "NCCL", "oneDNN", "libjpeg-turbo", "GPUs"):
            self.assertRegex(r.stdout, rf"(?m)^{re.escape(label)}\s+\S")
        # Where models compute, whatever GPUs the machine has.
        self.assertRegex(r.stdout, r"(?m)^Compute\s+CPU \(oneDNN\)")
        self.assertRegex(r.stdout, r"(?m)^MPI\s+.*\(MPI standard \d+\.\d+\)$")
        self.assertRegex(r.stdout, r"(?m)^oneDNN\s+\d+\.\d+\.\d+")


    def test_help_lists_launcher_options_and_library_settings(self):
        r = run(["--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        for text in ("--dry-run", "--mpi-args", "--nccl-debug LEVEL", "--link-timeout S", "--fusion_threshold_mb=FLOAT",
                     "--timeline_file"):
            self.assertIn(text, r.stdout)


class Sweep(unittest.TestCase):
    def test_table_csv_and_json_from_real_runs(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(["sweep", "-np", "1,2,3", "--sweep-out", d + "/scaling", "--", PROBE, "--summary", "100"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("ranks  images/sec   speedup  efficiency", r.stdout)
            self.assertRegex(r.stdout, r"(?m)^    2       190.0     1.90x       95.0%$")
            self.assertRegex(r.stdout, r"(?m)^    3       270.0     2.70x       90.0%$")
            with open(d + "/scaling.csv") as f:
                self.assertEqual(f.read().splitlines()[1:], ["1,100.000,1.0000,1.0000,0,ok,2.300000,",
                                                             "2,190.000,1.9000,0.9500,0,ok,2.300000,",
                                                             "3,270.000,2.7000,0.9000,0,ok,2.300000,"])
            with open(d + "/scaling.json") as f:
                doc = json.load(f)
            self.assertEqual([run["ranks"] for run in doc["runs"]], [1, 2, 3])
            self.assertEqual(doc["runs"][2]["summary"]["global_batch"], 192)

    def test_over_runs_the_cross_product_and_records_a_failed_point(self):
        # The probe's rate grows with the batch up to 128 (saturation); batch 64 fails, and
        # the sweep goes on.
        with tempfile.TemporaryDirectory() as d:
            r = run(["sweep", "-np", "1,2", "--over", "batch_size=32,64,256", "--sweep-out", d + "/s", "--", PROBE,
                     "--summary", "100", "--fail-when", "COHORT_BATCH_SIZE=64"])
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("2 of 6 runs failed", r.stderr)
            with open(d + "/s.csv") as f:
                rows = [line.split(",") for line in f.read().splitlines()]
            self.assertEqual(rows[0][:3], ["ranks", "batch_size", "images_per_sec"])
            self.assertEqual([(row[0], row[1], row[6]) for row in rows[1:]],
                             [("1", "32", "ok"), ("2", "32", "ok"), ("1", "64", "failed"), ("2", "64", "failed"),
                              ("1", "256", "ok"), ("2", "256", "ok")])
            self.assertEqual([row[2] for row in rows[1:]], ["50.000", "95.000", "", "", "200.000", "380.000"])
            self.assertEqual(rows[2][3:5], ["1.9000", "0.9500"])  # speedup against 1 rank of the same batch
            with open(d + "/s.json") as f:
                runs = json.load(f)["runs"]
            self.assertEqual(runs[3]["settings"], {"batch_size": "64"})
            self.assertEqual(runs[3]["exit_status"], 3)
            self.assertEqual(runs[5]["summary"]["batch_per_rank"], 256)

    def test_tag_output_keeps_the_summary_readable(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(["sweep", "-np", "1,2", "--tag-output", "--sweep-out", d + "/s", "--", PROBE, "--summary", "10"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("[1,0]<stdout>:rank 0 of 2 ready", r.stdout)
            self.assertRegex(r.stdout, r"(?m)^    2        19.0     1.90x       95.0%$")

    def test_missing_summary_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(["sweep", "-np", "1", "--sweep-out", d + "/s", "--", PROBE])
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("no run summary line", r.stdout)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
