"""The timing loop the peer benchmarks share: runs step() WARMUP + STEPS times and
prints one line per step and the final "images/sec: MEDIAN CPU_MEDIAN" line that
compare.py reads (the second figure counts process CPU time)."""
import statistics
import time


def time_steps(step, batch, steps, warmup, version):
    rates, cpu_rates = [], []
    for s in range(warmup + steps):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = step()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        print(f"step {s} loss {loss:.4f} images/sec {batch / dt:.2f} cpu {batch / dc:.2f}"
              f"{' (warm-up)' if s < warmup else ''}")
        if s >= warmup:
            rates.append(batch / dt)
            cpu_rates.append(batch / dc)
    print(version)
    print(f"images/sec: {statistics.median(rates):.3f} {statistics.median(cpu_rates):.3f}")
