"""Screen or status lines, and Ctrl-C: how the commands meet the terminal they run in."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainmon.monitor import Snapshot


def use_tui() -> bool:
    """The screen needs a terminal on stdin (keys), stdout and stderr (Textual draws on stderr)."""
    if os.environ.get("TEXTUAL_DRIVER", "").startswith("textual.drivers.web_driver"):
        return True  # served to a browser by `trainmon serve`
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return all(stream is not None and stream.isatty() for stream in (sys.stdin, sys.stdout, sys.stderr))
    except (AttributeError, ValueError):
        return False


def print_status(snap: Snapshot) -> None:
    """A Monitor listener: one status line per tick on stdout (a closed pipe just ends the lines)."""
    from trainmon.monitor import status_line

    try:
        print(status_line(snap), flush=True)
    except BrokenPipeError:
        pass


def status_listener(args: argparse.Namespace, stop: threading.Event) -> Callable[[Snapshot], None]:
    """What a headless command prints each tick: a JSON object with --json (the command stops when its reader
    leaves), else a status line."""
    if getattr(args, "json", False):
        from trainmon.export.json_stream import JsonLines

        return JsonLines(on_closed=stop.set)
    return print_status


def stop_event() -> threading.Event:
    """An event that SIGINT or SIGTERM sets: the headless commands run until it is set."""
    stop = threading.Event()

    def handler(signum, frame):
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop
