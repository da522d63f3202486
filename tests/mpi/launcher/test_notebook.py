"""A real notebook, executed in a real Jupyter kernel (nbclient, ipykernel), that calls
`!cohortrun` and the Python helper, checked for its outputs and figures. Exits 77
(ctest: skipped) when nbclient, nbformat, ipykernel or matplotlib is missing."""
import os
import sys

try:
    import nbclient
    import nbformat
    import ipykernel  # noqa: F401
    import matplotlib  # noqa: F401
except ImportError as e:
    print(f"SKIPPED: {e.name} is not installed (Debian: python3-nbclient python3-ipykernel python3-matplotlib)")
    sys.exit(77)

COHORTRUN = os.environ["COHORTRUN"]
PROBE = os.environ["LAUNCHER_PROBE"]

CELLS = [
    "import os, cohort\nPROBE = os.environ['LAUNCHER_PROBE']",
    "!cohortrun -np 2 {PROBE} --summary 100 --print-env COHORT_PROGRESS",
    "summary = cohort.run(np=2, program=PROBE, args=['--summary', '100'])\n"
    "print('images/sec from the summary:', summary['images_per_sec']['median'])",
    "rows = cohort.sweep(np=[1, 2], program=PROBE, args=['--summary', '100'], echo=False)\n"
    "print(cohort.format_table(rows))",
    "%matplotlib inline\ncohort.plot_scaling_efficiency(rows);",
    "cohort.plot_real_vs_synthetic({'alexnet': (26791, 3250), 'trivial': (53000, 3200)});",
]
# The real trainer, when it is built: `!cohortrun` streams its output and cohort.run
# returns its run summary.
TRAIN = os.environ.get("COHORT_TRAIN", "")
TINY = "['--model=trivial', '--image_size=16', '--batch_size=8', '--num_iter=15', '--num_warmup_batches=2', " \
       "'--compute_threads=1', '--decode_threads=1', '--json']"
if TRAIN:
    CELLS += [
        "TRAIN = os.environ['COHORT_TRAIN']\n!cohortrun -np 2 {TRAIN} --model=trivial --image_size=16 --batch_size=8 "
        "--num_iter=15 --num_warmup_batches=2 --compute_threads=1 --decode_threads=1 --json",
        "real = cohort.run(np=2, program=TRAIN, args=" + TINY + ", echo=False)\n"
        "print('trainer summary:', real['schema'], real['model'], real['ranks'], real['images_per_sec']['median'] > 0)",
    ]


def text_of(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def main():
    # The kernel inherits this environment: cohortrun on PATH, the helper on PYTHONPATH.
    os.environ["PATH"] = os.path.dirname(COHORTRUN) + os.pathsep + os.environ.get("PATH", "")
    os.environ.pop("MPLBACKEND", None)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()

    shell = text_of(nb.cells[1])
    assert "rank 0 of 2 ready" in shell and "rank 1 of 2 ready" in shell, shell
    assert '{"schema": "cohort.run/1"' in shell, shell
    # IPython runs `!` commands on a pty, which ends lines with \r\n; nothing else may
    # move the cursor: plain progress, no bars, no ANSI codes.
    assert "rank 1 COHORT_PROGRESS=plain" in shell, shell
    assert "\r" not in shell.replace("\r\n", "\n") and "\x1b" not in shell, repr(shell)
    run = text_of(nb.cells[2])
    assert "step 10 images/sec: 190.0" in run and "images/sec from the summary: 190.0" in run, run
    table = text_of(nb.cells[3])
    assert "    2       190.0     1.90x       95.0%" in table, table
    for index in (4, 5):
        images = [o for o in nb.cells[index].outputs if o.output_type == "display_data" and "image/png" in o.data]
        assert len(images) == 1, nb.cells[index].outputs
    if TRAIN:
        shell = text_of(nb.cells[6])
        assert "Num ranks:   2" in shell and "total images/sec" in shell, shell
        assert '{"schema": "cohort.run/1", "model": "trivial", "ranks": 2' in shell, shell
        assert "\r" not in shell.replace("\r\n", "\n") and "\x1b" not in shell, repr(shell)
        assert "trainer summary: cohort.run/1 trivial 2 True" in text_of(nb.cells[7]), text_of(nb.cells[7])
    print("notebook: all cells ran; outputs and figures as expected")


if __name__ == "__main__":
    main()
