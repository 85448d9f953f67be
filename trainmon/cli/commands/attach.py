"""``trainmon attach PID``: start the agent in a Python training that is already running, without restarting it.

Prints one line (the outcome, with the fix when there is one) and exits with the outcome's status: 0 attached or
already attached, else the failure's own code (listed in ``trainmon.attach.result`` and ``--help``).
"""

from __future__ import annotations

import argparse
import sys

from trainmon.cli.command import Command
from trainmon.cli.errors import CliError
from trainmon.cli.monitor_setup import listen_address
from trainmon.cli.options import positive_seconds

_CODES = (
    "exit status: 0 attached (or already), 3 no such process, 4 not Python, 5 Python < 3.10 or unsupported platform, "
    "6 ptrace denied, 7 another user's process, 8 another namespace (container), 9 gdb missing, 10 the process "
    "exited, 11 timed out, 12 the agent did not start, 13 other failure"
)


class AttachCommand(Command):
    name = "attach"
    help = "inject the agent into a running Python training (no restart)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        # dest: not "pid", which is the monitor option --pid (a list) of `trainmon --pid N ...`
        parser.add_argument("target_pid", metavar="PID", help=f"the training's process id; {_CODES}")
        # SUPPRESS: `trainmon --listen ADDR attach PID` keeps the address given before the command name.
        parser.add_argument(
            "--listen",
            metavar="ADDR",
            default=argparse.SUPPRESS,
            help="the monitor's address the agent reports to: a Unix socket path or HOST:PORT (default: as the "
            "monitor's, $TRAINMON_ADDR or the per-user socket)",
        )
        parser.add_argument(
            "--timeout",
            type=positive_seconds,
            default=15.0,
            metavar="S",
            help="give up after S seconds (default 15)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from trainmon import protocol
        from trainmon.attach import attach_process

        pid = _pid(args.target_pid)
        address = protocol.resolve_address(listen_address(args))
        result = attach_process(pid, address, timeout=args.timeout, token=getattr(args, "token", None))
        if result.ok:
            print(f"trainmon: {result.message}", flush=True)
        else:
            print(f"trainmon: error: {result.message}", file=sys.stderr, flush=True)
        return result.exit_code


def _pid(value: str) -> int:
    try:
        pid = int(value, 10)
    except ValueError:
        raise CliError(f"PID: expected a process id (a positive integer), got {value!r}") from None
    if pid <= 0:
        raise CliError(f"PID: expected a process id (a positive integer), got {value}")
    return pid
