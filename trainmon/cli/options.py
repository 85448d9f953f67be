"""Option types and the monitor options shared by ``trainmon`` and the subcommands that accept them again."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from trainmon.cli.errors import CliError

MonitorOptionHelp = Mapping[str, "str | None"]

# Before the command: ``trainmon --listen X ...``.
GLOBAL_MONITOR_OPTION_HELP: MonitorOptionHelp = {
    "listen": "address agents connect to: a Unix socket path or HOST:PORT (default: $TRAINMON_ADDR or "
    "a per-user socket)",
    "interval": "refresh interval (default 1 s)",
    "prometheus": "serve Prometheus /metrics here",
    "pid": "watch a job started without the agent (py-spy sampling); repeatable",
}

# Options given several times that add up, before and after the command alike (``Subcommands`` keeps both).
REPEATABLE_MONITOR_OPTIONS = ("pid",)


def positive_seconds(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value}")
    return x


def speed_factor(value: str) -> float:
    """Checked by the command rather than by argparse, so a bad value is one error line like every other."""
    try:
        x = float(value)
    except ValueError:
        raise CliError(f"--speed: expected a factor such as 2 or 0.5, got {value!r}") from None
    if not 0 < x <= 1000:
        raise CliError(f"--speed: must be greater than 0 and at most 1000, got {value}")
    return x


def monitor_options(
    help_texts: MonitorOptionHelp = GLOBAL_MONITOR_OPTION_HELP, *, in_subcommand: bool = False
) -> argparse.ArgumentParser:
    """A parent parser with how the monitor listens, samples, exports and which agentless jobs it watches.

    In a subcommand every default is SUPPRESS: argparse parses a subcommand into a fresh namespace and copies all of it
    over the top-level one, so a default there would erase the value given before the command name.
    """

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if in_subcommand else value

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--listen", metavar="ADDR", default=default(None), help=help_texts["listen"])
    p.add_argument("--interval", type=positive_seconds, default=default(None), metavar="S", help=help_texts["interval"])
    p.add_argument("--prometheus", metavar="HOST:PORT", default=default(None), help=help_texts["prometheus"])
    p.add_argument("--pid", type=int, action="append", default=default([]), metavar="PID", help=help_texts["pid"])
    p.add_argument(
        "--no-discover",
        action="store_true",
        default=default(False),
        help="do not look for PyTorch trainings running without the agent (default: they are found and sampled; "
        "TRAINMON_DISCOVER=0 does the same)",
    )
    return p


class Subcommands(argparse._SubParsersAction):
    """argparse's subcommand action, except that a repeatable monitor option given both before and after the command
    name keeps the values from both places, in that order (argparse would keep only the later ones)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        before = {dest: vars(namespace).pop(dest) for dest in REPEATABLE_MONITOR_OPTIONS if dest in vars(namespace)}
        super().__call__(parser, namespace, values, option_string)
        for dest, earlier in before.items():
            setattr(namespace, dest, [*earlier, *getattr(namespace, dest, [])])
