"""Driving the Textual app in tests: async tests without pytest-asyncio, an app over a replayed store, waiting
for the frames a key asked for."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine
from typing import Any

from testsupport.stores import replay_at_end, timeline_store
from trainmon.tui import Job, TrainmonApp
from trainmon.tui.theme import Glyphs

COLOR = Glyphs("braille", True)


def aio(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test on its own event loop (no pytest-asyncio in this project)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


def make_app(
    feed=None, *, glyphs: Glyphs = COLOR, job: Job | None = None, threaded: bool = False, store=None
) -> TrainmonApp:
    """The app over ``feed``, or over a replay (at its end) of ``store`` or of a two-minute timeline store."""
    feed = feed or replay_at_end(store or timeline_store(120.0, switch_at=60.0))
    return TrainmonApp(feed, glyphs=glyphs, job=job, watchdog=False, threaded=threaded)


async def settle(pilot, app: TrainmonApp, timeout: float = 5.0) -> None:
    """Let the frames a key asked for arrive (they come as messages), and the first frame at all."""
    await until(pilot, lambda: app.frame is not None, timeout)
    await pilot.pause()
    await pilot.pause()


async def until(pilot, condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Let the app run until ``condition`` holds or ``timeout`` passes; returns its last answer."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        await pilot.pause(0.02)
    return condition()


def text(widget) -> str:
    """A widget's lines as the terminal shows them."""
    return "\n".join(widget.text_lines())


def fake_monitor(store: Any, extra_pids: dict[int, str] | None = None, dump_stacks: Any = None) -> Any:
    """What a LiveFeed reads of the headless Monitor (view.feeds.live.MonitorLike), over a prepared store:
    a test calls ``monitor.listeners[0](snapshot)`` to play a tick."""
    from types import SimpleNamespace

    from trainmon.monitor import Monitor

    return SimpleNamespace(
        store=store,
        last_snapshot=None,
        listeners=[],
        interval=1.0,
        gpu=None,
        extra_pids=extra_pids or {},
        dump_stacks=dump_stacks or Monitor.dump_stacks,
        found_roles=dict,
        attach=lambda pid: (False, f"pid {pid}: this test's monitor does not listen"),
    )
