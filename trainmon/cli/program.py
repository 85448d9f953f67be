"""The ``trainmon`` parser built from the commands, and the dispatch to the one named."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from trainmon import __version__
from trainmon.cli.command import Command
from trainmon.cli.commands.attach import AttachCommand
from trainmon.cli.commands.cluster import ClusterCommand
from trainmon.cli.commands.demo import DemoCommand
from trainmon.cli.commands.diff import DiffCommand
from trainmon.cli.commands.doctor import DoctorCommand
from trainmon.cli.commands.live import LiveCommand
from trainmon.cli.commands.record import RecordCommand
from trainmon.cli.commands.replay import ReplayCommand
from trainmon.cli.commands.report import ReportCommand
from trainmon.cli.commands.run import RunCommand
from trainmon.cli.commands.serve import ServeCommand
from trainmon.cli.errors import EXIT_INTERRUPTED, EXIT_USAGE, CliError
from trainmon.cli.options import Subcommands, monitor_options

DEFAULT_COMMAND: Command = LiveCommand()  # ``trainmon`` with no command name
# --help order
COMMANDS: tuple[Command, ...] = (
    DemoCommand(),
    RunCommand(),
    AttachCommand(),
    RecordCommand(),
    DoctorCommand(),
    ReportCommand(),
    DiffCommand(),
    ClusterCommand(),
    ServeCommand(),
    ReplayCommand(),
)
_BY_NAME = {command.name: command for command in COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="trainmon",
        description="What is the GPU waiting for, and what should I change?",
        parents=[_global_options(), monitor_options()],
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", action=Subcommands)
    for command in COMMANDS:
        sub.add_parser(command.name, help=command.help, parents=_command_options(command))
    return p


def _global_options() -> argparse.ArgumentParser:
    """The options only accepted before the command name."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--version", action="version", version=f"trainmon {__version__}")
    p.add_argument(
        "--config", metavar="FILE", default=None, help="config file (default ~/.config/trainmon/config.toml)"
    )
    p.add_argument("--token", default=None, help="shared token required from agents on a non-loopback TCP address")
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per tick on stdout instead of the screen (newline-delimited; schema: docs/json.md)",
    )
    return p


def _command_options(command: Command) -> list[argparse.ArgumentParser]:
    """The command's own options, then the monitor options when it accepts them too (the order of its --help)."""
    own = argparse.ArgumentParser(add_help=False)
    command.add_arguments(own)
    if command.monitor_option_help is None:
        return [own]
    return [own, monitor_options(command.monitor_option_help, in_subcommand=True)]


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="trainmon: %(message)s")
    args = build_parser().parse_args(argv)
    from trainmon.config import ConfigError, load

    try:
        args.settings = load(args.config)
    except ConfigError as exc:
        print(f"trainmon: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.settings.theme == "mono":
        os.environ.setdefault("NO_COLOR", "1")
    command = _BY_NAME[args.command] if args.command is not None else DEFAULT_COMMAND
    try:
        return command.run(args)
    except CliError as exc:
        print(f"trainmon: error: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
