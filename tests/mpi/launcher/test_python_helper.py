"""The Python helper (launcher/python/cohort) against real cohortrun runs of the
stand-in rank program, which prints a cohort.run/1 summary line. `Plots` needs
matplotlib and exits 77 (ctest: skipped) without it."""
import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import cohort

PROBE = os.environ["LAUNCHER_PROBE"]


def quiet(fn, *args, **kwargs):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = fn(*args, **kwargs)
    return result, out.getvalue()


class Run(unittest.TestCase):
    def test_returns_the_summary_and_streams_the_output(self):
        summary, out = quiet(cohort.run, np=2, program=PROBE, args=["--summary", "100"])
        self.assertEqual(summary["schema"], "cohort.run/1")
        self.assertEqual(summary["ranks"], 2)
        self.assertAlmostEqual(summary["images_per_sec"]["median"], 190.0)
        self.assertIn("rank 1 of 2 ready\n", out)
        self.assertIn("step 10 images/sec: 190.0\n", out)

    def test_output_arrives_while_the_job_runs(self):
        class Clock(io.StringIO):
            def __init__(self):
                super().__init__()
                self.when = {}

            def write(self, text):
                self.when.setdefault(text.strip(), time.monotonic())
                return super().write(text)

        out = Clock()
        with contextlib.redirect_stdout(out):
            cohort.run(np=1, program=PROBE, args=["--sleep", "1.5", "--summary", "10"])
        ended = time.monotonic()
        self.assertLess(out.when["rank 0 of 1 ready"], ended - 1.0, out.getvalue())

    def test_interrupt_stops_the_job(self):
        """A notebook's "interrupt kernel" is SIGINT to Python: the job is stopped, then
        KeyboardInterrupt goes on up."""
        with tempfile.TemporaryDirectory() as d:
            code = ("import cohort\ntry:\n    cohort.run(np=2, program=%r, args=['--pid-file', %r, '--sleep', '60'])\n"
                    "except KeyboardInterrupt:\n    print('interrupted', flush=True)\n" % (PROBE, d))
            proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 20
            texts = []
            while time.monotonic() < deadline:  # each rank creates its file before it writes its pid
                texts = [open(os.path.join(d, f)).read() for f in os.listdir(d)]
                if len(texts) == 2 and all(t.endswith("\n") for t in texts):
                    break
                time.sleep(0.05)
            pids = [int(t) for t in texts]
            self.assertEqual(len(pids), 2)
            proc.send_signal(signal.SIGINT)
            out = proc.communicate(timeout=60)[0]
            self.assertIn("interrupted", out)
            for pid in pids:
                with self.assertRaises(ProcessLookupError):
                    os.kill(pid, 0)

    def test_settings_and_env_reach_the_ranks(self):
        _, out = quiet(cohort.run, np=2, program=PROBE, settings={"fusion_threshold_mb": 32, "resume": False},
                       env={"MY_VAR": "a b;$(c)"},
                       args=["--print-env", "COHORT_FUSION_THRESHOLD_MB", "--print-env", "COHORT_RESUME",
                             "--print-env", "MY_VAR", "--print-env", "COHORT_JSON", "--print-env", "COHORT_PROGRESS"])
        for text in ("COHORT_FUSION_THRESHOLD_MB=32", "COHORT_RESUME=false", "MY_VAR=a b;$(c)", "COHORT_JSON=true",
                     "COHORT_PROGRESS=plain"):
            self.assertIn(f"rank 1 {text}\n", out)

    def test_summary_is_found_behind_tag_output(self):
        summary, out = quiet(cohort.run, np=2, program=PROBE, args=["--summary", "100"], tag_output=True)
        self.assertIn("[1,1]<stdout>:rank 1 of 2 ready", out)
        self.assertEqual(summary["ranks"], 2)

    def test_no_summary_gives_none(self):
        summary, _ = quiet(cohort.run, np=1, program=PROBE)
        self.assertIsNone(summary)

    def test_failing_rank_raises_naming_it(self):
        with self.assertRaises(cohort.CohortRunError) as caught:
            quiet(cohort.run, np=2, program=PROBE, args=["--fail-rank", "1", "--exit-code", "5"])
        self.assertEqual(caught.exception.returncode, 5)
        self.assertRegex(str(caught.exception), r"rank 1 \(on \S+\) exited with status 5")

    def test_bad_input_raises_with_status_2(self):
        with self.assertRaises(cohort.CohortRunError) as caught:
            quiet(cohort.run, np=0, program=PROBE)
        self.assertEqual(caught.exception.returncode, 2)
        self.assertIn("at least 1", str(caught.exception))


