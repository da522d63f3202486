"""The course exercises and their checker, one ctest per group:
`python3 test_course.py GROUP [ARG]`.

  Grading          the checker's grading on made-up runs (deterministic, no process started)
  Blocks           exercise and solution differ only in their TODO blocks
  Accelerate LANG  the unmodified exercise fails with hints; the solution passes
  Mutation LANG K  the solution with TODO K undone fails on exactly the items it breaks
  AddModel         the add-a-model exercise fails until alexnet_owt is added
  Mistake NAME     a wrong answer students write fails with a hint that names it
  Throughput       the solutions compute an epoch >= 1.5x faster at np=2, the exercise
                   does not (perf: full-size runs)
  Labs             the notebooks' helpers (cohort.labs): datasets, allreduce_perf's table

Functional groups run the checker with --throughput=skip: its full-size runs take long;
its grading logic is covered by Grading, and real runs by the Throughput group (label
perf, run serially).

Environment: COHORT_CHECK (the checker of the build tree), COHORT_EXERCISES
(samples/exercises)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import exercise_blocks  # noqa: E402

EXERCISES = os.environ.get("COHORT_EXERCISES", os.path.join(HERE, "..", "..", "samples", "exercises"))
sys.path.insert(0, os.path.join(EXERCISES, "checker"))
import cohort_check  # noqa: E402

CHECK = os.environ.get("COHORT_CHECK", "cohort-check")
ACCELERATE = os.path.join(EXERCISES, "accelerate")
# Small enough for CI, large enough that np=2 reaches np=1's accuracy (measured margin:
# 0.25 points or more, np=2 ahead, on every mutation that does not break it).
SIZES = ["--train-samples", "4096", "--test-samples", "2000", "--epochs", "2"]

# What each TODO breaks when undone: the items that must fail, no more, no fewer
# (throughput, skipped by the functional tests, fails too without TODO 1 or 7).
BREAKS = {
    # Copies that ignore each other: each one's checkpoint is its own, and rank 0's
    # accuracy is that of its own model.
    1: {"runtime", "init_params", "final_params", "shards", "one_printer", "lr_scaled", "steps_divided",
        "metrics_averaged", "checkpoint", "accuracy"},
    2: {"shards"},
    3: {"lr_scaled"},
    4: {"init_params", "final_params", "accuracy"},  # the ranks start apart, so they also end apart
    5: {"metrics_averaged"},
    6: {"one_printer"},
    7: {"steps_divided"},
}

# Wrong answers as students write them, each made from a solution by one replacement:
# (language, the solution's text, its replacement, extra checker arguments).
MISTAKES = {
    # Each rank rounds its own share of the data up to whole batches: with an odd number
    # of samples rank 0 takes one step more per epoch, and the ranks deadlock.
    "deadlock": (".c", "const int64_t steps_per_epoch = info.dataset_size / (batch * r->size);",
                 "const int64_t share = (info.dataset_size + r->size - 1 - r->rank) / r->size;\n"
                 "  const int64_t steps_per_epoch = (share + batch - 1) / batch;",
                 ["--train-samples", "4097"]),
    # The same, with stall_shutdown_s off: the run is stopped at its limit (2 x the np=1
    # run's time + 30 s), and the ranks' progress records still give their step counts.
    "deadlock_at_limit": (".c", "const int64_t steps_per_epoch = info.dataset_size / (batch * r->size);",
                          "const int64_t share = (info.dataset_size + r->size - 1 - r->rank) / r->size;\n"
                          "  const int64_t steps_per_epoch = (share + batch - 1) / batch;",
                          ["--train-samples", "4097", "--stall-seconds", "0"]),
    # TODO 6 read the Horovod way: checkpoints written on rank 0 only.
    "rank0_checkpoint": (".c", '  CHECK(cohort_optimizer_save_checkpoint(r->opt, dir, &ck), "saving a checkpoint");',
                         '  if (r->rank == 0) CHECK(cohort_optimizer_save_checkpoint(r->opt, dir, &ck), "saving");',
                         []),
    "rank0_checkpoint_py": (".py", "        opt.save_checkpoint(directory,",
                            "        if self.rank == 0:\n            opt.save_checkpoint(directory,", []),
    # lr x ranks by hand (Horovod's way) on top of lr_scaling=linear.
    "double_lr": (".c", '         preset(opt_cfg, "warmup_epochs", "1");',
                  '         preset(opt_cfg, "warmup_epochs", "1");\n'
                  '  double lr = 0;\n'
                  '  char scaled[32];\n'
                  '  cohort_config_get_float(opt_cfg, "lr", &lr);\n'
                  '  snprintf(scaled, sizeof scaled, "%g", lr * r->size);\n'
                  '  bad |= cohort_config_set(opt_cfg, "lr", scaled) != COHORT_OK;', []),
    # The dataset divided by the ranks as if it were the whole, then by batch x ranks.
    "half_steps": (".c", "info.dataset_size / (batch * r->size)", "info.dataset_size / r->size / (batch * r->size)",
                   []),
    # An optimizer that does not average the gradients (Horovod: no DistributedOptimizer).
    "unaveraged": (".c", '         preset(opt_cfg, "warmup_epochs", "1");',
                   '         preset(opt_cfg, "warmup_epochs", "1") |\n'
                   '         preset(opt_cfg, "variable_update", "independent");', []),
}


def check(exercise, path, *extra):
    """Runs cohort-check; returns (exit status, {item: result dict}, report text)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result.json")
        proc = subprocess.run([CHECK, exercise, path, "--json", out, "--quiet"] + list(extra), capture_output=True,
                              text=True, timeout=900)
        if not os.path.exists(out):
            raise AssertionError(f"cohort-check wrote no result (exit {proc.returncode}):\n{proc.stdout}\n"
                                 f"{proc.stderr}")
        with open(out) as f:
            items = {i["item"]: i for i in json.load(f)["items"]}
    return proc.returncode, items, proc.stdout + proc.stderr


