"""``trainmon replay``: a recording through the live screen, or as status lines when not on a terminal."""

from __future__ import annotations

import argparse
import os
import sys

from trainmon.cli.command import Command
from trainmon.cli.errors import CliError
from trainmon.cli.options import speed_factor
from trainmon.cli.terminal import use_tui


class ReplayCommand(Command):
    name = "replay"
    help = "a recording through the live screen (status lines when not a terminal)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("file")
        parser.add_argument("--speed", default="1", metavar="X", help="playback speed (default 1: real time)")

    def run(self, args: argparse.Namespace) -> int:
        from trainmon.record import RecordingError, load_recording
        from trainmon.view import ReplayFeed, status_lines

        speed = speed_factor(args.speed)
        try:
            store, warnings = load_recording(args.file)
        except RecordingError as exc:
            raise CliError(f"{args.file}: {exc}") from None
        for w in warnings:
            print(f"trainmon: warning: {args.file}: {w}", file=sys.stderr)
        feed = ReplayFeed(store, speed, name=os.path.basename(args.file))
        if not feed.ticks:
            raise CliError(f"{args.file}: the recording holds no samples to replay")
        if use_tui():
            from trainmon.tui.terminal import run_tui

            feed.clock.play()
            return run_tui(feed)
        for line in status_lines(feed):
            print(line, flush=True)
        return 0
