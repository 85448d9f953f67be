"""The frame thread (memray's pattern): woken by a new monitor snapshot, a replay tick or a key, it builds one Frame
off the UI thread and hands it to ``post`` (the app posts it as a message). Wake-ups coalesce: however many
arrive while a frame is being built, one more frame follows."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from trainmon.view import Frame, FrameBuilder, Layout

log = logging.getLogger("trainmon.tui")


class FrameThread(threading.Thread):
    def __init__(self, builder: FrameBuilder, post: Callable[[Frame], None], layout: Layout | None = None) -> None:
        super().__init__(name="trainmon-frames", daemon=True)
        self.builder = builder
        self.post = post
        self.layout = layout or Layout()
        self.built = 0
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._last_key: tuple | None = None

    def request(self, layout: Layout | None = None, force: bool = False) -> None:
        if layout is not None:
            self.layout = layout
        if force:
            self._last_key = None
        self._wake.set()

    def stop(self, timeout: float = 2.0) -> None:
        self._halt.set()
        self._wake.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout)

    def run(self) -> None:
        while True:
            self._wake.wait()
            if self._halt.is_set():
                return
            self._wake.clear()
            try:
                self.build_now()
            except Exception:
                log.exception("building a frame failed")

    def build_now(self) -> None:
        """Build and post one frame on the calling thread (unless a paused view is unchanged since the last)."""
        state = self.builder.state
        layout = self.layout
        # A paused view over unchanged settings draws the same frame again: skip it.
        key = (state.version, layout.cols, layout.sub, state.paused)
        if state.paused and key == self._last_key:
            return
        frame = self.builder.build(layout)
        self._last_key = (state.version, layout.cols, layout.sub, state.paused)
        self.built += 1
        self.post(frame)
