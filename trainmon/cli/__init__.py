"""Command line: ``trainmon [live] | demo | run | record | report | replay | doctor | serve``.

Errors are one line, exit 2. The live, demo, run and replay commands open the screen (trainmon.tui) when stdin,
stdout and stderr are a terminal, and print one status line per second otherwise (CI, pipes). Each command is a
module of ``trainmon.cli.commands``; ``trainmon.cli.program`` builds the parser from them and dispatches.
"""

from trainmon.cli.program import build_parser, main

__all__ = ["build_parser", "main"]
