"""PyTorch CPU peer of train_bench: the same model, batch, layout (NCHW), thread
count, loss and plain SGD step. Usage: torch_bench.py MODEL BATCH THREADS STEPS [WARMUP]"""
import statistics
import sys
import time

import torch
import torch.nn as nn
import torchvision


def model(name):
    if name == "resnet50":
        return torchvision.models.resnet50(), (3, 224, 224), 1000
    if name == "mnist_cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(128, 10)), (1, 28, 28), 10
    raise SystemExit(f"torch_bench: no peer for model {name}")


def main():
    name, batch, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    warmup = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    net, shape, classes = model(name)
    x = torch.sin(torch.arange(batch * shape[0] * shape[1] * shape[2], dtype=torch.float32) * 0.37).view(batch, *shape)
    y = torch.arange(batch) % classes
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    rates, cpu_rates = [], []
    for s in range(warmup + steps):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        print(f"step {s} loss {loss.item():.4f} images/sec {batch / dt:.2f} cpu {batch / dc:.2f}"
              f"{' (warm-up)' if s < warmup else ''}")
        if s >= warmup:
            rates.append(batch / dt)
            cpu_rates.append(batch / dc)
    print(f"images/sec: {statistics.median(rates):.3f} {statistics.median(cpu_rates):.3f}")


main()
