"""The Python binding of cohort's C API (ctypes over libcohort; no compiled extension).

    import numpy as np, cohort
    with cohort.Runtime() as rt:
        model = cohort.Model(rt, "mnist_cnn")
        data = cohort.Pipeline(rt, data_dir="/usr/share/datasets/fashion-mnist", augment="none")
        opt = cohort.Optimizer(model, lr=0.05)
        opt.broadcast(0)
        for batch in data:                      # one epoch
            stats = model.train_step(opt, batch)
        w = np.from_dlpack(model.param(0).value)  # the parameter itself, no copy

Every class wraps one C handle. ``close()`` (or leaving a ``with`` block) destroys it
at once, after closing what was made from it: a runtime's models, pipelines,
optimizers, run logs and requests; a model's optimizer. Objects not closed are
destroyed when collected, and whatever is still open at interpreter exit is closed
there, children before their runtime. A handle whose memory is still viewed by an
array made through DLPack (a parameter) is destroyed when the last such array goes. A
call on a closed object says which ``close()`` closed it.

Failures raise a ``CohortError`` subclass: the library's, carrying the
``cohort_status_t`` and ``cohort_last_error()``, or the binding's own checks of the
arguments (``ArgumentTypeError``, ``InvalidArgumentError``), naming the call and the
parameter.
"""
import atexit
import ctypes
import operator
import os
import threading
import weakref
from collections.abc import Mapping
from ctypes import byref, c_char_p, c_double, c_float, c_int, c_int64, c_size_t, c_void_p

from . import _capi
from ._capi import caller, lib, text
from ._dlpack import ManagedTensor, TensorView, borrow, describe, expect_array
from .errors import ArgumentTypeError, InvalidArgumentError, InvalidStateError

# ---- arguments: what the binding checks before it calls C ----


def _type_error(param, expected, value, where):
    return ArgumentTypeError(f"{where}: {param} must be {expected}, got {describe(value)}", where)


def _expect(value, cls, param, expected=None, optional=False, where=None):
    """``value`` when it is a ``cls`` (or None, when optional); otherwise an
    ArgumentTypeError naming the calling function, the parameter and the type."""
    if isinstance(value, cls) or (optional and value is None):
        return value
    expected = expected or f"a cohort.{cls.__name__}"
    raise _type_error(param, expected + (" or None" if optional else ""), value, where or caller(1))


def _int(value, param, where=None):
    """An integer argument (a Python or NumPy integer; not a float, not text)."""
    try:
        return operator.index(value)
    except TypeError:
        raise _type_error(param, "an int", value, where or caller(1)) from None


def _number(value, param, where=None):
    if isinstance(value, (str, bytes)):
        raise _type_error(param, "a number", value, where or caller(1))
    try:
        return float(value)
    except (TypeError, ValueError):
        raise _type_error(param, "a number", value, where or caller(1)) from None


def _path(value, param, where=None):
    try:
        return os.fspath(value)
    except TypeError:
        raise _type_error(param, "a path (str or os.PathLike)", value, where or caller(1)) from None

# ---- records: C structs as Python objects ----


class Record:
    """The fields of a C struct (``struct_size`` left out) as attributes and as a dict."""

    def __init__(self, struct=None, **fields):
        if struct is not None:
            for name, _ in struct._fields_:
                if name == "struct_size":
                    continue
                value = getattr(struct, name)
                if isinstance(value, bytes):
                    value = text(value)
                elif isinstance(value, ctypes.Structure):
                    value = Record(value)
                fields[name] = value
        self.__dict__.update(fields)

    def as_dict(self):
        return {k: (v.as_dict() if isinstance(v, Record) else v) for k, v in self.__dict__.items()}

    def __getitem__(self, key):
        return self.__dict__[key]

    def __eq__(self, other):
        return isinstance(other, Record) and self.as_dict() == other.as_dict()

    def __repr__(self):
        return "Record(" + ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()) + ")"


def _filled(struct_type, fn, *args):
    s = struct_type()
    s.struct_size = ctypes.sizeof(struct_type)
    fn(*args, byref(s))
    return s


# ---- handles: creation order, closing, exit ----

_open_handles = []  # weak references, in creation order
_open_lock = threading.Lock()
_serials = {}  # class name → objects made so far, to tell objects apart in messages


class _Handle:
    """One C handle: closed once, by close(), by the garbage collector, or at exit."""

    _destroy_name = None

    def __init__(self):
        self._h = None
        self._parents = []  # Python objects this one needs (its runtime, its model)
        self._children = []  # weak references (a runtime's models, pipelines, ...)
        self._views = 0  # TensorViews of this handle's memory still alive
        self._close_pending = False
        self._closed_by = None  # (class name, repr) of the object whose close() closed this one
        with _open_lock:
            kind = type(self).__name__
            self._serial = _serials[kind] = _serials.get(kind, 0) + 1
            _open_handles.append(weakref.ref(self))

    def _label(self):
        """What tells this object apart in a message, after its class and number."""
        return ""

    def __repr__(self):
        return f"<cohort.{type(self).__name__}{self._label()} #{self._serial}>"

    def _adopt(self, handle, *parents):
        self._h = handle
        self._parents = [p for p in parents if p is not None]
        for p in self._parents:
            p._children.append(weakref.ref(self))

    @property
    def handle(self):
        """The C handle (an int), for calling the C API directly."""
        if self._h is None:
            raise self._closed_error(caller(1))
        return self._h

    @property
    def closed(self):
        return self._h is None

    def _require_open(self):
        """Raises InvalidStateError, naming the calling function, when this object is closed."""
        if self._h is None:
            raise self._closed_error(caller(1))

    def close(self):
        """Closes what was made from this object, then destroys its C object (a second
        close does nothing)."""
        self._close(self)

    def _close(self, by):
        for ref in reversed(self._children):
            child = ref()
            if child is not None:
                child._close(by)
        self._children.clear()
        if self._h is None:
            return
        if self._closed_by is None:
            self._closed_by = (type(by).__name__, repr(by))
        if self._views > 0:
            self._close_pending = True  # destroyed when the last view of its memory goes
            return
        self._destroy()

    def _destroy(self):
        h, self._h = self._h, None
        self._close_pending = False
        if h is not None and self._destroy_name:
            getattr(lib(), self._destroy_name)(h)
        self._parents = []

    def _view_added(self):
        self._views += 1

    def _view_released(self):
        self._views -= 1
        if self._views == 0 and self._close_pending and not _exiting:
            self._destroy()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._h is not None and not _exiting:
                self.close()
        except Exception:
            pass

    def _closed_error(self, where):
        kind, by = self._closed_by or (type(self).__name__, repr(self))
        if by == repr(self):
            how = f"{kind}.close() was called on it"
        else:
            how = f"{kind}.close() of {by} closed it (closing a {kind} closes what was made from it first)"
        message = f"{self!r} is closed: {how}"
        return InvalidStateError(2, f"{where}: {message}" if where else message, where)


