"""What ``trainmon attach`` reports: one status, one line for the user, one exit status per kind of failure.

Exit statuses (also ``trainmon attach --help``):

====  =====================  ==========================================================================
code  name                   meaning
====  =====================  ==========================================================================
0     EXIT_OK                the agent was started in the process, or it already ran there ("already")
2     (argparse)             bad command line: a PID that is not a positive integer
3     EXIT_NO_PROCESS        no process with that pid (or it is a thread id, not a process id)
4     EXIT_NOT_PYTHON        not a Python process, or an interpreter without the symbols the injection needs
                             (a stripped, fully static build)
5     EXIT_UNSUPPORTED       the process's Python is older than 3.10, or one gdb cannot call into (not x86-64,
                             CET shadow stacks) where ``sys.remote_exec`` cannot be used either
6     EXIT_PERMISSION        ptrace refused (Yama ptrace_scope, no CAP_SYS_PTRACE, a non-dumpable process)
7     EXIT_OTHER_USER        the process belongs to another user
8     EXIT_NAMESPACE         the process runs in another pid or mount namespace (a container)
9     EXIT_NO_INJECTOR       gdb is not installed (and ``sys.remote_exec`` cannot be used)
10    EXIT_EXITED            the process exited, or began shutting down, during the attach
11    EXIT_TIMEOUT           nothing finished within the timeout (the message says what is still queued)
12    EXIT_AGENT_FAILED      the code ran in the process but the agent did not start there
13    EXIT_FAILED            anything else, named in the message: a stopped (Ctrl-Z) or already traced process,
                             a DataLoader worker, a full pending-call queue, an interrupted attach, a gdb error
====  =====================  ==========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

ATTACHED = "attached"
ALREADY = "already"
ERROR = "error"

EXIT_OK = 0
EXIT_NO_PROCESS = 3
EXIT_NOT_PYTHON = 4
EXIT_UNSUPPORTED = 5
EXIT_PERMISSION = 6
EXIT_OTHER_USER = 7
EXIT_NAMESPACE = 8
EXIT_NO_INJECTOR = 9
EXIT_EXITED = 10
EXIT_TIMEOUT = 11
EXIT_AGENT_FAILED = 12
EXIT_FAILED = 13

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "attached, or the agent already ran there",
    EXIT_NO_PROCESS: "no such process",
    EXIT_NOT_PYTHON: "not a Python process (or no interpreter symbols)",
    EXIT_UNSUPPORTED: "Python older than 3.10, or an unsupported platform",
    EXIT_PERMISSION: "ptrace permission denied",
    EXIT_OTHER_USER: "another user's process",
    EXIT_NAMESPACE: "another pid or mount namespace (a container)",
    EXIT_NO_INJECTOR: "gdb not installed",
    EXIT_EXITED: "the process exited during the attach",
    EXIT_TIMEOUT: "timed out",
    EXIT_AGENT_FAILED: "the agent did not start in the process",
    EXIT_FAILED: "the injection failed",
}


@dataclass
class AttachResult:
    """The outcome of ``attach_process``: ``status`` is ``attached``, ``already`` or ``error``."""

    pid: int
    status: str
    message: str  # one line for the user, with the fix where there is one
    exit_code: int  # see the table above
    stopped_s: float | None  # how long the process was held in ptrace stops; None: no ptrace stop was made

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK


def failure(pid: int, exit_code: int, message: str, stopped_s: float | None = None) -> AttachResult:
    return AttachResult(pid, ERROR, one_line(message), exit_code, stopped_s)


def one_line(text: str) -> str:
    return " ".join(str(text).split())
