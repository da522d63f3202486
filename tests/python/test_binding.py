"""The Python binding (launcher/python/cohort, ctypes over libcohort), one ctest per
group: `python3 test_binding.py GROUP`. Multi-rank groups run under mpirun -np 2 (every
rank runs the tests). Needs NumPy (Debian: python3-numpy).

Environment: COHORT_INCLUDE_DIR, the headers the completeness test reads;
COHORT_TEST_DATA, a scratch directory."""
import atexit
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
except ImportError:
    print("SKIPPED: NumPy is not installed (Debian: python3-numpy)")
    sys.exit(77)

import cohort
from cohort import _capi, errors

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.environ.get("COHORT_INCLUDE_DIR", os.path.join(HERE, "..", "..", "capi", "include"))


def fashion_subset(train=2048, test=512):
    """A Fashion-MNIST subset as IDX files (made once per process, in a temp dir)."""
    global _DATA
    if _DATA is None:
        _DATA = tempfile.mkdtemp(prefix="cohort-binding-", dir=os.environ.get("COHORT_TEST_DATA"))
        atexit.register(shutil.rmtree, _DATA, True)
        cohort.labs.fashion_mnist_subset(_DATA, train, test)
    return _DATA


_DATA = None


# ---- the headers, read as text ----


def _header_text():
    texts = []
    for name in sorted(os.listdir(os.path.join(INCLUDE, "cohort"))):
        if name.endswith(".h"):
            with open(os.path.join(INCLUDE, "cohort", name)) as f:
                texts.append(f.read())
    text = "\n".join(texts)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def header_functions():
    """Every function the headers declare with COHORT_API."""
    text = _header_text()
    names = set()
    for m in re.finditer(r"^\s*COHORT_API\b([^;{]*?)\b(cohort_\w+)\s*\(", text, re.M):
        names.add(m.group(2))
    return names


def header_structs():
    """{typedef name: [field names]} of the public structs."""
    out = {}
    for m in re.finditer(r"typedef struct (\w+)\s*\{(.*?)\}\s*(\w+)\s*;", _header_text(), re.S):
        fields = []
        for decl in m.group(2).split(";"):
            decl = decl.strip()
            if decl:
                fields.append(re.findall(r"\w+", decl)[-1])
        out[m.group(3)] = fields
    return out


def header_statuses():
    body = re.search(r"typedef enum cohort_status_t \{(.*?)\}", _header_text(), re.S).group(1)
    return {name: int(value, 0) for name, value in re.findall(r"(COHORT_\w+)\s*=\s*(\w+)", body)
            if name != "COHORT_STATUS_MAX_ENUM"}


