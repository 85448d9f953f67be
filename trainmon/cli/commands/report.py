"""``trainmon report``: a recording summarised in one of the report formats, on stdout."""

from __future__ import annotations

import argparse
import sys

from trainmon.cli.command import Command
from trainmon.cli.errors import CliError


class Report(Command):
    name = "report"
    help = "summarise a recording"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from trainmon.report import FORMATS

        parser.add_argument("file")
        parser.add_argument("--format", "-f", default="text", choices=FORMATS)

    def run(self, args: argparse.Namespace) -> int:
        from trainmon.record import RecordingError, load_recording
        from trainmon.report import build_report, render

        try:
            store, warnings = load_recording(args.file)
        except RecordingError as exc:
            raise CliError(f"{args.file}: {exc}") from None
        report = build_report(store, args.settings.thresholds)
        if warnings:
            report["warnings"] = warnings
            for w in warnings:
                print(f"trainmon: warning: {args.file}: {w}", file=sys.stderr)
        sys.stdout.write(render(report, args.format, store=store))
        return 0
