"""Run the screen in the real terminal: log records held back while it is up (they would tear the screen) and
printed after; SIGTERM and SIGHUP close it cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Iterator

from trainmon.tui.app import Job, TrainmonApp
from trainmon.view import Feed


class _Held(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) < 200:
            self.records.append(record)


@contextlib.contextmanager
def _logging_held() -> Iterator[_Held]:
    root = logging.getLogger()
    saved = [h for h in root.handlers if isinstance(h, logging.StreamHandler)]
    held = _Held()
    fmt = saved[0].formatter if saved and saved[0].formatter else None
    held.setFormatter(fmt or logging.Formatter("trainmon: %(message)s"))
    for h in saved:
        root.removeHandler(h)
    root.addHandler(held)
    try:
        yield held
    finally:
        root.removeHandler(held)
        for h in saved:
            root.addHandler(h)


@contextlib.contextmanager
def _signals_exit(app: TrainmonApp) -> Iterator[None]:
    def handler(signum: int, frame: object) -> None:
        try:
            asyncio.get_running_loop().call_soon_threadsafe(app.exit, None, 128 + signum)
        except RuntimeError:  # the loop is not running yet or any more
            raise SystemExit(128 + signum) from None

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            previous[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)


def run_tui(feed: Feed, *, job: Job | None = None) -> int:
    """Show the screen until the user quits; the exit status (non-zero when the terminal or a signal ended it)."""
    app = TrainmonApp(feed, job=job)
    with _logging_held() as held, _signals_exit(app):
        app.run()
    for record in held.records:
        print(held.format(record), file=sys.stderr)
    return app.return_code or 0
