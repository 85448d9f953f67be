"""What the screen shows, computed headless: the shared time axis, every pane's series and its values at the cursor.

The TUI (``trainmon.tui``) only draws a :class:`Frame`. A Frame is built from a :class:`Feed` (the live Monitor,
or a recording being replayed) and a :class:`ViewState` (window, pause, cursor) by :func:`build_frame`, under the
store's lock, on any thread. Nothing here imports textual, so all of it is unit-tested without a terminal.

The time axis: the plot area has ``cols`` columns ending at ``t_end``; each column covers ``window_s / cols``
seconds, and every series is resampled to ``cols * sub`` buckets on the same edges (``sub`` = 2 when the
charts draw two samples per cell with braille), so a column means the same instant in every pane.
"""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainmon.diagnose.findings import Finding
from trainmon.store.run import Run
from trainmon.store.series import Series
from trainmon.store.store import Store

NAN = math.nan
WINDOWS_S = (60.0, 300.0, 900.0)
THROTTLE_NAMES = {0x4: "power cap", 0x8: "hw slowdown", 0x20: "sw thermal", 0x40: "hw thermal", 0x80: "power brake"}
GPM_KEYS = ("gpm.sm_active", "gpm.sm_occupancy", "gpm.tensor_active", "gpm.dram_bw")
ROLE_ORDER = {"main": 0, "rank": 0, "child": 1, "worker": 2}
STEP_SPAN_S = 1.0  # steps are averaged over at least this long per bucket: a smooth line at 1 Hz sampling
RATE_SPAN_S = 2.0  # samples/s and data-wait % over at least this long
CURSOR_SPAN_S = 5.0  # the training figures shown at the cursor: the last 5 s of steps


def _nan(x: float | None) -> bool:
    return x is None or x != x


# ---------------------------------------------------------------- the feed: live Monitor or a replayed recording


@dataclass
class VerdictPoint:
    """The verdict shown at ``t`` (after hysteresis) and every finding that held then."""

    t: float
    verdict: Finding | None
    findings: list[Finding]


class Feed(Protocol):
    store: Store
    live: bool

    def head(self) -> float | None:
        """The newest instant there is data for (live: the last tick; replay: the playback clock)."""

    def span(self) -> tuple[float, float] | None:
        """The range the cursor may visit."""

    def interval(self) -> float: ...

    def verdicts(self, t0: float, t1: float) -> list[VerdictPoint]:
        """Verdict points with ``t0 <= t <= t1`` (and the last one before ``t0``), oldest first."""

    def gpu_error(self) -> str | None: ...

    def extra_roles(self) -> dict[int, str]: ...

    def wall_offset(self) -> float | None:
        """wall clock minus monotonic clock, to print times of day; None when unknown."""

    def set_playing(self, playing: bool, at: float | None = None) -> None: ...

    def status_label(self, paused: bool, t_end: float) -> tuple[str, str]:
        """The state in one word (LIVE, PAUSED, REPLAY, END) and a detail ("2× 0:12/0:30" in replay)."""

    def dump(self, pid: int) -> list[str]:
        """A stack dump of ``pid`` as lines (or one line saying why not). Slow: call off the UI thread."""

    def subscribe(self, callback: Callable[[], None]) -> bool:
        """Call ``callback`` (on any thread) when new data arrives; False when the feed must be polled instead."""


