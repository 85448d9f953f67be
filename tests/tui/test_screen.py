"""The screen under Textual's Pilot, read as text: every pane, resize to 80×24, ASCII without colour, the process
table's keyed updates, the frame thread fed by a real Monitor, the TTY watchdog."""

from __future__ import annotations

import os
import pty

from testsupport.stores import replay_at_end, timeline_store
from testsupport.tui import COLOR, aio, make_app, settle, text, until
from trainmon.monitor import Monitor
from trainmon.sources.host.host_source import HostSource
from trainmon.tui import FrameReady, TrainmonApp
from trainmon.tui.charts import EIGHTHS
from trainmon.tui.collector import FrameThread
from trainmon.tui.theme import Glyphs
from trainmon.tui.watchdog import tty_alive
from trainmon.tui.widgets import Banner, ChartPane, ProcTable, TimeAxis
from trainmon.view import Frame, FrameBuilder, Layout, LiveFeed


def screen_text(app: TrainmonApp) -> str:
    return "\n".join(text(w) for w in (app.query_one(Banner), *app.query(ChartPane), app.query_one(TimeAxis)))


@aio
async def test_panes_render_as_text_through_render_line():
    app = make_app(store=timeline_store(120.0, throttle=0x4))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        training = text(app.query_one("#training", ChartPane))
        assert training.splitlines()[0].startswith("── Training · train.py pid 4242 · bs 32 · 2 workers")
        step_rows = [ln for ln in training.splitlines()[1:5]]
        assert step_rows[0].startswith("step ") and step_rows[1].startswith("50ms")
        assert "step 50ms = wait 30ms + 20ms" in training and "data wait 60%" in training
        assert any(ch in training for ch in EIGHTHS[1:])  # bars were drawn
        gpu = text(app.query_one("#gpu", ChartPane))
        assert "GPU0" in gpu and "throttled: power cap" in gpu and "pwr 412/700W" in gpu and "H100" in gpu
        cpu = text(app.query_one("#cpu", ChartPane))
        assert "cpu " in cpu and "cores ██▃▁" in cpu and "swap 0M/2.0G" in cpu
        disk = text(app.query_one("#disk", ChartPane))
        assert "nvme0n1" in disk and "sda" in disk and "await r 0.4" in disk
        banner = text(app.query_one(Banner))
        assert "input." in banner.splitlines()[0] and "→ " in banner
        axis = text(app.query_one(TimeAxis))
        assert axis.startswith("END") and "1m · 2:00/2:00" in axis and "1:30" in axis
        # every chart row of every pane: gutter, then the plot on the same columns, then the figures
        cols = app.geometry.cols
        rows = [ln for pane in app.query(ChartPane) for ln in text(pane).splitlines() if not ln.startswith("──")]
        assert len(rows) >= 12
        assert all(ln[7] == " " and ln[8 + cols] == " " for ln in rows)


# ---------------------------------------------------------------- layout


@aio
async def test_resize_to_80x24_picks_the_compact_layout_with_every_pane():
    app = make_app(store=timeline_store(120.0))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        assert not app.compact and "── GPU" in text(app.query_one("#gpu", ChartPane))
        await pilot.resize_terminal(80, 24)
        await settle(pilot, app)
        assert app.compact and app.has_class("-compact")
        assert app.frame is not None and app.frame.axis.cols == app.geometry.cols == 80 - 7 - 26 - 2
        for widget in (app.query_one(Banner), *app.query(ChartPane), app.query_one(TimeAxis)):
            assert widget.region.height >= 1 and widget.region.bottom <= 23, widget
            assert all(len(line) <= 80 for line in widget.text_lines())
        table = app.query_one(ProcTable)
        assert table.region.y < 23 and table.region.height >= 4 and table.row_count == 3
        assert "── " not in screen_text(app)  # no title rules at 80×24
        assert "input." in text(app.query_one(Banner))
        await pilot.resize_terminal(120, 40)
        await settle(pilot, app)
        assert not app.compact and "── Training" in text(app.query_one("#training", ChartPane))


