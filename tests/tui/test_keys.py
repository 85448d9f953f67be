"""Every key of the screen under Textual's Pilot: pause, window, cursor, focus, the modals (help, evidence, a stack
dump of a real process), quit, replay speed."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from textual.widgets import Static

from testsupport.stores import T0, timeline_store
from testsupport.tui import aio, fake_monitor, make_app, settle, text, until
from trainmon.sources.pyspy.py_spy import PTRACE_FIX
from trainmon.tui import Job
from trainmon.tui.screens import EvidenceScreen, HelpScreen, StackScreen
from trainmon.tui.widgets import ChartPane, ProcTable, TimeAxis
from trainmon.view import WINDOWS_S, LiveFeed, ReplayFeed

# ---------------------------------------------------------------- keys


@aio
async def test_pause_key_freezes_and_resumes():
    clk = [0.0]
    feed = ReplayFeed(timeline_store(120.0), clock=lambda: clk[0])
    feed.set_playing(True)
    app = make_app(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        assert app.frame.status == ("REPLAY", "1× 0:00/2:00")
        await pilot.press("p")
        await settle(pilot, app)
        assert app.state.paused and app.frame.status[0] == "PAUSED"
        frozen = app.frame.axis.t1
        clk[0] = 30.0
        await pilot.pause(0.6)  # the replay poll ticks twice meanwhile
        assert app.frame.axis.t1 == frozen
        await pilot.press("space")  # playback resumes from where the view stopped
        await settle(pilot, app)
        assert not app.state.paused and app.frame.axis.t1 == frozen
        clk[0] = 40.0
        assert await until(pilot, lambda: app.frame.axis.t1 == frozen + 10.0)


@aio
async def test_window_key_cycles_1_5_15_minutes():
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        seen = []
        for _ in range(3):
            await pilot.press("w")
            await settle(pilot, app)
            seen.append(app.frame.window_s)
            assert f" {app.frame.window_s / 60:g}m " in text(app.query_one(TimeAxis))
        assert seen == [WINDOWS_S[1], WINDOWS_S[2], WINDOWS_S[0]]


@aio
async def test_cursor_keys_move_one_instant_across_every_pane():
    app = make_app(store=timeline_store(120.0, switch_at=60.0))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        edge = app.frame
        assert edge.axis.cursor_col is None and edge.runs[0].values.wait_pct < 5
        await pilot.press("left")
        await settle(pilot, app)
        assert app.frame.axis.cursor_col == app.geometry.cols - 1
        await pilot.press(*["shift+left"] * 8)  # 80 columns = 64 s back: before the switch
        await settle(pilot, app)
        f = app.frame
        assert f.axis.cursor_t is not None and f.axis.cursor_t < T0 + 60
        assert f.runs[0].values.wait_pct > 50 and f.gpus[0].values["util"] < 60
        assert f.verdict is not None and f.verdict.code != "ok.compute_bound"
        # the cursor column is drawn in every chart row and marked on the axis
        col = 8 + f.axis.cursor_col
        assert text(app.query_one(TimeAxis))[col] == "▲"
        cpu_row = app.query_one("#cpu", ChartPane).render_line(1)
        cell = cpu_row.crop(col, col + 1)
        assert cell.text in ("│",) or any(seg.style and seg.style.reverse for seg in cell)
        assert f.axis.cursor_label in text(app.query_one(TimeAxis))
        await pilot.press("right")
        await settle(pilot, app)
        assert app.frame.axis.cursor_t > f.axis.cursor_t
        await pilot.press("home")
        await settle(pilot, app)
        assert app.frame.axis.cursor_t == app.feed.clock.start and app.state.paused
        await pilot.press("end")
        await settle(pilot, app)
        assert app.frame.axis.cursor_t == app.feed.clock.end
        await pilot.press("escape")
        await settle(pilot, app)
        assert app.frame.axis.cursor_col is None


@aio
async def test_focus_key_gives_a_pane_the_room():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        before = app.query_one("#cpu", ChartPane).region.height
        order = []
        for _ in range(6):
            await pilot.press("f")
            await settle(pilot, app)
            order.append(app.frame.focus)
            if app.frame.focus == "cpu":
                assert app.query_one("#cpu", ChartPane).region.height > before
                assert text(app.query_one("#cpu", ChartPane)).startswith("── CPU")
        assert order == ["training", "gpu", "cpu", "disk", "procs", None]
        assert app.query_one(ProcTable).has_focus


@aio
async def test_help_evidence_and_stack_dump_modals():
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert "stack dump of the selected process" in str(app.screen.query_one("#help-text", Static).render())
        await pilot.press("escape")
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, EvidenceScreen)
        shown = str(app.screen.query_one("#evidence-text", Static).render())
        assert app.frame.verdict.code in shown and "wait_fraction" in shown
        await pilot.press("escape")
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, StackScreen) and app.screen.pid == 4242
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "stack dumps need the live process" in str(app.screen.query_one("#stack-text", Static).render())
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, StackScreen)


@aio
async def test_stack_dump_of_a_real_process_and_the_permission_message():
    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"])
    try:
        store = timeline_store(20.0)
        monitor = fake_monitor(store, {child.pid: "child"})
        store.sample(T0 + 20.5, {f"proc.{child.pid}.rss_mb": 10.0, f"proc.{child.pid}.cpu_pct": 0.0})
        app = make_app(LiveFeed(monitor))
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(3):
                monitor.listeners[0](SimpleNamespace(t=T0 + 20.5, verdict=None, findings=[]))
            await settle(pilot, app)
            table = app.query_one(ProcTable)
            table.move_cursor(row=table.get_row_index(str(child.pid)))
            await pilot.press("d")
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            lines = app.screen.lines
            assert lines, "no dump"
            if "permission denied" not in lines[0]:
                assert lines[0].startswith(f"pid {child.pid}:") and any("<module>" in ln for ln in lines), lines
            await pilot.press("escape")
        denied = (
            f"py-spy cannot attach to pid {child.pid}: permission denied, Yama allows only descendants; {PTRACE_FIX}"
        )
        app = make_app(LiveFeed(monitor, dumper=lambda pid: [denied]))
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot, app)
            await pilot.press("d")
            await app.workers.wait_for_complete()
            await pilot.pause()
            shown = app.screen.query_one("#stack-text", Static).render()
            assert "permission denied" in str(shown) and "ptrace_scope=0" in str(shown)
    finally:
        child.kill()
        child.wait()


@aio
async def test_quit_key_and_the_second_q_while_a_command_runs():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0
    job = Job(notice=lambda: "train.py running", running=lambda: True, confirm_quit=True)
    app = make_app(job=job)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        assert "train.py running" in text(app.query_one(TimeAxis))
        await pilot.press("q")
        await pilot.pause()
        assert app.is_running
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


@aio
async def test_speed_keys_in_replay():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.press("plus")
        assert app.feed.clock.speed == 2.0
        await pilot.press("minus", "minus")
        assert app.feed.clock.speed == 0.5
