"""What every ``trainmon COMMAND`` provides to the parser and the dispatcher."""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from typing import ClassVar

from trainmon.cli.options import MonitorOptionHelp


class Command(ABC):
    """One command: its name and line in ``trainmon --help``, its own options, and what it does."""

    name: ClassVar[str]
    help: ClassVar[str]
    # Help texts of the monitor options (--listen, --interval, --prometheus, --pid) when the command also accepts them
    # after its name; None when they are only accepted before it.
    monitor_option_help: ClassVar[MonitorOptionHelp | None] = None

    @abstractmethod
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Declare the command's own options (on a parent of its subparser)."""

    @abstractmethod
    def run(self, args: argparse.Namespace) -> int:
        """Do the command; returns the exit status, or raises CliError for a one-line failure."""
