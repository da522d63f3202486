"""cohort's notebook helper: start jobs through ``cohortrun`` and get numbers back.

    import cohort
    summary = cohort.run(np=2, program="cohort-train", args=["--model=trivial"])
    rows = cohort.sweep(np=[1, 2, 4], program="cohort-train", args=["--model=trivial"])
    cohort.plot_scaling_efficiency(rows)
    rows = cohort.sweep(np=[1, 2], program="cohort-train", over={"batch_size": [32, 64, 128]})
    cohort.plot_throughput(rows)   # images/sec against the batch size, a line per rank count
    cohort.plot_scaling(rows)      # images/sec against ranks, with linear scaling dashed

Output streams into the notebook while the job runs; the run summary (the JSON line
that programs print with ``--json``, schema ``cohort.run/1``) comes back as a dict.
Standard library only, plus matplotlib for the plotting helpers.
"""
from .launch import (CohortRunError, find_cohortrun, format_table, is_summary_line, options_to_args, run,
                     sweep)
from .plots import plot_ratio, plot_real_vs_synthetic, plot_scaling, plot_scaling_efficiency, plot_throughput

__all__ = [
    "CohortRunError", "find_cohortrun", "format_table", "is_summary_line", "options_to_args", "run", "sweep",
    "plot_ratio", "plot_real_vs_synthetic", "plot_scaling", "plot_scaling_efficiency", "plot_throughput",
]
