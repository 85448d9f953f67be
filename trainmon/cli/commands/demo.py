"""``trainmon demo``: a built-in training scenario with a known bottleneck, under the monitor, then its report."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import sys
import time

from trainmon.cli.child import run_under_screen, run_with_status_lines
from trainmon.cli.command import Command
from trainmon.cli.errors import CliError
from trainmon.cli.monitor_setup import private_address, start_monitor
from trainmon.cli.options import positive_seconds
from trainmon.cli.terminal import use_tui


class DemoCommand(Command):
    name = "demo"
    help = "run a built-in demo training under the monitor"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from trainmon.demo.scenarios import DEFAULT, SCENARIOS

        parser.add_argument("--scenario", default=DEFAULT, choices=sorted(SCENARIOS), help=f"default: {DEFAULT}")
        parser.add_argument("--seconds", type=positive_seconds, default=None, help="override the scenario's duration")

    def run(self, args: argparse.Namespace) -> int:
        from trainmon.demo.scenarios import SCENARIOS, command
        from trainmon.report import build_report, render

        _require_torch()
        scenario = SCENARIOS[args.scenario]
        tui = use_tui()
        address, tmp = private_address()
        # A scenario judged with its own thresholds (a 12 s freeze is a hang only below the default 30 s minimum).
        args.settings.thresholds = dataclasses.replace(args.settings.thresholds, **dict(scenario.thresholds))
        args.no_discover = True  # the demo's screen and report are about its own training, not the host's others
        with tmp:
            monitor = start_monitor(args, address)
            print(f"trainmon demo: scenario {scenario.name} — {scenario.description}", flush=True)
            cmd = command(scenario, ["--seconds", str(args.seconds)] if args.seconds else None)
            env = dict(os.environ, TRAINMON_ADDR=address, TRAINMON_DEMO_NAME=f"demo:{scenario.name}")
            try:
                if tui:
                    status, log_path, stopped = run_under_screen(
                        cmd,
                        env,
                        monitor,
                        "the demo training",
                        f"demo {scenario.name}: {scenario.description} (expected: {scenario.expected})",
                        confirm_quit=False,
                    )
                    os.unlink(log_path)
                    if stopped:
                        status = 0  # the user ended the demo: not a failure
                else:
                    status = run_with_status_lines(cmd, env, monitor)
                time.sleep(0.3)  # the agent's last batch arrives
            finally:
                monitor.stop()
            print()
            sys.stdout.write(render(build_report(monitor.store, args.settings.thresholds), "text"))
            print(f"(expected verdict for this scenario: {scenario.expected})")
        return status


def _require_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        raise CliError("the demo trains a real PyTorch model: install torch first (pip install torch)")
