"""The C API as ctypes sees it: the library, its public structs and one table of
function signatures. Everything else in the binding calls through ``lib()``.

The table (``FUNCTIONS``) and the list of functions deliberately left out
(``NOT_BOUND``) together name every function of ``cohort/*.h``; the test suite reads
the installed headers and fails when a function is in neither, or when a struct here
no longer matches its header. A function that the loaded library lacks (an older
libcohort) is bound to a stub that raises ``UnsupportedError`` naming it, so the rest
keeps working. An argument ctypes cannot convert raises ``ArgumentTypeError`` (the
binding checks the arguments of its own calls first, naming their parameters).
"""
import ctypes
import ctypes.util
import os
import re
import sys
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_float, c_int, c_int32, c_int64, c_size_t,
                    c_uint, c_uint8, c_uint16, c_uint64, c_void_p)

# ---- DLPack (dlpack/dlpack.h, ABI 0.6: what Debian's libdlpack-dev ships) ----


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    pass


DLManagedTensorDeleter = CFUNCTYPE(None, POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DLManagedTensorDeleter)]

kDLCPU, kDLCUDA, kDLCUDAHost = 1, 2, 3
kDLInt, kDLUInt, kDLFloat, kDLBfloat = 0, 1, 2, 4

# ---- cohort's public structs (field for field as in the headers) ----

status_t = c_int  # cohort_status_t: a 32-bit enum


class OptionInfo(Structure):  # cohort_option_info_t (config.h)
    _fields_ = [("struct_size", c_size_t), ("name", c_char_p), ("type", c_int), ("default_value", c_char_p),
                ("min", c_double), ("max", c_double), ("choices", c_char_p), ("group", c_char_p),
                ("help", c_char_p)]


class BuildInfo(Structure):  # cohort_build_info_t (build.h)
    _fields_ = [("struct_size", c_size_t), ("cohort_version", c_char_p), ("mpi_library", c_char_p),
                ("mpi_version", c_int), ("mpi_subversion", c_int), ("cuda_built", c_int),
                ("cuda_runtime", c_char_p), ("cuda_driver", c_char_p), ("cudnn", c_char_p), ("nccl", c_char_p),
                ("dnnl", c_char_p), ("dnnl_cpu_runtime", c_char_p), ("jpeg_turbo", c_char_p),
                ("gpu_count", c_int), ("gpu_note", c_char_p), ("cuda_trains", c_int)]


class GpuInfo(Structure):  # cohort_gpu_info_t (build.h)
    _fields_ = [("struct_size", c_size_t), ("name", c_char_p), ("pci_bus_id", c_char_p),
                ("total_memory", c_uint64), ("compute_major", c_int), ("compute_minor", c_int),
                ("multiprocessors", c_int)]


class RuntimeInfo(Structure):  # cohort_runtime_info_t (runtime.h)
    _fields_ = [("struct_size", c_size_t), ("rank", c_int), ("size", c_int), ("local_rank", c_int),
                ("local_size", c_int), ("cross_rank", c_int), ("cross_size", c_int), ("thread_budget", c_int),
                ("device_type", c_int), ("device_id", c_int), ("cuda_device_count", c_int),
                ("mpi_thread_level", c_int), ("collective_device_id", c_int)]


class CpuTimes(Structure):  # cohort_cpu_times_t (runtime.h)
    _fields_ = [("struct_size", c_size_t), ("process_s", c_double), ("calling_thread_s", c_double),
                ("engine_s", c_double)]


class EngineStats(Structure):  # cohort_engine_stats_t (runtime.h)
    _fields_ = [("struct_size", c_size_t), ("cycles", c_uint64), ("full_exchanges", c_uint64),
                ("cache_hits", c_uint64), ("fused_batches", c_uint64), ("completed", c_uint64), ("held", c_uint64)]


class MemoryStats(Structure):  # cohort_memory_stats_t (runtime.h)
    _fields_ = [("struct_size", c_size_t), ("device_id", c_int), ("in_use_bytes", c_uint64),
                ("reserved_bytes", c_uint64), ("peak_in_use_bytes", c_uint64), ("peak_reserved_bytes", c_uint64),
                ("requests", c_uint64), ("cache_hits", c_uint64), ("device_allocations", c_uint64),
                ("device_frees", c_uint64)]


