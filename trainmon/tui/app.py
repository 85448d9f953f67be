"""The trainmon screen: verdict banner, training, GPU, CPU and disk panes on one time axis, the process table.

The app never collects anything. A :class:`~trainmon.tui.collector.FrameThread` builds a headless
:class:`~trainmon.view.Frame` whenever the feed has news or a key changed the view, and posts it; the app applies
it to every widget inside one ``batch_update()``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.events import Resize
from textual.message import Message
from textual.strip import Strip
from textual.widgets import Footer, Static

from trainmon.tui.collector import FrameThread
from trainmon.tui.lines import Geometry
from trainmon.tui.panes import PANES, Size
from trainmon.tui.screens import EvidenceScreen, HelpScreen, StackScreen
from trainmon.tui.theme import Glyphs, detect
from trainmon.tui.watchdog import CHECK_EVERY_S, ServerWatch, tty_alive
from trainmon.tui.widgets import Banner, ChartPane, ProcTable, TimeAxis
from trainmon.view import Feed, Frame, FrameBuilder, Layout, ViewState

log = logging.getLogger("trainmon.tui")

COMPACT_WIDTH = 100
COMPACT_HEIGHT = 34
REPLAY_POLL_S = 0.25
QUIT_CONFIRM_S = 5.0
ATTACH_CONFIRM_S = 5.0
ASCII_KEYS = " <> cursor  q quit  ? help  p pause  w window  f focus  d stack  e evidence"


@dataclass(frozen=True)
class Painted:
    """Every grid widget's rows for one frame, drawn off the UI thread for one geometry."""

    geo: Geometry
    compact: bool
    banner: list[Strip]
    panes: list[list[Strip]]
    axis: list[Strip]


class FrameReady(Message):
    """One frame for every pane, built and drawn off the UI thread."""

    def __init__(self, frame: Frame, painted: Painted | None = None) -> None:
        super().__init__()
        self.frame = frame
        self.painted = painted

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FrameReady)


@dataclass
class Job:
    """A training command the screen was opened for (``trainmon run`` / ``demo``): its state for the notice line,
    and whether quitting while it runs needs a second ``q``."""

    notice: Callable[[], str | None]
    running: Callable[[], bool]
    confirm_quit: bool = True