def failing(items):
    return {k for k, v in items.items() if v["status"] == "FAIL"}


def source(lang, solution=False):
    return os.path.join(ACCELERATE, "solution" if solution else "", "train_single" + lang)


class Accelerate(unittest.TestCase):
    lang = ".c"

    def test_the_exercise_fails_with_hints(self):
        status, items, text = check("accelerate", source(self.lang), *SIZES, "--throughput", "skip")
        self.assertEqual(status, 1, text)
        self.assertEqual(failing(items), BREAKS[1], text)  # as written, no TODO is done
        for key in BREAKS[1]:
            self.assertTrue(items[key]["hint"], f"{key} failed without a hint")
        self.assertIn("Hints:", text)
        self.assertIn("cohort_optimizer_broadcast", items["init_params"]["hint"])
        self.assertEqual(items["throughput"]["status"], "SKIP")

    def test_the_solution_passes(self):
        status, items, text = check("accelerate", source(self.lang, True), *SIZES, "--throughput", "skip")
        self.assertEqual(status, 0, text)
        self.assertEqual(failing(items), set(), text)
        self.assertEqual({k for k, v in items.items() if v["status"] == "SKIP"}, {"throughput"})


class Mutation(unittest.TestCase):
    lang, todo = ".c", 4

    def test_fails_on_exactly_what_it_breaks(self):
        with open(source(self.lang, True)) as f:
            solution = f.read()
        with open(source(self.lang)) as f:
            exercise = f.read()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "train_single" + self.lang)
            with open(path, "w") as f:
                f.write(exercise_blocks.splice(solution, exercise, self.lang, [self.todo]))
            status, items, text = check("accelerate", path, *SIZES, "--throughput", "skip")
        self.assertEqual(status, 1, text)
        self.assertEqual(failing(items), BREAKS[self.todo], text)