class AllreduceOptions(Structure):  # cohort_allreduce_options_t (collectives.h)
    _fields_ = [("struct_size", c_size_t), ("op", c_int), ("prescale", c_double), ("postscale", c_double)]


class Batch(Structure):  # cohort_batch_t (pipeline.h)
    _fields_ = [("struct_size", c_size_t), ("images", DLTensor), ("labels", DLTensor), ("valid_mask", DLTensor),
                ("valid", c_int64), ("epoch", c_int64), ("step", c_int64)]


class PipelineInfo(Structure):  # cohort_pipeline_info_t (pipeline.h)
    _fields_ = [("struct_size", c_size_t), ("dataset_size", c_int64), ("steps_per_epoch", c_int64),
                ("samples_per_epoch", c_int64), ("batch_size", c_int64), ("num_classes", c_int64),
                ("channels", c_int), ("height", c_int), ("width", c_int), ("reader_threads", c_int),
                ("decode_threads", c_int), ("prefetch_depth", c_int)]


class PipelineStats(Structure):  # cohort_pipeline_stats_t (pipeline.h)
    _fields_ = [("struct_size", c_size_t), ("batches", c_int64), ("images", c_int64), ("decoded", c_int64),
                ("errors", c_int64), ("padded", c_int64), ("read_busy_s", c_double), ("decode_busy_s", c_double),
                ("wait_s", c_double), ("elapsed_s", c_double), ("images_per_sec", c_double),
                ("wait_fraction", c_double), ("mean_ready_batches", c_double), ("mean_decode_queue", c_double),
                ("skipped", c_int64), ("read_cpu_s", c_double), ("decode_cpu_s", c_double),
                ("augment_cpu_s", c_double), ("assemble_cpu_s", c_double), ("bytes_read", c_int64),
                ("limiting_stage", c_char_p)]


class TrainStats(Structure):  # cohort_train_stats_t (train.h)
    _fields_ = [("struct_size", c_size_t), ("loss", c_double), ("lr", c_double), ("images", c_int64),
                ("valid", c_int64), ("step", c_int64), ("updated", c_int), ("compute_s", c_double),
                ("comm_wait_s", c_double), ("update_s", c_double), ("total_s", c_double)]


class EvalResult(Structure):  # cohort_eval_result_t (train.h)
    _fields_ = [("struct_size", c_size_t), ("samples", c_int64), ("top1", c_double), ("top5", c_double),
                ("loss", c_double)]


class CheckpointInfo(Structure):  # cohort_checkpoint_info_t (train.h)
    _fields_ = [("struct_size", c_size_t), ("epoch", c_int64), ("step", c_int64), ("pipeline_epoch", c_int64),
                ("pipeline_step", c_int64), ("ranks", c_int64)]


class OptimizerInfo(Structure):  # cohort_optimizer_info_t (train.h)
    _fields_ = [("struct_size", c_size_t), ("variable_update", c_char_p), ("worker", c_int), ("server", c_int),
                ("workers", c_int), ("servers", c_int), ("worker_index", c_int64), ("updates", c_int64),
                ("staleness_sum", c_double), ("staleness_max", c_int64), ("lockstep", c_int)]


class StepRecord(Structure):  # cohort_step_record_t (train.h)
    _fields_ = [("struct_size", c_size_t), ("step", c_int64), ("epoch", c_double), ("loss", c_double),
                ("lr", c_double), ("step_s", c_double), ("data_wait_s", c_double), ("comm_exposed_s", c_double),
                ("images", c_double)]


class RateSummary(Structure):  # cohort_rate_summary_t (train.h)
    _fields_ = [("struct_size", c_size_t), ("count", c_int64), ("median", c_double), ("mean", c_double),
                ("std_error", c_double), ("jitter", c_double), ("data_wait", c_double),
                ("comm_exposed", c_double), ("compute", c_double)]


class OverRanks(Structure):  # cohort_over_ranks_t (train.h)
    _fields_ = [("median", c_double), ("max", c_double)]