class LiveFeed:
    """The live Monitor as a Feed; it keeps the verdict of every tick for the history strip and the cursor."""

    live = True

    def __init__(self, monitor: Any, keep_s: float = 1200.0, dumper: Callable[[int], list[str]] | None = None) -> None:
        self.monitor = monitor
        self.store: Store = monitor.store
        self.keep_s = keep_s
        self._dumper = dumper
        self._lock = threading.Lock()
        self._points: deque[VerdictPoint] = deque()
        self._subscribers: list[Callable[[], None]] = []
        self._offset = time.time() - time.monotonic()
        if monitor.last_snapshot is not None:
            self.on_snapshot(monitor.last_snapshot)
        monitor.listeners.append(self.on_snapshot)

    def on_snapshot(self, snap: Any) -> None:
        with self._lock:
            self._points.append(VerdictPoint(snap.t, snap.verdict, list(snap.findings)))
            while self._points and self._points[0].t < snap.t - self.keep_s:
                self._points.popleft()
        for callback in list(self._subscribers):
            callback()

    def subscribe(self, callback: Callable[[], None]) -> bool:
        self._subscribers.append(callback)
        return True

    def head(self) -> float | None:
        with self._lock:
            if self._points:
                return self._points[-1].t
        return self.store.last_t

    def span(self) -> tuple[float, float] | None:
        head = self.head()
        if head is None:
            return None
        with self._lock:
            first = self._points[0].t if self._points else head
        lo = self.store.first_t if self.store.first_t is not None else first
        return max(lo, head - self.keep_s), head

    def interval(self) -> float:
        return float(self.monitor.interval)

    def verdicts(self, t0: float, t1: float) -> list[VerdictPoint]:
        with self._lock:
            points = list(self._points)
        return clip_points(points, t0, t1)

    def gpu_error(self) -> str | None:
        gpu = self.monitor.gpu
        if gpu is not None:
            return gpu.error
        return self.store.metadata.get("gpu_error")

    def extra_roles(self) -> dict[int, str]:
        return dict(self.monitor.extra_pids)

    def wall_offset(self) -> float | None:
        return self._offset

    def set_playing(self, playing: bool, at: float | None = None) -> None:
        return None  # live data never stops; only the view freezes

    def status_label(self, paused: bool, t_end: float) -> tuple[str, str]:
        return ("PAUSED" if paused else "LIVE"), ""

    def dump(self, pid: int) -> list[str]:
        if self._dumper is not None:
            return self._dumper(pid)
        from trainmon.sources.pyspy import dump

        return dump(pid).summary(max_frames=30)

    def close(self) -> None:
        self._subscribers.clear()
        try:
            self.monitor.listeners.remove(self.on_snapshot)
        except ValueError:
            pass


def clip_points(points: Sequence[VerdictPoint], t0: float, t1: float) -> list[VerdictPoint]:
    times = [p.t for p in points]
    i = max(0, bisect_left(times, t0) - 1)
    j = bisect_right(times, t1)
    return list(points[i:j])


# ---------------------------------------------------------------- view state: window, pause, cursor


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

    def _changed(self) -> None:
        self.version += 1

    def follow(self, head: float | None) -> None:
        """The plots' right edge tracks the head unless paused."""
        if head is not None and (not self.paused or self.t_end is None) and self.t_end != head:
            self.t_end = head
            self._changed()

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
        self._changed()

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
        self._changed()

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
        self._changed()

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
        self._changed()

    def cycle_focus(self, panes: Sequence[str]) -> str | None:
        order = [None, *panes]
        i = order.index(self.focus) if self.focus in order else 0
        self.focus = order[(i + 1) % len(order)]
        self._changed()
        return self.focus


# ---------------------------------------------------------------- frame models (what each pane draws)


@dataclass
class Axis:
    t0: float
    t1: float
    cols: int
    sub: int
    cursor_col: int | None
    cursor_t: float | None
    ticks: list[tuple[int, str]]
    cursor_label: str
    col_dt: float

    @property
    def buckets(self) -> int:
        return self.cols * self.sub


@dataclass
class VerdictView:
    code: str
    severity: str
    summary: str
    advice: list[str]
    evidence: dict[str, Any]
    findings: list[Finding]
    since_s: float | None  # how long this verdict has held at the shown instant
    at_label: str


@dataclass
class StripCell:
    code: str | None
    severity: str | None
    change: bool = False  # the verdict changed in this column


