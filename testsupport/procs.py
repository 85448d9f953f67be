"""Child processes for tests and benchmarks: their environment, ``trainmon`` commands, starting, waiting, stopping.

Two ways to stop a child: ``stop`` (SIGTERM, then read what it printed; a child that does not exit in time is an
error) for tests that look at the output, and ``force_stop`` (SIGCONT, SIGTERM, SIGKILL after a timeout, never an
error) for benchmark loads that must end whatever state they are in.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from testsupport.paths import ROOT
from trainmon.demo.scenario_command import free_port  # the one free-port finder: the demo needs it too

__all__ = [
    "PY",
    "child_env",
    "force_stop",
    "force_stop_all",
    "free_port",
    "proc_status",
    "record_training",
    "report_json",
    "run_train",
    "start_python",
    "start_recorder",
    "stop",
    "trainmon_cmd",
    "wait_for",
    "wait_for_path",
]

PY = sys.executable


def child_env(**extra: str) -> dict[str, str]:
    """The environment for children: this checkout importable first, no stray ``TRAINMON_*`` settings (but the
    suite's ``TRAINMON_DISCOVER``: see tests/conftest.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_") or k == "TRAINMON_DISCOVER"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def trainmon_cmd(*args: str) -> list[str]:
    return [PY, "-m", "trainmon", *args]


def start_python(*args: str, env: dict[str, str] | None = None, **popen: Any) -> subprocess.Popen:
    """``python ARGS`` with the children's environment (plus ``env``), stdout and stderr piped as text."""
    return subprocess.Popen(
        [PY, *args],
        env=child_env(**(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def wait_for(predicate: Callable[[], object], timeout: float = 20.0, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` passes; returns its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def wait_for_path(path: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Until ``path`` exists; raises if ``proc`` exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with status {proc.returncode} before creating {path}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout:.0f} s")
        time.sleep(0.05)


def attach_cli(pid: int, addr: str) -> subprocess.CompletedProcess:
    """``trainmon attach PID --listen ADDR`` run as a user runs it; its result."""
    return subprocess.run(
        trainmon_cmd("attach", str(pid), "--listen", addr), env=child_env(), capture_output=True, text=True, timeout=60
    )


def start_recorder(addr: str, output: str, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A real ``trainmon record`` listening on ``addr``, started and listening when this returns."""
    proc = subprocess.Popen(
        trainmon_cmd("record", "--output", output, "--listen", addr, "-q", *extra),
        env=child_env(**(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert wait_for(lambda: os.path.exists(addr) or proc.poll() is not None, 20), "recorder did not start"
    assert proc.poll() is None, proc.communicate()
    return proc


def stop(proc: subprocess.Popen, timeout: float = 20.0) -> tuple[str, str]:
    """SIGTERM and read what the child printed; raises ``TimeoutExpired`` if it does not exit in ``timeout``."""
    if proc.poll() is None:
        proc.terminate()
    out, err = proc.communicate(timeout=timeout)
    return out, err


def force_stop(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """SIGCONT (a frozen child cannot die of SIGTERM), SIGTERM, then SIGKILL; always reaped."""
    if proc is None or proc.poll() is not None:
        if proc is not None:
            proc.wait()
        return
    for sig in (signal.SIGCONT, signal.SIGTERM):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            break
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def force_stop_all(procs: Iterable[subprocess.Popen | None], timeout: float = 10.0) -> None:
    """``force_stop`` for many at once: all are signalled first, then all share one ``timeout``."""
    procs = [p for p in procs if p is not None]
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGCONT)
                p.terminate()
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_train(addr: str | None, *args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    """The demo training (``trainmon.demo.train ARGS``) to the end, reporting to ``addr`` when given."""
    extra = {"TRAINMON_ADDR": addr} if addr else {}
    extra.update(env)
    return subprocess.run(
        [PY, "-m", "trainmon.demo.train", *args],
        env=child_env(**extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def report_json(path: str) -> dict:
    """``trainmon report PATH --format json``, parsed."""
    res = subprocess.run(
        trainmon_cmd("report", path, "--format", "json"), env=child_env(), capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def record_training(addr: str, output: str, *train_args: str) -> str:
    """A real training under a real ``trainmon record``; returns the recording's path."""
    recorder = start_recorder(addr, output)
    try:
        res = run_train(addr, *train_args)
        assert res.returncode == 0, res.stderr
        time.sleep(1.0)  # the agent's last batch is read before the recorder is stopped
    finally:
        stop(recorder)
    return output


def proc_status(pid: int) -> dict[str, int]:
    """RSS (KiB), threads and open descriptors of a live process; ``proc_files``: how many of those are files under
    /proc (the monitor keeps its tracked processes' /proc files open between ticks)."""
    fd_dir = f"/proc/{pid}/fd"
    names = os.listdir(fd_dir)
    proc_files = 0
    for name in names:
        try:
            proc_files += os.readlink(f"{fd_dir}/{name}").startswith("/proc/")
        except OSError:
            continue  # closed since the listing
    out = {"fds": len(names), "proc_files": proc_files}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key == "VmRSS":
                out["rss_kb"] = int(value.split()[0])
            elif key == "Threads":
                out["threads"] = int(value)
    return out
