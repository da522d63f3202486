"""One rank of the torch gloo peer: times allreduce of float32 tensors of the given
byte sizes and prints 'gloo SIZE TIME_US' on rank 0 (slowest rank's time)."""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for size in (int(s) for s in sys.argv[1].split(",")):
        t = torch.ones(max(1, size // 4))
        iters = 200 if size <= 65536 else max(3, int(2e8 // max(size, 1)))
        for _ in range(max(2, iters // 10)):
            dist.all_reduce(t)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        took = torch.tensor([(time.perf_counter() - start) / iters])
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"gloo {size} {took.item() * 1e6:.2f}", flush=True)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # a gloo rank sometimes hangs in its exit handlers


if __name__ == "__main__":
    main()
