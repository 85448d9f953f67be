"""Frames built headless: :class:`FrameBuilder` reads the view state, :func:`build_frame` puts every pane's
series on the shared axis (see :mod:`trainmon.view.resample`) and adds the verdict at the cursor and its history.
Runs on any thread, under the store's lock."""

from __future__ import annotations

import math
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence

from trainmon.diagnose.thresholds import Thresholds
from trainmon.numbers import is_nan
from trainmon.store.agent_cost import largest_live, per_step_text
from trainmon.store.store import Store
from trainmon.view import extract
from trainmon.view.axis import axis_ticks, clock_label
from trainmon.view.feeds.protocol import Feed, VerdictPoint
from trainmon.view.frames import Axis, Frame, Layout, StripCell, VerdictView
from trainmon.view.resample import StepBucketCache, grid, value_at
from trainmon.view.stacks import stack_views
from trainmon.view.viewport import ViewState


class FrameBuilder:
    """Builds Frames for one feed and one view state. Thread-safe; callers may build from any thread."""

    def __init__(
        self, feed: Feed, state: ViewState | None = None, status_extra: Callable[[], str | None] | None = None
    ) -> None:
        self.feed = feed
        self.state = state or ViewState()
        self.status_extra = status_extra
        self.seq = 0
        self.cache = StepBucketCache()

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
            cache=self.cache,
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
    cache: StepBucketCache | None = None,
) -> Frame:
    """One frame; ``cache`` (the builder's) keeps the complete columns' step figures from one frame to the next."""
    cols, sub = max(1, layout.cols), max(1, layout.sub)
    if t_end is None:
        t_end = time.monotonic()
    g = grid(t_end, window_s, cols, sub)
    t0, edges, col_edges, col_dt = g.t0, g.edges, g.col_edges, g.col_dt
    interval = feed.interval()
    hold = 1.6 * interval
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
        axis_ticks(feed, t0, t_end, cols, window_s),
        clock_label(instant, offset, feed, t_end),
        col_dt,
    )
    points = feed.verdicts(t0, instant if cursor_t is not None else t_end)
    with store.lock:
        verdict = _verdict_view(points, instant, clock_label(instant, offset, feed, t_end))
        if verdict is not None:
            verdict.stacks = stack_views(store, verdict, instant, lambda t: clock_label(t, offset, feed, t_end))
        strip = _strip(feed.verdicts(t0, t_end), col_edges)
        th = feed_thresholds(feed)
        runs = [
            extract.run_view(r, edges, col_edges, cols, instant, th, cache, g)
            for r in extract.visible_runs(store, t0, t_end)
        ]
        agentless = extract.agentless_views(store, edges, instant, hold)
        gpus = extract.gpu_views(store, edges, instant, hold)
        cpu = extract.cpu_view(store, edges, instant, hold)
        disks = extract.disk_views(store, edges, instant, hold)
        procs = extract.proc_rows(store, feed.extra_roles(), instant, max(3.0 * interval, 3.0))
        self_cost = _self_cost(store, instant, hold)
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
        self_cost=self_cost,
    )


def _self_cost(store: Store, t: float, hold: float) -> str | None:
    """The monitor's own CPU (with its py-spy helpers) and RSS at ``t``, and the most an agent costs its training
    per step there (measured by the agent itself), as the time axis shows them."""
    agent = largest_live(store.runs.values(), t)
    agent_text = f"agent {per_step_text(agent)}/step" if agent is not None else None
    cpu = value_at(store.series.get("self.cpu_pct"), t, hold)
    rss = value_at(store.series.get("self.rss_mb"), t, hold)
    if is_nan(cpu) or is_nan(rss):
        return agent_text
    helpers = value_at(store.series.get("self.helpers_cpu_pct"), t, hold)
    total = cpu + (0.0 if is_nan(helpers) else helpers)
    own = f"trainmon {total:.1f}% CPU {rss:.0f}M"
    return f"{own} · {agent_text}" if agent_text else own


def feed_thresholds(feed: Feed) -> Thresholds:
    """The thresholds the feed's verdicts are judged with (a replay's own, the live monitor's), else the defaults."""
    th = getattr(feed, "thresholds", None) or getattr(getattr(feed, "monitor", None), "thresholds", None)
    return th if isinstance(th, Thresholds) else Thresholds()


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