_exiting = False


@atexit.register
def _close_all():
    """Closes what is still open, newest first (children before their runtime), before
    cohort finalizes MPI at process exit."""
    global _exiting
    with _open_lock:
        handles = [ref() for ref in reversed(_open_handles)]
    for h in handles:
        if h is not None and h._h is not None:
            try:
                h._views = 0
                h.close()
            except Exception:
                pass
    _exiting = True


def _prune():
    with _open_lock:
        _open_handles[:] = [r for r in _open_handles if r() is not None]


# ---- options ----

_SOURCES = {0: "default", 1: "environment", 2: "explicit"}
_TYPES = {0: "int", 1: "float", 2: "bool", 3: "string", 4: "choice"}


def describe_option(key):
    """Type, default, bounds, choices, group and help of a registry key (a Record)."""
    info = _capi.OptionInfo()
    info.struct_size = ctypes.sizeof(info)
    lib().cohort_option_describe(_capi.arg(key), byref(info))
    record = Record(info)
    record.type = _TYPES.get(record.type, str(record.type))
    return record


def option_names():
    """Every key of the option registry, in registry order."""
    L = lib()
    return [text(L.cohort_option_name(i)) for i in range(L.cohort_option_count())]


def options_help(group=None):
    return text(lib().cohort_option_help(_capi.arg(group)))


def options_markdown():
    return text(lib().cohort_option_markdown())


class Config(_Handle):
    """A set of option values: ``Config(batch_size=64, data_dir="...")`` or
    ``Config({"batch-size": 64})``. Keys are the registry's snake_case names; values
    not set explicitly come from ``COHORT_<KEY>`` or the default."""

    _destroy_name = "cohort_config_destroy"

    def __init__(self, options=None, **more):
        super().__init__()
        _expect(options, Mapping, "options", "a dict of option values", optional=True)
        h = c_void_p()
        lib().cohort_config_create(byref(h))
        self._adopt(h.value)
        self.update(options or {}, **more)

    @classmethod
    def _wrap(cls, handle):
        self = cls.__new__(cls)
        _Handle.__init__(self)
        self._adopt(handle)
        return self

    def update(self, options=None, **more):
        _expect(options, Mapping, "options", "a dict of option values", optional=True)
        for key, value in dict(options or {}, **more).items():
            self.set(key, value)
        return self

    def set(self, key, value):
        """Sets an option; bool, int and float use the typed setters, anything else is text."""
        L, k = lib(), _capi.arg(key)
        if isinstance(value, bool):
            L.cohort_config_set_bool(self.handle, k, int(value))
        elif isinstance(value, int):
            L.cohort_config_set_int(self.handle, k, value)
        elif isinstance(value, float):
            L.cohort_config_set_float(self.handle, k, value)
        else:
            L.cohort_config_set(self.handle, k, _capi.arg(value))
        return self

    def get(self, key):
        """The value in the option's type (int, float, bool or str)."""
        kind = describe_option(key).type
        L, k = lib(), _capi.arg(key)
        if kind == "int":
            v = c_int64()
            L.cohort_config_get_int(self.handle, k, byref(v))
            return v.value
        if kind == "float":
            v = c_double()
            L.cohort_config_get_float(self.handle, k, byref(v))
            return v.value
        if kind == "bool":
            v = c_int()
            L.cohort_config_get_bool(self.handle, k, byref(v))
            return bool(v.value)
        return self.get_text(key)

    def get_text(self, key):
        return _capi.get_text(lib().cohort_config_get, self.handle, _capi.arg(key))

    __getitem__ = get
    __setitem__ = set

    def unset(self, key):
        lib().cohort_config_unset(self.handle, _capi.arg(key))

    def source(self, key):
        """Where the value comes from: "default", "environment" or "explicit"."""
        v = c_int()
        lib().cohort_config_source(self.handle, _capi.arg(key), byref(v))
        return _SOURCES.get(v.value, str(v.value))

    def is_explicit(self, key):
        """True when set here or through COHORT_<KEY> (not the default)."""
        return self.source(key) != "default"

    def clone(self):
        h = c_void_p()
        lib().cohort_config_clone(self.handle, byref(h))
        return Config._wrap(h.value)

    def parse_args(self, argv, strict=False):
        """Consumes the registry's ``--key=value`` flags of ``argv`` (argv[0] first) and
        returns what it did not consume, argv[0] included."""
        if isinstance(argv, (str, bytes)) or not hasattr(argv, "__iter__"):
            raise _type_error("argv", "a list of str (argv[0] first)", argv, "Config.parse_args")
        argv = [str(a) for a in argv] or ["python"]
        encoded = [a.encode("utf-8") for a in argv]
        array = (c_char_p * len(encoded))(*encoded)
        out = (c_char_p * len(encoded))()
        n = c_int()
        lib().cohort_config_parse_args(self.handle, len(encoded), array, 1 if strict else 0, byref(n), out)
        return [text(out[i]) for i in range(n.value)]

    def as_dict(self):
        return {name: self.get(name) for name in option_names()}