class ThreadCpu(Structure):  # cohort_thread_cpu_t (train.h)
    _fields_ = [("struct_size", c_size_t), ("compute", OverRanks), ("engine", OverRanks), ("other", OverRanks),
                ("has_input", c_int), ("readers", OverRanks), ("decoders", OverRanks),
                ("compute_spread_median", c_double), ("compute_spread_p90", c_double)]


class RunSummary(Structure):  # cohort_run_summary_t (train.h)
    _fields_ = [("struct_size", c_size_t), ("model", c_char_p), ("ranks", c_int64), ("local_ranks", c_int64),
                ("device", c_char_p), ("precision", c_char_p), ("data", c_char_p), ("batch_per_rank", c_int64),
                ("global_batch", c_int64), ("steps", c_int64), ("warmup_steps", c_int64),
                ("images_per_sec", RateSummary), ("epochs", c_double), ("loss", c_double), ("has_top1", c_int),
                ("top1", c_double), ("top5", c_double), ("wall_s", c_double), ("extra_json", c_char_p),
                ("variable_update", c_char_p), ("workers", c_int64), ("servers", c_int64), ("has_staleness", c_int),
                ("staleness_mean", c_double), ("staleness_max", c_int64), ("input", POINTER(PipelineStats)),
                ("threads", POINTER(ThreadCpu))]


# C name of each struct above, for the test that compares them with the headers.
STRUCTS = {
    "DLDevice": DLDevice, "DLDataType": DLDataType, "DLTensor": DLTensor, "DLManagedTensor": DLManagedTensor,
    "cohort_option_info_t": OptionInfo, "cohort_build_info_t": BuildInfo, "cohort_gpu_info_t": GpuInfo,
    "cohort_runtime_info_t": RuntimeInfo, "cohort_allreduce_options_t": AllreduceOptions,
    "cohort_batch_t": Batch, "cohort_pipeline_info_t": PipelineInfo, "cohort_pipeline_stats_t": PipelineStats,
    "cohort_train_stats_t": TrainStats, "cohort_eval_result_t": EvalResult,
    "cohort_checkpoint_info_t": CheckpointInfo, "cohort_rate_summary_t": RateSummary,
    "cohort_run_summary_t": RunSummary, "cohort_optimizer_info_t": OptimizerInfo,
    "cohort_step_record_t": StepRecord, "cohort_cpu_times_t": CpuTimes, "cohort_engine_stats_t": EngineStats,
    "cohort_memory_stats_t": MemoryStats,
    "cohort_over_ranks_t": OverRanks,
    "cohort_thread_cpu_t": ThreadCpu,
}

GradReadyFn = CFUNCTYPE(None, c_void_p, c_size_t)  # cohort_grad_ready_fn
DataReportFn = CFUNCTYPE(None, c_char_p, c_void_p)  # cohort_data_report_fn

# ---- the function table ----
# name: (return type, argument types). STATUS marks a function returning
# cohort_status_t: the binding turns a failure into an exception.
STATUS = "status"
H = c_void_p  # every opaque handle (cohort_runtime_t*, cohort_model_t*, ...)
HP = POINTER(c_void_p)  # an out-parameter receiving a handle
T = POINTER(DLTensor)
MT = POINTER(POINTER(DLManagedTensor))
SZ = POINTER(c_size_t)
I64P = POINTER(c_int64)
IP = POINTER(c_int)
STRS = POINTER(c_char_p)