class Completeness(unittest.TestCase):
    """Every function of the headers is bound or listed as not bound with a reason, and
    every struct matches its header field for field."""

    def test_every_function_is_bound_or_excused(self):
        declared = header_functions()
        self.assertGreater(len(declared), 50, f"read too few functions from {INCLUDE}")
        missing = sorted(declared - set(_capi.FUNCTIONS) - set(_capi.NOT_BOUND))
        self.assertEqual(missing, [], "functions of the headers that the binding neither binds nor lists in "
                                      "NOT_BOUND (cohort/_capi.py): add them to FUNCTIONS")
        stale = sorted((set(_capi.FUNCTIONS) | set(_capi.NOT_BOUND)) - declared)
        self.assertEqual(stale, [], "the binding names functions the headers no longer declare")
        for name, reason in _capi.NOT_BOUND.items():
            self.assertTrue(reason.strip(), f"{name} is not bound without a reason")

    def test_the_library_exports_every_bound_function(self):
        lib = cohort._capi.lib()
        self.assertEqual(lib.missing, [], f"{lib.path} lacks these functions")

    def test_structs_match_the_headers(self):
        declared = header_structs()
        for c_name, struct in _capi.STRUCTS.items():
            if c_name.startswith("DL"):
                continue  # DLPack's own header, not cohort's
            self.assertIn(c_name, declared, f"{c_name} is not in the headers any more")
            ours = [name for name, _ in struct._fields_]
            self.assertEqual(ours, declared[c_name], f"{c_name}: the binding's fields differ from the header's")
        public = {n for n in declared if n.endswith("_t")}
        self.assertEqual(sorted(public - set(_capi.STRUCTS)), [], "public structs the binding does not define")

    def test_every_status_has_its_exception(self):
        statuses = header_statuses()
        for name, value in statuses.items():
            if value == 0:
                continue
            self.assertIn(value, errors.STATUSES, f"{name} has no exception class")
            self.assertEqual(errors.STATUSES[value][0], name)
            err = errors.error_from_status(value, "text")
            self.assertIsInstance(err, cohort.CohortError)
            self.assertEqual((err.status, err.status_name, err.message), (value, name, "text"))
            self.assertIn(name, str(err))
        self.assertIs(type(errors.error_from_status(999, "x")), cohort.CohortError)

    def test_the_python_guide_documents_every_public_name(self):
        with open(os.path.join(HERE, "..", "..", "docs", "guides", "python.md")) as f:
            guide = f.read()
        sections = dict(re.findall(r"^### `?(\w+)`?\n(.*?)(?=^##)", guide + "\n##", re.S | re.M))
        instance_attributes = {"Batch": ["images", "labels", "valid_mask", "valid", "epoch", "step"],
                               "Parameter": ["index", "name", "value", "grad"], "Optimizer": ["model"],
                               "Model": ["runtime"]}
        undocumented = []
        for cls in (cohort.Runtime, cohort.Config, cohort.Model, cohort.Pipeline, cohort.Batch, cohort.Optimizer,
                    cohort.Request, cohort.Metrics, cohort.RunLog, cohort.Parameter, cohort.TensorView,
                    cohort.ManagedTensor, cohort.Record):
            names = [n for n in dir(cls) if not n.startswith("_")] + instance_attributes.get(cls.__name__, [])
            text = sections.get(cls.__name__, "")
            undocumented += [f"{cls.__name__}.{n}" for n in names if not re.search(rf"\b{n}\b", text)]
        self.assertEqual(undocumented, [], "python.md: a '### Name' section per class names each of its members")
        records = {"Model.train_step": _capi.TrainStats, "Model.evaluate": _capi.EvalResult}
        for call, struct in records.items():
            for field, _ in struct._fields_[1:]:
                self.assertRegex(guide, rf"`{field}`", f"python.md does not describe {call}'s field {field}")
        for text in ("data_split=\"validation\"", "ArgumentTypeError", "LibraryNotFound"):
            self.assertIn(text, guide)


class WithRuntime(unittest.TestCase):
    """Tests sharing one runtime of this process."""

    @classmethod
    def setUpClass(cls):
        cls.rt = cohort.Runtime(log_level="error")

    @classmethod
    def tearDownClass(cls):
        cls.rt.close()


