"""Running cohortrun from Python: stream its output, return the run summary."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

SUMMARY_SCHEMA = "cohort.run/1"


class CohortRunError(RuntimeError):
    """cohortrun failed: bad input (status 2), a failing rank, or a stopped job.

    ``returncode`` is cohortrun's exit status and ``output`` the last lines it printed
    (the line naming the failing rank among them)."""

    def __init__(self, message, returncode, output):
        super().__init__(message)
        self.returncode = returncode
        self.output = output


def find_cohortrun():
    """The cohortrun to use: $COHORTRUN, the build tree this package was copied into,
    or cohortrun on PATH."""
    candidates = [os.environ.get("COHORTRUN")]
    try:
        from . import _build_config  # written by CMake into the build tree's copy
        candidates.append(_build_config.COHORTRUN)
    except ImportError:
        pass
    candidates.append(shutil.which("cohortrun"))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError("cohortrun was not found: set COHORTRUN=/path/to/cohortrun, put it on PATH, or use "
                            "this package from the build tree (PYTHONPATH=<build>/launcher/python)")


def find_program(name):
    """A cohort program (cohort-train, allreduce_perf, ...): the one of this package's
    build tree or install prefix, else the one on PATH, else the name itself (cohortrun
    then says it was not found)."""
    candidates = []
    try:
        from . import _build_config
        candidates.append(getattr(_build_config, "PROGRAMS", {}).get(name))
        if getattr(_build_config, "BINDIR", None):
            candidates.append(os.path.join(_build_config.BINDIR, name))
    except ImportError:
        pass
    candidates.append(shutil.which(name))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return name


_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")


def _untagged(line):
    """The line without the "[1,0]<stdout>:" prefix that --tag-output adds."""
    return _TAG.sub("", line, count=1)


def is_summary_line(line):
    """True for a run-summary line (after any --tag-output prefix): a JSON object whose
    "schema" is "cohort.run/1"."""
    text = _untagged(line).strip()
    if not text.startswith("{") or SUMMARY_SCHEMA not in text:
        return False
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and value.get("schema") == SUMMARY_SCHEMA


def options_to_args(options):
    """{"fusion_threshold_mb": 64, "json": True} → ["--fusion_threshold_mb=64", "--json=true"]."""
    args = []
    for key, value in (options or {}).items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        args.append(f"--{key}={value}")
    return args


def _launcher_args(hosts, hostfile, settings, env, mpi_args, nccl_debug, tag_output, output_dir, json_summary):
    args = []
    if hosts:
        args += ["-H", hosts if isinstance(hosts, str) else ",".join(hosts)]
    if hostfile:
        args += ["--hostfile", str(hostfile)]
    args += options_to_args(settings)
    for name, value in (env or {}).items():
        args += ["--env", f"{name}={value}"]
    if mpi_args:
        args += ["--mpi-args", mpi_args]
    if nccl_debug:
        args += ["--nccl-debug", nccl_debug]
    if tag_output:
        args.append("--tag-output")
    if output_dir:
        args += ["--output-dir", str(output_dir)]
    if json_summary:
        args.append("--json")
    return args


def _stream(command, echo, on_line=None):
    """Runs command, echoing each line as it arrives; returns (status, last lines)."""
    tail = []
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            errors="replace")
    try:
        for line in proc.stdout:
            if echo:
                sys.stdout.write(line)
                sys.stdout.flush()
            tail.append(line.rstrip("\n"))
            del tail[:-40]
            if on_line:
                on_line(line)
        proc.wait()
    except KeyboardInterrupt:
        # A notebook's "interrupt kernel": cohortrun forwards it and tears the job down.
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        proc.stdout.close()
    return proc.returncode, tail


def _failure(what, status, tail):
    reason = next((l for l in reversed(tail) if l.startswith("cohortrun: ")), None)
    return CohortRunError(f"{what} failed with exit status {status}" + (f" ({reason})" if reason else ""), status,
                          "\n".join(tail))


def run(np, program, args=(), *, hosts=None, hostfile=None, settings=None, env=None, mpi_args=None,
        nccl_debug=None, tag_output=False, output_dir=None, json_summary=True, echo=True, check=True,
        cohortrun=None):
    """Runs ``cohortrun -np NP [options] -- PROGRAM ARGS`` and returns its run summary.

    Output streams to this process's stdout (a notebook cell) while the job runs.
    ``settings`` are library options ({"batch_size": 64} → --batch_size=64), ``env``
    extra variables for every rank, ``json_summary`` asks the program for its summary
    line (--json). Returns the summary as a dict, or None when the program printed none.
    Raises CohortRunError when the job fails (``check``) and KeyboardInterrupt after
    stopping the job when interrupted."""
    command = [cohortrun or find_cohortrun(), "-np", str(np)]
    command += _launcher_args(hosts, hostfile, settings, env, mpi_args, nccl_debug, tag_output, output_dir,
                              json_summary)
    command += ["--", str(program)] + [str(a) for a in args]
    found = []
    status, tail = _stream(command, echo, lambda line: found.append(line) if is_summary_line(line) else None)
    if status != 0 and check:
        raise _failure(f"cohortrun -np {np} {program}", status, tail)
    return json.loads(_untagged(found[-1])) if found else None


def _setting_text(value):
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def sweep(np, program, args=(), *, over=None, hosts=None, hostfile=None, settings=None, env=None, mpi_args=None,
          nccl_debug=None, out=None, echo=True, check=True, cohortrun=None):
    """Runs ``cohortrun sweep -np N1,N2,… [--over KEY=V1,V2,…]…`` and returns its table as a
    list of dicts (ranks, settings, images_per_sec, speedup, efficiency, loss, top1,
    status, exit_status, error, summary), one per run of the cross product.

    ``over`` maps library settings to the values to sweep ({"batch_size": [32, 64]});
    speedup and efficiency compare each run with the smallest size of the same settings.
    ``out`` is the prefix of the CSV and JSON files cohortrun writes (a temporary one
    when None). A failed run is a row with status "failed"; with ``check`` true the call
    then raises CohortRunError after the whole sweep."""
    sizes = ",".join(str(n) for n in (np if isinstance(np, (list, tuple)) else [np]))
    with tempfile.TemporaryDirectory() as scratch:
        prefix = str(out) if out else os.path.join(scratch, "sweep")
        command = [cohortrun or find_cohortrun(), "sweep", "-np", sizes, "--sweep-out", prefix]
        for key, values in (over or {}).items():
            values = values if isinstance(values, (list, tuple)) else [values]
            command += ["--over", f"{key}=" + ",".join(_setting_text(v) for v in values)]
        command += _launcher_args(hosts, hostfile, settings, env, mpi_args, nccl_debug, False, None, False)
        command += ["--", str(program)] + [str(a) for a in args]
        status, tail = _stream(command, echo)
        rows = []
        if os.path.exists(prefix + ".json"):
            with open(prefix + ".json") as f:
                rows = json.load(f)["runs"]
    if status != 0 and check:
        raise _failure(f"cohortrun sweep -np {sizes} {program}", status, tail)
    return rows


def format_table(rows):
    """The sweep's table as text, as cohortrun sweep prints it (a column per swept setting)."""
    keys = list((rows[0].get("settings") or {}) if rows else {})
    widths = [max([len(k)] + [len(str((r.get("settings") or {}).get(k, ""))) for r in rows]) for k in keys]
    lines = ["ranks" + "".join(f"  {k:<{w}}" for k, w in zip(keys, widths)) + "  images/sec   speedup  efficiency"]
    for r in rows:
        cells = "".join(f"  {str((r.get('settings') or {}).get(k, '')):<{w}}" for k, w in zip(keys, widths))
        if r.get("images_per_sec") is None:
            lines.append(f"{r['ranks']:5d}{cells}  {'-':>10}  {'-':>8}  {'-':>10}  (failed: {r.get('error')})")
        else:
            lines.append(f"{r['ranks']:5d}{cells}  {r['images_per_sec']:10.1f}  {r['speedup']:7.2f}x  "
                         f"{100 * r['efficiency']:9.1f}%")
    return "\n".join(lines)