class Sweep(unittest.TestCase):
    def test_rows_and_files(self):
        with tempfile.TemporaryDirectory() as d:
            rows, out = quiet(cohort.sweep, np=[1, 2, 4], program=PROBE, args=["--summary", "50"], out=d + "/s")
            self.assertTrue(os.path.exists(d + "/s.csv"))
        self.assertEqual([r["ranks"] for r in rows], [1, 2, 4])
        self.assertAlmostEqual(rows[2]["speedup"], 3.4)
        self.assertAlmostEqual(rows[2]["efficiency"], 0.85)
        self.assertIn("    4       170.0     3.40x       85.0%", out)
        self.assertEqual(cohort.format_table(rows).splitlines()[3], "    4       170.0     3.40x       85.0%")


    def test_over_sweeps_a_setting_and_the_plots_read_the_rows(self):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        with tempfile.TemporaryDirectory() as d:
            rows, out = quiet(cohort.sweep, np=[1, 2], program=PROBE, args=["--summary", "100", "--fail-when",
                                                                             "COHORT_BATCH_SIZE=16"],
                              over={"batch_size": [16, 32, 64, 128, 256]}, out=d + "/s", check=False)
        self.assertEqual(len(rows), 10)
        self.assertEqual([r["settings"]["batch_size"] for r in rows[::2]], ["16", "32", "64", "128", "256"])
        self.assertEqual([r["status"] for r in rows[:3]], ["failed", "failed", "ok"])
        self.assertEqual(cohort.format_table(rows).splitlines()[0], "ranks  batch_size  images/sec   speedup  efficiency")
        ax = cohort.plot_throughput(rows)
        self.assertEqual([list(line.get_xdata()) for line in ax.lines], [[32, 64, 128, 256]] * 2)
        self.assertEqual(list(ax.lines[0].get_ydata()), [50.0, 100.0, 200.0, 200.0])  # saturates at 128
        ax = cohort.plot_scaling(rows)
        self.assertEqual(len(ax.lines), 8)  # 4 settings that worked, each with its ideal
        self.assertEqual(list(ax.lines[1].get_ydata()), [50.0, 100.0])
        plt.close("all")


class Plots(unittest.TestCase):
    def test_the_labs_figures(self):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        measured = {"alexnet": (26791, 3250), "googlenet": (6447, 3454), "resnet50": (2796, 2741),
                    "resnet152": (1251, 1184), "trivial": (53000, 3200)}
        ax = cohort.plot_real_vs_synthetic(measured)
        self.assertEqual(ax.get_xlim(), ax.get_ylim())
        self.assertEqual(len(ax.texts), 5)
        ax = cohort.plot_ratio(measured)
        self.assertAlmostEqual(ax.patches[2].get_height(), 2741 / 2796)
        rows = [{"ranks": 1, "efficiency": 1.0}, {"ranks": 2, "efficiency": 0.95}, {"ranks": 4, "efficiency": None}]
        ax = cohort.plot_scaling_efficiency({"mnist": rows})
        self.assertEqual(list(ax.lines[0].get_ydata()), [100.0, 95.0])
        with tempfile.TemporaryDirectory() as d:
            ax.figure.savefig(d + "/eff.png")
            self.assertGreater(os.path.getsize(d + "/eff.png"), 1000)
        plt.close("all")


class Install(unittest.TestCase):
    """pip installs the package (as ENVIRONMENT.md says) and the installed copy runs jobs."""

    def test_pip_install_and_run(self):
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "launcher", "python")
        with tempfile.TemporaryDirectory() as d:
            shutil.copytree(source, d + "/src", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
            pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation",
                                  "--break-system-packages", "--no-deps", "--target", d + "/site", d + "/src"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
            self.assertEqual(pip.returncode, 0, pip.stdout)
            self.assertFalse(os.path.exists(d + "/site/cohort/_build_config.py"))
            code = ("import cohort; s = cohort.run(np=2, program=%r, args=['--summary', '10'], echo=False); "
                    "print(cohort.__file__, s['images_per_sec']['median'])" % PROBE)
            env = dict(os.environ, PYTHONPATH=d + "/site", COHORTRUN=os.environ["COHORTRUN"])
            r = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.split(), [d + "/site/cohort/__init__.py", "19.0"])


if __name__ == "__main__":
    if sys.argv[1:] == ["Install"]:
        import importlib.util
        if not importlib.util.find_spec("pip") or not importlib.util.find_spec("setuptools"):
            print("SKIPPED: pip or setuptools is not installed (Debian: python3-pip python3-setuptools)")
            sys.exit(77)
    if sys.argv[1:] == ["Plots"]:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("SKIPPED: matplotlib is not installed (Debian: python3-matplotlib)")
            sys.exit(77)
    unittest.main(verbosity=2)