class Errors(WithRuntime):
    """The error classes a single process can provoke, raised by real calls."""

    def assertRaisesStatus(self, cls, fn, *args, text=None, **kwargs):
        with self.assertRaises(cls) as ctx:
            fn(*args, **kwargs)
        e = ctx.exception
        self.assertEqual(e.status, cls.status_value)
        self.assertTrue(e.message.startswith("cohort_"), e.message)  # cohort_last_error(): the function first
        self.assertEqual(e.message, cohort.last_error())
        if text:
            self.assertIn(text, e.message)
        return e

    def test_invalid_argument(self):
        e = self.assertRaisesStatus(cohort.InvalidArgumentError, cohort.Config, batch_sise=3, text="batch_size")
        self.assertIsInstance(e, ValueError)
        self.assertRaisesStatus(cohort.InvalidArgumentError, cohort.Model, self.rt, "alexnet_ow",
                                text="Invalid model type")

    def test_invalid_state(self):
        req = self.rt.collective_barrier(wait=False)
        req.wait()
        self.assertRaisesStatus(cohort.InvalidStateError, req.output, text="no result tensor")
        req.close()
        with self.assertRaises(cohort.InvalidStateError):
            req.wait()  # a closed handle

    def test_unsupported(self):
        with cohort.Model(self.rt, "trivial", image_size=8) as m:
            self.assertRaisesStatus(cohort.UnsupportedError, cohort.Optimizer, m, precision="f16", text="f16")

    def test_io(self):
        e = self.assertRaisesStatus(cohort.CohortIOError, cohort.Pipeline, None, data_dir="/nonexistent/cohort")
        self.assertIsInstance(e, OSError)

    def test_wrong_argument_types_name_the_call_the_parameter_and_the_type(self):
        model = cohort.Model(self.rt, "trivial", image_size=8, num_classes=4)
        opt = cohort.Optimizer(model)
        batch = cohort.Batch.from_arrays(np.zeros((2, 3, 8, 8), np.float32), np.zeros(2, np.int32))
        strided = np.zeros((4, 4), np.float32)[:, ::2]
        cases = [
            (lambda: model.train_step(opt, "str"), "Model.train_step", "batch", "cohort.Batch", "str"),
            (lambda: model.train_step(batch, opt), "Model.train_step", "optimizer", "cohort.Optimizer",
             "cohort.Batch"),
            (lambda: opt.step("str"), "Model.train_step", "batch", "cohort.Batch", "str"),
            (lambda: cohort.Optimizer("mnist_cnn"), "cohort.Optimizer", "model", "cohort.Model", "str"),
            (lambda: cohort.Model("rt", "trivial"), "cohort.Model", "runtime", "cohort.Runtime", "str"),
            (lambda: cohort.Pipeline(model), "cohort.Pipeline", "runtime", "cohort.Runtime", "cohort.Model"),
            (lambda: cohort.Pipeline(None, config="batch_size=3"), "cohort.Pipeline", "config", "cohort.Config",
             "str"),
            (lambda: model.evaluate(batch), "Model.evaluate", "pipeline", "cohort.Pipeline", "cohort.Batch"),
            (lambda: model.param("0"), "Model.param", "index", "int", "str"),
            (lambda: self.rt.allreduce("text", "types/text"), "Runtime.allreduce", "array", "array", "str"),
            (lambda: self.rt.broadcast(np.zeros(2, np.float32), "types/root", root="0"), "Runtime.broadcast",
             "root", "int", "str"),
            (lambda: cohort.RunLog(opt), "cohort.RunLog", "runtime", "cohort.Runtime", "cohort.Optimizer"),
            (lambda: cohort.Config("batch_size=3"), "cohort.Config", "options", "dict", "str"),
            (lambda: model.set_grad_ready(3), "Model.set_grad_ready", "fn", "callable", "int"),
            (lambda: cohort.Batch.from_arrays(np.zeros((2, 3, 8, 8), np.float32), "ab"), "Batch.from_arrays",
             "labels", "array", "str"),
        ]
        for call, where, param, expected, got in cases:
            with self.subTest(where=where, param=param):
                with self.assertRaises(cohort.CohortError) as ctx:
                    call()
                e = ctx.exception
                self.assertIsInstance(e, TypeError)
                self.assertIsInstance(e, cohort.InvalidArgumentError)
                self.assertEqual(e.status, errors.STATUSES[1][1].status_value)
                self.assertTrue(e.message.startswith(where + ": "), e.message)
                self.assertIn(f"{param} must be", e.message)
                self.assertIn(expected, e.message)
                self.assertIn(got, e.message.split(" got ", 1)[-1])
                self.assertNotRegex(e.message, r"\b(_c|handle|_h|NoneType)\b")
        # Right type, wrong shape of memory: a ValueError, still a CohortError, naming the parameter.
        for call, where in ((lambda: self.rt.allreduce(strided, "types/strided"), "Runtime.allreduce"),
                            (lambda: model.forward(np.zeros((2, 3, 8, 8), np.float32)[:, :, :, ::2]),
                             "Model.forward")):
            with self.assertRaises(cohort.InvalidArgumentError) as ctx:
                call()
            self.assertIsInstance(ctx.exception, ValueError)
            self.assertNotIsInstance(ctx.exception, TypeError)
            self.assertRegex(ctx.exception.message, rf"^{re.escape(where)}: \w+ must be C-contiguous")
        # An argument the binding passes to C unchecked still fails as a CohortError.
        with cohort.Metrics() as metrics:
            with self.assertRaises(cohort.ArgumentTypeError) as ctx:
                metrics.record("fast", images=8)
        self.assertEqual(ctx.exception.message, "Metrics.record: cohort_metrics_record's argument 2 must be a "
                                                "number, got str 'fast'")
        opt.close()
        model.close()

    def test_another_models_optimizer_is_refused_naming_both_models(self):
        # Two models that take the same batches: the step would train b without a word.
        a = cohort.Model(self.rt, "trivial", image_size=8, num_classes=4)
        b = cohort.Model(self.rt, "trivial", image_size=8, num_classes=4)
        opt_b = cohort.Optimizer(b, lr=0.5)
        before = b.param(0).value.numpy().copy()
        batch = cohort.Batch.from_arrays(np.random.rand(4, 3, 8, 8).astype(np.float32), np.arange(4, dtype=np.int32))
        with self.assertRaises(cohort.InvalidArgumentError) as ctx:
            a.train_step(opt_b, batch)
        message = ctx.exception.message
        self.assertTrue(message.startswith("Model.train_step: "), message)
        self.assertNotEqual(repr(a), repr(b))
        self.assertIn(repr(a), message)
        self.assertIn(repr(b), message)
        self.assertIn(repr(opt_b), message)
        self.assertEqual(opt_b.steps, 0)  # nothing trained
        np.testing.assert_array_equal(b.param(0).value.numpy(), before)
        for h in (opt_b, b, a):
            h.close()

    def test_an_unknown_option_points_at_the_python_lists_of_options(self):
        with self.assertRaises(cohort.InvalidArgumentError) as ctx:
            cohort.Config(zzzzzzzzzzzz=1)
        self.assertIn("unknown option 'zzzzzzzzzzzz'", ctx.exception.message)
        self.assertNotIn("--help", ctx.exception.message)
        self.assertIn("cohort.option_names()", ctx.exception.message)
        with self.assertRaises(cohort.InvalidArgumentError) as ctx:
            cohort.describe_option("zzzzzzzzzzzz")
        self.assertNotIn("--help", ctx.exception.message)

    def test_corrupt_data(self):
        with tempfile.TemporaryDirectory() as d:
            for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
                with open(os.path.join(d, name), "wb") as f:
                    f.write(b"\x00\x00\x08\x03\x00\x00\x00\x05")  # a header promising more than follows
            self.assertRaisesStatus(cohort.CorruptDataError, cohort.Pipeline, None, data_dir=d,
                                    data_source="idx")