def _config_for(config, options, base=None):
    """A Config for a constructor: ``config`` (a Config or a dict) or ``base`` cloned,
    with ``options`` applied; None when there is nothing to pass (C: NULL)."""
    _expect(config, (Config, Mapping), "config", "a cohort.Config or a dict", optional=True, where=caller(1))
    if isinstance(config, Config):
        return config.clone().update(options) if options else config
    if isinstance(config, dict):
        options = dict(config, **options)
    if not options:
        return base
    cfg = base.clone() if base is not None else Config()
    return cfg.update(options)


def _handle_or_null(obj):
    return obj.handle if obj is not None else None


# ---- the runtime and its collectives ----

_OPS = {"sum": 0, "average": 1, "avg": 1, "mean": 1, "min": 2, "max": 3, "product": 4, "prod": 4}


def _op(op, where):
    if isinstance(op, int):
        return op
    try:
        return _OPS[str(op).lower()]
    except KeyError:
        raise InvalidArgumentError(1, f"{where}: op: unknown reduction '{op}' (use sum, average, min, max or "
                                      "product)", where) from None


class Runtime(_Handle):
    """The process-level object (cohort_runtime_t): ranks, devices, the collective
    engine. Collective: every rank creates it, in the same order as other collectives."""

    _destroy_name = "cohort_runtime_destroy"

    def __init__(self, config=None, **options):
        super().__init__()
        cfg = _config_for(config, options)
        h = c_void_p()
        lib().cohort_runtime_create(_handle_or_null(cfg), byref(h))
        self._adopt(h.value)
        self._info = Record(_filled(_capi.RuntimeInfo, lib().cohort_runtime_info, self.handle))
        self._names = 0

    def info(self):
        """rank, size, local_rank, local_size, cross_rank, cross_size, thread_budget,
        device_type, device_id, cuda_device_count, mpi_thread_level."""
        return Record(_filled(_capi.RuntimeInfo, lib().cohort_runtime_info, self.handle))

    def cpu_times(self):
        """CPU seconds used so far: process_s (every thread of this process),
        calling_thread_s (the calling thread) and engine_s (the collective engine's thread)."""
        return Record(_filled(_capi.CpuTimes, lib().cohort_runtime_cpu_times, self.handle))

    def engine_stats(self):
        """The collective engine's counters so far: cycles (negotiation barriers),
        full_exchanges, cache_hits, fused_batches, completed (operations) and held."""
        return Record(_filled(_capi.EngineStats, lib().cohort_runtime_engine_stats, self.handle))

    def memory_stats(self):
        """The memory cache of the device models compute on: device_id (-1 on the CPU, whose
        memory is not counted: every figure 0), in_use_bytes, reserved_bytes,
        peak_in_use_bytes, peak_reserved_bytes, requests, cache_hits, device_allocations
        and device_frees (cohort_runtime_memory_stats)."""
        return Record(_filled(_capi.MemoryStats, lib().cohort_runtime_memory_stats, self.handle))

    def empty_cache(self):
        """Gives the device memory the caches hold and nothing uses back to the device
        (cohort_runtime_empty_cache); a no-op on the CPU."""
        lib().cohort_runtime_empty_cache(self.handle)

    rank = property(lambda self: self._info.rank)
    size = property(lambda self: self._info.size)
    local_rank = property(lambda self: self._info.local_rank)
    local_size = property(lambda self: self._info.local_size)

    @property
    def device(self):
        """"cpu" or "cuda:N"."""
        return _capi.get_text(lib().cohort_runtime_device, self.handle)

    def config(self):
        """The effective configuration (a new Config)."""
        h = c_void_p()
        lib().cohort_runtime_config(self.handle, byref(h))
        return Config._wrap(h.value)

    def barrier(self):
        """MPI barrier of the runtime's ranks. Collective."""
        lib().cohort_runtime_barrier(self.handle)

    def mark_step(self):
        lib().cohort_runtime_mark_step(self.handle)

    # Collectives: every rank submits each name; `wait=False` returns a Request.

    def _name(self, name, kind):
        if name is not None:
            return _capi.arg(name)
        self._names += 1
        return f"py/{kind}/{self._names}".encode()

    def allreduce(self, array, name=None, op="sum", prescale=1.0, postscale=1.0, out=None, wait=True):
        """Reduces ``array`` over the ranks into ``out`` (in place when None) and
        returns it. ``op``: sum, average, min, max, product."""
        inp = borrow(array, writable=out is None)
        outp = borrow(out, writable=True, param="out") if out is not None else None
        opts = _allreduce_options(op, prescale, postscale, "Runtime.allreduce")
        result = (outp or inp).array
        if wait:
            lib().cohort_allreduce(self.handle, self._name(name, "allreduce"), inp.ref,
                                   outp.ref if outp else None, byref(opts))
            return result
        h = c_void_p()
        lib().cohort_allreduce_async(self.handle, self._name(name, "allreduce"), inp.ref,
                                     outp.ref if outp else None, byref(opts), byref(h))
        return Request(h.value, self, keep=(inp, outp, opts), result=lambda r: result)

    def grouped_allreduce(self, arrays, names=None, op="sum", prescale=1.0, postscale=1.0, wait=True):
        """Reduces every array in place as one unit; returns them."""
        views = [borrow(a, writable=True, param=f"arrays[{i}]") for i, a in enumerate(arrays)]
        base = self._name(None, "grouped").decode()
        names = [_capi.arg(n) for n in names] if names else [f"{base}/{i}".encode() for i in range(len(views))]
        c_names = (c_char_p * len(views))(*names)
        c_inputs = (ctypes.POINTER(_capi.DLTensor) * len(views))(*[ctypes.pointer(v.tensor) for v in views])
        opts = _allreduce_options(op, prescale, postscale, "Runtime.grouped_allreduce")
        result = [v.array for v in views]
        if wait:
            lib().cohort_grouped_allreduce(self.handle, len(views), c_names, c_inputs, None, byref(opts))
            return result
        h = c_void_p()
        lib().cohort_grouped_allreduce_async(self.handle, len(views), c_names, c_inputs, None, byref(opts), byref(h))
        return Request(h.value, self, keep=(views, c_names, c_inputs, opts), result=lambda r: result)

    def broadcast(self, array, name=None, root=0, out=None, wait=True):
        """``root``'s values into ``out`` (in place when None) on every rank; returns it."""
        root = _int(root, "root")
        inp = borrow(array, writable=out is None)
        outp = borrow(out, writable=True, param="out") if out is not None else None
        result = (outp or inp).array
        if wait:
            lib().cohort_broadcast(self.handle, self._name(name, "broadcast"), inp.ref, outp.ref if outp else None,
                                   root)
            return result
        h = c_void_p()
        lib().cohort_broadcast_async(self.handle, self._name(name, "broadcast"), inp.ref,
                                     outp.ref if outp else None, root, byref(h))
        return Request(h.value, self, keep=(inp, outp), result=lambda r: result)

    def allgather(self, array, name=None, wait=True):
        """Every rank's rows, concatenated in rank order (a new array)."""
        inp = borrow(array)
        h = c_void_p()
        lib().cohort_allgather_async(self.handle, self._name(name, "allgather"), inp.ref, byref(h))
        req = Request(h.value, self, keep=(inp,), result=lambda r: r.output())
        return req.wait_and_close() if wait else req

    def alltoall(self, array, name=None, splits=None, wait=True):
        """Rows [sum(splits[:r]), +splits[r]) go to rank r; returns (array, recv_splits)."""
        inp = borrow(array)
        c_splits = (c_int64 * len(splits))(*[_int(n, "splits") for n in splits]) if splits is not None else None
        h = c_void_p()
        lib().cohort_alltoallv_async(self.handle, self._name(name, "alltoall"), inp.ref, c_splits,
                                     len(splits) if splits is not None else 0, byref(h))
        req = Request(h.value, self, keep=(inp, c_splits),
                      result=lambda r: (r.output(), r.recv_splits(self.size)))
        return req.wait_and_close() if wait else req

    def reducescatter(self, array, name=None, op="sum", wait=True):
        """The reduction of every rank's array, of which this rank keeps its block of rows."""
        inp = borrow(array)
        h = c_void_p()
        lib().cohort_reducescatter_async(self.handle, self._name(name, "reducescatter"), inp.ref,
                                         _op(op, "Runtime.reducescatter"), byref(h))
        req = Request(h.value, self, keep=(inp,), result=lambda r: r.output())
        return req.wait_and_close() if wait else req

    def collective_barrier(self, wait=True):
        """A barrier ordered with the other collectives (through the engine)."""
        h = c_void_p()
        lib().cohort_barrier_async(self.handle, byref(h))
        req = Request(h.value, self, result=lambda r: None)
        return req.wait_and_close() if wait else req

    def join(self, wait=True):
        """This rank has no more data; returns the rank that joined last."""
        h = c_void_p()
        lib().cohort_join_async(self.handle, byref(h))
        req = Request(h.value, self, result=lambda r: r.last_joined())
        return req.wait_and_close() if wait else req