@dataclass
class RunValues:
    step_ms: float = NAN
    wait_ms: float = NAN
    compute_ms: float = NAN
    wait_pct: float = NAN
    samples_s: float = NAN
    steps_s: float = NAN
    steps_total: int = 0


@dataclass
class RunView:
    key: int
    label: str  # "rank 1" or "pid 4242"
    name: str
    pid: int
    state: str  # "running", "ended: exit", ...
    loader: str  # "bs 32 · 2 workers · pin off · persistent"
    wait_ms: list[float]
    compute_ms: list[float]
    samples_s: list[float]
    wait_pct: list[float]
    marks: list[str]  # per column: "" or one letter: C checkpoint, E eval, M user mark
    values: RunValues


@dataclass
class AgentlessView:
    pid: int
    wait_share: list[float]
    checkpoint_share: list[float]
    values: dict[str, float]


@dataclass
class GpuView:
    index: int
    name: str
    util: list[float]
    util_max: list[float]
    mem_pct: list[float]
    values: dict[str, float]
    throttle: list[str]
    gpm: dict[str, float]


@dataclass
class CpuView:
    busy: list[float]
    iowait: list[float]
    mem_pct: list[float]
    per_core: list[float]
    values: dict[str, float]


@dataclass
class DiskView:
    name: str
    read: list[float]
    write: list[float]
    util: list[float]
    values: dict[str, float]
    activity: float


@dataclass
class ProcRow:
    pid: int
    role: str
    name: str
    cpu_pct: float
    state_r: float
    state_s: float
    state_d: float
    rss_mb: float
    read_mb_s: float
    gpu_mb: float


@dataclass
class Frame:
    seq: int
    live: bool
    status: tuple[str, str]  # ("LIVE", ""), ("PAUSED", ...), ("REPLAY", "2× 0:12/0:30"), ("END", ...)
    window_s: float
    paused: bool
    focus: str | None
    axis: Axis
    verdict: VerdictView | None
    strip: list[StripCell]
    runs: list[RunView]
    agentless: list[AgentlessView]
    gpus: list[GpuView]
    gpu_error: str | None
    cpu: CpuView
    disks: list[DiskView]
    procs: list[ProcRow]
    notice: str | None = None

    @property
    def instant(self) -> float:
        """The instant the values columns describe: the cursor, else the right edge."""
        return self.axis.cursor_t if self.axis.cursor_t is not None else self.axis.t1


# ---------------------------------------------------------------- resampling on the shared edges


def make_edges(t0: float, t1: float, n: int) -> list[float]:
    step = (t1 - t0) / n
    return [t0 + step * k for k in range(n + 1)]


def bucket_series(series: Series | None, edges: Sequence[float], hold_s: float, how: str = "mean") -> list[float]:
    """One value per bucket ``(edges[k], edges[k+1]]``: the mean (or min/max) of the samples in it, else the
    last sample at most ``hold_s`` before the bucket's end, else nan."""
    n = len(edges) - 1
    out = [NAN] * n
    if series is None or not len(series) or n <= 0:
        return out
    times, values = series.times, series.values
    idx = [bisect_right(times, e) for e in edges]
    for k in range(n):
        i, j = idx[k], idx[k + 1]
        if j > i:
            vals = [v for v in values[i:j] if v == v]
            if vals:
                if how == "max":
                    out[k] = max(vals)
                elif how == "min":
                    out[k] = min(vals)
                else:
                    out[k] = sum(vals) / len(vals)
                continue
        if j > 0 and edges[k + 1] - times[j - 1] <= hold_s:
            out[k] = values[j - 1]
    return out


def value_at(series: Series | None, t: float, hold_s: float) -> float:
    """The latest sample at or before ``t`` if it is at most ``hold_s`` old, else nan."""
    if series is None:
        return NAN
    i = bisect_right(series.times, t)
    if not i or t - series.times[i - 1] > hold_s:
        return NAN
    return series.values[i - 1]