class DeviceMemory(WithRuntime):
    def test_memory_stats_count_the_compute_devices_cache_and_nothing_on_the_cpu(self):
        with cohort.Model(self.rt, "trivial", image_size=8):
            m = self.rt.memory_stats()
        fields = ("in_use_bytes", "reserved_bytes", "peak_in_use_bytes", "peak_reserved_bytes", "requests",
                  "cache_hits", "device_allocations", "device_frees")
        if self.rt.device == "cpu":
            self.assertEqual(m.device_id, -1)
            self.assertEqual([getattr(m, f) for f in fields], [0] * len(fields))
        else:  # the model's parameters came from the cache
            self.assertEqual(self.rt.device, f"cuda:{m.device_id}")
            self.assertGreater(m.requests, 0)
            self.assertGreaterEqual(m.peak_in_use_bytes, m.in_use_bytes)
            self.assertGreaterEqual(m.reserved_bytes, m.in_use_bytes)
        self.rt.empty_cache()
        after = self.rt.memory_stats()
        self.assertLessEqual(after.reserved_bytes, m.reserved_bytes)
        self.assertEqual(after.peak_reserved_bytes, m.peak_reserved_bytes)


class DLPack(WithRuntime):
    """Batches, parameters and results reach NumPy without copies, and arrays go in."""

    def test_parameters_are_the_models_memory(self):
        with cohort.Model(self.rt, "mnist_cnn") as m:
            p = m.param(0)
            w = np.from_dlpack(p.value)
            self.assertEqual(w.ctypes.data, p.value.data_ptr)
            self.assertEqual(p.name, "conv1.weight")
            self.assertEqual(w.shape, (32, 1, 3, 3))
            self.assertEqual(w.dtype, np.float32)
            self.assertFalse(w.flags.writeable)  # NumPy 1.x: DLPack imports are read-only
            # .numpy() is writable, and writes go to the model: zero weights, zero logits.
            for q in m.params():
                v = q.value.numpy()
                self.assertEqual(v.ctypes.data, q.value.data_ptr)
                v[...] = 0
            logits = m.forward(np.random.rand(4, 1, 28, 28).astype(np.float32))
            np.testing.assert_allclose(logits, 0.0)
            again = np.from_dlpack(m.param(0).value)
            self.assertEqual(again.ctypes.data, w.ctypes.data)

    def test_gradients_are_written_in_place(self):
        with cohort.Model(self.rt, "mnist_cnn") as m:
            g = np.from_dlpack(m.param(0).grad)
            before = g.copy()
            m.forward_backward(np.random.rand(8, 1, 28, 28).astype(np.float32),
                               np.arange(8, dtype=np.int32) % 10)
            self.assertFalse(np.array_equal(before, g))

    def test_an_array_keeps_its_model_alive(self):
        m = cohort.Model(self.rt, "mnist_cnn")
        w = m.param(1).value.numpy()
        gc.collect()
        m.close()
        self.assertFalse(m.closed)  # destroyed when the last array goes
        w[...] = 1.0
        self.assertTrue(np.all(w == 1.0))
        del w
        gc.collect()
        self.assertTrue(m.closed)

    def test_batches_are_the_pipelines_memory(self):
        with cohort.Pipeline(None, data_dir=fashion_subset(), augment="none", batch_size=16) as p:
            b = p.next()
            x = np.from_dlpack(b.images)
            y = np.from_dlpack(b.labels)
            self.assertEqual(x.ctypes.data, b.images.data_ptr)
            self.assertEqual(y.ctypes.data, b.labels.data_ptr)
            self.assertEqual(x.shape, (16, 1, 28, 28))
            self.assertEqual(y.dtype, np.int32)
            self.assertEqual(b.valid, 16)

    def test_arrays_go_in_without_copies(self):
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        out = self.rt.allreduce(x, "dlpack/inplace")  # one rank: the sum is the array itself
        self.assertIs(out, x)
        np.testing.assert_array_equal(x, np.arange(12).reshape(3, 4))
        images = np.random.randint(0, 255, size=(20, 8, 8), dtype=np.uint8)
        labels = np.arange(20, dtype=np.int32) % 4
        with cohort.Pipeline.from_memory(None, images, labels, batch_size=5, shuffle=False, augment="none") as p:
            b = p.next()
            np.testing.assert_array_equal(np.from_dlpack(b.labels), labels[:5])
        with self.assertRaises(ValueError):
            self.rt.allreduce(np.zeros((4, 4), np.float32)[:, ::2], "dlpack/strided")

    def test_gradient_ready_callback(self):
        with cohort.Model(self.rt, "mnist_cnn") as m:
            ready = []
            m.set_grad_ready(ready.append)
            m.forward_backward(np.random.rand(2, 1, 28, 28).astype(np.float32), np.zeros(2, np.int32))
            self.assertEqual(sorted(ready), list(range(m.num_tensors)))
            self.assertGreaterEqual(ready[0], m.num_tensors - 2)  # the last layer's gradients first
            m.set_grad_ready(None)
            m.forward_backward(np.random.rand(2, 1, 28, 28).astype(np.float32), np.zeros(2, np.int32))
            self.assertEqual(len(ready), m.num_tensors)

    def test_results_are_handed_over(self):
        x = np.arange(6, dtype=np.int64).reshape(3, 2)
        gathered = self.rt.allgather(x, "dlpack/gather")
        np.testing.assert_array_equal(gathered, x)
        self.assertNotEqual(gathered.ctypes.data, x.ctypes.data)