def _allreduce_options(op, prescale, postscale, where):
    opts = _capi.AllreduceOptions()
    opts.struct_size = ctypes.sizeof(opts)
    lib().cohort_allreduce_options_default(byref(opts))
    opts.op = _op(op, where)
    opts.prescale, opts.postscale = _number(prescale, "prescale", where), _number(postscale, "postscale", where)
    return opts


class Request(_Handle):
    """One submitted collective (cohort_request_t). Its tensors stay referenced until
    it is closed; closing an unfinished request waits for it first (the C contract)."""

    _destroy_name = "cohort_request_destroy"

    def __init__(self, handle, runtime, keep=(), result=None):
        super().__init__()
        self._adopt(handle, runtime)
        self._keep = keep
        self._result = result

    def test(self):
        """True once the collective has completed (successfully or not)."""
        done = c_int()
        lib().cohort_request_test(self.handle, byref(done))
        return bool(done.value)

    def wait(self):
        """Blocks until done; raises its error; returns its result (the output array,
        (array, recv_splits) for alltoall, the last rank for join, None for a barrier)."""
        lib().cohort_request_wait(self.handle)
        return self._result(self) if self._result else None

    def wait_and_close(self):
        try:
            return self.wait()
        finally:
            self.close()

    def output(self):
        """The result of an allgather, alltoall or reducescatter as a NumPy array (owned)."""
        p = ctypes.POINTER(_capi.DLManagedTensor)()
        lib().cohort_request_output(self.handle, byref(p))
        return ManagedTensor(p).numpy()

    def recv_splits(self, count):
        splits = (c_int64 * count)()
        lib().cohort_request_recv_splits(self.handle, splits, count)
        return list(splits)

    def last_joined(self):
        rank = c_int()
        lib().cohort_request_last_joined(self.handle, byref(rank))
        return rank.value

    def _destroy(self):
        super()._destroy()
        self._keep = ()


