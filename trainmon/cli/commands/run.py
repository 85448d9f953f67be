"""``trainmon run -- CMD``: CMD with the agent attached through the environment, no change to its code."""

from __future__ import annotations

import argparse
import sys
import time

from trainmon.cli.child import run_under_screen, run_with_status_lines, shell_status
from trainmon.cli.command import Command
from trainmon.cli.errors import CliError
from trainmon.cli.monitor_setup import private_address, start_monitor
from trainmon.cli.terminal import use_tui


class RunCommand(Command):
    name = "run"
    help = "run CMD with the agent attached (no code change)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--record", metavar="FILE", default=None, help="also record to FILE")
        parser.add_argument("--no-tui", action="store_true", help="print status lines instead of the screen")
        parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ...")

    def run(self, args: argparse.Namespace) -> int:
        from trainmon.launch import agent_env

        cmd = list(args.cmd)
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        if not cmd:
            raise CliError("nothing to run: trainmon run [--record FILE] [--no-tui] -- CMD ...")
        recorder = None
        if args.record:
            from trainmon.record import Recorder, RecorderError

            try:
                recorder = Recorder(args.record)
            except RecorderError as exc:
                raise CliError(str(exc)) from None
        tui = not args.no_tui and use_tui()
        log_path = None
        address, tmp = private_address()
        with tmp:
            monitor = start_monitor(args, address, sinks=[recorder] if recorder else None)
            try:
                with agent_env(address) as env:
                    if tui:
                        status, log_path, _ = run_under_screen(cmd, env, monitor, cmd[0], None, confirm_quit=True)
                    else:
                        status = run_with_status_lines(cmd, env, monitor)
                time.sleep(0.3)  # the agent's last batch arrives
            finally:
                monitor.stop()
                if recorder is not None:
                    recorder.close()
        if log_path is not None:
            print(f"trainmon: {' '.join(cmd)} exited with status {status}; its output: {log_path}", file=sys.stderr)
        if recorder is not None and recorder.error:
            print(f"trainmon: error: {recorder.error}", file=sys.stderr)
        return shell_status(status)
