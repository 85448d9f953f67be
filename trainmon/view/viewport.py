"""Where the screen looks: the window, pause, the time cursor and the focused pane, moved by keys."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from trainmon.view.feeds.protocol import Feed

WINDOWS_S = (60.0, 300.0, 900.0)


@dataclass
class ViewState:
    """Where the screen looks. Mutated by keys (UI thread) and read by the frame builder: guard with ``lock``."""

    window_s: float = WINDOWS_S[0]
    paused: bool = False
    t_end: float | None = None
    cursor_t: float | None = None
    focus: str | None = None
    version: int = 0  # bumped by every change, so a builder can skip unchanged paused frames
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    def touch(self) -> None:
        """Note a change, so the next frame is built even while paused; the setters below call it, and callers
        call it for what the state does not hold (a new replay speed)."""
        self.version += 1

    def follow(self, head: float | None) -> None:
        """The plots' right edge tracks the head unless paused."""
        if head is not None and (not self.paused or self.t_end is None) and self.t_end != head:
            self.t_end = head
            self.touch()

    def col_dt(self, cols: int) -> float:
        return self.window_s / max(1, cols)

    def cycle_window(self) -> float:
        i = WINDOWS_S.index(self.window_s) if self.window_s in WINDOWS_S else -1
        self.set_window(WINDOWS_S[(i + 1) % len(WINDOWS_S)])
        return self.window_s

    def set_window(self, window_s: float) -> None:
        self.window_s = window_s
        if self.cursor_t is not None and self.t_end is not None and self.cursor_t < self.t_end - window_s:
            self.cursor_t = self.t_end - window_s
        self.touch()

    def toggle_pause(self, feed: Feed) -> bool:
        self.set_paused(feed, not self.paused)
        return self.paused

    def set_paused(self, feed: Feed, paused: bool) -> None:
        if paused == self.paused:
            return
        self.paused = paused
        if paused:
            feed.set_playing(False)
        else:
            # Replay resumes from where the view stands; live jumps back to the present.
            feed.set_playing(True, at=self.t_end)
            self.t_end = feed.head()
        self.touch()

    def move_cursor(self, feed: Feed, cols: int, steps: int) -> None:
        """Move the time cursor ``steps`` columns (negative: back); scroll the view (and pause) at its edges."""
        span = feed.span()
        if span is None or self.t_end is None:
            return
        dt = self.col_dt(cols)
        start = self.cursor_t if self.cursor_t is not None else self.t_end
        self.place_cursor(feed, start + steps * dt)

    def place_cursor(self, feed: Feed, t: float) -> None:
        span = feed.span()
        if span is None or self.t_end is None:
            return
        lo, hi = span
        t = min(max(t, lo), hi)
        if t < self.t_end - self.window_s:
            self.set_paused(feed, True)
            self.t_end = t + self.window_s
        elif t > self.t_end:
            self.set_paused(feed, True)
            self.t_end = t
        self.cursor_t = t
        self.touch()

    def cursor_home(self, feed: Feed) -> None:
        span = feed.span()
        if span is not None:
            self.place_cursor(feed, span[0])

    def cursor_end(self, feed: Feed) -> None:
        span = feed.span()
        if span is not None:
            self.place_cursor(feed, span[1])

    def clear_cursor(self, feed: Feed) -> None:
        """Drop the cursor and go back to following the head."""
        self.cursor_t = None
        if self.paused and feed.live:
            self.set_paused(feed, False)
        self.touch()

    def cycle_focus(self, panes: Sequence[str]) -> str | None:
        order = [None, *panes]
        i = order.index(self.focus) if self.focus in order else 0
        self.focus = order[(i + 1) % len(order)]
        self.touch()
        return self.focus
