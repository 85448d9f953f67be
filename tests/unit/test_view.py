"""The headless view layer (trainmon.view) without a terminal: resampling on the shared axis,
values at the cursor, the view state's keys, the replay clock and the re-evaluated verdict timeline.

The stores are testsupport's timeline stores, the ones the TUI and snapshot tests draw too. A real recording
replayed, and ``trainmon replay``, are in tests/integration/test_replay.py.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from testsupport.stores import T0, replay_at_end, timeline_store
from trainmon.diagnose.findings import Finding
from trainmon.store.series import Series
from trainmon.store.store import Store
from trainmon.view import (
    WINDOWS_S,
    FrameBuilder,
    Layout,
    LiveFeed,
    ReplayClock,
    ReplayFeed,
    ViewState,
    build_frame,
    run_values,
    status_lines,
)
from trainmon.view.resample import (
    StepBucketCache,
    bucket_series,
    grid,
    make_edges,
    run_marks,
    step_buckets,
    value_at,
)

# ---------------------------------------------------------------- resampling


def series(*points: tuple[float, float]) -> Series:
    s = Series()
    for t, v in points:
        s.append(t, v)
    return s


def test_buckets_average_what_falls_inside_and_hold_short_gaps():
    s = series((1.0, 10.0), (2.0, 20.0), (2.5, 30.0), (6.0, 40.0))
    edges = make_edges(0.0, 8.0, 8)  # (0,1] (1,2] ... (7,8]
    out = bucket_series(s, edges, hold_s=1.5)
    assert out[0] == 10.0 and out[1] == 20.0 and out[2] == 30.0
    assert out[3] == 30.0  # (3,4]: held, the last sample is 1.5 s old
    assert math.isnan(out[4])  # (4,5]: too old to hold
    assert out[5] == 40.0 and out[6] == 40.0 and math.isnan(out[7])
    assert bucket_series(s, make_edges(0.0, 4.0, 2), 1.5, "max") == [20.0, 30.0]
    assert bucket_series(s, make_edges(0.0, 4.0, 2), 1.5, "min") == [10.0, 30.0]
    assert all(math.isnan(x) for x in bucket_series(None, edges, 1.0))


def test_nan_samples_do_not_poison_a_bucket_and_value_at_respects_age():
    s = series((1.0, math.nan), (1.5, 8.0), (3.0, math.nan))
    assert bucket_series(s, [0.0, 2.0], 1.0) == [8.0]
    assert value_at(s, 1.7, 1.0) == 8.0
    assert math.isnan(value_at(s, 9.0, 1.0)) and math.isnan(value_at(s, 0.5, 1.0))


def test_step_buckets_split_step_time_into_wait_and_compute():
    store = timeline_store(30.0, wait_ms=30.0, compute_ms=20.0)
    run = store.runs[1]
    edges = make_edges(T0 + 10, T0 + 20, 20)
    wait, compute, rate, wait_pct = step_buckets(run, edges)
    for k in range(20):
        assert wait[k] == pytest.approx(30.0, abs=0.5) and compute[k] == pytest.approx(20.0, abs=0.5)
        assert wait_pct[k] == pytest.approx(60.0, abs=1.0)
        assert rate[k] == pytest.approx(32 / 0.05, rel=0.05)  # 20 steps/s × 32 samples
    before = step_buckets(run, make_edges(T0 - 20, T0, 4))
    assert all(math.isnan(x) for x in before[0])


def test_run_values_at_an_instant_use_the_last_five_seconds():
    store = timeline_store(60.0, switch_at=30.0)
    run = store.runs[1]
    early, late = run_values(run, T0 + 25), run_values(run, T0 + 55)
    assert early.wait_pct == pytest.approx(60.0, abs=1.0) and early.step_ms == pytest.approx(50.0, abs=1.0)
    assert late.wait_pct < 5.0 and late.step_ms == pytest.approx(20.5, abs=1.0)
    assert early.steps_total < late.steps_total <= run.steps.total


def test_marks_name_checkpoints_over_user_marks():
    store = timeline_store(60.0, checkpoint_every=100)
    run = store.runs[1]
    marks = run_marks(run, make_edges(T0, T0 + 60, 60), 60)
    assert marks.count("C") >= 3
    assert "M" in marks  # the lr-drop mark at step 450
    assert set(marks) <= {"", "C", "M", "E"}


# ---------------------------------------------------------------- view state and replay clock


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_replay_clock_plays_at_speed_pauses_seeks_and_stops_at_the_end():
    clk = Clock()
    c = ReplayClock(100.0, 160.0, 2.0, clock=clk)
    assert c.position() == 100.0 and not c.playing
    c.play()
    clk.t = 5.0
    assert c.position() == 110.0
    c.pause()
    clk.t = 50.0
    assert c.position() == 110.0
    c.set_speed(4.0)
    c.play()
    clk.t = 60.0
    assert c.position() == 150.0
    clk.t = 100.0
    assert c.position() == 160.0 and not c.playing
    c.seek(20.0)
    assert c.position() == 100.0


def test_view_state_window_pause_and_cursor_with_a_replay():
    clk = Clock()
    feed = ReplayFeed(timeline_store(120.0), clock=clk)
    st = ViewState()
    feed.set_playing(True)
    clk.t = 200.0
    st.follow(feed.head())
    assert st.t_end == feed.clock.end  # played to the end
    assert st.cycle_window() == WINDOWS_S[1] and st.cycle_window() == WINDOWS_S[2] and st.cycle_window() == 60.0
    st.move_cursor(feed, 60, -1)  # one column = 1 s back from the right edge
    assert st.cursor_t == pytest.approx(st.t_end - 1.0)
    st.move_cursor(feed, 60, -100)  # off the left edge: the view scrolls back and pauses
    assert st.paused and not feed.clock.playing
    assert st.cursor_t == pytest.approx(st.t_end - 60.0)
    st.cursor_home(feed)
    assert st.cursor_t == feed.clock.start and st.t_end == feed.clock.start + 60.0
    st.cursor_end(feed)
    assert st.cursor_t == feed.clock.end and st.t_end == feed.clock.end
    version = st.version
    st.toggle_pause(feed)  # resume: replay plays from where the view stands
    assert not st.paused and st.version > version
    st.clear_cursor(feed)
    assert st.cursor_t is None
    assert [st.cycle_focus(["a", "b"]) for _ in range(3)] == ["a", "b", None]


def test_replay_feed_reevaluates_the_verdict_with_hysteresis_in_order():
    feed = replay_at_end(timeline_store(90.0, switch_at=45.0))
    points = feed.verdicts(T0, T0 + 90)
    codes = [p.verdict.code for p in points if p.verdict is not None]
    assert codes[0] == "insufficient_data"
    assert "input.too_few_workers" in codes or "input.workers_cpu" in codes
    assert codes[-1] == "ok.compute_bound"
    # a later query reuses what was computed
    assert feed._done == len(feed.ticks)
    assert feed.verdicts(T0 + 10, T0 + 12)[0].t <= T0 + 10


def test_replay_status_lines_one_per_recorded_second():
    feed = ReplayFeed(timeline_store(20.0))
    lines = list(status_lines(feed))
    assert len(lines) == 21
    assert lines[0].startswith("+0:00 ")
    assert "pid 4242:" in lines[-1] and "data wait" in lines[-1] and "▶" in lines[-1]


# ---------------------------------------------------------------- frames


def test_frame_shares_one_axis_and_reads_values_at_the_cursor():
    store = timeline_store(120.0, switch_at=60.0)
    feed = replay_at_end(store)
    end = feed.clock.end
    live_edge = build_frame(feed, Layout(60, 2), end, 60.0, None)
    assert live_edge.axis.cols == 60 and live_edge.axis.buckets == 120
    for series_len in (
        len(live_edge.runs[0].wait_ms),
        len(live_edge.gpus[0].util),
        len(live_edge.cpu.busy),
        len(live_edge.disks[0].read),
    ):
        assert series_len == 120
    assert len(live_edge.strip) == 60 and len(live_edge.runs[0].marks) == 60
    assert live_edge.verdict is not None and live_edge.verdict.code == "ok.compute_bound"
    # the cursor 40 s back: before the switch, every pane shows that instant
    at = build_frame(feed, Layout(60, 2), end, 300.0, end - 70.0)
    assert at.axis.cursor_col is not None and at.axis.cursor_col < 60
    assert at.runs[0].values.wait_pct > 50 > live_edge.runs[0].values.wait_pct
    assert at.gpus[0].values["util"] < 60 < live_edge.gpus[0].values["util"]
    assert at.verdict is not None and at.verdict.code != "ok.compute_bound"
    assert at.axis.cursor_label.endswith("+0:50")  # 50 s after the recording's first tick


def test_frame_panes_gpu_cpu_disk_and_processes():
    store = timeline_store(40.0, throttle=0x4 | 0x40)
    frame = build_frame(replay_at_end(store), Layout(40, 1), T0 + 40, 60.0, None)
    g = frame.gpus[0]
    assert g.name.startswith("NVIDIA H100") and g.throttle == ["power cap", "hw thermal"]
    assert g.values["power_limit_w"] == 700.0 and g.values["util_max"] == 100.0
    assert frame.gpu_error is None
    assert frame.cpu.per_core == [97.0, 95.0, 40.0, 12.0] and frame.cpu.values["cores"] == 4.0
    assert [d.name for d in frame.disks] == ["nvme0n1", "sda"]  # busiest first
    roles = [(p.pid, p.role) for p in frame.procs]
    assert roles == [(4242, "main"), (5000, "worker"), (5001, "worker")]
    main = frame.procs[0]
    assert main.gpu_mb == 40_960.0 and main.state_s == 0.8 and main.name == "train.py"
    assert frame.runs[0].loader == "bs 32 · 2 workers · no pin · persistent"


def test_frame_without_gpu_says_why_and_ranks_get_a_row_each():
    store = timeline_store(40.0, gpus=0, ranks=2)
    frame = build_frame(replay_at_end(store), Layout(30, 2), T0 + 40, 60.0, None)
    assert frame.gpus == [] and frame.gpu_error == "no NVIDIA driver: NVML Shared Library Not Found"
    assert [r.label for r in frame.runs] == ["rank 0", "rank 1"]
    assert {p.role for p in frame.procs} == {"rank", "worker"}


def test_frame_builder_follows_the_head_and_clamps_a_cursor_that_slid_off():
    feed = replay_at_end(timeline_store(200.0))
    builder = FrameBuilder(feed)
    builder.state.cursor_t = T0 + 10  # far before the 1-minute window at the end
    frame = builder.build(Layout(30, 1))
    assert frame.axis.t1 == feed.clock.end
    assert frame.axis.cursor_t == pytest.approx(frame.axis.t1 - 60.0) and frame.axis.cursor_col == 0
    assert frame.seq == 1 and builder.build(Layout(30, 1)).seq == 2


# ---------------------------------------------------------------- the live feed


def test_live_feed_keeps_each_ticks_verdict_and_calls_subscribers():
    store = timeline_store(10.0)
    monitor = SimpleNamespace(
        store=store,
        last_snapshot=None,
        listeners=[],
        interval=1.0,
        gpu=None,
        extra_pids={777: "child"},
        found_roles=lambda: {888: "main", 889: "worker"},
    )
    feed = LiveFeed(monitor, keep_s=5.0)
    calls = []
    assert feed.subscribe(lambda: calls.append(1))
    ok = Finding("ok.compute_bound", "ok", "fine")
    for k in range(8):
        for listener in monitor.listeners:
            listener(SimpleNamespace(t=T0 + k, verdict=ok, findings=[ok]))
    assert len(calls) == 8 and feed.head() == T0 + 7
    assert [p.t for p in feed.verdicts(T0, T0 + 7)] == [T0 + 2 + k for k in range(6)]  # older than keep_s: gone
    assert feed.extra_roles() == {777: "child", 888: "main", 889: "worker"}
    assert feed.status_label(False, 0) == ("LIVE", "")
    feed.close()
    assert monitor.listeners == []


# ---------------------------------------------------------------- columns on absolute time, and what is kept of them


def same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True))


def test_the_grid_sits_on_absolute_time_and_ends_at_the_live_edge():
    early, later = grid(1000.3, 60.0, 50, 2), grid(1001.3, 60.0, 50, 2)
    assert early.edges[-1] == 1000.3 and later.edges[-1] == 1001.3
    assert early.col_edges == early.edges[::2] and len(early.edges) == 101
    assert early.t0 == early.col_edges[0] and 1000.3 - 60.0 <= early.t0 < 1000.3 - 60.0 + early.col_dt
    # one second later the plot moved by whole columns: a complete column has the very same edges
    shift = round((later.t0 - early.t0) / early.col_dt)
    assert shift >= 1
    assert early.col_edges[shift : shift + 40] == later.col_edges[:40]
    assert later.base - early.base == 2 * shift
    # the live column is cut at t_end: its later bucket is empty (held values), never in the future
    assert all(e <= 1000.3 for e in early.edges) and early.complete(0) and not early.complete(99)


def _feed_second(store: Store, t: float, wait_s: float, step_s: float) -> float:
    """One second of a DataLoader loop's waits, sent as an agent sends them; returns where it stopped."""
    from array import array

    from trainmon.protocol import K_WAIT

    recs, end = array("q"), t + 1.0
    while t + step_s <= end:
        recs.extend([(1 << 8) | K_WAIT, round(t * 1e9), round((t + wait_s) * 1e9), 0])
        t += step_s
    store.events(1, end, recs)
    return t


def test_kept_columns_give_the_figures_of_the_table_as_it_is_frame_after_frame():
    """A live run drawn once a second with the builder's cache: every frame's buckets are those worked out afresh,
    through a change of pace, the table trimmed under its cap, and a bucket width change."""
    store = Store()
    store.hello(1, T0, {"pid": 4242, "name": "train.py"})
    run = store.runs[1]
    run.steps.cap = 400  # trimmed within the window
    cache = StepBucketCache()
    t = T0 + 1.0
    kept = 0
    for s in range(40):
        t = _feed_second(store, t, 0.03 if s < 20 else 0.002, 0.05 if s < 20 else 0.02)
        for window, cols in ((60.0, 50), (60.0, 50), (300.0, 50)):
            g = grid(T0 + 2 + s + 0.37, window, cols, 2)
            cached = step_buckets(run, g.edges, cache, g)
            fresh = step_buckets(run, g.edges, None, g)
            assert all(same(a, b) for a, b in zip(cached, fresh, strict=True)), (s, window)
        kept = max(kept, len(cache.buckets(run, grid(T0, 60.0, 50, 2).bucket_dt)))
    assert kept > 40  # complete buckets were kept, not worked out each frame
    assert len(run.steps) < run.steps.total  # the table was trimmed while being drawn