class Lifetime(unittest.TestCase):
    def test_runtime_close_closes_its_children(self):
        rt = cohort.Runtime(log_level="error")
        m = cohort.Model(rt, "trivial", image_size=8)
        opt = cohort.Optimizer(m)
        p = cohort.Pipeline(rt, batch_size=4, image_size=8)
        rt.close()
        for h in (rt, m, opt, p):
            self.assertTrue(h.closed, h)
        rt.close()  # twice is fine

    def test_a_closed_object_says_which_close_closed_it(self):
        rt = cohort.Runtime(log_level="error")
        model = cohort.Model(rt, "trivial", image_size=8)
        opt = cohort.Optimizer(model)
        batch = cohort.Batch.from_arrays(np.zeros((2, 3, 8, 8), np.float32), np.zeros(2, np.int32))
        model.close()
        self.assertTrue(opt.closed)  # a model's close() closes its optimizer
        for call in (lambda: opt.step(batch), lambda: opt.state()):
            with self.assertRaises(cohort.InvalidStateError) as ctx:
                call()
            self.assertIn(f"{opt!r} is closed: Model.close() of {model!r} closed it", ctx.exception.message)
        with self.assertRaises(cohort.InvalidStateError) as ctx:
            model.train_step(opt, batch)
        self.assertIn(f"{model!r} is closed: Model.close() was called on it", ctx.exception.message)
        with self.assertRaises(cohort.InvalidStateError) as ctx:
            opt.set_run_length(10)
        self.assertTrue(ctx.exception.message.startswith("Optimizer.set_run_length: "), ctx.exception.message)
        p = cohort.Pipeline(rt, batch_size=4, image_size=8)
        rt.close()
        with self.assertRaises(cohort.InvalidStateError) as ctx:
            p.next()
        self.assertIn(f"Runtime.close() of {rt!r}", ctx.exception.message)
        self.assertTrue(ctx.exception.message.startswith("Pipeline.next: "), ctx.exception.message)
        with self.assertRaises(cohort.InvalidStateError) as ctx:
            rt.barrier()
        self.assertIn("Runtime.close() was called on it", ctx.exception.message)

    def test_objects_left_open_are_closed_at_exit(self):
        code = ("import cohort\nrt = cohort.Runtime(log_level='error')\nm = cohort.Model(rt, 'trivial', "
                "image_size=8)\no = cohort.Optimizer(m)\np = cohort.Pipeline(rt, batch_size=2, image_size=8)\n"
                "b = p.next()\nimport numpy\nw = numpy.from_dlpack(m.param(0).value)\nprint('done')\n")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout.strip(), "done")

    def test_library_not_found_says_where_it_looked(self):
        code = "import cohort\ntry:\n    cohort.version()\nexcept cohort.LibraryNotFound as e:\n    print(e)\n"
        env = dict(os.environ, COHORT_LIBRARY="/nonexistent/libcohort.so.0")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout
        self.assertIn("COHORT_LIBRARY: /nonexistent/libcohort.so.0 (no such file)", out)
        # A copy of the package without its build tree's _build_config.py, and no
        # COHORT_LIBRARY: only the system linker path is left.
        with tempfile.TemporaryDirectory() as d:
            package = os.path.dirname(cohort.__file__)
            shutil.copytree(package, os.path.join(d, "cohort"),
                            ignore=shutil.ignore_patterns("_build_config.py", "__pycache__"))
            env = {k: v for k, v in os.environ.items() if k not in ("COHORT_LIBRARY", "LD_LIBRARY_PATH")}
            env["PYTHONPATH"] = d
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                 cwd=d).stdout
        self.assertIn("the system linker path: libcohort.so.0", out)
        self.assertIn("Set COHORT_LIBRARY=", out)

    def test_a_library_that_is_not_libcohort_is_not_found(self):
        with open("/proc/self/maps") as f:  # the C library this interpreter runs on
            libc = next(line.split()[-1] for line in f if re.search(r"/libc[.-][^/]*so", line))
        code = ("import cohort\ntry:\n    cohort.version()\nexcept cohort.LibraryNotFound as e:\n"
                "    print('LibraryNotFound:', e)\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
        env = dict(os.environ, COHORT_LIBRARY=libc)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout
        self.assertTrue(out.startswith("LibraryNotFound:"), out)
        self.assertIn(f"COHORT_LIBRARY: {libc} (not libcohort: it has no cohort_version)", out)
        self.assertNotIn("older than the binding", out)
        # A libcohort older than the binding: what it lacks fails as unsupported, not with COHORT_OK.
        with self.assertRaises(cohort.UnsupportedError) as ctx:
            _capi._Missing("cohort_future_call", "/lib/libcohort.so.0")()
        self.assertIn("cohort_future_call is not in /lib/libcohort.so.0", ctx.exception.message)
        self.assertEqual(ctx.exception.status_name, "COHORT_ERR_UNSUPPORTED")

    def test_config_round_trip(self):
        cfg = cohort.Config(batch_size=32, lr=0.5, shuffle=False, augment="none")
        self.assertEqual((cfg["batch_size"], cfg["lr"], cfg["shuffle"], cfg["augment"]), (32, 0.5, False, "none"))
        self.assertEqual(cfg.source("batch_size"), "explicit")
        self.assertEqual(cfg.source("seed"), "default")
        rest = cfg.parse_args(["prog", "--seed=7", "extra"])
        self.assertEqual((rest, cfg["seed"]), (["prog", "extra"], 7))
        self.assertIn("batch_size", cohort.option_names())
        self.assertTrue(cohort.build_info().dnnl)
        if cohort.build_info().gpu_count == 0:
            with self.assertRaises(cohort.InvalidArgumentError):
                cohort.gpu_info(0)
        self.assertEqual(cohort.describe_option("batch_size").type, "int")
        self.assertEqual(cohort.version_string().count("."), 2)


def train_mnist(rt, steps=60, batch=32):
    """Trains mnist_cnn on this rank's share of the subset; returns the losses."""
    model = cohort.Model(rt, "mnist_cnn")
    data = cohort.Pipeline(rt, data_dir=fashion_subset(), augment="none", batch_size=batch)
    opt = cohort.Optimizer(model, lr=0.05, optimizer="momentum")
    opt.broadcast(0)
    losses = [model.train_step(opt, data.next()).loss for _ in range(steps)]
    return model, opt, losses


class Train(unittest.TestCase):
    """mnist_cnn trained from Python at the size it is started with (np=1 or np=2)."""

    def test_loss_falls(self):
        with cohort.Runtime(log_level="error") as rt:
            model, opt, losses = train_mnist(rt)
            first, last = np.mean(losses[:10]), np.mean(losses[-10:])
            self.assertLess(last, 0.75 * first, losses)
            opt.check_consistency()  # parameters agree on every rank
            with tempfile.TemporaryDirectory() as d:
                d = rt.broadcast(np.frombuffer(d.encode().ljust(256, b"\0"), np.uint8).copy(), "train/dir", 0)
                directory = d.tobytes().rstrip(b"\0").decode()
                opt.save_checkpoint(directory, epoch=1, pipeline_epoch=0, pipeline_step=60)
                saved = model.param(0).value.numpy().copy()
                model.param(0).value.numpy()[...] = 0
                info = opt.load_checkpoint(directory)
                self.assertEqual((info.epoch, info.step, info.pipeline_step), (1, len(losses), 60))
                np.testing.assert_array_equal(model.param(0).value.numpy(), saved)
                self.assertIsNone(opt.load_checkpoint(os.path.join(directory, "empty")))
                rt.barrier()
            self.assertEqual(opt.steps, len(losses))
            w = np.from_dlpack(model.param(0).value)
            everyone = rt.allgather(w.reshape(1, -1).copy(), "train/params")
            for r in range(rt.size):
                np.testing.assert_array_equal(everyone[r], w.reshape(-1))

    def test_role_and_run_log(self):
        with cohort.Runtime(log_level="error") as rt:
            model = cohort.Model(rt, "trivial", image_size=8, num_classes=4)
            opt = cohort.Optimizer(model)
            info = opt.info()
            self.assertEqual((info.variable_update, info.worker, info.workers, info.servers, info.worker_index),
                             ("replicated", 1, rt.size, 0, rt.rank))
            with tempfile.TemporaryDirectory() as d:
                csv = os.path.join(d, "steps.csv")
                with cohort.RunLog(rt, log_csv=csv) as log:
                    log.step(1, loss=2.5, lr=0.1, step_s=0.01, images=8)
                    log.step(2, loss=2.0, lr=0.1, step_s=0.01, images=8, epoch=1.0)
                    log.evaluation(2, {"samples": 10, "top1": 0.5, "top5": 1.0, "loss": 1.0})
                rt.barrier()
                if rt.rank == 0:
                    with open(csv) as f:
                        rows = [line.rstrip("\n").split(",") for line in f]
                    self.assertEqual(rows[0][:4], ["step", "epoch", "loss", "lr"])
                    self.assertEqual([(r[0], float(r[2])) for r in rows[1:]], [("1", 2.5), ("2", 2.0)])
                rt.barrier()


def read_records(directory):
    records = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".jsonl"):
            continue  # rank-R.progress.json: one record, rewritten while the rank runs
        with open(os.path.join(directory, name)) as f:
            records[name] = [json.loads(line) for line in f]
    return records


