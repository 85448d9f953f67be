"""``trainmon report``: a recording summarised in one of the report formats, on stdout."""

from __future__ import annotations

import argparse
import sys

from trainmon.cli.command import Command
from trainmon.cli.errors import CliError


class ReportCommand(Command):
    name = "report"
    help = "summarise a recording"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from trainmon.report import FORMATS

        parser.add_argument("file")
        parser.add_argument("--format", "-f", default="text", choices=FORMATS)
        parser.add_argument(
            "--fail-on",
            metavar="CODE[,CODE...]",
            default=None,
            help="exit 1 when the verdict or a finding that held has one of these codes (a family: input.*)",
        )
        parser.add_argument(
            "--max-data-wait",
            metavar="F",
            default=None,
            help="exit 1 when a run waited on data for more than F of its step time (0..1 or a percentage: 30%%)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from trainmon.compare.gate import GATE_FAILED, GateError, fail_on, max_data_wait, parse_codes, parse_fraction
        from trainmon.record import RecordingError, load_recording
        from trainmon.report import build_report, render

        try:  # the gate's arguments are checked before the recording is read
            codes = parse_codes(args.fail_on) if args.fail_on is not None else None
            wait_limit = parse_fraction(args.max_data_wait, "--max-data-wait") if args.max_data_wait else None
        except GateError as exc:
            raise CliError(str(exc)) from None
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
        sys.stdout.flush()
        reasons = [
            *([why] if codes is not None and (why := fail_on(report, codes)) else []),
            *([why] if wait_limit is not None and (why := max_data_wait(report, wait_limit)) else []),
        ]
        if reasons:
            print(f"trainmon: gate failed: {'; '.join(reasons)}", file=sys.stderr)
            return GATE_FAILED
        return 0