class Mistake(unittest.TestCase):
    """A wrong answer fails on the items it breaks, with a hint that names the mistake."""
    name = "deadlock"

    def check_mistake(self):
        lang, text, replacement, extra = MISTAKES[self.name]
        with open(source(lang, True)) as f:
            solution = f.read()
        self.assertEqual(solution.count(text), 1, text)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "train_single" + lang)
            with open(path, "w") as f:
                f.write(solution.replace(text, replacement))
            status, items, report = check("accelerate", path, *SIZES, *extra, "--throughput", "skip")
        self.assertEqual(status, 1, report)
        return items, report

    def test_fails_with_a_hint_that_names_it(self):
        items, report = self.check_mistake()
        failed = failing(items)
        expect = getattr(self, "expect_" + self.name.removesuffix("_py"))
        expect(items, failed, report)

    def expect_deadlock(self, items, failed, report):
        # Reported by the stall (stall_shutdown_s), not the run's limit, with each rank's
        # step count; the items whose records are complete keep their verdicts.
        steps = items["steps_divided"]
        self.assertIn("steps_divided", failed, report)
        self.assertIn("different numbers of steps: rank 0 33, rank 1 32", steps["detail"], report)
        self.assertIn("failed (exit status", steps["detail"], report)
        self.assertIn("same number of steps", steps["hint"], report)
        for key in ("runtime", "init_params", "one_printer"):
            self.assertEqual(items[key]["status"], "PASS", report)
        for key in ("final_params", "accuracy", "checkpoint"):
            self.assertIn("not graded", items[key]["detail"], report)

    def expect_deadlock_at_limit(self, items, failed, report):
        steps = items["steps_divided"]
        self.assertIn("different numbers of steps: rank 0 33, rank 1 32", steps["detail"], report)
        self.assertIn("the np=2 run was stopped after", steps["detail"], report)
        for key in ("runtime", "init_params", "one_printer"):
            self.assertEqual(items[key]["status"], "PASS", report)

    def expect_rank0_checkpoint(self, items, failed, report):
        self.assertEqual(failed, {"checkpoint"}, report)
        self.assertIn("if (rank == 0)", items["checkpoint"]["hint"], report)

    def expect_double_lr(self, items, failed, report):
        self.assertIn("lr_scaled", failed, report)
        self.assertLessEqual(failed, {"lr_scaled", "accuracy"}, report)
        self.assertIn("4.00x, scaled twice (expected 2x)", items["lr_scaled"]["detail"], report)
        if "accuracy" in failed:
            self.assertIn("scaled twice", items["accuracy"]["hint"], report)

    def expect_half_steps(self, items, failed, report):
        self.assertIn("steps_divided", failed, report)
        self.assertLessEqual(failed, {"steps_divided", "shards", "accuracy"}, report)
        self.assertIn("divided twice", items["steps_divided"]["detail"], report)
        if "accuracy" in failed:
            self.assertIn("divided twice", items["accuracy"]["hint"], report)

    def expect_unaveraged(self, items, failed, report):
        # One model per rank, on one rank's batch: lr_scaling leaves lr unscaled, and says why.
        self.assertEqual(failed, {"final_params", "lr_scaled", "accuracy"}, report)
        self.assertIn("variable_update=independent", items["final_params"]["hint"], report)
        self.assertIn("variable_update=independent", items["lr_scaled"]["hint"], report)
        self.assertIn("different parameters", items["accuracy"]["hint"], report)
        for blamed in ("lr_scaling", "learning rate"):
            self.assertNotIn(blamed, items["accuracy"]["hint"], report)


class Blocks(unittest.TestCase):
    """The exercise is the solution with every TODO block in its single-device form."""

    def test_exercise_and_solution_differ_only_in_their_todo_blocks(self):
        for lang in (".c", ".py"):
            with open(source(lang, True)) as f:
                solution = f.read()
            with open(source(lang)) as f:
                exercise = f.read()
            self.assertEqual(sorted(exercise_blocks.blocks(solution, lang)), list(range(1, 8)), lang)
            self.assertEqual(sorted(exercise_blocks.blocks(exercise, lang)), list(range(1, 8)), lang)
            spliced = exercise_blocks.splice(solution, exercise, lang, range(1, 8))
            self.assertEqual(exercise_blocks.body(spliced, lang), exercise_blocks.body(exercise, lang), lang)


