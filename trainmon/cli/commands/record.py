"""``trainmon record``: the headless monitor writing a recording, with a status line per tick."""

from __future__ import annotations

import argparse
import sys
import time
from typing import ClassVar

from trainmon.cli.command import Command
from trainmon.cli.errors import CliError
from trainmon.cli.monitor_setup import listen_address, start_monitor, watched_pids
from trainmon.cli.options import MonitorOptionHelp, positive_seconds
from trainmon.cli.terminal import status_listener, stop_event


class RecordCommand(Command):
    name = "record"
    help = "record headless to a file"
    monitor_option_help: ClassVar[MonitorOptionHelp] = {
        "listen": None,
        "interval": None,
        "prometheus": "serve Prometheus /metrics here while recording",
        "pid": "also watch this process without the agent (py-spy sampling)",
    }

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--output", "-o", required=True, metavar="FILE")
        parser.add_argument("--duration", type=positive_seconds, default=None, metavar="S", help="stop after S seconds")
        parser.add_argument("--quiet", "-q", action="store_true", help="no status lines")
        parser.add_argument(
            "--json",
            action="store_true",
            default=argparse.SUPPRESS,  # or given before the command: trainmon --json record ...
            help="one JSON object per tick on stdout instead of the status lines (schema: docs/json.md)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from trainmon.record import Recorder, RecorderError

        try:
            recorder = Recorder(args.output)
        except RecorderError as exc:
            raise CliError(str(exc)) from None
        try:
            monitor = start_monitor(
                args, listen_address(args), token=args.token, sinks=[recorder], pids=watched_pids(args)
            )
        except CliError:
            recorder.close()
            raise
        print(f"trainmon: recording to {args.output}; agents connect to {monitor.address}", file=sys.stderr, flush=True)
        stop = stop_event()
        if not args.quiet or getattr(args, "json", False):
            monitor.listeners.append(status_listener(args, stop))
        deadline = time.monotonic() + args.duration if args.duration else None
        try:
            while not stop.is_set():
                timeout = 0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic()))
                if stop.wait(timeout) or (deadline is not None and time.monotonic() >= deadline):
                    break
                if recorder.error:
                    break
        finally:
            monitor.stop()
            recorder.close()
        if recorder.error:
            print(f"trainmon: error: {recorder.error}", file=sys.stderr)
            return 1
        runs = len(monitor.store.runs)
        steps = sum(r.steps.total for r in monitor.store.runs.values())
        print(
            f"trainmon: wrote {args.output} ({recorder.bytes_written / 1024:.0f} KiB, {runs} run(s), {steps} steps)",
            file=sys.stderr,
        )
        return 0