class TrainmonApp(App[int]):
    TITLE = "trainmon"
    ENABLE_COMMAND_PALETTE = False
    CSS_PATH: ClassVar[list[str | PurePath]] = ["widgets.tcss", "trainmon.tcss"]  # beside this module
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark,h", "help", "Help"),
        Binding("p,space", "pause", "Pause"),
        Binding("w", "window", "Window"),
        Binding("f", "focus_pane", "Focus"),
        Binding("d", "dump", "Stack"),
        Binding("a", "attach", "Attach"),
        Binding("e", "evidence", "Evidence"),
        Binding("left", "cursor(-1)", "Cursor", priority=True, key_display="←→"),
        Binding("right", "cursor(1)", "Cursor", priority=True, show=False),
        Binding("shift+left", "cursor(-10)", show=False, priority=True),
        Binding("shift+right", "cursor(10)", show=False, priority=True),
        Binding("home", "cursor_home", show=False, priority=True),
        Binding("end", "cursor_end", show=False, priority=True),
        Binding("escape", "follow", "Live", show=False),
        Binding("plus,equals_sign", "speed(1)", show=False),
        Binding("minus", "speed(-1)", show=False),
    ]

    def __init__(
        self,
        feed: Feed,
        *,
        glyphs: Glyphs | None = None,
        job: Job | None = None,
        state: ViewState | None = None,
        watchdog: bool = True,
        threaded: bool = True,
    ) -> None:
        super().__init__()
        self.feed = feed
        self.glyphs = glyphs or detect()
        self.job = job
        self.state = state or ViewState()
        self.builder = FrameBuilder(feed, self.state, status_extra=job.notice if job else None)
        self.frame: Frame | None = None
        self.frames_applied = 0
        self.compact = True
        self.geometry = Geometry.for_width(80, True)
        self.watchdog = watchdog
        self._server_watch: ServerWatch | None = None
        self.threaded = threaded
        self._quit_armed_at: float | None = None
        self._attach_armed: tuple[int, float] | None = None  # (pid, when) of a first press of a
        self._thread: FrameThread | None = None
        if not self.glyphs.unicode:
            self.add_class("-ascii")

    # ---- layout

    def compose(self) -> ComposeResult:
        # Held by reference: frames keep arriving while a modal screen is on top, where queries would not see them.
        self.banner = Banner(self.glyphs, id="banner")
        self.panes = [ChartPane(pane, self.glyphs) for pane in PANES[:-1]]
        self.axis = TimeAxis(self.glyphs, id="axis")
        self.table = ProcTable(id="procs")
        yield self.banner
        yield from self.panes
        yield self.axis
        yield self.table
        if self.glyphs.unicode:
            yield Footer()
        else:  # Textual's footer draws arrows and box characters
            yield Static(ASCII_KEYS, id="keys")

    def on_mount(self) -> None:
        self._relayout(self.size.width, self.size.height)
        self.table.fit(self.size.width)
        self._thread = FrameThread(self.builder, self._post_frame, self._layout())
        if self.threaded:
            self._thread.start()
        if not self.feed.subscribe(self.request_frame):
            self.set_interval(REPLAY_POLL_S, self.request_frame)
        if self.watchdog and not self.is_headless:
            if self.is_web:  # pipes to `trainmon serve`, not a terminal: a closed tab ends the app via the driver
                self._server_watch = ServerWatch()
            self.set_interval(CHECK_EVERY_S, self._check_tty)
        self.table.focus()
        self.request_frame()

    def on_unmount(self) -> None:
        if self._thread is not None:
            self._thread.stop()

    def on_resize(self, event: Resize) -> None:
        self._relayout(event.size.width, event.size.height)
        if self.frame is not None:
            self._apply(self.frame)  # redraw at once on the new grid, then with data for the new width
        self.request_frame(force=True)

    def _relayout(self, width: int, height: int) -> None:
        self.compact = width < COMPACT_WIDTH or height < COMPACT_HEIGHT
        self.set_class(self.compact, "-compact")
        self.geometry = Geometry.for_width(width, self.compact)
        if hasattr(self, "table"):
            self.table.fit(width)

    def _layout(self) -> Layout:
        return Layout(self.geometry.cols, self.glyphs.sub)

    # ---- frames

    def request_frame(self, force: bool = False) -> None:
        """Ask for a new frame (thread-safe: the feed calls this from the monitor thread)."""
        thread = self._thread
        if thread is None:
            return
        if self.threaded:
            thread.request(self._layout(), force=force)
        else:
            thread.layout = self._layout()
            thread.build_now()

    def _post_frame(self, frame: Frame) -> None:
        # On the frame thread: the rows are drawn here too, so the UI thread only swaps them in.
        painted = None
        try:
            painted = self._paint(frame, self.geometry, self.compact)
        except Exception:
            log.exception("drawing a frame failed")  # the UI thread draws it again
        self.post_message(FrameReady(frame, painted))

    def on_frame_ready(self, message: FrameReady) -> None:
        self._apply(message.frame, message.painted)

    def _paint(self, frame: Frame, geo: Geometry, compact: bool) -> Painted:
        """Every grid widget's rows for ``frame`` (pure: any thread)."""
        focus = frame.focus
        panes = []
        for pane in self.panes:
            focused = focus == pane.pane
            small = (compact or focus is not None) and not focused
            size = Size(compact=small, focused=focused and not compact)
            panes.append(pane.strips_for(frame, geo, size, with_title=not small))
        return Painted(
            geo, compact, self.banner.strips_for(frame, geo, compact), panes, self.axis.strips_for(frame, geo)
        )

    def _apply(self, frame: Frame, painted: Painted | None = None) -> None:
        self.frame = frame
        if painted is None or painted.geo != self.geometry or painted.compact != self.compact:
            painted = self._paint(frame, self.geometry, self.compact)  # resized since it was drawn
        with self.batch_update():
            self.banner.set_strips(painted.banner)
            for pane, strips in zip(self.panes, painted.panes, strict=True):
                pane.set_strips(strips)
            self.axis.set_strips(painted.axis)
            self.table.set_class(frame.focus == "procs", "-focused-pane")
            self.table.show(frame.procs)
        self.frames_applied += 1

    # ---- keys

    def action_pause(self) -> None:
        with self.state.lock:
            self.state.toggle_pause(self.feed)
        self.request_frame()

    def action_window(self) -> None:
        with self.state.lock:
            window = self.state.cycle_window()
        self.notify(f"window {window / 60:g} min", timeout=1.5)
        self.request_frame()

    def action_focus_pane(self) -> None:
        with self.state.lock:
            focus = self.state.cycle_focus(PANES)
        if focus == "procs":
            self.table.focus()
        self.request_frame()

    def action_cursor(self, steps: int) -> None:
        with self.state.lock:
            self.state.move_cursor(self.feed, self.geometry.cols, steps)
        self.request_frame()

    def action_cursor_home(self) -> None:
        with self.state.lock:
            self.state.cursor_home(self.feed)
        self.request_frame()

    def action_cursor_end(self) -> None:
        with self.state.lock:
            self.state.cursor_end(self.feed)
        self.request_frame()

    def action_follow(self) -> None:
        with self.state.lock:
            self.state.clear_cursor(self.feed)
        self.request_frame()

    def action_speed(self, direction: int) -> None:
        speed = self.feed.change_speed(direction)
        if speed is None:
            return
        self.notify(f"replay speed {speed:g}×", timeout=1.5)
        with self.state.lock:
            self.state.touch()
        self.request_frame()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_evidence(self) -> None:
        self.push_screen(EvidenceScreen(self.frame.verdict if self.frame else None))

    def action_dump(self) -> None:
        table = self.table
        pid = table.selected_pid()
        if pid is None:
            why = "the table is empty" if not table.row_count else "it runs in a pid namespace trainmon cannot see"
            self.notify(f"no stack dump: {why}", severity="warning", timeout=3)
            return
        self.push_screen(StackScreen(pid, table.selected_role(), self.feed.dump))

    def action_attach(self) -> None:
        """Inject the agent into the selected process: a first press asks, a second within ATTACH_CONFIRM_S does."""
        table = self.table
        pid = table.selected_pid()
        role = table.selected_role()
        if pid is None or role not in ("main", "rank"):
            what = "a training's main process" if pid is None else f"its main process, not a {role or 'process'}"
            self.notify(f"to attach, select {what} in the process table", severity="warning", timeout=3)
            return
        now = time.monotonic()
        armed = self._attach_armed
        if armed is None or armed[0] != pid or now - armed[1] > ATTACH_CONFIRM_S:
            self._attach_armed = (pid, now)
            self.notify(
                f"attach the trainmon agent to pid {pid} without a restart? press a again to confirm",
                timeout=ATTACH_CONFIRM_S,
            )
            return
        self._attach_armed = None
        self.notify(f"attaching to pid {pid}…", timeout=3)
        self.run_worker(lambda: self._attach_pid(pid), thread=True, group="attach", exit_on_error=False)

    def _attach_pid(self, pid: int) -> None:
        ok, message = self.feed.attach(pid)
        self.call_from_thread(self.notify, message, severity="information" if ok else "error", timeout=8)

    async def action_quit(self) -> None:
        if self.job is not None and self.job.confirm_quit and self.job.running():
            now = time.monotonic()
            if self._quit_armed_at is None or now - self._quit_armed_at > QUIT_CONFIRM_S:
                self._quit_armed_at = now
                self.notify(
                    "the command is still running: press q again to stop it and quit",
                    severity="warning",
                    timeout=QUIT_CONFIRM_S,
                )
                return
        self.exit(0)

    # ---- TTY watchdog

    def _check_tty(self) -> None:
        if self._server_watch is not None:
            if not self._server_watch.alive():
                log.warning("server lost: exiting")
                self.exit(return_code=1)
        elif not tty_alive():
            log.warning("terminal lost: exiting")
            self.exit(return_code=1)
