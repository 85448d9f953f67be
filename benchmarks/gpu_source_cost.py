"""Per-tick cost of GpuSource.sample() (and process_usage()) against the fake pynvml.

This is the Python overhead of the wrapper plus the fake's own work; on a real GPU each NVML call adds driver
time on top (~15 calls per device per tick). Run with the real driver: `--real`.

    python benchmarks/gpu_source_cost.py [--devices 8] [--ticks 1000] [--real]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from testsupport.fake_pynvml import GIB, FakeNvml
from trainmon.sources.gpu.gpu_source import GpuSource


def bench(src: GpuSource, ticks: int, before_tick=None) -> tuple[float, float]:
    src.sample(0.0)
    t_sample = t_procs = 0.0
    for i in range(1, ticks + 1):
        if before_tick is not None:
            before_tick()
        t0 = time.perf_counter()
        src.sample(float(i))
        t1 = time.perf_counter()
        src.process_usage()
        t_procs += time.perf_counter() - t1
        t_sample += t1 - t0
    return t_sample / ticks, t_procs / ticks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--ticks", type=int, default=1000)
    ap.add_argument("--real", action="store_true", help="use the real pynvml and the GPUs of this machine")
    args = ap.parse_args()

    if args.real:
        src = GpuSource()
        if not src.available:
            sys.exit(f"GPU source unavailable: {src.error}")
        n = len(src.devices())
        per_sample, per_procs = bench(src, args.ticks)
        label = f"real NVML, {n} device(s), GPM: {src.gpm_status()}"
    else:
        fake = FakeNvml(args.devices, gpm=True)
        for i, dev in enumerate(fake.devices):
            dev.processes = [(1000 + i, 20 * GIB), (2000 + i, GIB)]

        def feed() -> None:  # a realistic driver: ~6 utilisation samples and a process sample per second
            for j in range(args.devices):
                fake.push_util_samples(j, [100, 0, 100, 0, 100, 0], period_us=1)
                fake.push_process_samples(j, [(1000 + j, 90)])

        src = GpuSource(fake)
        n = args.devices
        per_sample, per_procs = bench(src, args.ticks, feed)
        label = f"fake pynvml, {n} devices, GPM on"
    src.close()
    print(
        f"{label}: sample() {per_sample * 1e6:.0f} µs/tick ({per_sample * 1e6 / max(n, 1):.0f} µs/device), "
        f"process_usage() {per_procs * 1e6:.0f} µs/tick over {args.ticks} ticks"
    )


if __name__ == "__main__":
    main()