FUNCTIONS = {
    # common.h
    "cohort_status_string": (c_char_p, [status_t]),
    "cohort_last_error": (c_char_p, []),
    "cohort_version": (c_uint, []),
    "cohort_version_string": (c_char_p, []),
    "cohort_finalize": (STATUS, []),
    # config.h
    "cohort_config_create": (STATUS, [HP]),
    "cohort_config_destroy": (None, [H]),
    "cohort_config_clone": (STATUS, [H, HP]),
    "cohort_config_set": (STATUS, [H, c_char_p, c_char_p]),
    "cohort_config_set_int": (STATUS, [H, c_char_p, c_int64]),
    "cohort_config_set_float": (STATUS, [H, c_char_p, c_double]),
    "cohort_config_set_bool": (STATUS, [H, c_char_p, c_int]),
    "cohort_config_unset": (STATUS, [H, c_char_p]),
    "cohort_config_get": (STATUS, [H, c_char_p, c_char_p, c_size_t, SZ]),
    "cohort_config_get_int": (STATUS, [H, c_char_p, I64P]),
    "cohort_config_get_float": (STATUS, [H, c_char_p, POINTER(c_double)]),
    "cohort_config_get_bool": (STATUS, [H, c_char_p, IP]),
    "cohort_config_source": (STATUS, [H, c_char_p, IP]),
    "cohort_config_parse_args": (STATUS, [H, c_int, STRS, c_uint, IP, STRS]),
    "cohort_option_describe": (STATUS, [c_char_p, POINTER(OptionInfo)]),
    "cohort_option_count": (c_size_t, []),
    "cohort_option_name": (c_char_p, [c_size_t]),
    "cohort_option_help": (c_char_p, [c_char_p]),
    "cohort_option_markdown": (c_char_p, []),
    "cohort_options_help": (c_char_p, [c_char_p]),  # deprecated alias
    "cohort_options_markdown": (c_char_p, []),  # deprecated alias
    # build.h
    "cohort_build_info": (STATUS, [POINTER(BuildInfo)]),
    "cohort_build_gpu_info": (STATUS, [c_int, POINTER(GpuInfo)]),
    # runtime.h
    "cohort_runtime_create": (STATUS, [H, HP]),
    "cohort_runtime_destroy": (None, [H]),
    "cohort_runtime_info": (STATUS, [H, POINTER(RuntimeInfo)]),
    "cohort_runtime_cpu_times": (STATUS, [H, POINTER(CpuTimes)]),
    "cohort_runtime_engine_stats": (STATUS, [H, POINTER(EngineStats)]),
    "cohort_runtime_memory_stats": (STATUS, [H, POINTER(MemoryStats)]),
    "cohort_runtime_empty_cache": (STATUS, [H]),
    "cohort_runtime_rank": (STATUS, [H, IP]),
    "cohort_runtime_size": (STATUS, [H, IP]),
    "cohort_runtime_device": (STATUS, [H, c_char_p, c_size_t, SZ]),
    "cohort_runtime_config": (STATUS, [H, HP]),
    "cohort_runtime_barrier": (STATUS, [H]),
    "cohort_runtime_mark_step": (STATUS, [H]),
    # collectives.h
    "cohort_allreduce_options_default": (STATUS, [POINTER(AllreduceOptions)]),
    "cohort_allreduce_async": (STATUS, [H, c_char_p, T, T, POINTER(AllreduceOptions), HP]),
    "cohort_allreduce": (STATUS, [H, c_char_p, T, T, POINTER(AllreduceOptions)]),
    "cohort_grouped_allreduce_async": (STATUS, [H, c_size_t, STRS, POINTER(T), POINTER(T),
                                                POINTER(AllreduceOptions), HP]),
    "cohort_grouped_allreduce": (STATUS, [H, c_size_t, STRS, POINTER(T), POINTER(T), POINTER(AllreduceOptions)]),
    "cohort_broadcast_async": (STATUS, [H, c_char_p, T, T, c_int, HP]),
    "cohort_broadcast": (STATUS, [H, c_char_p, T, T, c_int]),
    "cohort_allgather_async": (STATUS, [H, c_char_p, T, HP]),
    "cohort_allgather": (STATUS, [H, c_char_p, T, MT]),
    "cohort_alltoallv_async": (STATUS, [H, c_char_p, T, I64P, c_size_t, HP]),
    "cohort_alltoallv": (STATUS, [H, c_char_p, T, I64P, c_size_t, MT, I64P, c_size_t]),
    "cohort_alltoall_async": (STATUS, [H, c_char_p, T, I64P, HP]),  # deprecated alias
    "cohort_alltoall": (STATUS, [H, c_char_p, T, I64P, MT, I64P]),  # deprecated alias
    "cohort_reducescatter_async": (STATUS, [H, c_char_p, T, c_int, HP]),
    "cohort_reducescatter": (STATUS, [H, c_char_p, T, c_int, MT]),
    "cohort_barrier_async": (STATUS, [H, HP]),
    "cohort_barrier": (STATUS, [H]),
    "cohort_join_async": (STATUS, [H, HP]),
    "cohort_join": (STATUS, [H, IP]),
    "cohort_request_test": (STATUS, [H, IP]),
    "cohort_request_wait": (STATUS, [H]),
    "cohort_request_output": (STATUS, [H, MT]),
    "cohort_request_recv_splits": (STATUS, [H, I64P, c_size_t]),
    "cohort_request_last_joined": (STATUS, [H, IP]),
    "cohort_request_destroy": (None, [H]),
    # model.h
    "cohort_model_create": (STATUS, [H, c_char_p, H, HP]),
    "cohort_model_create_custom": (STATUS, [H, H, I64P, c_size_t, HP]),
    "cohort_model_add_layer": (STATUS, [H, c_char_p, c_char_p, IP, c_size_t, c_char_p, IP]),
    "cohort_model_destroy": (None, [H]),
    "cohort_model_num_params": (STATUS, [H, I64P]),
    "cohort_model_summary": (STATUS, [H, c_char_p, c_size_t, SZ]),
    "cohort_model_set_profiling": (STATUS, [H, c_int]),
    "cohort_model_profile": (STATUS, [H, c_char_p, c_size_t, SZ]),
    "cohort_model_materialize": (STATUS, [H]),
    "cohort_model_num_tensors": (STATUS, [H, SZ]),
    "cohort_model_param": (STATUS, [H, c_size_t, POINTER(c_char_p), T, T]),
    "cohort_model_set_grad_ready": (STATUS, [H, GradReadyFn, c_void_p]),
    "cohort_model_forward": (STATUS, [H, T, T]),
    "cohort_model_loss": (STATUS, [H, T, T, POINTER(c_float)]),
    "cohort_model_forward_backward": (STATUS, [H, T, T, POINTER(c_float)]),
    "cohort_model_io_shape": (STATUS, [H, I64P, I64P, I64P, I64P]),
    # pipeline.h
    "cohort_pipeline_create": (STATUS, [H, H, HP]),
    "cohort_pipeline_create_for_model": (STATUS, [H, H, HP]),
    "cohort_pipeline_create_from_memory": (STATUS, [H, H, T, T, HP]),
    "cohort_pipeline_destroy": (None, [H]),
    "cohort_pipeline_next": (STATUS, [H, POINTER(Batch)]),
    "cohort_pipeline_seek": (STATUS, [H, c_int64, c_int64]),
    "cohort_pipeline_position": (STATUS, [H, I64P, I64P]),
    "cohort_pipeline_info": (STATUS, [H, POINTER(PipelineInfo)]),
    "cohort_pipeline_steps_per_epoch": (STATUS, [H, I64P]),
    "cohort_pipeline_stats": (STATUS, [H, POINTER(PipelineStats)]),
    "cohort_pipeline_verdict": (STATUS, [H, c_char_p, c_size_t, SZ]),
    "cohort_data_pack": (STATUS, [H, c_char_p, c_char_p, c_int, DataReportFn, c_void_p, I64P]),
    "cohort_data_inspect": (STATUS, [H, c_char_p, c_int64, DataReportFn, c_void_p]),
    "cohort_data_verify": (STATUS, [H, c_char_p, DataReportFn, c_void_p, I64P]),
    # train.h
    "cohort_optimizer_create": (STATUS, [H, H, HP]),
    "cohort_optimizer_destroy": (None, [H]),
    "cohort_optimizer_set_run_length": (STATUS, [H, c_int64, c_int64]),
    "cohort_optimizer_state": (STATUS, [H, POINTER(c_double), I64P]),
    "cohort_optimizer_info": (STATUS, [H, POINTER(OptimizerInfo)]),
    "cohort_optimizer_broadcast": (STATUS, [H, c_int]),
    "cohort_optimizer_check_consistency": (STATUS, [H]),
    "cohort_optimizer_train_step": (STATUS, [H, POINTER(Batch), POINTER(TrainStats)]),
    "cohort_model_train_step": (STATUS, [H, H, POINTER(Batch), POINTER(TrainStats)]),  # deprecated alias
    "cohort_model_evaluate": (STATUS, [H, H, c_int64, POINTER(EvalResult)]),
    "cohort_optimizer_save_checkpoint": (STATUS, [H, c_char_p, POINTER(CheckpointInfo)]),
    "cohort_optimizer_load_checkpoint": (STATUS, [H, c_char_p, POINTER(CheckpointInfo), IP]),
    "cohort_metrics_create": (STATUS, [c_int64, HP]),
    "cohort_metrics_destroy": (None, [H]),
    "cohort_metrics_record": (STATUS, [H, c_double, c_double, c_double, c_double]),
    "cohort_metrics_summary": (STATUS, [H, POINTER(RateSummary)]),
    "cohort_run_summary_json": (STATUS, [POINTER(RunSummary), c_char_p, c_size_t, SZ]),
    "cohort_run_log_create": (STATUS, [H, H, HP]),
    "cohort_run_log_destroy": (None, [H]),
    "cohort_run_log_step": (STATUS, [H, POINTER(StepRecord)]),
    "cohort_run_log_eval": (STATUS, [H, c_int64, POINTER(EvalResult)]),
}

