"""cohort from Python: start jobs through ``cohortrun`` and read their run summaries
(the notebook helper), and drive the library itself through its C API (the binding).

    import cohort
    summary = cohort.run(np=2, program="cohort-train", args=["--model=trivial"])
    rows = cohort.sweep(np=[1, 2, 4], program="cohort-train", args=["--model=trivial"])
    cohort.plot_scaling_efficiency(rows)
    rows = cohort.sweep(np=[1, 2], program="cohort-train", over={"batch_size": [32, 64, 128]})
    cohort.plot_throughput(rows)   # images/sec against the batch size, a line per rank count
    cohort.plot_scaling(rows)      # images/sec against ranks, with linear scaling dashed

    with cohort.Runtime() as rt:                     # the binding (ctypes over libcohort)
        model = cohort.Model(rt, "mnist_cnn")
        ...

The helper needs the standard library only (matplotlib for the plots). The binding
loads libcohort on first use (``COHORT_LIBRARY``, this package's build tree or install
prefix, or the system linker path) and needs NumPy for arrays.
"""
from .binding import (Batch, Config, Metrics, Model, Optimizer, Parameter, Pipeline, Record, Request, RunLog,
                      Runtime, build_info, data_inspect, data_pack, data_verify, describe_option, finalize, gpu_info,
                      last_error, option_names, options_help, options_markdown, run_summary_json, status_string,
                      version, version_string)
from ._capi import LibraryNotFound
from ._dlpack import ManagedTensor, TensorView
from .errors import (ArgumentTypeError, CancelledError, CohortError, CohortIOError, CorruptDataError, CUBLASError,
                     CUDAError, CUDNNError, DNNLError, EndOfDataError, InternalError, InvalidArgumentError,
                     InvalidStateError, JPEGError, MismatchError, MPIError, NCCLError, OutOfMemoryError, PeerLostError,
                     PeerShutdownError, StalledError, UnsupportedError)
from .launch import (CohortRunError, find_cohortrun, find_program, format_table, is_summary_line, options_to_args,
                     run, sweep)
from . import labs
from .plots import (plot_bandwidth, plot_ratio, plot_real_vs_synthetic, plot_scaling, plot_scaling_efficiency,
                    plot_throughput)

__all__ = [
    # the notebook helper
    "CohortRunError", "find_cohortrun", "find_program", "format_table", "is_summary_line", "options_to_args", "run",
    "sweep", "plot_bandwidth", "plot_ratio", "plot_real_vs_synthetic", "plot_scaling", "plot_scaling_efficiency",
    "plot_throughput", "labs",
    # the binding
    "Batch", "Config", "Metrics", "Model", "Optimizer", "Parameter", "Pipeline", "Record", "Request", "RunLog",
    "Runtime", "ManagedTensor", "TensorView", "LibraryNotFound", "build_info", "data_inspect", "data_pack",
    "data_verify", "describe_option", "finalize", "gpu_info", "last_error", "option_names", "options_help",
    "options_markdown", "run_summary_json", "status_string", "version", "version_string",
    # errors
    "CohortError", "InvalidArgumentError", "ArgumentTypeError", "InvalidStateError", "UnsupportedError",
    "MismatchError", "StalledError", "CancelledError", "EndOfDataError", "OutOfMemoryError", "CohortIOError",
    "CorruptDataError", "InternalError", "MPIError", "PeerLostError", "PeerShutdownError", "CUDAError", "NCCLError",
    "CUDNNError", "CUBLASError", "JPEGError", "DNNLError",
]