def _step_slices(run: Run, edges: Sequence[float], span: float) -> list[tuple[int, int]]:
    """For each bucket, the steps that ended within ``span`` before its right edge."""
    ends = run.steps.end
    return [(bisect_right(ends, e - span), bisect_right(ends, e)) for e in edges[1:]]


def step_buckets(run: Run, edges: Sequence[float]) -> tuple[list[float], list[float], list[float], list[float]]:
    """Per bucket: mean data wait (ms), mean compute (ms), samples/s and data-wait %, held over short gaps."""
    n = len(edges) - 1
    wait_ms, compute_ms, rate, wait_pct = [NAN] * n, [NAN] * n, [NAN] * n, [NAN] * n
    if not len(run.steps) or n <= 0:
        return wait_ms, compute_ms, rate, wait_pct
    s = run.steps
    dt = (edges[-1] - edges[0]) / n
    step_span = max(dt, STEP_SPAN_S)
    rate_span = max(dt, RATE_SPAN_S)
    last_end = s.end[-1]
    cum_dur, cum_wait, cum_samples = s.prefix_sums()  # O(1) per bucket however many steps it holds
    for k, ((i, j), (ri, rj)) in enumerate(
        zip(_step_slices(run, edges, step_span), _step_slices(run, edges, rate_span), strict=True)
    ):
        if j > i:
            cnt = j - i
            dur = cum_dur[j] - cum_dur[i]
            w = cum_wait[j] - cum_wait[i]
            wait_ms[k] = w / cnt * 1e3
            compute_ms[k] = max(0.0, dur - w) / cnt * 1e3
        elif k and wait_ms[k - 1] == wait_ms[k - 1] and edges[k + 1] <= last_end + 3 * step_span:
            wait_ms[k], compute_ms[k] = wait_ms[k - 1], compute_ms[k - 1]
        if rj > ri:
            dur = cum_dur[rj] - cum_dur[ri]
            rate[k] = (cum_samples[rj] - cum_samples[ri]) / rate_span
            wait_pct[k] = (cum_wait[rj] - cum_wait[ri]) / dur * 100.0 if dur > 0 else NAN
        elif k and rate[k - 1] == rate[k - 1] and edges[k + 1] <= last_end + rate_span:
            rate[k], wait_pct[k] = rate[k - 1], wait_pct[k - 1]
    return wait_ms, compute_ms, rate, wait_pct


def run_values(run: Run, t: float, span: float = CURSOR_SPAN_S) -> RunValues:
    s = run.steps
    i, j = bisect_right(s.end, t - span), bisect_right(s.end, t)
    v = RunValues(steps_total=s.total - (len(s) - j))
    if j <= i:
        return v
    cnt = j - i
    dur = sum(s.end[i:j]) - sum(s.start[i:j])
    w = sum(s.wait[i:j])
    v.step_ms = dur / cnt * 1e3
    v.wait_ms = w / cnt * 1e3
    v.compute_ms = max(0.0, dur - w) / cnt * 1e3
    v.wait_pct = w / dur * 100.0 if dur > 0 else NAN
    covered = min(span, max(1e-9, t - s.start[i]))
    v.samples_s = sum(s.samples[i:j]) / covered
    v.steps_s = cnt / covered
    return v


def run_marks(run: Run, edges: Sequence[float], cols: int) -> list[str]:
    """Per column: C a checkpoint save, E an evaluation pass, M a user mark (most important wins)."""
    marks = [""] * cols
    t0, t1 = edges[0], edges[-1]
    width = (t1 - t0) / cols

    def put(a: float, b: float, letter: str) -> None:
        if b < t0 or a > t1:
            return
        c0 = max(0, min(cols - 1, int((a - t0) / width)))
        c1 = max(0, min(cols - 1, int((b - t0) / width)))
        for c in range(c0, c1 + 1):
            if not marks[c] or "CEM".index(letter) < "CEM".index(marks[c]):
                marks[c] = letter

    for t, _name in run.marks:
        put(t, t, "M")
    train = run.train_loader()
    for t, lid in run.iter_starts:
        if train is not None and lid != train.id:
            put(t, t, "E")
    for a, b, name in run.phases:
        if "eval" in name.lower() or "valid" in name.lower():
            put(a, b, "E")
    for a, b in run.checkpoints:
        put(a, b, "C")
    return marks


