"""``trainmon`` with no command: the live screen, or status lines when not on a terminal."""

from __future__ import annotations

import argparse
import sys

from trainmon import __version__
from trainmon.cli.command import Command
from trainmon.cli.monitor_setup import listen_address, start_monitor, watched_pids
from trainmon.cli.terminal import status_listener, stop_event, use_tui


class LiveCommand(Command):
    name = "live"
    help = "the live screen (the default when no command is given)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """No options of its own."""

    def run(self, args: argparse.Namespace) -> int:
        monitor = start_monitor(args, listen_address(args), token=args.token, pids=watched_pids(args))
        if use_tui() and not args.json:
            from trainmon.tui.app import Job
            from trainmon.tui.terminal import run_tui
            from trainmon.view import LiveFeed

            hint = (
                f"listening on {monitor.address}: trainmon.agent.attach() in the script, "
                f"or TRAINMON_ADDR={monitor.address}"
            )
            job = Job(
                notice=lambda: None if monitor.store.runs or monitor.extra_pids else hint,
                running=lambda: False,
                confirm_quit=False,
            )
            try:
                return run_tui(LiveFeed(monitor), job=job)
            finally:
                monitor.stop()
        print(
            f"trainmon {__version__}: listening on {monitor.address} — in training: trainmon.agent.attach() "
            f"(or TRAINMON_ADDR={monitor.address})",
            file=sys.stderr,
            flush=True,
        )
        stop = stop_event()
        monitor.listeners.append(status_listener(args, stop))
        try:
            stop.wait()
        finally:
            monitor.stop()
        return 0