class Instrument(unittest.TestCase):
    """instrument_dir: what a run records for the course checker."""

    def test_a_run_records_parameters_samples_and_rates(self):
        with tempfile.TemporaryDirectory() as d:
            with cohort.Runtime(log_level="error", instrument_dir=d) as rt:
                model, opt, losses = train_mnist(rt, steps=70)  # one epoch of 2048 is 64 steps of 32
            records = read_records(d)
            with open(os.path.join(d, "rank-0.progress.json")) as f:
                progress = json.load(f)
        self.assertEqual(list(records), ["rank-0.jsonl"])
        self.assertEqual((progress["steps_started"], progress["steps"], progress["in_step"]), (70, 70, False))
        events = {r["event"]: r for r in records["rank-0.jsonl"]}
        self.assertEqual(set(events), {"first_step", "end", "pipeline"})
        start, end, pipe = events["first_step"], events["end"], events["pipeline"]
        self.assertEqual((start["runtime_size"], start["lr"], start["base_lr"]), (1, 0.05, 0.05))
        self.assertNotEqual(start["params_crc32c"], end["params_crc32c"])
        self.assertEqual((end["steps"], end["images"], end["measured_images"]), (70, 70 * 32, 65 * 32))
        self.assertAlmostEqual(end["last_loss"], losses[-1], places=5)
        self.assertEqual((pipe["split"], pipe["dataset_size"], pipe["first_epoch_samples"]), ("train", 2048, 2048))
        self.assertEqual(pipe["first_epoch_bitmap"], "ff" * 256)  # every sample once in epoch 0
        self.assertEqual(pipe["first_epoch_repeated"], 0)