# Functions of the headers that the binding does not bind, with the reason.
NOT_BOUND = {}

# ---- finding and loading the library ----

SONAME = "libcohort.so.0"


class LibraryNotFound(ImportError):
    """libcohort could not be loaded; the message lists every place that was tried."""


def _candidates():
    """(where it came from, path) pairs, in the order they are tried."""
    env = os.environ.get("COHORT_LIBRARY")
    if env:
        return [("COHORT_LIBRARY", env)]  # the user's choice: nothing else is tried
    out = []
    try:
        from . import _build_config  # written by CMake into the build tree's and the installed copy
        for path in getattr(_build_config, "LIBRARIES", []):
            out.append((_build_config.ORIGIN, path))
    except ImportError:
        pass
    found = ctypes.util.find_library("cohort")
    out.append(("the system linker path", found or SONAME))
    return out


def _load():
    # RTLD_GLOBAL: Open MPI loads its components with dlopen and they need libmpi's
    # symbols in the global namespace (as mpi4py does it).
    mode = ctypes.RTLD_GLOBAL
    tried = []
    for origin, path in _candidates():
        if origin != "the system linker path" and not os.path.exists(path):
            tried.append(f"  {origin}: {path} (no such file)")
            continue
        try:
            cdll = ctypes.CDLL(path, mode=mode)
        except OSError as e:
            tried.append(f"  {origin}: {path} ({e})")
            continue
        if not hasattr(cdll, "cohort_version"):
            tried.append(f"  {origin}: {path} (not libcohort: it has no cohort_version)")
            continue
        return cdll, path
    raise LibraryNotFound("cohort: libcohort could not be loaded. Looked in:\n" + "\n".join(tried) +
                          "\nSet COHORT_LIBRARY=/path/to/libcohort.so.0, use the package from a build tree "
                          "(PYTHONPATH=<build>/launcher/python) or an install prefix, or add the library's "
                          "folder to LD_LIBRARY_PATH.")


