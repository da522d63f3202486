"""The labs' notebooks (docs/notebooks) executed in a real Jupyter kernel (nbclient,
ipykernel) at the small sizes of COHORT_NOTEBOOK_SIZE=ci: every cell runs without an
error and each notebook draws its figures. `python3 test_notebooks.py NOTEBOOK
FIGURES` (the least number of figures it must produce). Exits 77 (ctest: skipped)
without nbclient, nbformat, ipykernel or matplotlib."""
import os
import sys
import tempfile
import time

try:
    import ipykernel  # noqa: F401
    import matplotlib  # noqa: F401
    import nbclient
    import nbformat
except ImportError as e:
    print(f"SKIPPED: {e.name} is not installed (Debian: python3-nbclient python3-ipykernel python3-matplotlib)")
    sys.exit(77)

NOTEBOOKS = os.environ.get("COHORT_NOTEBOOKS", os.path.join(os.path.dirname(__file__), "..", "..", "docs",
                                                               "notebooks"))


def figures(cell):
    return sum(1 for o in cell.get("outputs", []) if o.get("output_type") in ("display_data", "execute_result")
               and "image/png" in o.get("data", {}))


def main(name, least):
    os.environ["COHORT_NOTEBOOK_SIZE"] = "ci"
    os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend draws the figures
    with open(os.path.join(NOTEBOOKS, name)) as f:
        nb = nbformat.read(f, as_version=4)
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as cwd:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": cwd}}).execute()
    drawn = sum(figures(c) for c in nb.cells if c.cell_type == "code")
    for c in nb.cells:
        for o in c.get("outputs", []):
            if o.get("output_type") == "stream" and o.get("name") == "stdout":
                sys.stdout.write(o["text"])
    print(f"\n{name}: every cell ran in {time.monotonic() - start:.1f} s; {drawn} figure(s)")
    if drawn < least:
        print(f"{name} drew {drawn} figure(s), expected at least {least}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
