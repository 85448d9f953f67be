"""How a command fails: one line on stderr and an exit status."""

from __future__ import annotations

EXIT_USAGE = 2  # bad arguments, a file that cannot be read, an address that cannot be served
EXIT_NOT_EXECUTABLE = 126  # the shell's statuses for a command that cannot run
EXIT_NOT_FOUND = 127
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports it


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2 (or ``status``)."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status