class MultiRank(unittest.TestCase):
    """Collectives and their errors at np=2."""

    @classmethod
    def setUpClass(cls):
        cls.rt = cohort.Runtime(log_level="error", stall_shutdown_s=3)
        assert cls.rt.size == 2, "run this group under mpirun -np 2"

    @classmethod
    def tearDownClass(cls):
        cls.rt.close()

    def test_collectives(self):
        rt = self.rt
        before = rt.engine_stats()
        x = np.full(5, rt.rank + 1, dtype=np.float32)
        np.testing.assert_array_equal(rt.allreduce(x, "mr/sum"), np.full(5, 3.0))
        y = np.full(3, float(rt.rank), dtype=np.float64)
        np.testing.assert_array_equal(rt.allreduce(y, "mr/avg", op="average"), np.full(3, 0.5))
        z = np.full(4, rt.rank * 10, dtype=np.int32)
        np.testing.assert_array_equal(rt.broadcast(z, "mr/bcast", root=1), np.full(4, 10))
        g = rt.allgather(np.full((rt.rank + 1, 2), rt.rank, dtype=np.int64), "mr/gather")
        np.testing.assert_array_equal(g, [[0, 0], [1, 1], [1, 1]])
        out, splits = rt.alltoall(np.arange(4, dtype=np.float32) + 10 * rt.rank, "mr/a2a")
        np.testing.assert_array_equal(out, [2 * rt.rank, 2 * rt.rank + 1, 10 + 2 * rt.rank, 11 + 2 * rt.rank])
        self.assertEqual(splits, [2, 2])
        rs = rt.reducescatter(np.ones((4, 2), dtype=np.float32), "mr/rs")
        np.testing.assert_array_equal(rs, np.full((2, 2), 2.0))
        req = rt.allreduce(np.ones(3, np.float32), "mr/async", wait=False)
        np.testing.assert_array_equal(req.wait(), np.full(3, 2.0))
        self.assertTrue(req.test())
        req.close()
        a, b = rt.grouped_allreduce([np.ones(2, np.float32), np.ones(3, np.float64)], ["mr/g0", "mr/g1"])
        np.testing.assert_array_equal(a, [2, 2])
        np.testing.assert_array_equal(b, [2, 2, 2])
        rt.collective_barrier()
        after = rt.engine_stats()
        # The operations above, each of the group's counted, the barrier not.
        self.assertEqual(after.completed - before.completed, 9)
        self.assertGreater(after.cycles, before.cycles)
        self.assertGreaterEqual(after.fused_batches - before.fused_batches, 0)

    def test_world_process_is_this_process_alone(self):
        with cohort.Runtime(log_level="error", world="process") as alone:
            self.assertEqual((alone.rank, alone.size, alone.local_size), (0, 1, 1))
            x = np.ones(2, np.float32)
            np.testing.assert_array_equal(alone.allreduce(x, "mr/alone"), [1, 1])
        self.assertEqual(self.rt.size, 2)

    def test_instrumented_ranks_start_apart_until_a_broadcast(self):
        with tempfile.TemporaryDirectory() as d:
            d = self.rt.broadcast(np.frombuffer(d.encode().ljust(256, b"\0"), np.uint8).copy(), "mr/dir", 0)
            directory = d.tobytes().rstrip(b"\0").decode()
            with cohort.Runtime(log_level="error", instrument_dir=directory) as rt:
                model = cohort.Model(rt, "mnist_cnn")
                w = model.param(0).value.numpy()
                both = rt.allgather(w.reshape(1, -1).copy(), "mr/w0")
                self.assertFalse(np.array_equal(both[0], both[1]))  # seed + 7919 x rank
                opt = cohort.Optimizer(model)
                opt.broadcast(0)
                both = rt.allgather(w.reshape(1, -1).copy(), "mr/w1")
                np.testing.assert_array_equal(both[0], both[1])
            self.rt.barrier()

    def test_mismatch(self):
        x = np.zeros(3 + self.rt.rank, dtype=np.float32)
        with self.assertRaises(cohort.MismatchError) as ctx:
            self.rt.allreduce(x, "mr/mismatch")
        self.assertIn("mr/mismatch", ctx.exception.message)

    def test_stalled(self):
        if self.rt.rank == 0:
            with self.assertRaises(cohort.StalledError) as ctx:
                self.rt.allreduce(np.zeros(2, np.float32), "mr/only-rank-0")
            self.assertIsInstance(ctx.exception, TimeoutError)
        self.rt.barrier()


if __name__ == "__main__":
    group = sys.argv.pop(1) if len(sys.argv) > 1 else None
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(globals()[group]) if group else \
        unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    ok = unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful()
    sys.exit(0 if ok else 1)
