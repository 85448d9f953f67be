"""Per-tick CPU cost of the disk and procs sources, and of the procs thread-state sampler.

    python benchmarks/sources_cost.py [--ticks 200] [--mains 1] [--workers 8] [--main-threads 32] [--worker-threads 4]

The heavy load of docs/performance.md (16 ranks with 4 workers each, 4 threads apiece):
``--mains 16 --workers 64 --main-threads 4``.

Tracked processes are real sleeping children shaped like a training job: one main process with many threads
(PyTorch's intra-op and helper threads) and DataLoader-like workers with a few each.
CPU time is the calling thread's own (time.thread_time); the sampler thread's comes from its schedstat.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import spawn_sleepers
from trainmon.sources.host.disk import DiskSource
from trainmon.sources.host.procs import ProcSource


def per_tick(fn: Callable[[float], dict], ticks: int, pause: float) -> tuple[list[float], list[float], int]:
    """CPU and wall microseconds of each call, and the number of metrics of the last one."""
    fn(time.monotonic())
    cpu: list[float] = []
    wall: list[float] = []
    n = 0
    for _ in range(ticks):
        time.sleep(pause)
        c0, w0 = time.thread_time(), time.perf_counter()
        n = len(fn(time.monotonic()))
        cpu.append((time.thread_time() - c0) * 1e6)
        wall.append((time.perf_counter() - w0) * 1e6)
    return cpu, wall, n


def thread_runtime_ns(native_id: int) -> int:
    with open(f"/proc/self/task/{native_id}/schedstat") as f:
        return int(f.read().split()[0])


def idle_wake_us(hz: float, seconds: float) -> float:
    """Baseline: what one timed wake-up of an idle Python thread costs on this machine."""
    stop = threading.Event()

    def idle() -> None:
        while not stop.wait(1.0 / hz):
            pass

    thread = threading.Thread(target=idle)
    thread.start()
    assert thread.native_id is not None
    r0, t0 = thread_runtime_ns(thread.native_id), time.monotonic()
    time.sleep(seconds)
    r1, t1 = thread_runtime_ns(thread.native_id), time.monotonic()
    stop.set()
    thread.join()
    return (r1 - r0) / 1e3 / ((t1 - t0) * hz)


def p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(len(xs) * 0.95) - 1)]


def row(name: str, cpu: list[float], wall: list[float], metrics: int | str) -> str:
    return f"{name:<34} {statistics.median(cpu):>9.0f} {p95(cpu):>9.0f} {statistics.median(wall):>9.0f} {metrics!s:>8}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--pause", type=float, default=0.01, help="seconds between ticks")
    ap.add_argument("--mains", type=int, default=1)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--main-threads", type=int, default=32)
    ap.add_argument("--worker-threads", type=int, default=4)
    ap.add_argument("--sampler-seconds", type=float, default=5.0)
    args = ap.parse_args()

    kids = spawn_sleepers(args.mains, args.main_threads) + spawn_sleepers(args.workers, args.worker_threads)
    tracked = {k.pid: "main" if i < args.mains else "worker" for i, k in enumerate(kids)}
    nthreads = args.mains * args.main_threads + args.workers * args.worker_threads
    try:
        print(
            f"{os.cpu_count()} CPUs; tracked: {args.mains} mains ({args.main_threads} threads each) + "
            f"{args.workers} workers "
            f"({args.worker_threads} threads each) = {len(tracked)} pids, {nthreads} threads"
        )
        print(f"{'per tick (µs)':<34} {'cpu p50':>9} {'cpu p95':>9} {'wall p50':>9} {'metrics':>8}")
        disk = DiskSource()
        disk.sample(time.monotonic())
        print(row(f"disk ({len(disk.devices())} devices)", *per_tick(disk.sample, args.ticks, args.pause)))
        with ProcSource(lambda: tracked, hz_states=0) as procs:
            # Without the sampler thread each tick also observes every thread's state once itself.
            print(row(f"procs ({len(tracked)} pids, hz_states=0)", *per_tick(procs.sample, args.ticks, args.pause)))
        with ProcSource(lambda: tracked, hz_states=10.0) as procs:
            # At a monitor-like tick rate, so that the sampler has observed every pid before each tick.
            stats = per_tick(procs.sample, max(5, args.ticks // 10), 0.5)
            print(row(f"procs ({len(tracked)} pids, sampler on, 2 Hz)", *stats))

        hz = 10.0
        with ProcSource(lambda: tracked, hz_states=hz) as procs:
            procs.sample(time.monotonic())  # hands the pids to the sampler and starts it
            thread = procs._thread
            assert thread is not None and thread.native_id is not None
            r0, t0 = thread_runtime_ns(thread.native_id), time.monotonic()
            time.sleep(args.sampler_seconds)
            r1, t1 = thread_runtime_ns(thread.native_id), time.monotonic()
        passes = (t1 - t0) * hz
        busy_us = (r1 - r0) / 1e3
        idle_us = idle_wake_us(hz, args.sampler_seconds)
        print(
            f"state sampler @ {hz:.0f} Hz: {busy_us / passes:.0f} µs per pass ({nthreads} task stat reads), "
            f"{busy_us / (t1 - t0) / 1e4:.2f} % of one core; an empty thread wake-up here costs {idle_us:.0f} µs"
        )
    finally:
        for k in kids:
            k.kill()
            k.wait()


if __name__ == "__main__":
    main()
