"""The processor a benchmark ran on, in one line: a CPU goal holds on every processor the
project runs on, so a benchmark's table names the one it was measured on (compare.py,
bench_allreduce.py and scaling.py print it). The model name alone
does not tell (a VM may show only "AMD EPYC"): the line adds the x86 family and model,
the core generation where they name one, the CPUs this process may use, and the
instruction sets the CPU backend's kernels depend on.
    from processor import describe; print("processor:", describe())"""
import os


def _cpuinfo():
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first CPU is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def cpu_flags():
    """The first CPU's instruction-set flags (empty where /proc/cpuinfo cannot be read)."""
    return set(_cpuinfo().get("flags", "").split())


# Intel names its server cores by model number (family 6); AVX512-BF16 and AMX alone do
# not tell Cooper Lake from Sapphire or Emerald Rapids, and a VM may hide AMX or report a
# model number of a client core (167, Rocket Lake, beside AMX).
_INTEL_SERVER = {85: "Skylake or Cascade Lake", 106: "Ice Lake",
                 143: "Sapphire Rapids", 207: "Emerald Rapids", 173: "Granite Rapids",
                 175: "Sierra Forest"}


def _generation(vendor, family, model, flags):
    if vendor == "AuthenticAMD":
        if family == 26:
            return "Zen 5"
        if family == 25:
            return "Zen 4" if "avx512f" in flags else "Zen 3"
    if vendor == "GenuineIntel" and family == 6:
        if model == 85 and "avx512_bf16" in flags:
            return "Cooper Lake"
        if model in _INTEL_SERVER:
            return _INTEL_SERVER[model]
        if "amx_bf16" in flags:
            return "Sapphire Rapids or newer, by its AMX (no AMX processor has this model number)"
        return ""
    return ""


def describe():
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    name = info.get("model name", "unknown processor")
    try:
        family, model = int(info.get("cpu family", "")), int(info.get("model", ""))
    except ValueError:
        return f"{name}, {os.cpu_count()} CPUs"
    generation = _generation(info.get("vendor_id", ""), family, model, flags)
    gen = f": {generation}" if generation else ""
    isa = ["AVX-512" if "avx512f" in flags else ("AVX2" if "avx2" in flags else "no AVX2")]
    isa.append("AVX512-BF16" if "avx512_bf16" in flags else "no AVX512-BF16")
    if "avx512_fp16" in flags:
        isa.append("AVX512-FP16")
    isa.append("AMX" if "amx_bf16" in flags else "no AMX")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{name} (x86 family {family} model {model}{gen}), {cpus} CPUs, {', '.join(isa)}"


if __name__ == "__main__":
    print(describe())