def _loader_text(run: Run) -> str:
    info = run.train_loader()
    if info is None:
        return ""
    c = info.config
    parts = []
    if isinstance(c.get("batch_size"), int):
        parts.append(f"bs {c['batch_size']}")
    if isinstance(c.get("num_workers"), int):
        parts.append(f"{c['num_workers']} worker{'s' if c['num_workers'] != 1 else ''}")
    if "pin_memory" in c:
        parts.append("pin" if c.get("pin_memory") else "no pin")
    if c.get("persistent_workers"):
        parts.append("persistent")
    return " · ".join(parts)


# ---------------------------------------------------------------- the frame builder


@dataclass
class Layout:
    """What the screen can hold: plot columns and samples per column."""

    cols: int = 60
    sub: int = 2


class FrameBuilder:
    """Builds Frames for one feed and one view state. Thread-safe; callers may build from any thread."""

    def __init__(
        self, feed: Feed, state: ViewState | None = None, status_extra: Callable[[], str | None] | None = None
    ) -> None:
        self.feed = feed
        self.state = state or ViewState()
        self.status_extra = status_extra
        self.seq = 0

    def build(self, layout: Layout) -> Frame:
        st = self.state
        with st.lock:
            st.follow(self.feed.head())
            window_s, paused, focus = st.window_s, st.paused, st.focus
            t_end = st.t_end
            if t_end is not None and st.cursor_t is not None and st.cursor_t < t_end - window_s:
                st.cursor_t = t_end - window_s  # the cursor slid off the left edge as time went on
            cursor_t = st.cursor_t
        self.seq += 1
        return build_frame(
            self.feed,
            layout,
            t_end,
            window_s,
            cursor_t,
            paused=paused,
            focus=focus,
            seq=self.seq,
            notice=self.status_extra() if self.status_extra else None,
        )


def build_frame(
    feed: Feed,
    layout: Layout,
    t_end: float | None,
    window_s: float,
    cursor_t: float | None,
    *,
    paused: bool = False,
    focus: str | None = None,
    seq: int = 0,
    notice: str | None = None,
) -> Frame:
    cols, sub = max(1, layout.cols), max(1, layout.sub)
    if t_end is None:
        t_end = time.monotonic()
    t0 = t_end - window_s
    n = cols * sub
    edges = make_edges(t0, t_end, n)
    col_edges = make_edges(t0, t_end, cols)
    interval = feed.interval()
    hold = 1.6 * interval
    col_dt = window_s / cols
    cursor_col = None
    if cursor_t is not None:
        cursor_col = min(cols - 1, max(0, math.ceil((cursor_t - t0) / col_dt) - 1))
    instant = cursor_t if cursor_t is not None else t_end
    store = feed.store
    offset = feed.wall_offset()
    axis = Axis(
        t0,
        t_end,
        cols,
        sub,
        cursor_col,
        cursor_t,
        _ticks(feed, t0, t_end, cols, window_s),
        _clock(instant, offset, feed, t_end),
        col_dt,
    )
    points = feed.verdicts(t0, instant if cursor_t is not None else t_end)
    with store.lock:
        verdict = _verdict_view(points, instant, _clock(instant, offset, feed, t_end))
        strip = _strip(feed.verdicts(t0, t_end), col_edges)
        runs = [_run_view(r, edges, col_edges, cols, instant) for r in _visible_runs(store, t0, t_end)]
        agentless = _agentless(store, edges, instant, hold)
        gpus = _gpus(store, edges, instant, hold)
        cpu = _cpu(store, edges, instant, hold)
        disks = _disks(store, edges, instant, hold)
        procs = _procs(store, feed.extra_roles(), instant, max(3.0 * interval, 3.0))
    gpu_error = feed.gpu_error()
    if gpu_error is None and not gpus:
        gpu_error = "no device found" if store.metadata.get("gpus") == [] or feed.live else "not recorded"
    return Frame(
        seq=seq,
        live=feed.live,
        status=feed.status_label(paused, t_end),
        window_s=window_s,
        paused=paused,
        focus=focus,
        axis=axis,
        verdict=verdict,
        strip=strip,
        runs=runs,
        agentless=agentless,
        gpus=gpus,
        gpu_error=gpu_error,
        cpu=cpu,
        disks=disks,
        procs=procs,
        notice=notice,
    )