class AddModel(unittest.TestCase):
    def test_the_exercise_fails_until_the_model_is_added(self):
        path = os.path.join(EXERCISES, "add_model", "trainer.c")
        status, items, text = check("add-model", path)
        self.assertEqual(status, 1, text)
        self.assertEqual(failing(items), set(items), text)
        self.assertIn("Invalid model type: alexnet_owt", items["model_known"]["detail"])
        # The trainer itself names the valid models.
        with tempfile.TemporaryDirectory() as d:
            exe = cohort_check.prepare(path, d)
            proc = subprocess.run(exe + ["--model=alexnet_owt"], capture_output=True, text=True)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("Invalid model type: alexnet_owt\nvalid models: mnist_cnn, trivial", proc.stderr)

    def test_the_solution_passes(self):
        status, items, text = check("add-model", os.path.join(EXERCISES, "add_model", "solution", "trainer.c"))
        self.assertEqual(status, 0, text)
        self.assertEqual(items["param_count"]["detail"], "61,100,840")


class Throughput(unittest.TestCase):
    """The throughput item on real runs at the checker's default sizes (label perf): the
    solutions share each epoch's compute between the ranks, the exercise as written does
    not."""

    def throughput(self, path):
        _, items, text = check("accelerate", path)
        print(text)
        return items["throughput"]

    def test_the_solutions_pass(self):
        for lang in (".c", ".py"):
            item = self.throughput(source(lang, True))
            self.assertEqual(item["status"], "PASS", (lang, item["detail"]))

    def test_the_exercise_fails(self):
        item = self.throughput(source(".c"))
        self.assertEqual(item["status"], "FAIL", item["detail"])
        self.assertIn("all of np=1's steps", item["hint"])


class Labs(unittest.TestCase):
    def test_allreduce_perf_table(self):
        import cohort.labs
        lines = ["# cohort 0.1.0, 2 ranks, collective allreduce",
                 "#       size         count      type   redop   root     time   algbw   busbw #wrong",
                 "           8             2     float     sum     -1     6.66    0.00    0.00      0     4.39    0.00"
                 "    0.00      0     0.24    0.03   0.06",
                 "      524288        131072     float     sum     -1    40.20   13.04   13.04      0    28.66   18.29"
                 "   18.29      0    53.80    9.75   1.88",
                 "# Avg bus bandwidth    : 3.65072 "]
        rows = cohort.labs.parse_allreduce_perf(lines)
        self.assertEqual([r["size"] for r in rows], [8, 524288])
        self.assertEqual((rows[1]["busbw"], rows[1]["inplace_busbw"], rows[1]["raw_busbw"], rows[1]["ratio"]),
                         (13.04, 18.29, 9.75, 1.88))
        self.assertEqual((rows[0]["type"], rows[0]["wrong"]), ("float", 0))

    def test_datasets(self):
        import cohort
        import cohort.labs
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(cohort.labs.fashion_mnist_subset(os.path.join(d, "f"), 100, 30),
                             {"train": 100, "t10k": 30})
            self.assertEqual(cohort.data_inspect(os.path.join(d, "f"), 0)[:2], ["source: idx", "samples: 100"])
            cohort.labs.photo_folder(os.path.join(d, "p"), images=8, classes=2)
            written, _ = cohort.data_pack(os.path.join(d, "p"), os.path.join(d, "r"))
            self.assertEqual(written, 8)
            broken, _ = cohort.data_verify(os.path.join(d, "r"))
            self.assertEqual(broken, 0)
        self.assertTrue(os.access(cohort.find_program("cohort-train"), os.X_OK))


# ---- grading on made-up runs ----


