"""DLPack both ways, without copies.

Out: ``TensorView`` wraps a ``DLTensor`` that cohort filled (a batch, a parameter, a
gradient) and implements ``__dlpack__``/``__dlpack_device__``, so ``numpy.from_dlpack``
(or torch, jax, cupy) sees cohort's memory itself. The capsule's deleter holds a
reference to the object that owns the memory (the model, the pipeline's batch), so
the owner stays alive as long as any array made from it.

``ManagedTensor`` wraps a ``DLManagedTensor`` that cohort handed over (the result of an
allgather, alltoall or reducescatter): the first consumer takes ownership.

In: ``as_dltensor`` describes a NumPy array (or anything with ``__array_interface__``)
as a ``DLTensor`` for cohort to read or write in place.
"""
import ctypes
import itertools
import numbers
import threading
import weakref

from ._capi import (DLDataType, DLDevice, DLManagedTensor, DLManagedTensorDeleter, DLTensor, POINTER, c_int64,
                    caller, kDLBfloat, kDLCPU, kDLCUDA, kDLCUDAHost, kDLFloat, kDLInt, kDLUInt)
from .errors import ArgumentTypeError, InvalidArgumentError

_CAPSULE_NAME = b"dltensor"
_USED_NAME = b"used_dltensor"

_api = ctypes.pythonapi
_PyCapsule_Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_PyCapsule_New = _api.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _PyCapsule_Destructor]
_PyCapsule_IsValid = _api.PyCapsule_IsValid
_PyCapsule_IsValid.restype = ctypes.c_int
_PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_PyCapsule_GetPointer = _api.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

# Exported tensors still held by a consumer: id → (DLManagedTensor, shape array, owner).
_exports = {}
_exports_lock = threading.Lock()
_next_id = itertools.count(1)


def _release(managed_ptr):
    try:
        key = managed_ptr.contents.manager_ctx
        with _exports_lock:
            _exports.pop(key, None)
    except Exception:  # interpreter shutdown: nothing left to release
        pass


def _capsule_destructor(capsule):
    # A capsule nobody consumed still owns its tensor.
    try:
        if _PyCapsule_IsValid(capsule, _CAPSULE_NAME):
            ptr = _PyCapsule_GetPointer(capsule, _CAPSULE_NAME)
            _release(ctypes.cast(ptr, POINTER(DLManagedTensor)))
    except Exception:
        pass


# Module-level and never freed: consumers may call them at interpreter exit.
_DELETER = DLManagedTensorDeleter(_release)
_DESTRUCTOR = _PyCapsule_Destructor(_capsule_destructor)
_api.Py_IncRef.argtypes = [ctypes.py_object]
_api.Py_IncRef(_DELETER)
_api.Py_IncRef(_DESTRUCTOR)

_DEVICE_NAMES = {kDLCPU: "cpu", kDLCUDA: "cuda", kDLCUDAHost: "cuda_host"}


def _numpy():
    import numpy
    return numpy


def dtype_name(dt):
    """A DLDataType as a NumPy dtype name ("float32", "int32", "uint8", "bfloat16")."""
    names = {(kDLFloat, 32): "float32", (kDLFloat, 16): "float16", (kDLFloat, 64): "float64",
             (kDLInt, 32): "int32", (kDLInt, 64): "int64", (kDLInt, 8): "int8", (kDLUInt, 8): "uint8",
             (kDLBfloat, 16): "bfloat16"}
    return names.get((dt.code, dt.bits), f"code{dt.code}:{dt.bits}")


_TYPESTR = {(kDLFloat, 32): "<f4", (kDLFloat, 16): "<f2", (kDLFloat, 64): "<f8", (kDLInt, 32): "<i4",
            (kDLInt, 64): "<i8", (kDLInt, 8): "|i1", (kDLUInt, 8): "|u1"}