def _fmt_rel(seconds: float) -> str:
    s = round(seconds)
    sign = "-" if s < 0 else ""
    s = abs(s)
    if s >= 60:
        return f"{sign}{s // 60}m{s % 60:02d}" if s % 60 else f"{sign}{s // 60}m"
    return f"{sign}{s}s"


def fmt_elapsed(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _ticks(feed: Feed, t0: float, t1: float, cols: int, window_s: float) -> list[tuple[int, str]]:
    """Tick labels: seconds before the right edge live; time since the recording started in replay."""
    step = {60.0: 15.0, 300.0: 60.0, 900.0: 180.0}.get(window_s, window_s / 4)
    origin = None if feed.live else (feed.span() or (t0, t1))[0]
    ticks = []
    if origin is None:
        k = 0
        while k * step <= window_s + 1e-9:
            t = t1 - k * step
            col = round((t - t0) / window_s * cols) - 1
            ticks.append((max(0, min(cols - 1, col)), "now" if k == 0 else _fmt_rel(-k * step)))
            k += 1
    else:
        t = max(0, math.ceil((t0 - origin) / step)) * step + origin
        while t <= t1 + 1e-9:
            col = round((t - t0) / window_s * cols) - 1
            if 0 <= col < cols:
                ticks.append((col, fmt_elapsed(t - origin)))
            t += step
    return sorted(ticks)


def _clock(t: float, offset: float | None, feed: Feed, t_end: float) -> str:
    parts = []
    if offset is not None:
        parts.append(time.strftime("%H:%M:%S", time.localtime(t + offset)))
    if feed.live:
        if t < t_end - 0.5:
            parts.append(_fmt_rel(t - t_end))
    else:
        span = feed.span()
        if span is not None:
            parts.append("+" + fmt_elapsed(t - span[0]))
    return " ".join(parts)


def _verdict_view(points: list[VerdictPoint], t: float, at_label: str) -> VerdictView | None:
    times = [p.t for p in points]
    i = bisect_right(times, t)
    if not i:
        return None
    p = points[i - 1]
    if p.verdict is None:
        return None
    v = p.verdict
    since = None
    for q in reversed(points[:i]):
        if q.verdict is None or q.verdict.code != v.code:
            break
        since = p.t - q.t
    return VerdictView(
        v.code, v.severity, v.summary, list(v.advice), dict(v.evidence), list(p.findings), since, at_label
    )


def _strip(points: list[VerdictPoint], col_edges: Sequence[float]) -> list[StripCell]:
    cols = len(col_edges) - 1
    cells = [StripCell(None, None) for _ in range(cols)]
    if not points:
        return cells
    times = [p.t for p in points]
    prev_code = None
    for c in range(cols):
        i = bisect_right(times, col_edges[c + 1])
        if not i:
            continue
        p = points[i - 1]
        if p.verdict is None:
            continue
        code = p.verdict.code
        cells[c] = StripCell(code, p.verdict.severity, change=prev_code is not None and code != prev_code)
        prev_code = code
    return cells


def _visible_runs(store: Store, t0: float, t1: float) -> list[Run]:
    runs = [r for r in store.runs.values() if r.first_seen <= t1 and r.last_seen >= t0 - 5.0]
    return sorted(runs, key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.pid, r.id))


