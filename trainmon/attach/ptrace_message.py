"""ptrace permissions in words: the facts (Yama, CAP_SYS_PTRACE, owner) and the fix, the way py-spy's are told.

The facts and the fix text are ``trainmon.ptrace``'s, which py-spy's messages
(``trainmon.sources.pyspy.py_spy``) use too.
"""

from __future__ import annotations

import os

from trainmon.ptrace import CAP_SYS_PTRACE, PTRACE_FIX, PTRACE_SCOPE_PATH, has_cap_sys_ptrace, read_ptrace_scope
from trainmon.ptrace import facts as ptrace_facts
from trainmon.ptrace import refusal as ptrace_refusal

__all__ = [
    "CAP_SYS_PTRACE",
    "PTRACE_FIX",
    "PTRACE_SCOPE_PATH",
    "dumpable",
    "has_cap_sys_ptrace",
    "permission_message",
    "read_ptrace_scope",
    "status",
]


def dumpable(pid: int) -> bool | None:
    """Whether ``pid`` is dumpable (a same-user tracer without CAP_SYS_PTRACE needs it); None: cannot tell.

    The kernel makes a non-dumpable process's /proc/PID files root's: owned by root while the process is not root.
    """
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
        with open(f"/proc/{pid}/status") as f:
            uids = next((line.split()[1:] for line in f if line.startswith("Uid:")), [])
        euid = int(uids[1])
    except (OSError, ValueError, IndexError):
        return None
    return not (owner == 0 and euid != 0)


def status(cap: bool | None = None) -> tuple[bool, str]:
    """Whether this process can likely ptrace a same-user process, and why (one line, for ``trainmon doctor``)."""
    scope = read_ptrace_scope()
    cap = has_cap_sys_ptrace() if cap is None else cap
    where = ptrace_facts(scope, cap)
    if scope == 3:
        return False, f"{where}: ptrace is disabled until reboot"
    if cap:
        return True, f"{where}: ptrace allowed to any process"
    if scope in (None, 0):
        return True, f"{where}: ptrace allowed to processes of the same user"
    if scope == 1:
        return False, f"{where}: only descendants may be traced, which a running training is not"
    return False, f"{where}: only CAP_SYS_PTRACE may trace"


def permission_message(pid: int) -> str:
    """One line: why the kernel refused to let gdb attach to ``pid``, and the fix."""
    why, facts = ptrace_refusal(read_ptrace_scope(), has_cap_sys_ptrace())
    if dumpable(pid) is False:
        facts.append("the process is not dumpable (prctl PR_SET_DUMPABLE 0, or a setuid/capability program)")
    return f"cannot attach to pid {pid}: ptrace permission denied, {why} ({', '.join(facts)}); {PTRACE_FIX}"
