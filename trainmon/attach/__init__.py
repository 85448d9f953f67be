"""``trainmon attach PID``: start the trainmon agent in a Python training that is already running.

Standard library only (it runs in the ``trainmon`` command, and no textual). ``attach_process`` never raises;
``trainmon.attach.result`` lists the exit statuses. How it works: ``trainmon.attach.gdb`` (any CPython 3.10+ on
x86-64 Linux, through gdb) and ``trainmon.attach.remote`` (CPython 3.14+ on both sides, ``sys.remote_exec``).
"""

from __future__ import annotations

from trainmon.attach.core import attach_process
from trainmon.attach.result import (
    ALREADY,
    ATTACHED,
    ERROR,
    EXIT_AGENT_FAILED,
    EXIT_CODES,
    EXIT_EXITED,
    EXIT_FAILED,
    EXIT_NAMESPACE,
    EXIT_NO_INJECTOR,
    EXIT_NO_PROCESS,
    EXIT_NOT_PYTHON,
    EXIT_OK,
    EXIT_OTHER_USER,
    EXIT_PERMISSION,
    EXIT_TIMEOUT,
    EXIT_UNSUPPORTED,
    AttachResult,
)

__all__ = [
    "ALREADY",
    "ATTACHED",
    "ERROR",
    "EXIT_AGENT_FAILED",
    "EXIT_CODES",
    "EXIT_EXITED",
    "EXIT_FAILED",
    "EXIT_NAMESPACE",
    "EXIT_NOT_PYTHON",
    "EXIT_NO_INJECTOR",
    "EXIT_NO_PROCESS",
    "EXIT_OK",
    "EXIT_OTHER_USER",
    "EXIT_PERMISSION",
    "EXIT_TIMEOUT",
    "EXIT_UNSUPPORTED",
    "AttachResult",
    "attach_process",
]
