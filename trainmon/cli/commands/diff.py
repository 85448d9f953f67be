"""``trainmon diff A B``: two recordings (or two runs, ``FILE#RUN``) side by side, with noise bounds."""

from __future__ import annotations

import argparse
import sys

from trainmon.cli.command import Command
from trainmon.cli.errors import CliError


class DiffCommand(Command):
    name = "diff"
    help = "two recordings (or FILE#RUN) side by side, with noise bounds"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from trainmon.compare.diff_render import FORMATS

        parser.add_argument("a", metavar="A", help="the baseline: a recording, or FILE#RUN (RUN: rank:N, pid:N or N)")
        parser.add_argument("b", metavar="B", help="the one compared with it, likewise")
        parser.add_argument("--format", "-f", default="text", choices=FORMATS)
        parser.add_argument(
            "--max-slowdown",
            metavar="F",
            default=None,
            help="exit 1 when B's step time p50 grew by more than F (5%% or 0.05) beyond noise",
        )
        parser.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default 0)")

    def run(self, args: argparse.Namespace) -> int:
        from trainmon.compare.diff import DiffError, diff, load_side, slowdown_gate
        from trainmon.compare.diff_render import render
        from trainmon.compare.gate import GATE_FAILED, GateError, parse_fraction

        try:
            limit = parse_fraction(args.max_slowdown, "--max-slowdown") if args.max_slowdown else None
            a = load_side(args.a, args.settings.thresholds)
            b = load_side(args.b, args.settings.thresholds)
        except (DiffError, GateError) as exc:
            raise CliError(str(exc)) from None
        d = diff(a, b, seed=args.seed)
        why = slowdown_gate(d, limit) if limit is not None else None
        if limit is not None:
            d.gate = {"max_slowdown": limit, "failed": why}
        sys.stdout.write(render(d, args.format))
        sys.stdout.flush()
        if why is not None:
            print(f"trainmon: gate failed: {why}", file=sys.stderr)
            return GATE_FAILED
        return 0
