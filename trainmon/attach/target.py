"""The target process as /proc shows it, read without touching it: alive, owner, namespaces, stopped or traced.

``preflight`` returns the failure to report before anything is injected, or None when the injection may go on.
"""

from __future__ import annotations

import os
import pwd
import signal
from dataclasses import dataclass

from trainmon.attach.result import (
    EXIT_EXITED,
    EXIT_FAILED,
    EXIT_NAMESPACE,
    EXIT_NO_PROCESS,
    EXIT_OTHER_USER,
    AttachResult,
    failure,
)

RUN_INSIDE = (
    "run `trainmon attach` inside that container (with trainmon installed there and the monitor's socket "
    "mounted), or start the training with `trainmon run -- python train.py`, or add "
    "`import trainmon.agent; trainmon.agent.attach()` to the script"
)


@dataclass(frozen=True)
class ProcStatus:
    state: str  # the letter of /proc/PID/stat: R, S, D, T (stopped), t (tracing stop), Z, X
    tgid: int
    uid: int  # real
    euid: int
    tracer: int  # TracerPid: 0 when nobody traces it


def read_status(pid: int) -> ProcStatus | None:
    """The process's state and owner; None when there is no such process (or it has been reaped)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
        uids = fields["Uid"].split()
        return ProcStatus(
            state=fields["State"].split()[0],
            tgid=int(fields["Tgid"]),
            uid=int(uids[0]),
            euid=int(uids[1]),
            tracer=int(fields.get("TracerPid", "0").split()[0]),
        )
    except (FileNotFoundError, ProcessLookupError):
        return None
    except (OSError, KeyError, ValueError, IndexError):
        return None


def main_state(pid: int) -> str | None:
    """The main thread's state letter from /proc/PID/stat (cheaper than status: polled while gdb holds it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    end = data.rfind(b")")
    return chr(data[end + 2]) if 0 < end < len(data) - 2 else None


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    state = main_state(pid)
    return state is not None and state not in ("Z", "X")


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _namespace(pid: int | str, kind: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def foreign_namespaces(pid: int) -> list[str]:
    """Which of the pid and mount namespaces of ``pid`` differ from this process's (unreadable ones: not judged)."""
    out = []
    for kind in ("pid", "mnt"):
        theirs, ours = _namespace(pid, kind), _namespace("self", kind)
        if theirs is not None and ours is not None and theirs != ours:
            out.append(kind)
    return out


def preflight(pid: int) -> AttachResult | None:
    """Everything that can be told from /proc before gdb or ``sys.remote_exec`` goes near the process."""
    if pid <= 0:
        return failure(pid, EXIT_NO_PROCESS, f"{pid} is not a process id (it must be a positive integer)")
    st = read_status(pid)
    if st is None:
        return failure(pid, EXIT_NO_PROCESS, f"no process with pid {pid}")
    if st.tgid != pid:
        return failure(pid, EXIT_NO_PROCESS, f"{pid} is a thread of process {st.tgid}: run `trainmon attach {st.tgid}`")
    if st.state in ("Z", "X"):
        return failure(pid, EXIT_EXITED, f"process {pid} has exited (a zombie waiting for its parent)")
    if pid == os.getpid():
        return failure(pid, EXIT_FAILED, f"pid {pid} is this trainmon process itself")
    me = os.geteuid()
    if st.uid != me or st.euid != me:
        owner = user_name(st.euid if st.euid != me else st.uid)
        return failure(
            pid,
            EXIT_OTHER_USER,
            f"process {pid} belongs to {owner}, not to you ({user_name(me)}): its agent could not reach your "
            f"monitor; run the monitor and `trainmon attach {pid}` as {owner} (e.g. sudo -u {owner} trainmon "
            f"attach {pid})",
        )
    foreign = foreign_namespaces(pid)
    if foreign:
        kinds = " and ".join({"pid": "pid", "mnt": "mount"}[k] for k in foreign)
        return failure(
            pid, EXIT_NAMESPACE, f"process {pid} runs in another {kinds} namespace (a container?): {RUN_INSIDE}"
        )
    if st.state == "T":
        return failure(
            pid,
            EXIT_FAILED,
            f"process {pid} is stopped (state T, e.g. Ctrl-Z): resume it first (kill -CONT {pid}), then attach",
        )
    if st.tracer != 0:
        return failure(
            pid,
            EXIT_FAILED,
            f"process {pid} is already being traced by pid {st.tracer} (a debugger or profiler): "
            "detach it first, then attach",
        )
    return None


def shadow_stack(pid: int) -> bool:
    """Whether the process runs with x86 CET user shadow stacks (/proc shows it from Linux 6.6 on)."""
    return "shstk" in _thread_features(pid)


def _thread_features(pid: int) -> str:
    """x86 user-space CET features enabled in the process (``shstk``, ``wrss``), from /proc (kernels 6.6+)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("x86_Thread_features:"):
                    return line.split(":", 1)[1]
    except OSError:
        pass
    return ""


def resume_if_left_stopped(pid: int) -> bool:
    """SIGCONT a process that a killed tracer left in a group stop (never one somebody else traces).

    Returns True when it had to be resumed."""
    st = read_status(pid)
    if st is None or st.tracer != 0 or st.state not in ("T", "t"):
        return False
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        return False
    return True