class _Missing:
    def __init__(self, name, path):
        self.name, self.path = name, path

    def __call__(self, *args):
        from .errors import UnsupportedError
        raise UnsupportedError(3, f"{self.name} is not in {self.path}: this libcohort is older than the binding; "
                                  "use the package of the same build or install", self.name)


# What each C argument type takes, for the message of an argument ctypes refused.
_C_TYPE_WORDS = {c_int: "an int", c_int32: "an int", c_int64: "an int", c_uint: "an int >= 0",
                 c_size_t: "an int >= 0", c_uint64: "an int >= 0", c_double: "a number", c_float: "a number",
                 c_char_p: "a str"}


def caller(depth=1):
    """The binding's call ``depth`` frames above the function asking: "Model.train_step",
    "cohort.Model" for a constructor; None when that frame is not this package's."""
    frame = sys._getframe(depth + 1)
    if frame.f_globals.get("__package__") != __package__:
        return None
    code = frame.f_code
    name = getattr(code, "co_qualname", None)
    if name is None:  # Python < 3.11
        owner = frame.f_locals.get("self", frame.f_locals.get("cls"))
        owner = owner if isinstance(owner, type) else type(owner) if owner is not None else None
        name = f"{owner.__name__}.{code.co_name}" if owner is not None else code.co_name
    name = name.split(".<locals>")[0]
    return "cohort." + name[:-len(".__init__")] if name.endswith(".__init__") else name


