"""The PyTorch reference for cohort's ResNet-50 training speed on one GPU: torchvision's
resnet50, synthetic data made on the GPU once, SGD (lr 0.1, momentum 0.9, no weight
decay), cudnn.benchmark on, one GPU, eager mode. Prints one JSON line:

  {"schema": "cohort.torch_resnet50/1", "images_per_sec": …, "step_ms": …,
   "peak_memory_bytes": …, "peak_reserved_bytes": …,
   "device_name": …, "torch": …, "torchvision": …, "cudnn": …, "cuda": …, …}

The peaks are PyTorch's caching allocator's over the timed steps (torch.cuda.
max_memory_allocated and max_memory_reserved, reset after the warm-up, whose
cudnn.benchmark search takes its workspaces from that cache; cohort's search is
cudnnFind's own), comparable with cohort's run summary's "device_memory": neither
counts the CUDA context nor cuDNN's and cuBLAS's own memory.

Precisions: f32 with TF32 for convolutions and matrix products (cudnn.allow_tf32 and
cuda.matmul.allow_tf32); f16 mixed: autocast(float16) + GradScaler; bf16 mixed:
autocast(bfloat16), no scaler. NHWC is channels_last (model and input), NCHW
contiguous. The timed steps run back to back between two CUDA events (no host sync
inside them); the warm-up steps before them hold cuDNN's algorithm search.

Exit status: 0 measured; 77 nothing measured: torch or torchvision does not import, or
no GPU (the reason is printed); 2 bad usage; 1 the run failed.
Usage: torch_resnet50.py [--precision f32|f16|bf16] [--layout NHWC|NCHW]
                         [--batch_size 256] [--warmup 10] [--steps 30] [--compile]"""
import argparse
import json
import sys
import warnings

NAME = "torch_resnet50"


def parse_args():
    p = argparse.ArgumentParser(prog=NAME, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--precision", choices=["f32", "f16", "bf16"], default="f32")
    p.add_argument("--layout", choices=["NHWC", "NCHW"], default="NHWC")
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--warmup", type=int, default=10, help="steps before the timed ones (default 10)")
    p.add_argument("--steps", type=int, default=30, help="timed steps (default 30)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (not part of the reference)")
    a = p.parse_args()
    for flag, value, least in (("--batch_size", a.batch_size, 1), ("--warmup", a.warmup, 0),
                               ("--steps", a.steps, 1)):
        if value < least:
            p.error(f"{flag} must be >= {least}, got {value}")
    return a


def nothing_measured(why):
    print(f"{NAME}: nothing measured: {why}", file=sys.stderr)
    sys.exit(77)


def cudnn_version(torch):
    v = torch.backends.cudnn.version()  # 91900 for cuDNN 9.19.0; 8902 for 8.9.2
    if v is None:
        return None
    major = v // 10000 if v >= 10000 else v // 1000
    rest = v % 10000 if v >= 10000 else v % 1000
    return f"{major}.{rest // 100}.{rest % 100}"


def main():
    a = parse_args()
    try:
        import torch
        import torch.nn.functional as F
        import torchvision
    except ImportError as e:
        nothing_measured(f"cannot import torch and torchvision with {sys.executable} ({e})")
    if a.compile and not hasattr(torch, "compile"):
        print(f"{NAME}: --compile needs PyTorch 2.0 or later (this is {torch.__version__})", file=sys.stderr)
        sys.exit(2)
    if not torch.cuda.is_available():
        nothing_measured(f"no GPU: torch.cuda.is_available() is False (torch {torch.__version__}, "
                         f"built with CUDA {torch.version.cuda})")

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.backends.cudnn.benchmark = True
    # PyTorch 2.9 and later warn that these flags give way to fp32_precision; they still
    # set the same math, and they are what users of earlier versions set. f16 and bf16
    # keep PyTorch's defaults (autocast runs convolutions and products in 16 bits).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if a.precision == "f32":
            torch.backends.cudnn.allow_tf32 = True
            torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = {"tf32_conv": bool(torch.backends.cudnn.allow_tf32),
                "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32)}
    torch.manual_seed(0)
    fmt = torch.channels_last if a.layout == "NHWC" else torch.contiguous_format

    model = torchvision.models.resnet50().to(dev, memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0)
    net = torch.compile(model) if a.compile else model
    x = torch.randn(a.batch_size, 3, 224, 224, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, 1000, (a.batch_size,), device=dev)
    half = {"f32": None, "f16": torch.float16, "bf16": torch.bfloat16}[a.precision]
    scaler = None
    if a.precision == "f16":
        scaler = torch.amp.GradScaler("cuda") if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler") \
            else torch.cuda.amp.GradScaler()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=half or torch.float32, enabled=half is not None):
            loss = F.cross_entropy(net(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(a.steps):
        loss = step()
    stop.record()
    torch.cuda.synchronize(dev)
    seconds = start.elapsed_time(stop) / 1000.0
    loss = loss.detach().item()
    print(json.dumps({
        "schema": "cohort.torch_resnet50/1", "model": "resnet50", "precision": a.precision,
        "layout": a.layout, "batch_size": a.batch_size, "warmup_steps": a.warmup, "steps": a.steps,
        "compile": a.compile, "images_per_sec": round(a.batch_size * a.steps / seconds, 2),
        "step_ms": round(1000.0 * seconds / a.steps, 3), "loss": loss if loss == loss else None,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(dev),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(dev),
        "device_name": torch.cuda.get_device_name(dev), "torch": torch.__version__,
        "torchvision": torchvision.__version__, "cudnn": cudnn_version(torch), "cuda": torch.version.cuda,
        **tf32}))


if __name__ == "__main__":
    main()