class TensorView:
    """A tensor in cohort's memory, exported without copying.

    ``numpy.from_dlpack(view)`` gives a read-only array over the same memory (NumPy 1.x
    marks every DLPack import read-only); ``view.numpy()`` or ``numpy.asarray(view)``
    (through ``__array_interface__``) a writable one, e.g. to set parameters. Torch,
    JAX or CuPy take the view through ``__dlpack__`` too.

    While a view (or an array made from it) exists, its owner's C object is not
    destroyed: ``close()`` then waits for the last one. A batch's tensors are still
    reused by the pipeline's next ``next()``: copy what you keep."""

    def __init__(self, dltensor, owner):
        self._owner = owner
        if hasattr(owner, "_view_added"):
            owner._view_added()
            weakref.finalize(self, owner._view_released)
        self._shape = (c_int64 * max(dltensor.ndim, 1))(*[dltensor.shape[i] for i in range(dltensor.ndim)])
        self._tensor = DLTensor()
        ctypes.memmove(ctypes.byref(self._tensor), ctypes.byref(dltensor), ctypes.sizeof(DLTensor))
        self._tensor.shape = ctypes.cast(self._shape, POINTER(c_int64))
        self._strides = None
        if dltensor.strides:
            self._strides = (c_int64 * dltensor.ndim)(*[dltensor.strides[i] for i in range(dltensor.ndim)])
            self._tensor.strides = ctypes.cast(self._strides, POINTER(c_int64))

    @property
    def shape(self):
        return tuple(self._shape[i] for i in range(self._tensor.ndim))

    @property
    def dtype(self):
        return dtype_name(self._tensor.dtype)

    @property
    def data_ptr(self):
        """The address of the first element (for checks that nothing was copied)."""
        return (self._tensor.data or 0) + self._tensor.byte_offset

    @property
    def device(self):
        d = self._tensor.device
        name = _DEVICE_NAMES.get(d.device_type, str(d.device_type))
        return name if d.device_type == kDLCPU else f"{name}:{d.device_id}"

    def __dlpack_device__(self):
        return (self._tensor.device.device_type, self._tensor.device.device_id)

    def __dlpack__(self, stream=None):
        managed = DLManagedTensor()
        managed.dl_tensor = self._tensor
        key = next(_next_id)
        managed.manager_ctx = key
        managed.deleter = _DELETER
        with _exports_lock:
            # The struct and this view (its shape, its owner) stay alive until the
            # consumer calls the deleter.
            _exports[key] = (managed, self)
        return _PyCapsule_New(ctypes.addressof(managed), _CAPSULE_NAME, _DESTRUCTOR)

    @property
    def __array_interface__(self):
        t = self._tensor
        if t.device.device_type not in (kDLCPU, kDLCUDAHost):
            raise TypeError(f"{self!r} is in device memory: use a GPU array library's from_dlpack")
        typestr = _TYPESTR.get((t.dtype.code, t.dtype.bits))
        if typestr is None or t.dtype.lanes != 1:
            raise TypeError(f"NumPy has no dtype for {self.dtype}")
        itemsize = t.dtype.bits // 8
        strides = None if self._strides is None else tuple(s * itemsize for s in self._strides)
        return {"version": 3, "shape": self.shape, "typestr": typestr, "data": (self.data_ptr, False),
                "strides": strides}

    def numpy(self):
        """A writable NumPy array over this memory (no copy); it keeps the view alive."""
        return _numpy().asarray(self)

    def __repr__(self):
        return f"<cohort.TensorView {self.dtype}{list(self.shape)} on {self.device}>"


def describe(value):
    """A value as a message shows what it got: "str 'abc'", or a cohort object's repr."""
    if type(value).__module__.startswith("cohort."):
        return repr(value)
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


class ManagedTensor:
    """A tensor cohort created and handed over (a collective's result). The first
    ``__dlpack__`` (``numpy.from_dlpack``) transfers it; unconsumed, it is freed with
    this object."""

    def __init__(self, pointer):
        self._ptr = pointer  # POINTER(DLManagedTensor)

    @property
    def shape(self):
        t = self._ptr.contents.dl_tensor
        return tuple(t.shape[i] for i in range(t.ndim))

    def __dlpack_device__(self):
        d = self._ptr.contents.dl_tensor.device
        return (d.device_type, d.device_id)

    def __dlpack__(self, stream=None):
        if not self._ptr:
            raise RuntimeError("this tensor was already consumed by from_dlpack")
        ptr, self._ptr = self._ptr, None
        # The consumer calls cohort's deleter; our destructor only runs if nobody consumed it.
        return _PyCapsule_New(ctypes.addressof(ptr.contents), _CAPSULE_NAME, _OWNED_DESTRUCTOR)

    def numpy(self):
        return _numpy().from_dlpack(self)

    def __del__(self):
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr and ptr.contents.deleter:
            ptr.contents.deleter(ptr)