class _Checked:
    """A bound C function: an argument that ctypes cannot convert raises
    ArgumentTypeError naming the function, the argument and what it takes."""

    __slots__ = ("fn", "name")

    def __init__(self, name, fn):
        self.fn, self.name = fn, name

    def __call__(self, *args):
        try:
            return self.fn(*args)
        except ctypes.ArgumentError as e:
            raise self._type_error(args, e, caller(1)) from None

    def _type_error(self, args, error, where):
        from .errors import ArgumentTypeError
        m = re.match(r"argument (\d+)", str(error))
        index = int(m.group(1)) - 1 if m else -1
        if 0 <= index < len(args):
            ctype = self.fn.argtypes[index]
            value = args[index]
            what = (f"{self.name}'s argument {index + 1} must be {_C_TYPE_WORDS.get(ctype, ctype.__name__)}, "
                    f"got {type(value).__name__} {repr(value)[:60]}")
        else:
            what = f"{self.name}: {error}"
        return ArgumentTypeError(f"{where}: {what}" if where else what, where or self.name)


class Library:
    """The loaded libcohort with every function of FUNCTIONS bound (or stubbed)."""

    def __init__(self):
        self.cdll, self.path = _load()
        self.missing = []
        for name, (restype, argtypes) in FUNCTIONS.items():
            try:
                fn = getattr(self.cdll, name)
            except AttributeError:
                self.missing.append(name)
                setattr(self, name, _Missing(name, self.path))
                continue
            fn.restype = status_t if restype is STATUS else restype
            fn.argtypes = argtypes
            if restype is STATUS:
                fn.errcheck = _check_status
            setattr(self, name, _Checked(name, fn))


# The library's hint for an unknown option speaks to a command line; in Python the
# lists are functions.
_HELP_HINT = "(see --help for the list of options)"
_PYTHON_HINT = "(cohort.option_names() lists the options, cohort.options_help() describes them)"


def _check_status(result, func, args):
    if result != 0:
        from .errors import error_from_status
        message = _LIB.cohort_last_error().decode("utf-8", "replace").replace(_HELP_HINT, _PYTHON_HINT)
        raise error_from_status(result, message, func.__name__)
    return result


_LIB = None


def lib():
    """The library, loaded on first use (``import cohort`` alone never loads it)."""
    global _LIB
    if _LIB is None:
        _LIB = Library()
    return _LIB


def text(value):
    """bytes from C → str ("" for NULL)."""
    return value.decode("utf-8", "replace") if value else ""


def arg(value):
    """str → bytes for a const char* argument (None stays NULL)."""
    if value is None:
        return None
    return os.fsencode(value) if isinstance(value, os.PathLike) else str(value).encode("utf-8")


def get_text(fn, *args):
    """Calls a (…, char* buffer, size_t size, size_t* needed) function twice: size, then text."""
    needed = c_size_t(0)
    try:
        fn(*args, None, 0, ctypes.byref(needed))
    except Exception:
        if needed.value == 0:
            raise
    buf = ctypes.create_string_buffer(max(needed.value, 1))
    fn(*args, buf, len(buf), None)
    return text(buf.value)


__all__ = ["lib", "FUNCTIONS", "NOT_BOUND", "STRUCTS", "LibraryNotFound"]
if sys.byteorder != "little":  # DLPack and cohort's files are little-endian here
    raise ImportError("cohort: the binding supports little-endian machines only")
