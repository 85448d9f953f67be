"""For the reliability tests: trainings that report their own step times, the fault matrix's verdict on them,
and the figures a test measured (printed, and appended to ``TRAINMON_FIGURES`` when set)."""

from __future__ import annotations

import json
import os
import queue
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass

from testsupport.paths import STEADY
from testsupport.procs import start_python

FIGURES = os.environ.get("TRAINMON_FIGURES")  # a file to append measured figures to (JSON lines)


def note(test: str, **figures: object) -> None:
    """Keep what a test measured: printed (pytest -s) and, with TRAINMON_FIGURES, appended to a file."""
    line = json.dumps({"test": test, **figures})
    print(line)
    if FIGURES:
        with open(FIGURES, "a") as fh:
            fh.write(line + "\n")


class Lines:
    """A child's stdout read line by line on a thread, so a test can wait for a line with a timeout."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        self.all: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.all.append(line)
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {text!r} from pid {self.proc.pid}: {self.all}")
            try:
                if text in self.lines.get(timeout=left):
                    return
            except queue.Empty:
                continue


def start_steady(addr: str | None, steps: int, step_ms: float, **env: str) -> tuple[subprocess.Popen, Lines]:
    extra = {"TRAINMON_ADDR": addr} if addr else {"TRAINMON_DISABLE": "1"}
    proc = start_python(STEADY, str(steps), str(step_ms), env={**extra, **env})
    return proc, Lines(proc)


def finish(proc: subprocess.Popen, lines: Lines, timeout: float = 120.0) -> dict:
    proc.wait(timeout=timeout)
    err = proc.stderr.read()  # type: ignore[union-attr]
    assert proc.returncode == 0, err
    deadline = time.monotonic() + 5
    while not lines.all or not lines.all[-1].startswith("{"):
        assert time.monotonic() < deadline, lines.all
        time.sleep(0.01)
    result = json.loads(lines.all[-1])
    result["stderr"] = err
    return result


@dataclass
class StepStats:
    median_ms: float
    p99_ms: float
    worst_ms: float
    wall_s: float
    rss_growth_mb: float

    @classmethod
    def of(cls, result: dict) -> StepStats:
        times = sorted(result["times"][5:])  # the first steps warm up torch
        return cls(
            statistics.median(times) * 1e3,
            times[int(len(times) * 0.99)] * 1e3,
            times[-1] * 1e3,
            result["wall"],
            (result["rss1_kb"] - result["rss0_kb"]) / 1024,
        )


def assert_unaffected(test: str, base: dict, run: dict, **figures: object) -> None:
    """The fault-matrix promise: same step rate, no step held up by trainmon, memory bounded.

    Margins are for a loaded 2-core CI machine; a step that waited on a dead or frozen monitor
    would take the freeze (10 s) or a connect timeout (0.5 s or more), far outside them.
    """
    b, r = StepStats.of(base), StepStats.of(run)
    note(
        test, base=vars(b), run=vars(r), median_ratio=round(r.median_ms / b.median_ms, 4), agent=run["agent"], **figures
    )
    assert run["steps"] == base["steps"]
    assert r.median_ms <= b.median_ms * 1.05 + 0.3, (b, r)  # within 5 % (+0.3 ms of timer noise)
    assert r.wall_s <= b.wall_s * 1.10 + 0.3, (b, r)
    assert r.worst_ms <= b.worst_ms + 250, (b, r)
    assert r.rss_growth_mb <= b.rss_growth_mb + 16, (b, r)
    assert run["stderr"] == "" and base["stderr"] == ""