# ---- models ----


class Parameter:
    """One parameter tensor: ``name``, ``value`` and ``grad`` (DLPack views of the
    model's memory: ``numpy.from_dlpack(p.value)`` reads and writes it in place)."""

    def __init__(self, index, name, value, grad):
        self.index, self.name, self.value, self.grad = index, name, value, grad

    def __repr__(self):
        return f"<Parameter {self.index} {self.name} {list(self.value.shape)}>"


class Model(_Handle):
    """A network (cohort_model_t): from the zoo by name, or built layer by layer with
    ``Model.custom(...)`` and ``add_layer``. Keeps its runtime alive; its ``close()``
    closes its optimizer too."""

    _destroy_name = "cohort_model_destroy"

    def __init__(self, runtime, name, config=None, **options):
        super().__init__()
        self.name = _expect(name, str, "name", "a str (the name of a model of the zoo)")
        _expect(runtime, Runtime, "runtime")
        cfg = _config_for(config, options, runtime.config() if options else None)
        h = c_void_p()
        lib().cohort_model_create(runtime.handle, _capi.arg(name), _handle_or_null(cfg), byref(h))
        self._adopt(h.value, runtime)
        self.runtime = runtime
        self._grad_ready = None

    @classmethod
    def custom(cls, runtime, input_shape, config=None, **options):
        """An empty network over samples of ``input_shape`` ((C, H, W) or (F,))."""
        self = cls.__new__(cls)
        _Handle.__init__(self)
        self.name = "custom"
        _expect(runtime, Runtime, "runtime")
        if isinstance(input_shape, (str, bytes)) or not hasattr(input_shape, "__len__"):
            raise _type_error("input_shape", "a tuple of ints ((C, H, W) or (F,))", input_shape, "Model.custom")
        dims = [_int(d, "input_shape") for d in input_shape]
        cfg = _config_for(config, options, runtime.config() if options else None)
        shape = (c_int64 * len(dims))(*dims)
        h = c_void_p()
        lib().cohort_model_create_custom(runtime.handle, _handle_or_null(cfg), shape, len(dims), byref(h))
        self._adopt(h.value, runtime)
        self.runtime = runtime
        self._grad_ready = None
        return self

    def _label(self):
        return f" '{self.name}'" if getattr(self, "name", None) else ""

    def add_layer(self, kind, name, inputs=None, params="", **more):
        """Appends a layer; returns its index. ``params`` as text ("out=64 kernel=3")
        and/or keywords (out=64, kernel=3); ``inputs`` indices of earlier layers."""
        text_params = " ".join([params] + [f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in more.items()])
        ins = (c_int * len(inputs))(*[_int(i, "inputs") for i in inputs]) if inputs else None
        index = c_int()
        lib().cohort_model_add_layer(self.handle, _capi.arg(kind), _capi.arg(name), ins, len(inputs or ()),
                                     _capi.arg(text_params.strip()), byref(index))
        return index.value

    @property
    def num_params(self):
        n = c_int64()
        lib().cohort_model_num_params(self.handle, byref(n))
        return n.value

    def summary(self):
        return _capi.get_text(lib().cohort_model_summary, self.handle)

    def set_profiling(self, enabled=True):
        """Starts (from zero) or stops the per-layer profile of the training steps."""
        lib().cohort_model_set_profiling(self.handle, 1 if enabled else 0)

    def profile(self):
        """The per-layer profile as text: ms per step forward, backward, reorders."""
        return _capi.get_text(lib().cohort_model_profile, self.handle)

    def materialize(self):
        lib().cohort_model_materialize(self.handle)

    @property
    def num_tensors(self):
        n = c_size_t()
        lib().cohort_model_num_tensors(self.handle, byref(n))
        return n.value

    def param(self, index):
        """Parameter ``index`` (0 .. num_tensors - 1): its name, value and gradient."""
        index = _int(index, "index")
        name = c_char_p()
        value, grad = _capi.DLTensor(), _capi.DLTensor()
        lib().cohort_model_param(self.handle, index, byref(name), byref(value), byref(grad))
        return Parameter(index, text(name.value), TensorView(value, self), TensorView(grad, self))

    def params(self):
        return [self.param(i) for i in range(self.num_tensors)]

    @property
    def io_shape(self):
        """(channels, height, width, num_classes) of the model's input and output."""
        v = [c_int64() for _ in range(4)]
        lib().cohort_model_io_shape(self.handle, *[byref(x) for x in v])
        return tuple(x.value for x in v)

    def set_grad_ready(self, fn):
        """``fn(index)`` runs as soon as backward has finished parameter ``index``'s
        gradient (on the calling thread); None clears it. An optimizer replaces it."""
        if fn is not None and not callable(fn):
            raise _type_error("fn", "a callable taking the parameter's index, or None", fn, "Model.set_grad_ready")
        if fn is None:
            self._grad_ready = None
            lib().cohort_model_set_grad_ready(self.handle, _capi.GradReadyFn(), None)
            return
        self._grad_ready = _capi.GradReadyFn(lambda user, index: fn(index))
        lib().cohort_model_set_grad_ready(self.handle, self._grad_ready, None)

    def forward(self, images):
        """Logits [N, classes] for a batch of images (float32, the model's layout)."""
        import numpy as np
        x = borrow(images, param="images")
        out = np.empty((x.array.shape[0] if x.array.ndim else 1, self.io_shape[3]), dtype=np.float32)
        y = borrow(out, writable=True)
        lib().cohort_model_forward(self.handle, x.ref, y.ref)
        return out

    def loss(self, images, labels):
        """The mean loss of ``images`` against ``labels`` (no gradients)."""
        x, y, loss = borrow(images, param="images"), borrow(labels, param="labels"), c_float()
        lib().cohort_model_loss(self.handle, x.ref, y.ref, byref(loss))
        return loss.value

    def forward_backward(self, images, labels):
        """Training forward and backward: writes every gradient, returns the mean loss."""
        x, y, loss = borrow(images, param="images"), borrow(labels, param="labels"), c_float()
        lib().cohort_model_forward_backward(self.handle, x.ref, y.ref, byref(loss))
        return loss.value

    def train_step(self, optimizer, batch):
        """One step: forward, backward, the gradient exchange and the update, with this
        model's optimizer. ``batch`` is a Batch from a pipeline or
        ``Batch.from_arrays(images, labels)``. Returns a Record of loss, lr, images, valid,
        step, updated, compute_s, comm_wait_s, update_s and total_s. Collective."""
        _expect(optimizer, Optimizer, "optimizer")
        _expect(batch, Batch, "batch", "a cohort.Batch (from Pipeline.next() or Batch.from_arrays())")
        self._require_open()
        if optimizer.model is not self:
            raise InvalidArgumentError(
                1, f"Model.train_step: {optimizer!r} is the optimizer of {optimizer.model!r}, not of {self!r}; "
                   f"the step would train {optimizer.model!r}: pass the optimizer made for this model, or call "
                   "optimizer.step(batch)", "Model.train_step")
        stats = _capi.TrainStats()
        stats.struct_size = ctypes.sizeof(stats)
        lib().cohort_optimizer_train_step(optimizer.handle, byref(batch._c), byref(stats))
        return Record(stats)

    def evaluate(self, pipeline, max_steps=0):
        """samples, top1, top5 and loss over ``max_steps`` batches of ``pipeline`` (0: one
        epoch), over every rank; None on a rank without data (a dedicated parameter
        server), which only takes part in the sum. Collective."""
        _expect(pipeline, Pipeline, "pipeline", optional=True)
        max_steps = _int(max_steps, "max_steps")
        return Record(_filled(_capi.EvalResult, lib().cohort_model_evaluate, self.handle, _handle_or_null(pipeline),
                              max_steps))


