"""The command a ``trainmon run`` or ``trainmon demo`` launches: started, watched by the monitor, stopped.

Two ways to run it: in the foreground with status lines (its output shared with ours, Ctrl-C forwarded to it), or
under the screen (its output in a log file, stopped when the user quits the screen).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from trainmon.cli.errors import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, CliError
from trainmon.cli.terminal import print_status

if TYPE_CHECKING:
    from trainmon.monitor import Monitor


class ScreenRun(NamedTuple):
    status: int  # the command's exit status
    log_path: str  # where its output went
    stopped: bool  # the command was stopped because the user quit the screen


def launch(cmd: list[str], env: dict[str, str], **popen_kwargs: Any) -> subprocess.Popen:
    try:
        return subprocess.Popen(cmd, env=env, **popen_kwargs)
    except FileNotFoundError:
        raise CliError(f"command not found: {cmd[0]}", status=EXIT_NOT_FOUND) from None
    except PermissionError:
        raise CliError(f"permission denied: {cmd[0]}", status=EXIT_NOT_EXECUTABLE) from None
    except OSError as exc:  # not an executable format (ENOEXEC), too many arguments (E2BIG), ...
        raise CliError(f"cannot run {cmd[0]}: {exc.strerror or exc}", status=EXIT_NOT_EXECUTABLE) from None


@contextlib.contextmanager
def signals_forwarded(child: subprocess.Popen) -> Iterator[None]:
    """SIGINT and SIGTERM go to the child (which decides how to end) instead of ending trainmon first."""

    def forward(signum, frame):
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def stop(child: subprocess.Popen, *, gentle: bool) -> None:
    """SIGINT first when the job deserves a chance to save (``trainmon run``), then SIGTERM, then SIGKILL."""
    steps = ((signal.SIGINT, 10.0), (signal.SIGTERM, 5.0)) if gentle else ((signal.SIGTERM, 5.0),)
    for sig, wait_s in steps:
        try:
            child.send_signal(sig)
            child.wait(timeout=wait_s)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue
    child.kill()
    child.wait()


def run_with_status_lines(cmd: list[str], env: dict[str, str], monitor: Monitor) -> int:
    """Run CMD in the foreground, one status line per tick; returns its exit status."""
    child = launch(cmd, env)
    with signals_forwarded(child):
        monitor.track(child.pid, "child")
        monitor.listeners.append(print_status)
        return child.wait()


def run_under_screen(
    cmd: list[str], env: dict[str, str], monitor: Monitor, what: str, running_notice: str | None, confirm_quit: bool
) -> ScreenRun:
    """Run CMD under the screen; its output goes to a log file (it would tear the screen).

    ``what`` names CMD in the notice once it has exited; ``confirm_quit`` asks before quitting while it runs, and
    stops it gently (SIGINT first) when the user quits anyway.
    """
    from trainmon.tui.app import Job
    from trainmon.tui.terminal import run_tui
    from trainmon.view import LiveFeed

    fd, log_path = tempfile.mkstemp(prefix="trainmon-", suffix=".log")
    with os.fdopen(fd, "wb") as out:
        try:
            child = launch(cmd, env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        except CliError:
            os.unlink(log_path)
            raise
        monitor.track(child.pid, "child")

        def notice() -> str | None:
            rc = child.poll()
            if rc is None:
                return running_notice
            return f"{what} exited with status {rc} · its output: {log_path} · q quits"

        feed = LiveFeed(monitor)
        stopped = False
        try:
            run_tui(feed, job=Job(notice, running=lambda: child.poll() is None, confirm_quit=confirm_quit))
        finally:
            feed.close()
            if child.poll() is None:
                stopped = True
                stop(child, gentle=confirm_quit)
        return ScreenRun(child.wait(), log_path, stopped)


def shell_status(returncode: int) -> int:
    """A child's return code as a shell reports it: 128 + N for a child killed by signal N."""
    return returncode if returncode >= 0 else 128 - returncode
