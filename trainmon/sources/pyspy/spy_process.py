"""Running py-spy as a child process: what one ``record`` run saw, and waiting for it (stopped early on request,
killed past its time) with the CPU time it used, reaped with wait4."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

from trainmon.sources.pyspy.py_stacks import ThreadStack

# --idle: a main thread blocked in the DataLoader's queue.get is idle, and record drops idle threads without it.
# --threads: names each stack's thread, so the main thread's samples can be told from the others'.
RECORD_FLAGS = ("--format", "raw", "--idle", "--nonblocking", "--threads", "--full-filenames")
POLL_S = 0.25
REAP_POLL_S = 0.01
SAMPLES_LINE = re.compile(r"Samples: (\d+) Errors: (\d+)")


@dataclass
class Recording:
    """What one ``py-spy record`` run saw: each distinct stack of each thread with its count."""

    pid: int
    stacks: list[tuple[ThreadStack, int]] = field(default_factory=list)
    error: str | None = None
    elapsed_s: float = 0.0  # wall time of the py-spy run
    cpu_s: float = 0.0  # py-spy's own user + system CPU time
    read_errors: int = 0  # samples py-spy could not read (a stack torn by --nonblocking)

    def main_thread_stacks(self) -> list[tuple[ThreadStack, int]]:
        return [(thread, n) for thread, n in self.stacks if thread.is_main and thread.frames]


def wait_rusage(
    proc: subprocess.Popen[bytes], seconds: float, limit: float, stop: threading.Event | None
) -> tuple[int | None, float, bool]:
    """Wait for ``proc``, due to end after ``seconds`` (SIGINT when ``stop`` is set: py-spy then writes what it has;
    SIGKILL past ``limit`` s), reaping it with wait4 for its CPU time. (exit code, or None when killed for time;
    CPU seconds; whether it was interrupted)."""
    t0 = time.monotonic()
    due, deadline = t0 + seconds, t0 + limit
    interrupted = False
    while True:
        try:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else (a SIGCHLD handler): its code and CPU are lost
            proc.returncode = 0
            return 0, 0.0, interrupted
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            timed_out = time.monotonic() > deadline and proc.returncode == -signal.SIGKILL
            return None if timed_out else proc.returncode, usage.ru_utime + usage.ru_stime, interrupted
        now = time.monotonic()
        if now > deadline:
            proc.kill()
        elif stop is not None and stop.is_set() and not interrupted:
            proc.send_signal(signal.SIGINT)
            interrupted = True
            deadline = min(deadline, now + 5.0)
        if now < due and stop is not None and not interrupted:
            stop.wait(min(POLL_S, due - now))  # idle until the run is due to end, woken at once by close()
        else:
            time.sleep(REAP_POLL_S)


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""