# ---- the input pipeline ----


class Batch:
    """One batch: ``images``, ``labels``, ``valid_mask`` (DLPack views), ``valid``
    (the first ``valid`` samples are real), ``epoch`` and ``step``. A pipeline's views
    are reused by its next ``next()``: copy what you keep."""

    def __init__(self, struct, owner, keep=()):
        self._c = struct
        self._keep = keep
        self.images = TensorView(struct.images, owner)
        self.labels = TensorView(struct.labels, owner)
        self.valid_mask = TensorView(struct.valid_mask, owner)
        self.valid, self.epoch, self.step = struct.valid, struct.epoch, struct.step

    @classmethod
    def from_arrays(cls, images, labels, valid=None, epoch=0, step=0):
        """A batch over caller arrays: float32 images in the model's layout, int32 labels."""
        import numpy as np
        x = borrow(images, param="images")
        labels = expect_array(labels, "labels")
        if labels.dtype.kind not in "iu":
            raise InvalidArgumentError(1, f"Batch.from_arrays: labels must be integers, got dtype {labels.dtype}",
                                       "Batch.from_arrays")
        y = borrow(np.ascontiguousarray(labels, dtype=np.int32), param="labels")
        n = x.array.shape[0]
        mask = np.zeros(n, dtype=np.uint8)
        valid = n if valid is None else int(valid)
        mask[:valid] = 1
        m = borrow(mask)
        s = _capi.Batch()
        s.struct_size = ctypes.sizeof(s)
        s.images, s.labels, s.valid_mask = x.tensor, y.tensor, m.tensor
        s.valid, s.epoch, s.step = valid, epoch, step
        return cls(s, None, keep=(x, y, m))

    def __repr__(self):
        return f"<cohort.Batch epoch {self.epoch} step {self.step}: {self.valid} valid of {self.images.shape}>"


class Pipeline(_Handle):
    """The input pipeline (cohort_pipeline_t). With a runtime it reads this rank's
    share of every epoch; without one (None), the whole dataset. Options are the data
    group of the registry (data_dir, batch_size, augment, decode_threads, ...)."""

    _destroy_name = "cohort_pipeline_destroy"

    def __init__(self, runtime=None, config=None, **options):
        super().__init__()
        _expect(runtime, Runtime, "runtime", optional=True)
        base = runtime.config() if (runtime is not None and options) else None
        cfg = _config_for(config, options, base)
        h = c_void_p()
        lib().cohort_pipeline_create(_handle_or_null(runtime), _handle_or_null(cfg), byref(h))
        self._adopt(h.value, runtime)
        self._memory = None

    @classmethod
    def from_memory(cls, runtime, images, labels, config=None, **options):
        """A pipeline over arrays: uint8 images [N, H, W] or [N, H, W, C], int32/int64
        labels [N]. The images are borrowed (kept referenced) until close()."""
        self = cls.__new__(cls)
        _Handle.__init__(self)
        _expect(runtime, Runtime, "runtime", optional=True)
        base = runtime.config() if (runtime is not None and options) else None
        cfg = _config_for(config, options, base)
        x, y = borrow(images, param="images"), borrow(labels, param="labels")
        h = c_void_p()
        lib().cohort_pipeline_create_from_memory(_handle_or_null(runtime), _handle_or_null(cfg), x.ref, y.ref,
                                                 byref(h))
        self._adopt(h.value, runtime)
        self._memory = (x, y)
        return self

    def next(self):
        """The next batch (blocks until it is ready)."""
        s = _capi.Batch()
        s.struct_size = ctypes.sizeof(s)
        lib().cohort_pipeline_next(self.handle, byref(s))
        return Batch(s, self)

    def __iter__(self):
        """The batches of one epoch (steps_per_epoch of them)."""
        for _ in range(self.steps_per_epoch):
            yield self.next()

    def seek(self, epoch, step):
        """The next batch is batch ``step`` of epoch ``epoch``."""
        lib().cohort_pipeline_seek(self.handle, _int(epoch, "epoch"), _int(step, "step"))

    def position(self):
        """(epoch, step) of the batch next() returns: what a checkpoint saved now records
        as pipeline_epoch and pipeline_step, and what seek() resumes from."""
        epoch, step = c_int64(), c_int64()
        lib().cohort_pipeline_position(self.handle, byref(epoch), byref(step))
        return epoch.value, step.value

    def info(self):
        """dataset_size, steps_per_epoch, samples_per_epoch, batch_size, num_classes,
        channels, height, width, reader_threads, decode_threads, prefetch_depth."""
        return Record(_filled(_capi.PipelineInfo, lib().cohort_pipeline_info, self.handle))

    @property
    def steps_per_epoch(self):
        n = c_int64()
        lib().cohort_pipeline_steps_per_epoch(self.handle, byref(n))
        return n.value

    def stats(self):
        return Record(_filled(_capi.PipelineStats, lib().cohort_pipeline_stats, self.handle))

    def verdict(self):
        return _capi.get_text(lib().cohort_pipeline_verdict, self.handle)

    def _destroy(self):
        super()._destroy()
        self._memory = None