def _run_view(run: Run, edges: Sequence[float], col_edges: Sequence[float], cols: int, instant: float) -> RunView:
    wait_ms, compute_ms, rate, wait_pct = step_buckets(run, edges)
    label = f"rank {run.rank}" if run.rank is not None else f"pid {run.pid}"
    if run.connected and not run.ended:
        state = "running"
    else:
        state = f"ended: {run.ended or 'closed'}"
    if not run.connected and run.last_seen > instant:
        state = "running"  # replay: at the instant shown it had not ended yet
    return RunView(
        run.id,
        label,
        run.name,
        run.pid,
        state,
        _loader_text(run),
        wait_ms,
        compute_ms,
        rate,
        wait_pct,
        run_marks(run, col_edges, cols),
        run_values(run, instant),
    )


def _agentless(store: Store, edges: Sequence[float], t: float, hold: float) -> list[AgentlessView]:
    out = []
    for name in store.series_names("pyspy."):
        if not name.endswith(".data_wait_share"):
            continue
        try:
            pid = int(name.split(".")[1])
        except ValueError:
            continue
        wait = store.series.get(name)
        ckpt = store.series.get(f"pyspy.{pid}.checkpoint_share")
        out.append(
            AgentlessView(
                pid,
                [x * 100 for x in bucket_series(wait, edges, hold)],
                [x * 100 for x in bucket_series(ckpt, edges, hold)],
                {"wait_pct": value_at(wait, t, 3 * hold) * 100, "checkpoint_pct": value_at(ckpt, t, 3 * hold) * 100},
            )
        )
    return out


def _indices(store: Store, prefix: str, suffix: str) -> list[str]:
    """The middle parts of series named ``prefix + X + suffix``, e.g. GPU indices or disk names."""
    out = []
    for name in store.series:
        if name.startswith(prefix) and name.endswith(suffix):
            mid = name[len(prefix) : len(name) - len(suffix)]
            if mid and "." not in mid:
                out.append(mid)
    return out


def _gpus(store: Store, edges: Sequence[float], t: float, hold: float) -> list[GpuView]:
    names = {}
    for d in store.metadata.get("gpus") or []:
        if isinstance(d, dict) and isinstance(d.get("index"), int):
            names[d["index"]] = str(d.get("name") or "")
    out = []
    for idx in sorted(int(i) for i in _indices(store, "gpu.", ".util") if i.isdigit()):
        p = f"gpu.{idx}."

        def s(key: str, p: str = p) -> Series | None:
            return store.series.get(p + key)

        util = bucket_series(s("util"), edges, hold)
        util_max = bucket_series(s("util_max"), edges, hold, "max")
        used = bucket_series(s("mem_used_mb"), edges, hold)
        total = value_at(s("mem_total_mb"), edges[-1], 1e9)
        mem_pct = [u / total * 100 if total and total == total else NAN for u in used]
        values = {
            k: value_at(s(k), t, hold)
            for k in (
                "util",
                "util_min",
                "util_max",
                "mem_used_mb",
                "mem_total_mb",
                "power_w",
                "power_limit_w",
                "temp_c",
                "sm_clock_mhz",
                "sm_clock_max_mhz",
                "pcie_rx_mb_s",
                "pcie_tx_mb_s",
                "mem_util",
            )
        }
        bits = value_at(s("throttle"), t, hold)
        throttle = [] if _nan(bits) else [nm for b, nm in THROTTLE_NAMES.items() if int(bits) & b]
        gpm = {k.split(".")[1]: v for k in GPM_KEYS if not _nan(v := value_at(s(k), t, hold))}
        out.append(GpuView(idx, names.get(idx, ""), util, util_max, mem_pct, values, throttle, gpm))
    return out


