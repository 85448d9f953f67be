"""The monitor under benchmark: ``trainmon record`` or the live screen, with N simulated GPUs and tracked pids.

    python benchmarks/_monitor_proc.py record --output F --listen ADDR [--interval 1] [--gpus 8] [--track FILE]
    python benchmarks/_monitor_proc.py tui --listen ADDR [--interval 1] [--gpus 8] [--track FILE]

``record`` mirrors ``trainmon.cli.commands.record`` (a Recorder as the Monitor's sink, quiet, stopped by SIGTERM) and
``tui`` mirrors ``commands.live`` (the Textual screen over a LiveFeed); the only differences are the NVML module, the
fake of testsupport/fake_pynvml.py (the one boundary the project fakes; fed like a busy driver: utilisation and process
samples every tick), and ``Monitor.track(pid, "worker")`` for each pid listed in ``--track``. ``--summary F``
writes what the monitor ingested (runs, steps, records, bytes) when it stops. With ``BENCH_PROFILE_DIR`` set, the
monitor thread, the agents' thread and the TUI's frame thread each run under cProfile (by thread CPU time), written
there as ``monitor.prof``, ``agents.prof`` and ``frames.prof`` when the process stops
(``benchmarks/thread_split.py --profile DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._fake_gpus import fake_gpus, feeder
from trainmon.monitor import Monitor


def summary(monitor: Monitor, recorder: object | None) -> dict:
    store = monitor.store
    with store.lock:
        return {
            "runs": len(store.runs),
            "steps": sum(r.steps.total for r in store.runs.values()),
            "records": sum(r.records for r in store.runs.values()),
            "series": len(store.series),
            "bytes": getattr(recorder, "bytes_written", 0),
            "error": getattr(recorder, "error", None),
        }


def profile_threads(folder: str) -> None:
    """Run ``Monitor._loop`` and ``AgentServer._serve`` each under its own cProfile, dumped to ``folder`` when they
    return."""
    import cProfile
    import time

    from trainmon.ingest.agent_server import AgentServer
    from trainmon.tui.collector import FrameThread

    def profiled(fn, name):
        def run(self):
            prof = cProfile.Profile(time.thread_time)  # CPU time: a wait for the store's lock is not work
            try:
                prof.runcall(fn, self)
            finally:
                prof.dump_stats(os.path.join(folder, f"{name}.prof"))

        return run

    Monitor._loop = profiled(Monitor._loop, "monitor")  # type: ignore[method-assign]
    AgentServer._serve = profiled(AgentServer._serve, "agents")  # type: ignore[method-assign]
    FrameThread.run = profiled(FrameThread.run, "frames")  # type: ignore[method-assign]


def build(args: argparse.Namespace, sinks: list) -> Monitor:
    pids = [int(p) for p in Path(args.track).read_text().split()] if args.track else []
    fake, owners = fake_gpus(args.gpus, pids)
    monitor = Monitor(args.listen, interval=args.interval, sinks=sinks, nvml_module=fake)
    for pid in pids:
        monitor.track(pid, "worker")
    monitor.listeners.append(feeder(fake, owners))
    return monitor


def run_record(args: argparse.Namespace) -> int:
    from trainmon.record import Recorder

    recorder = Recorder(args.output)
    monitor = build(args, [recorder])
    monitor.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        while not stop.wait(0.2):  # as cmd_record polls
            if recorder.error:
                break
    finally:
        monitor.stop()
        recorder.close()
    write_summary(args, summary(monitor, recorder))
    return 1 if recorder.error else 0


def run_screen(args: argparse.Namespace) -> int:
    try:
        from trainmon.tui.app import Job
        from trainmon.tui.terminal import run_tui
        from trainmon.view import LiveFeed
    except ImportError as exc:
        print(f"the TUI is not available: {exc}", file=sys.stderr)
        return 3
    monitor = build(args, [])
    monitor.start()
    job = Job(notice=lambda: None, running=lambda: False, confirm_quit=False)
    try:
        return run_tui(LiveFeed(monitor), job=job)
    finally:
        monitor.stop()
        write_summary(args, summary(monitor, None))


def write_summary(args: argparse.Namespace, data: dict) -> None:
    if args.summary:
        Path(args.summary).write_text(json.dumps(data))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["record", "tui"])
    ap.add_argument("--output", "-o", default=None)
    ap.add_argument("--listen", required=True)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--track", default=None, help="a file of pids (whitespace-separated) to track as workers")
    ap.add_argument("--summary", default=None)
    args = ap.parse_args()
    if os.environ.get("BENCH_PROFILE_DIR"):
        profile_threads(os.environ["BENCH_PROFILE_DIR"])
    if args.mode == "record":
        if not args.output:
            ap.error("record needs --output")
        return run_record(args)
    return run_screen(args)


if __name__ == "__main__":
    sys.exit(main())
