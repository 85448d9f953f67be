"""Cost of one monitor tick with every source (host, disk, process tree, GPU/NVML, diagnosis).

    python benchmarks/monitor_tick.py [--ticks 60] [--interval 0.25]

Runs the real headless Monitor (no agent connected unless one attaches) and prints each source's
median and p95 wall time per tick, plus the monitor process's CPU share of one core over the run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainmon.monitor import Monitor


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=60)
    ap.add_argument("--interval", type=float, default=0.25)
    args = ap.parse_args()
    address = f"/tmp/trainmon-bench-{os.getpid()}.sock"
    monitor = Monitor(address, interval=3600)
    monitor.start()
    costs: dict[str, list[float]] = {}
    tick_times = []
    cpu0, wall0 = time.process_time(), time.monotonic()
    try:
        for _ in range(args.ticks):
            t0 = time.perf_counter()
            monitor.tick()
            tick_times.append(time.perf_counter() - t0)
            for name, cost in monitor.source_cost_s.items():
                costs.setdefault(name, []).append(cost)
            time.sleep(args.interval)
    finally:
        monitor.stop()
    cpu = (time.process_time() - cpu0) / (time.monotonic() - wall0)
    print(f"{'part':12} {'median µs':>10} {'p95 µs':>10}")
    for name, values in [*costs.items(), ("whole tick", tick_times)]:
        values = sorted(values)
        print(f"{name:12} {statistics.median(values) * 1e6:10.0f} {values[int(len(values) * 0.95)] * 1e6:10.0f}")
    print(
        f"monitor CPU: {cpu * 100:.2f}% of one core at one tick per {args.interval} s "
        f"(≈ {cpu * 100 * args.interval:.2f}% at 1 s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