def _cpu(store: Store, edges: Sequence[float], t: float, hold: float) -> CpuView:
    def s(key: str) -> Series | None:
        return store.series.get(key)

    busy = bucket_series(s("cpu.busy"), edges, hold)
    iowait = bucket_series(s("cpu.iowait"), edges, hold)
    mem_pct = bucket_series(s("mem.used_pct"), edges, hold)
    cores = sorted(int(i) for i in _indices(store, "cpu.core.", ".busy") if i.isdigit())
    per_core = [value_at(s(f"cpu.core.{i}.busy"), t, hold) for i in cores]
    values = {
        k: value_at(s(k), t, hold)
        for k in (
            "cpu.busy",
            "cpu.iowait",
            "cpu.user",
            "cpu.system",
            "cpu.steal",
            "load.1",
            "mem.used_pct",
            "mem.used_mb",
            "mem.total_mb",
            "swap.used_mb",
            "swap.total_mb",
        )
    }
    values["cores"] = float(len(cores)) if cores else value_at(s("cpu.cores"), t, 1e9)
    return CpuView(busy, iowait, mem_pct, per_core, values)


def _disks(store: Store, edges: Sequence[float], t: float, hold: float) -> list[DiskView]:
    out = []
    for name in _indices(store, "disk.", ".read_mb_s"):
        p = f"disk.{name}."
        read = bucket_series(store.series.get(p + "read_mb_s"), edges, hold)
        write = bucket_series(store.series.get(p + "write_mb_s"), edges, hold)
        util = bucket_series(store.series.get(p + "util_pct"), edges, hold)
        values = {
            k: value_at(store.series.get(p + k), t, hold)
            for k in ("read_mb_s", "write_mb_s", "util_pct", "r_await_ms", "w_await_ms", "r_s", "w_s")
        }
        activity = (
            sum(x for x in read if x == x) + sum(x for x in write if x == x) + sum(x for x in util if x == x) / 100
        )
        out.append(DiskView(name, read, write, util, values, activity))
    return sorted(out, key=lambda d: (-d.activity, d.name))


def _roles(store: Store, extra: dict[int, str], t: float) -> dict[int, tuple[str, str]]:
    """pid → (role, name) of the training process tree as it was at ``t``."""
    out: dict[int, tuple[str, str]] = {}
    for pid, role in extra.items():
        out[pid] = (role, "")
    for run in store.runs.values():
        if run.first_seen > t:
            continue
        role = "rank" if (run.hello.get("world_size") or 1) > 1 else "main"
        name = f"{run.name} (rank {run.rank})" if run.rank is not None else run.name
        out[run.pid] = (role, name)
        loaders = [(lid, info) for lid, info in sorted(run.loaders.items()) if info.worker_pids]
        for lid, info in loaders:
            for k, pid in enumerate(info.worker_pids):
                which = f"worker {k} of loader {lid}" if len(loaders) > 1 else f"worker {k}"
                out[pid] = ("worker", f"{which} · {run.name}")  # what tells workers apart first: names get cut
    return out


def _procs(store: Store, extra: dict[int, str], t: float, fresh_s: float) -> list[ProcRow]:
    roles = _roles(store, extra, t)
    pids = {int(p) for p in _indices(store, "proc.", ".rss_mb") if p.isdigit()}
    rows = []
    for pid in pids:
        p = f"proc.{pid}."

        def v(key: str, p: str = p) -> float:
            return value_at(store.series.get(p + key), t, fresh_s)

        rss = v("rss_mb")
        if _nan(rss):
            continue  # not alive at t
        role, name = roles.get(pid, ("proc", ""))
        r, s, d = v("state_main_R"), v("state_main_S"), v("state_main_D")
        if _nan(r):
            r, s, d = v("state_R"), v("state_S"), v("state_D")
        rows.append(ProcRow(pid, role, name, v("cpu_pct"), r, s, d, rss, v("read_mb_s"), v("gpu_mem_mb")))
    return sorted(rows, key=lambda r: (ROLE_ORDER.get(r.role, 3), r.pid))
