"""ptrace permissions: Yama's scope and CAP_SYS_PTRACE, read from /proc, and the one fix text trainmon gives for
them. Standard library only: py-spy's stack dumps
(``sources/pyspy/py_spy.py``) and the injector (``trainmon.attach``), which
both need ptrace, tell a refusal the same way."""

from __future__ import annotations

CAP_SYS_PTRACE = 19
PTRACE_SCOPE_PATH = "/proc/sys/kernel/yama/ptrace_scope"
PTRACE_FIX = (
    "fix: sudo sysctl kernel.yama.ptrace_scope=0, or run trainmon as the training job's user or with sudo; "
    "in Docker add --cap-add SYS_PTRACE; in Kubernetes set "
    "securityContext.capabilities.add: [SYS_PTRACE]"
)


def read_ptrace_scope() -> int | None:
    """Yama's ptrace_scope, or None where Yama is absent (no restriction beyond same-user)."""
    try:
        with open(PTRACE_SCOPE_PATH) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def has_cap_sys_ptrace() -> bool | None:
    """CAP_SYS_PTRACE in this process's effective set; None where /proc does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def facts(scope: int | None, cap: bool | None) -> str:
    """Yama's scope and the capability in words: "kernel.yama.ptrace_scope=1, no CAP_SYS_PTRACE"."""
    scope_txt = "Yama absent" if scope is None else f"kernel.yama.ptrace_scope={scope}"
    cap_txt = {True: "CAP_SYS_PTRACE present", False: "no CAP_SYS_PTRACE", None: "capabilities unknown"}[cap]
    return f"{scope_txt}, {cap_txt}"


def refusal(scope: int | None, cap: bool | None) -> tuple[str, list[str]]:
    """Why the kernel refused a ptrace attach, in words, and the facts behind it (Yama's scope, the capability),
    for a one-line message that ends with ``PTRACE_FIX``."""
    facts = [
        f"kernel.yama.ptrace_scope={'absent' if scope is None else scope}",
        {True: "CAP_SYS_PTRACE present", False: "no CAP_SYS_PTRACE", None: "capabilities unknown"}[cap],
    ]
    if scope == 3:
        why = "ptrace is disabled until reboot"
    elif cap:
        why = "an LSM (AppArmor/SELinux), seccomp or a sandbox blocks it"
    elif scope in (1, 2):
        why = "Yama allows only descendants" if scope == 1 else "Yama allows only CAP_SYS_PTRACE"
    else:
        why = "the process belongs to another user or is not dumpable"
    return why, facts