@aio
async def test_ascii_and_no_color_draw_only_ascii_and_no_colour():
    app = make_app(glyphs=Glyphs("ascii", False), store=timeline_store(120.0))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        for widget in (app.query_one(Banner), *app.query(ChartPane), app.query_one(TimeAxis)):
            for y in range(len(widget.text_lines())):
                strip = widget.render_line(y)
                assert strip.text.isascii(), strip.text
                assert all(
                    seg.style is None or (seg.style.color is None and seg.style.bgcolor is None)
                    for seg in strip
                    if seg.text.strip()
                )
        assert app.has_class("-ascii")
        assert "#" in text(app.query_one("#training", ChartPane))


def test_no_color_env_reaches_textual_and_the_charts(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = TrainmonApp(replay_at_end(timeline_store(10.0)), watchdog=False)
    assert app.no_color and not app.glyphs.color


# ---------------------------------------------------------------- process table


@aio
async def test_process_table_updates_rows_by_key_without_refilling():
    store = timeline_store(30.0)
    app = make_app(store=store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        table = app.query_one(ProcTable)

        def no_clear(*a, **k):
            raise AssertionError("the table was refilled")

        table.clear = no_clear
        assert table.row_count == 3 and table.row_adds == 3
        frame = app.frame
        updates = table.updates
        app._apply(frame)
        assert table.updates == updates and table.row_adds == 3  # same frame: no writes at all
        frame.procs[1].cpu_pct = 12.0
        app._apply(frame)
        assert table.updates == updates + 1
        assert table.get_row(str(frame.procs[1].pid))[2].plain == "12"
        gone = frame.procs.pop()
        app._apply(frame)
        assert table.row_count == 2 and str(gone.pid) not in table._cells
        assert [table.get_row_at(i)[1] for i in range(2)] == ["main", "worker"]


# ---------------------------------------------------------------- frames from a real Monitor, on the frame thread


@aio
async def test_frames_follow_a_real_monitor_through_the_frame_thread():
    monitor = Monitor(listen=False, sources=[HostSource()])
    feed = LiveFeed(monitor)
    app = TrainmonApp(feed, glyphs=COLOR, watchdog=False, threaded=True)
    posted: list[FrameReady] = []
    async with app.run_test(
        size=(100, 34), message_hook=lambda m: posted.append(m) if isinstance(m, FrameReady) else None
    ) as pilot:
        for k in range(3):
            monitor.tick()
            assert await until(pilot, lambda k=k: app.frames_applied >= k + 1)
        assert app.frame is not None and app.frame.live and app.frame.status == ("LIVE", "")
        assert app.frame.cpu.values["cpu.busy"] == app.frame.cpu.values["cpu.busy"]  # a real, non-nan figure
        assert "waiting for a training process" in text(app.query_one("#training", ChartPane))
        assert "no NVIDIA GPU" in text(app.query_one("#gpu", ChartPane))
        assert posted and all(isinstance(m.frame, Frame) for m in posted)
        assert app._thread is not None and app._thread.is_alive()
    assert not app._thread.is_alive()  # stopped and joined on unmount
    feed.close()
    monitor.stop()


def test_frame_messages_coalesce_and_paused_views_are_not_rebuilt():
    feed = replay_at_end(timeline_store(20.0))
    posted: list[Frame] = []
    thread = FrameThread(FrameBuilder(feed), posted.append, Layout(20, 1))
    thread.build_now()
    assert FrameReady(posted[0]).can_replace(FrameReady(posted[0]))
    thread.builder.state.paused = True
    thread.build_now()
    thread.build_now()
    assert len(posted) == 2  # the first paused build, then nothing new to draw
    thread.builder.state.touch()
    thread.build_now()
    assert len(posted) == 3


# ---------------------------------------------------------------- TTY watchdog


def test_tty_watchdog_sees_a_hung_up_terminal():
    master, slave = pty.openpty()
    try:
        assert tty_alive([slave])
        os.close(master)
        assert not tty_alive([slave])
        assert not tty_alive([987654])  # not even open
    finally:
        os.close(slave)


@aio
async def test_app_exits_when_the_terminal_is_lost(monkeypatch):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        monkeypatch.setattr("trainmon.tui.app.tty_alive", lambda: False)
        app._check_tty()
        await pilot.pause()
    assert app.return_code == 1