# ---- the optimizer ----


class Optimizer(_Handle):
    """The distributed optimizer of one model (cohort_optimizer_t): update rule, lr
    schedule and the gradient exchange over the model's runtime. Closed with its model."""

    _destroy_name = "cohort_optimizer_destroy"

    def __init__(self, model, config=None, **options):
        super().__init__()
        _expect(model, Model, "model")
        cfg = _config_for(config, options, model.runtime.config() if options else None)
        h = c_void_p()
        lib().cohort_optimizer_create(model.handle, _handle_or_null(cfg), byref(h))
        self._adopt(h.value, model)
        self.model = model

    def set_run_length(self, steps_per_epoch, total_steps=0):
        """Steps per epoch and of the whole run, for schedules that need them (0: unknown)."""
        lib().cohort_optimizer_set_run_length(self.handle, _int(steps_per_epoch, "steps_per_epoch"),
                                              _int(total_steps, "total_steps"))

    def state(self):
        """(learning rate of the next update, updates taken)."""
        lr, steps = c_double(), c_int64()
        lib().cohort_optimizer_state(self.handle, byref(lr), byref(steps))
        return lr.value, steps.value

    @property
    def lr(self):
        """The learning rate of the next update."""
        return self.state()[0]

    @property
    def steps(self):
        """The updates taken so far."""
        return self.state()[1]

    def info(self):
        """This rank's role under ``variable_update``: variable_update, worker, server,
        workers, servers, worker_index, updates, staleness_sum, staleness_max."""
        return Record(_filled(_capi.OptimizerInfo, lib().cohort_optimizer_info, self.handle))

    def broadcast(self, root=0):
        """Every rank's parameters and optimizer state become ``root``'s. Collective."""
        lib().cohort_optimizer_broadcast(self.handle, _int(root, "root"))

    def check_consistency(self):
        """Raises MismatchError naming the first parameter that differs from rank 0's."""
        lib().cohort_optimizer_check_consistency(self.handle)

    def step(self, batch):
        """``model.train_step(self, batch)``."""
        self._require_open()
        return self.model.train_step(self, batch)

    def save_checkpoint(self, directory, epoch=0, pipeline_epoch=0, pipeline_step=0):
        """Saves the model and the optimizer's state, with the run's position, into
        ``directory`` (rank 0 writes). Collective."""
        info = _capi.CheckpointInfo()
        info.struct_size = ctypes.sizeof(info)
        info.epoch, info.pipeline_epoch = _int(epoch, "epoch"), _int(pipeline_epoch, "pipeline_epoch")
        info.pipeline_step = _int(pipeline_step, "pipeline_step")
        lib().cohort_optimizer_save_checkpoint(self.handle, _capi.arg(_path(directory, "directory")), byref(info))

    def load_checkpoint(self, directory):
        """The saved position (epoch, step, pipeline_epoch, pipeline_step), or None
        when ``directory`` holds no checkpoint. Collective."""
        info = _capi.CheckpointInfo()
        info.struct_size = ctypes.sizeof(info)
        found = c_int()
        lib().cohort_optimizer_load_checkpoint(self.handle, _capi.arg(_path(directory, "directory")), byref(info),
                                               byref(found))
        return Record(info) if found.value else None


# ---- metrics and the run summary ----


class Metrics(_Handle):
    """Per-step throughput statistics as tf_cnn_benchmarks reports them."""

    _destroy_name = "cohort_metrics_destroy"

    def __init__(self, warmup_steps=10):
        super().__init__()
        h = c_void_p()
        lib().cohort_metrics_create(_int(warmup_steps, "warmup_steps"), byref(h))
        self._adopt(h.value)

    def record(self, seconds, images, data_wait_s=0.0, comm_exposed_s=0.0):
        lib().cohort_metrics_record(self.handle, seconds, data_wait_s, comm_exposed_s, float(images))

    def summary(self):
        """count, median, mean, std_error, jitter, data_wait, comm_exposed, compute."""
        return Record(_filled(_capi.RateSummary, lib().cohort_metrics_summary, self.handle))


