"""How long the target is held in ptrace stops while gdb has it, seen from outside through /proc.

A thread polls the main thread's state letter in ``/proc/PID/stat`` (``t``: tracing stop, ``T``: stopped) every
half millisecond while gdb runs. gdb stops every thread together (all-stop mode), so the main thread's stops are
the process's. Each stop is timed from the first poll that saw it to the first that saw it running again, so a
figure is good to about one poll interval; a stop shorter than one poll may be missed.
"""

from __future__ import annotations

import threading
import time

from trainmon.attach.target import main_state

POLL_S = 0.0005
_STOPPED = ("t", "T")


class StopWatch:
    def __init__(self, pid: int, poll_s: float = POLL_S) -> None:
        self.pid = pid
        self.poll_s = poll_s
        self.total_s = 0.0
        self.longest_s = 0.0
        self.stops = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainmon-attach-stopwatch", daemon=True)

    def __enter__(self) -> StopWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join(timeout=2.0)

    def _run(self) -> None:
        since: float | None = None
        while True:
            state = main_state(self.pid)
            now = time.perf_counter()
            if state in _STOPPED:
                if since is None:
                    since = now
            elif since is not None:
                self._add(now - since)
                since = None
            if state is None or self._halt.is_set():
                break
            time.sleep(self.poll_s)
        if since is not None:
            self._add(time.perf_counter() - since)

    def _add(self, duration: float) -> None:
        self.total_s += duration
        self.longest_s = max(self.longest_s, duration)
        self.stops += 1
