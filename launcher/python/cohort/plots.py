"""The labs' figures: real-data vs synthetic images/sec per model (equal axes), the
real/synthetic ratio per model, scaling efficiency by rank count, bus bandwidth by
message size, and from a sweep's rows (cohort.sweep) the throughput-saturation plot
(images/sec against a swept setting such as the batch size) and the scaling plot
(images/sec against ranks). Each helper draws on ``ax`` (a new figure when None) and
returns the Axes."""


def _axes(ax, size=(5, 5)):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt
    _, ax = plt.subplots(figsize=size)
    return ax


def _rate(value):
    """A number, or a run summary's global images/sec median."""
    if isinstance(value, dict):
        return float(value["images_per_sec"]["median"])
    return float(value)


def plot_real_vs_synthetic(results, ax=None, title="Real data vs synthetic data"):
    """results: {model: (synthetic, real)}, each a number or a run summary. A scatter
    with equal axes and the y = x line: points far below it are input-bound."""
    ax = _axes(ax)
    synthetic = [_rate(s) for s, _ in results.values()]
    real = [_rate(r) for _, r in results.values()]
    ax.scatter(synthetic, real)
    for model, x, y in zip(results, synthetic, real):
        ax.annotate(model, (x, y), textcoords="offset points", xytext=(4, 4))
    top = 1.08 * max(synthetic + real + [1.0])
    ax.plot([0, top], [0, top], linestyle="--", linewidth=1, color="gray", label="real = synthetic")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_aspect("equal")
    ax.set_xlabel("synthetic data, images/sec")
    ax.set_ylabel("real data, images/sec")
    ax.set_title(title)
    ax.legend(loc="upper left")
    return ax


def plot_ratio(results, ax=None, title="Real / synthetic images/sec"):
    """results: {model: (synthetic, real)}. A bar per model of real / synthetic."""
    ax = _axes(ax, (6, 4))
    models = list(results)
    ratios = [_rate(r) / _rate(s) for s, r in results.values()]
    bars = ax.bar(models, ratios)
    for bar, ratio in zip(bars, ratios):
        ax.annotate(f"{ratio:.2f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                    va="bottom", textcoords="offset points", xytext=(0, 2))
    ax.axhline(1.0, linestyle="--", linewidth=1, color="gray")
    ax.set_ylim(0, max(ratios + [1.0]) * 1.15)
    ax.set_ylabel("real / synthetic")
    ax.set_title(title)
    return ax


def plot_scaling_efficiency(rows, ax=None, title="Scaling efficiency"):
    """rows: a sweep table (list of dicts with ranks and efficiency), or {label: rows}
    for several series. Efficiency in percent against the number of ranks, with 100%."""
    ax = _axes(ax, (6, 4))
    series = rows if isinstance(rows, dict) else {"measured": rows}
    ranks_seen = set()
    for label, table in series.items():
        points = [(r["ranks"], 100 * r["efficiency"]) for r in table if r.get("efficiency") is not None]
        ranks_seen.update(p[0] for p in points)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.axhline(100, linestyle="--", linewidth=1, color="gray", label="ideal")
    ax.set_xticks(sorted(ranks_seen))
    ax.set_ylim(0, 110)
    ax.set_xlabel("ranks")
    ax.set_ylabel("efficiency, %")
    ax.set_title(title)
    ax.legend()
    return ax


def plot_bandwidth(rows, ax=None, title="Allreduce bus bandwidth"):
    """rows: cohort.labs.allreduce_perf()'s table, or {label: rows}. Bus bandwidth
    against message size (log scale), cohort's out-of-place and in-place, and plain
    MPI_Allreduce when the table has it (--raw)."""
    ax = _axes(ax, (7, 4))
    series = rows if isinstance(rows, dict) else {"cohort": rows}
    for label, table in series.items():
        sizes = [r["size"] for r in table]
        ax.plot(sizes, [r["busbw"] for r in table], marker="o", label=f"{label} (out of place)")
        ax.plot(sizes, [r["inplace_busbw"] for r in table], marker=".", linestyle=":", label=f"{label} (in place)")
        if table and "raw_busbw" in table[0]:
            ax.plot(sizes, [r["raw_busbw"] for r in table], marker="s", linestyle="--", label="MPI_Allreduce")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size, bytes")
    ax.set_ylabel("bus bandwidth, GB/s")
    ax.set_title(title)
    ax.legend()
    return ax


def _number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _series(rows, by):
    """Rows that have a rate, grouped by the value of `by` (a key or a function of a row)."""
    groups = {}
    for r in rows:
        if r.get("images_per_sec") is None:
            continue
        groups.setdefault(by(r), []).append(r)
    return groups


def plot_throughput(rows, setting="batch_size", ax=None, title=None):
    """The throughput-saturation plot: images/sec against a swept setting (the batch
    size by default), a line per rank count. rows: cohort.sweep(..., over={setting: ...}).
    Failed runs are left out."""
    ax = _axes(ax, (6, 4))
    for ranks, table in sorted(_series(rows, lambda r: r["ranks"]).items()):
        points = sorted((_number(r["settings"][setting]), r["images_per_sec"]) for r in table
                        if _number((r.get("settings") or {}).get(setting)) is not None)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                label=f"{ranks} rank{'s' if ranks != 1 else ''}")
    if setting == "batch_size":
        ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(setting.replace("_", " ") + (" per rank" if setting == "batch_size" else ""))
    ax.set_ylabel("images/sec")
    ax.set_title(title or f"Throughput against {setting.replace('_', ' ')}")
    ax.legend()
    return ax


def plot_scaling(rows, ax=None, title="Scaling"):
    """The scaling plot: images/sec against ranks, a line per combination of swept
    settings, each with its ideal (linear from its smallest size). rows: cohort.sweep."""
    ax = _axes(ax, (6, 4))
    key = lambda r: ", ".join(f"{k}={v}" for k, v in (r.get("settings") or {}).items()) or "measured"
    for label, table in _series(rows, key).items():
        table = sorted(table, key=lambda r: r["ranks"])
        line, = ax.plot([r["ranks"] for r in table], [r["images_per_sec"] for r in table], marker="o", label=label)
        base = table[0]
        ideal = [base["images_per_sec"] * r["ranks"] / base["ranks"] for r in table]
        ax.plot([r["ranks"] for r in table], ideal, linestyle="--", linewidth=1, color=line.get_color())
    ax.set_xticks(sorted({r["ranks"] for r in rows}))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("ranks")
    ax.set_ylabel("images/sec (dashed: linear scaling)")
    ax.set_title(title)
    ax.legend()
    return ax