class RunLog(_Handle):
    """The ``tensorboard_dir`` event file and the ``log_csv`` file of a run
    (cohort_run_log_t), written by rank 0; on other ranks, and with neither setting,
    every call does nothing."""

    _destroy_name = "cohort_run_log_destroy"

    def __init__(self, runtime, config=None, **options):
        super().__init__()
        _expect(runtime, Runtime, "runtime")
        cfg = _config_for(config, options, runtime.config() if options else None)
        h = c_void_p()
        lib().cohort_run_log_create(runtime.handle, _handle_or_null(cfg), byref(h))
        self._adopt(h.value, runtime)

    def step(self, step, loss, lr, step_s, images, epoch=0.0, data_wait_s=0.0, comm_exposed_s=0.0):
        """One training step: ``step`` counts the steps done, this one included."""
        r = _capi.StepRecord()
        r.struct_size = ctypes.sizeof(r)
        r.step, r.epoch, r.loss, r.lr, r.step_s = step, epoch, loss, lr, step_s
        r.data_wait_s, r.comm_exposed_s, r.images = data_wait_s, comm_exposed_s, float(images)
        lib().cohort_run_log_step(self.handle, byref(r))

    def evaluation(self, step, result):
        """An evaluation at ``step``: ``result`` is Model.evaluate()'s Record (or a dict
        with samples, top1, top5 and loss)."""
        _expect(result, (Record, Mapping), "result", "Model.evaluate()'s Record or a dict")
        values = result.as_dict() if isinstance(result, Record) else dict(result)
        e = _capi.EvalResult()
        e.struct_size = ctypes.sizeof(e)
        for key in ("samples", "top1", "top5", "loss"):
            if key not in values:
                raise InvalidArgumentError(1, f"RunLog.evaluation: result has no '{key}' (it needs samples, top1, "
                                              "top5 and loss)", "RunLog.evaluation")
            setattr(e, key, values[key])
        lib().cohort_run_log_eval(self.handle, step, byref(e))


def run_summary_json(model, ranks=1, local_ranks=1, device="cpu", precision="f32", data="synthetic",
                     batch_per_rank=0, global_batch=0, steps=0, warmup_steps=0, images_per_sec=None, epochs=0.0,
                     loss=0.0, top1=None, top5=None, wall_s=0.0, extra=None):
    """The run summary line (schema cohort.run/1) that cohortrun sweep and cohort.run
    read. ``images_per_sec``: Metrics.summary() (a Record) or a dict of its fields."""
    import json
    s = _capi.RunSummary()
    s.struct_size = ctypes.sizeof(s)
    s.model, s.device, s.precision, s.data = (_capi.arg(v) for v in (model, device, precision, data))
    s.ranks, s.local_ranks, s.batch_per_rank, s.global_batch = ranks, local_ranks, batch_per_rank, global_batch
    s.steps, s.warmup_steps, s.epochs, s.loss, s.wall_s = steps, warmup_steps, epochs, loss, wall_s
    s.images_per_sec.struct_size = ctypes.sizeof(_capi.RateSummary)
    rates = images_per_sec.as_dict() if isinstance(images_per_sec, Record) else dict(images_per_sec or {})
    for key, value in rates.items():
        setattr(s.images_per_sec, key, value)
    s.has_top1 = int(top1 is not None)
    s.top1, s.top5 = top1 or 0.0, top5 or 0.0
    extra_text = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in (extra or {}).items())
    s.extra_json = extra_text.encode() if extra_text else None
    return _capi.get_text(lib().cohort_run_summary_json, byref(s))


# ---- build, version, data tools ----


def build_info():
    return Record(_filled(_capi.BuildInfo, lib().cohort_build_info))


def gpu_info(index):
    """Name, memory and compute capability of GPU ``index``."""
    s = _capi.GpuInfo()
    s.struct_size = ctypes.sizeof(s)
    lib().cohort_build_gpu_info(_int(index, "index"), byref(s))
    return Record(s)


def version():
    """The loaded library's version as MAJOR*10000 + MINOR*100 + PATCH."""
    return lib().cohort_version()


def version_string():
    return text(lib().cohort_version_string())


def status_string(status):
    return text(lib().cohort_status_string(_int(status, "status")))


def last_error():
    """This thread's last error text ("" when none)."""
    return text(lib().cohort_last_error())


def finalize():
    """Finalizes MPI (collective; after every runtime is closed). Optional: it also
    happens at exit."""
    _close_all()
    lib().cohort_finalize()


def _reporter(lines, echo):
    def report(line, user):
        value = text(line)
        lines.append(value)
        if echo:
            print(value, flush=True)
    return _capi.DataReportFn(report)


def data_pack(image_dir, out_dir, shards=1, config=None, echo=False, **options):
    """Packs an image folder into TFRecord shards; returns (records written, report lines)."""
    cfg = _config_for(config, options)
    lines = []
    written = c_int64()
    lib().cohort_data_pack(_handle_or_null(cfg), _capi.arg(_path(image_dir, "image_dir")),
                           _capi.arg(_path(out_dir, "out_dir")), _int(shards, "shards"), _reporter(lines, echo), None,
                           byref(written))
    return written.value, lines


def data_inspect(path, limit=10, config=None, **options):
    """Kind, sample count, classes and the first ``limit`` samples, as lines."""
    cfg = _config_for(config, options)
    lines = []
    lib().cohort_data_inspect(_handle_or_null(cfg), _capi.arg(_path(path, "path")), _int(limit, "limit"),
                              _reporter(lines, False), None)
    return lines


def data_verify(path, config=None, **options):
    """Checks every record and image; returns (broken samples, report lines)."""
    cfg = _config_for(config, options)
    lines = []
    broken = c_int64()
    lib().cohort_data_verify(_handle_or_null(cfg), _capi.arg(_path(path, "path")), _reporter(lines, False), None,
                             byref(broken))
    return broken.value, lines