def _owned_capsule_destructor(capsule):
    try:
        if _PyCapsule_IsValid(capsule, _CAPSULE_NAME):
            ptr = ctypes.cast(_PyCapsule_GetPointer(capsule, _CAPSULE_NAME), POINTER(DLManagedTensor))
            if ptr.contents.deleter:
                ptr.contents.deleter(ptr)
    except Exception:
        pass


_OWNED_DESTRUCTOR = _PyCapsule_Destructor(_owned_capsule_destructor)
_api.Py_IncRef(_OWNED_DESTRUCTOR)

# ---- NumPy → DLTensor ----

_CODES = {"f": kDLFloat, "i": kDLInt, "u": kDLUInt}


def _is_array_like(value):
    return (hasattr(value, "__array_interface__") or hasattr(value, "__array__") or hasattr(value, "__dlpack__")
            or isinstance(value, (list, tuple, numbers.Number))) and not isinstance(value, (str, bytes, bool))


def expect_array(value, param, where=None):
    """``value`` as a NumPy array, or an ArgumentTypeError naming the calling function
    and the parameter when it is not an array (text, a dict, a cohort object)."""
    np = _numpy()
    if isinstance(value, np.ndarray):
        return value
    where = where or caller(1)
    if not _is_array_like(value):
        raise ArgumentTypeError(f"{where}: {param} must be an array (NumPy, or anything with __array_interface__ "
                                f"or __dlpack__), got {describe(value)}", where)
    if not hasattr(value, "__array_interface__") and hasattr(value, "__dlpack__"):
        return np.from_dlpack(value)
    return np.asarray(value)


class Borrowed:
    """A DLTensor describing a NumPy array's memory (keeps the array alive). ``param``
    and ``where`` name the argument and the call in the error of an array cohort cannot
    take."""

    def __init__(self, array, writable=False, param="array", where=None):
        np = _numpy()
        where = where or caller(1)
        array = expect_array(array, param, where)

        def refuse(what):
            return InvalidArgumentError(1, f"{where}: {param} {what}", where)

        if not array.flags.c_contiguous:
            raise refuse(f"must be C-contiguous, got strides {array.strides}: pass numpy.ascontiguousarray({param})")
        if writable and not array.flags.writeable:
            raise refuse(f"is read-only, but cohort writes into it: pass a writable array ({param}.copy())")
        if array.dtype.byteorder == ">":
            raise refuse(f"must be in native (little-endian) byte order: pass {param}.astype({param}.dtype."
                         "newbyteorder('='))")
        kind = array.dtype.kind
        if kind not in _CODES and array.dtype.name != "bfloat16":
            raise refuse(f"has dtype {array.dtype}, which cohort cannot take (use float32, float16, float64, "
                         "int32, int64 or uint8)")
        self.array = array
        self.shape = (c_int64 * max(array.ndim, 1))(*array.shape)
        self.tensor = DLTensor()
        self.tensor.data = array.ctypes.data if array.size else None
        self.tensor.device = DLDevice(kDLCPU, 0)
        self.tensor.ndim = array.ndim
        code = kDLBfloat if array.dtype.name == "bfloat16" else _CODES[kind]
        self.tensor.dtype = DLDataType(code, array.dtype.itemsize * 8, 1)
        self.tensor.shape = ctypes.cast(self.shape, POINTER(c_int64))
        self.tensor.strides = None
        self.tensor.byte_offset = 0

    @property
    def ref(self):
        return ctypes.byref(self.tensor)


def borrow(array, writable=False, param="array", where=None):
    """A ``Borrowed`` view of ``array``; ``TensorView``s (cohort memory) pass through.
    ``param`` names the argument in errors, ``where`` the call (default: the caller)."""
    if isinstance(array, TensorView):
        view = Borrowed.__new__(Borrowed)
        view.array, view.tensor, view.shape = array, array._tensor, array._shape
        return view
    return Borrowed(array, writable, param, where or caller(1))