def made_up_run(np, ranks_print=(0,), crc_init=("a",), crc_end=("b",), runtime_size=None, lr=(0.05, 0.1),
                steps=100, interval=0.05, cpu=0.05, rate=1000.0, threads=1, loss=(0.5,), summary_loss=None,
                summary_rate=None, top1=0.8, shards="split", variable_update="replicated", name=None):
    """A Run as execute() would return it for np ranks that all ended well; `steps`,
    `interval` and `cpu` (the median step, start to start, in wall and CPU time) may be
    per rank."""
    run = cohort_check.Run(np, name)
    run.status, run.ended_at, run.saved_checkpoint = 0, 1000.0, True
    size = np if runtime_size is None else runtime_size
    dataset = 64
    for r in range(np):
        share = [i for i in range(dataset) if shards == "whole" or i % np == r]
        bitmap = sum(1 << i for i in share).to_bytes(dataset // 8, "little").hex()
        last = loss[r % len(loss)]
        n = steps[r] if isinstance(steps, tuple) else steps
        run.records[r] = [
            {"event": "first_step", "job_rank": r, "runtime_rank": r % size, "runtime_size": size, "device": "cpu",
             "variable_update": variable_update, "compute_threads": threads, "thread_budget": 1,
             "params_crc32c": crc_init[r % len(crc_init)], "lr": lr[0], "base_lr": 0.05},
            {"event": "pipeline", "job_rank": r, "split": "train", "runtime_rank": r % size, "runtime_size": size,
             "dataset_size": dataset, "first_epoch_bitmap": bitmap},
            {"event": "end", "job_rank": r, "runtime_size": size, "steps": n, "steps_started": n,
             "params_crc32c": crc_end[r % len(crc_end)], "first_lr": lr[0], "max_lr": lr[1], "last_loss": last,
             "measured_images": rate * 10, "measured_s": 10.0, "step_intervals": n - 6,
             "step_interval_median_s": interval[r] if isinstance(interval, tuple) else interval,
             "step_cpu_median_s": cpu[r] if isinstance(cpu, tuple) else cpu},
        ]
        run.progress[r] = {"event": "progress", "job_rank": r, "steps_started": n, "steps": n, "in_step": False,
                           "time": 990.0}
        run.stdout[r] = "epoch 1\n" if r in ranks_print else ""
    mean_loss = sum(loss[r % len(loss)] for r in range(np)) / np
    run.summary = {"schema": "cohort.run/1", "top1": top1, "epochs": 2,
                   "loss": mean_loss if summary_loss is None else summary_loss,
                   "images_per_sec": {"mean": np * rate if summary_rate is None else summary_rate}}
    return run


def made_up_resumed(np, crc=("b",)):
    """The run resumed from the np=N run's checkpoint: the parameters at its first step."""
    run = made_up_run(np, crc_init=crc, crc_end=("e",), steps=50, name="resumed")
    run.summary["epochs"] = 3
    return run


def good_runs(resumed=None, **two):
    """np=1, np=2 and resumed runs of a correct answer, with the np=2 run changed by `two`."""
    one = made_up_run(1, lr=(0.0, 0.05), steps=200)
    return one, made_up_run(2, **two), made_up_resumed(2, **(resumed or {}))


def stopped(run, status=1, output="", summary=False, ends=False):
    """`run` cut short: without its summary and (unless `ends`) its end records."""
    run.status, run.output = status, output
    if not summary:
        run.summary = None
    if not ends:
        for r in run.records:
            run.records[r] = [x for x in run.records[r] if x["event"] != "end"]
    run.limit = 70.0
    return run


def grade(one, two, resumed=None, **kw):
    return {i.key: i for i in cohort_check.grade_accelerate(one, two, resumed, **kw)}


def failing_items(items):
    return {k for k, i in items.items() if i.status == "FAIL"}


class Grading(unittest.TestCase):
    def test_a_good_run_passes_every_item(self):
        items = grade(*good_runs())
        self.assertEqual({k: (i.status, i.detail) for k, i in items.items() if i.status != "PASS"}, {})

    def test_each_item_fails_alone(self):
        cases = {
            "init_params": dict(crc_init=("a", "c"), crc_end=("b",)),
            "shards": dict(shards="whole"),
            "one_printer": dict(ranks_print=(0, 1)),
            "lr_scaled": dict(lr=(0.05, 0.05)),
            "steps_divided": dict(steps=70),
            "metrics_averaged": dict(loss=(0.4, 0.6), summary_loss=0.4),
            "accuracy": dict(top1=0.78),
            "throughput": dict(cpu=0.08),
        }
        for key, change in cases.items():
            items = grade(*good_runs(**change))
            self.assertEqual(failing_items(items), {key}, (key, change))
            self.assertTrue(items[key].hint, key)
        items = grade(*good_runs(resumed=dict(crc=("b", "x"))))
        self.assertEqual(failing_items(items), {"checkpoint"})
        self.assertIn("load_checkpoint", items["checkpoint"].hint)

    def test_ranks_that_end_apart_did_not_train_one_model(self):
        items = grade(*good_runs(crc_end=("b", "d"), top1=0.9))
        self.assertEqual(failing_items(items), {"final_params", "accuracy"})
        self.assertIn("not averaged", items["final_params"].hint)
        self.assertIn("different parameters", items["accuracy"].hint)

    def test_the_hint_names_the_cause(self):
        items = grade(*good_runs(crc_init=("a", "c"), crc_end=("b", "d")))
        self.assertIn("started from different parameters", items["final_params"].hint)
        items = grade(*good_runs(lr=(0.1, 0.1)))
        self.assertIn("no warm-up", items["lr_scaled"].detail)
        items = grade(*good_runs(runtime_size=1, lr=(0.05, 0.05)))
        self.assertIn("world=process", items["runtime"].hint)
        self.assertIn("one runtime over all ranks", items["lr_scaled"].hint)  # lr x 1 rank: not scaled
        items = grade(*good_runs(loss=(0.4, 0.6), summary_rate=1000.0))
        self.assertIn("images/sec in the summary", items["metrics_averaged"].detail)

    def test_the_hint_says_what_the_measured_value_shows(self):
        # The learning rate 4x where 2x was expected: scaled twice (lr x ranks and lr_scaling).
        items = grade(*good_runs(lr=(0.05, 0.2), top1=0.7))
        self.assertIn("4.00x, scaled twice (expected 2x)", items["lr_scaled"].detail)
        self.assertIn("twice", items["lr_scaled"].hint)
        self.assertIn("scaled twice", items["accuracy"].hint)
        # Half the expected steps per rank: divided twice.
        items = grade(*good_runs(steps=50, top1=0.7), throughput=False)
        self.assertIn("divided twice (expected about 100)", items["steps_divided"].detail)
        self.assertIn("divided twice", items["accuracy"].hint)
        # Gradients never averaged (variable_update=independent, which lr_scaling does not
        # scale): the ranks end apart; the lr and the accuracy are not blamed on lr_scaling.
        items = grade(*good_runs(crc_end=("b", "d"), variable_update="independent", lr=(0.05, 0.05), top1=0.7))
        self.assertEqual(failing_items(items), {"final_params", "lr_scaled", "accuracy"})
        self.assertIn("variable_update=independent", items["final_params"].hint)
        self.assertIn("variable_update=independent", items["lr_scaled"].hint)
        self.assertIn("different parameters", items["accuracy"].hint)
        for word in ("lr_scaling", "learning rate"):
            self.assertNotIn(word, items["accuracy"].hint)

    def test_ranks_that_took_different_numbers_of_steps(self):
        one, two, _ = good_runs()
        stopped(two, output="collective 'grad/conv1.w' stalled for 20 s (stall_shutdown_s)")
        two.progress[0].update(steps_started=33, steps=32, in_step=True)
        two.progress[1].update(steps_started=32, steps=32)
        two.stderr = {0: "[cohort 0 warn] stall: collectives have waited more than 10 s\n  'grad/conv1.w': waiting\n"
                         "train_single: training step: collective 'grad/conv1.w' stalled\ncohortrun: rank 0 exited\n",
                      1: "train_single: summing the metrics: collective 'metrics' stalled\n"}
        items = grade(one, two)
        self.assertIn("\nrank 0: train_single: training step: collective 'grad/conv1.w' stalled\n"
                      "rank 1: train_single: summing the metrics", items["steps_divided"].hint)  # each rank's error
        self.assertEqual(failing_items(items), {"final_params", "lr_scaled", "steps_divided", "metrics_averaged",
                                                "checkpoint", "accuracy", "throughput"})
        for key in ("runtime", "init_params", "shards", "one_printer"):
            self.assertEqual(items[key].status, "PASS", key)  # their records are complete
        self.assertIn("different numbers of steps: rank 0 33, rank 1 32", items["steps_divided"].detail)
        self.assertIn("rank 0 was waiting in its step 33", items["steps_divided"].detail)
        self.assertIn("same number of steps", items["steps_divided"].hint)
        for key in ("final_params", "accuracy", "checkpoint"):
            self.assertIn("not graded", items[key].detail)
            self.assertIn("see 'steps per epoch divided'", items[key].hint)

    def test_a_run_stopped_at_its_limit(self):
        # Killed while no rank was stepping: the step counts are final.
        one, two, _ = good_runs()
        stopped(two, status="timeout")
        two.progress[0].update(steps_started=33, in_step=True)
        two.progress[1].update(steps_started=32)
        items = grade(one, two)
        self.assertIn("rank 0 33, rank 1 32", items["steps_divided"].detail)
        self.assertIn("stopped after 70 s", items["steps_divided"].detail)
        # Killed while it was still training: a step apart says nothing.
        two.progress[0]["time"] = two.progress[1]["time"] = two.ended_at - 0.2
        items = grade(one, two)
        self.assertIn("not graded", items["steps_divided"].detail)
        self.assertEqual(items["runtime"].status, "PASS")

    def test_a_checkpoint_saved_on_rank_0_only(self):
        one, two, _ = good_runs()
        stopped(two, output="train_single: saving a checkpoint: cohort_optimizer_save_checkpoint: every rank must "
                "call cohort_optimizer_save_checkpoint: ...", summary=True, ends=True)
        items = grade(one, two)
        self.assertEqual(failing_items(items), {"checkpoint"})
        self.assertIn("if (rank == 0)", items["checkpoint"].hint)
        self.assertIn("save_checkpoint", items["checkpoint"].detail)

    def test_throughput_is_the_compute_time_per_epoch(self):
        # Copies that ignore each other (the exercise as written): every rank takes all of
        # np=1's steps, and an epoch costs each as much as at np=1, however many images the
        # ranks read together.
        one, two, resumed = good_runs(steps=200, rate=1000.0)
        items = grade(one, two, resumed)
        self.assertEqual(items["throughput"].status, "FAIL")
        self.assertIn("compute per epoch 5.00 s at np=1, 5.00 s per rank at np=2 (1.00x)", items["throughput"].detail)
        self.assertIn("all of np=1's steps", items["throughput"].hint)
        # Half the steps per rank, each costing 1.3x: 1.54x.
        self.assertEqual(grade(*good_runs(cpu=0.065))["throughput"].status, "PASS")
        self.assertEqual(grade(*good_runs(cpu=0.065), min_speedup=1.6)["throughput"].status, "FAIL")
        # The slowest rank counts.
        self.assertEqual(grade(*good_runs(cpu=(0.05, 0.08)))["throughput"].status, "FAIL")
        # Wall time, which other work on the machine stretches, is reported, not graded.
        items = grade(*good_runs(interval=0.2))
        self.assertEqual(items["throughput"].status, "PASS")
        self.assertIn("wall time per epoch 5.00 s -> 10.00 s (0.50x)", items["throughput"].detail)
        self.assertEqual(grade(*good_runs(threads=2))["throughput"].status, "FAIL")
        self.assertEqual(grade(*good_runs(cpu=1.0), throughput=False)["throughput"].status, "SKIP")

    def test_accuracy_is_one_sided(self):
        self.assertEqual(grade(*good_runs(top1=0.95))["accuracy"].status, "PASS")  # better is fine
        self.assertEqual(grade(*good_runs(top1=0.786))["accuracy"].status, "PASS")  # 1.4 points lower
        self.assertEqual(grade(*good_runs(top1=0.784))["accuracy"].status, "FAIL")

    def test_a_failed_np1_run_fails_every_item_with_its_output(self):
        one, _, _ = good_runs()
        one.status, one.output = 1, "train_single: training step: cohort_model_train_step: boom\n"
        items = grade(one, None)
        self.assertTrue(all(i.status == "FAIL" for i in items.values()))
        self.assertIn("boom", items["runtime"].hint)

    def test_the_limits_of_the_runs(self):
        self.assertEqual(cohort_check.run_limit(25.0, 600), 80.0)  # 2 x T1 + 30 s
        self.assertEqual(cohort_check.run_limit(400.0, 600), 600)  # never more than --timeout
        self.assertEqual(cohort_check.resume_limit(25.0, 600), 55.0)


if __name__ == "__main__":
    group = sys.argv[1]
    args = sys.argv[2:]
    if group == "Accelerate":
        Accelerate.lang = args[0]
    elif group == "Mutation":
        Mutation.lang, Mutation.todo = args[0], int(args[1])
    elif group == "Mistake":
        Mistake.name = args[0]
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(globals()[group])
    sys.exit(0 if unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful() else 1)
