"""PyTorch DDP (gloo) peer of cohort-train for mnist_cnn: the same network, batch and
synthetic data, OMP_NUM_THREADS (default 1) threads per rank. Launched by hand (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as torchrun does not work with this Python. Prints
one JSON line on rank 0: {"ranks": N, "images_per_sec": global rate over the measured steps}."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
batch, steps, warmup = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if size > 1:
    dist.init_process_group("gloo", rank=rank, world_size=size)
torch.manual_seed(1234)
net = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                    nn.Linear(9216, 128), nn.ReLU(), nn.Linear(128, 10))
model = nn.parallel.DistributedDataParallel(net) if size > 1 else net
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
x = torch.randn(batch, 1, 28, 28)
y = torch.randint(0, 10, (batch,))
loss_fn = nn.CrossEntropyLoss()
for s in range(steps):
    if s == warmup:
        if size > 1:
            dist.barrier()
        start = time.perf_counter()
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()
elapsed = time.perf_counter() - start
if rank == 0:
    print(json.dumps({"ranks": size, "images_per_sec": batch * size * (steps - warmup) / elapsed}), flush=True)
if size > 1:
    dist.destroy_process_group()
