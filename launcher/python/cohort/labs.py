"""What the labs' notebooks and the course checker need besides cohort.run: small
datasets made on the spot (a Fashion-MNIST subset, a folder of photos as JPEGs), and
allreduce_perf's table as rows. Standard library only (Pillow for the photos)."""
import glob
import gzip
import math
import os
import random
import struct

from .launch import _failure, _launcher_args, _stream, find_cohortrun

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def _idx_subset(source, target, count):
    opener = gzip.open if source.endswith(".gz") else open
    with opener(source, "rb") as f:
        magic = f.read(4)
        ndim = magic[3]
        dims = list(struct.unpack(">" + "I" * ndim, f.read(4 * ndim)))
        count = min(count, dims[0])
        body = f.read(count * math.prod(dims[1:]))
    dims[0] = count
    with open(target, "wb") as f:
        f.write(magic + struct.pack(">" + "I" * ndim, *dims) + body)
    return count


def fashion_mnist_subset(directory, train=60000, test=10000, source=FASHION_MNIST):
    """Writes the first `train` and `test` samples of Fashion-MNIST as IDX files into
    `directory` (a cohort data_dir); returns {"train": n, "t10k": m}."""
    os.makedirs(directory, exist_ok=True)
    sizes = {}
    for split, count in (("train", train), ("t10k", test)):
        for kind in ("images-idx3", "labels-idx1"):
            name = f"{split}-{kind}-ubyte"
            found = [os.path.join(source, n) for n in (name + ".gz", name) if os.path.exists(os.path.join(source, n))]
            if not found:
                raise FileNotFoundError(f"Fashion-MNIST is not in {source} (Debian: apt install dataset-fashion-mnist)")
            sizes[split] = _idx_subset(found[0], os.path.join(directory, name), count)
    return sizes


def _photo_sources():
    """Photographs that come with Debian's Python packages (scikit-image, matplotlib)."""
    found = []
    try:
        import importlib.util
        spec = importlib.util.find_spec("skimage")
        if spec and spec.submodule_search_locations:
            data = os.path.join(list(spec.submodule_search_locations)[0], "data")
            for name in ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png",
                         "color.png", "hubble_deep_field.jpg", "immunohistochemistry.png"):
                if os.path.exists(os.path.join(data, name)):
                    found.append(os.path.join(data, name))
    except ImportError:
        pass
    try:
        import matplotlib
        found += glob.glob(os.path.join(matplotlib.get_data_path(), "sample_data", "grace_hopper.jpg"))
    except ImportError:
        pass
    return found


def photo_folder(directory, images=128, size=(500, 375), classes=4, quality=90, seed=0):
    """An image folder of JPEGs (`classes` sub-folders) cut from the photographs that
    come with scikit-image and matplotlib: random crops resized to `size` (ImageNet's
    typical 500x375). Returns the number of files written."""
    from PIL import Image
    sources = _photo_sources()
    if not sources:
        raise FileNotFoundError("no sample photographs found (Debian: python3-skimage or python3-matplotlib)")
    rng = random.Random(seed)
    photos = [Image.open(p).convert("RGB") for p in sources]
    for c in range(classes):
        os.makedirs(os.path.join(directory, f"class{c}"), exist_ok=True)
    for i in range(images):
        photo = photos[i % len(photos)]
        w, h = photo.size
        cw, ch = rng.randint(w // 2, w), rng.randint(h // 2, h)
        x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
        crop = photo.crop((x, y, x + cw, y + ch)).resize(size)
        crop.save(os.path.join(directory, f"class{i % classes}", f"{i:05d}.jpg"), quality=quality)
    return images


# ---- allreduce_perf ----

_COLUMNS = ["size", "count", "type", "redop", "root", "time_us", "algbw", "busbw", "wrong", "inplace_time_us",
            "inplace_algbw", "inplace_busbw", "inplace_wrong", "raw_time_us", "raw_busbw", "ratio"]


def parse_allreduce_perf(lines):
    """allreduce_perf's table (nccl-tests' columns, and with --raw plain MPI's) as a
    list of dicts: size, count, type, redop, root, time_us, algbw, busbw, wrong, the
    same prefixed inplace_, and raw_time_us, raw_busbw, ratio."""
    rows = []
    for line in lines:
        fields = line.split()
        if not fields or line.lstrip().startswith("#") or not fields[0].isdigit() or len(fields) < 13:
            continue
        row = {}
        for name, value in zip(_COLUMNS, fields):
            row[name] = value if name in ("type", "redop") else (int(value) if value.lstrip("-").isdigit()
                                                               else float(value))
        rows.append(row)
    return rows


def allreduce_perf(np=2, begin="8", end="64M", factor=4, iters=20, warmup=5, raw=True, collective="allreduce",
                   program="allreduce_perf", settings=None, env=None, echo=False, cohortrun=None):
    """Runs ``cohortrun -np NP allreduce_perf -b BEGIN -e END -f FACTOR [--raw]`` and
    returns its table (parse_allreduce_perf). Raises CohortRunError when it fails."""
    args = ["-b", str(begin), "-e", str(end), "-f", str(factor), "-n", str(iters), "-w", str(warmup)]
    if collective != "allreduce":
        args += ["--coll", collective]
    if raw:
        args.append("--raw")
    command = [cohortrun or find_cohortrun(), "-np", str(np)]
    command += _launcher_args(None, None, settings, env, None, None, False, None, False)
    command += ["--", str(program)] + args
    lines = []
    status, tail = _stream(command, echo, lines.append)
    if status != 0:
        raise _failure(f"cohortrun -np {np} {program}", status, tail)
    return parse_allreduce_perf(lines)
