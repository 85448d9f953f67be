"""The screen under Textual's Pilot: every key, resize to 80×24, the process table's keyed updates, the frame thread
fed by a real Monitor, the TTY watchdog, and the real commands in a real pseudo-terminal."""

from __future__ import annotations

import asyncio
import fcntl
import functools
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from types import SimpleNamespace

import pytest
from textual.widgets import Static

from tests.conftest import child_env
from tests.test_view import T0, make_store, real_recording, replay_at_end
from trainmon.monitor import Monitor
from trainmon.sources.host import HostSource
from trainmon.sources.pyspy import PTRACE_FIX
from trainmon.tui import FrameReady, Job, TrainmonApp
from trainmon.tui.charts import EIGHTHS, Layer, area, bars, heat, nice_top
from trainmon.tui.collector import FrameThread
from trainmon.tui.screens import EvidenceScreen, HelpScreen, StackScreen
from trainmon.tui.theme import Glyphs, detect_mode
from trainmon.tui.watchdog import tty_alive
from trainmon.tui.widgets import Banner, ChartPane, ProcTable, TimeAxis
from trainmon.view import WINDOWS_S, Frame, FrameBuilder, Layout, LiveFeed, ReplayFeed

COLOR = Glyphs("braille", True)
__all__ = ["real_recording"]  # a fixture shared with test_view


def aio(fn):
    """Run an async test on its own event loop (no pytest-asyncio in this project)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


def make_app(
    feed=None, *, glyphs: Glyphs = COLOR, job: Job | None = None, threaded: bool = False, store=None
) -> TrainmonApp:
    feed = feed or replay_at_end(store or make_store(120.0, switch_at=60.0))
    return TrainmonApp(feed, glyphs=glyphs, job=job, watchdog=False, threaded=threaded)


async def settle(pilot, app: TrainmonApp, timeout: float = 5.0) -> None:
    """Let the frames a key asked for arrive (they come as messages), and the first frame at all."""
    await until(pilot, lambda: app.frame is not None, timeout)
    await pilot.pause()
    await pilot.pause()


async def until(pilot, condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        await pilot.pause(0.02)
    return condition()


def text(widget) -> str:
    return "\n".join(widget.text_lines())


def screen_text(app: TrainmonApp) -> str:
    return "\n".join(text(w) for w in (app.query_one(Banner), *app.query(ChartPane), app.query_one(TimeAxis)))


# ---------------------------------------------------------------- chart widgets as text


def test_stacked_bars_split_each_column_to_an_eighth():
    rows = bars([[1.0, 2.0, 0.0], [1.0, 0.0, 4.0]], [Layer("wait"), Layer("compute")], 4.0, 2, COLOR)
    assert ["".join(c[0] for c in row) for row in rows] == ["  █", "▄██"]
    # column 0: the lower row is half wait (fg) on compute (bg); column 2: compute alone
    assert rows[1][0] == ("▄", "wait", "compute") and rows[0][2] == ("█", "compute", None)
    mono = bars([[3.0], [1.0]], [Layer("wait", "█", "#"), Layer("compute", "▒", "=")], 4.0, 4, Glyphs("block", False))
    assert [r[0][0] for r in mono] == ["▒", "█", "█", "█"]
    ascii_rows = bars(
        [[3.0], [1.0]], [Layer("wait", "█", "#"), Layer("compute", "▒", "=")], 4.0, 4, Glyphs("ascii", True)
    )
    assert [r[0][0] for r in ascii_rows] == ["=", "#", "#", "#"]


def test_braille_area_two_samples_per_cell_and_heat_strip():
    rows = area([100.0, 50.0, 0.0, float("nan")], 100.0, 1, "rate", COLOR)
    assert rows[0][0][0] == chr(0x2800 + 0x40 | 0x04 | 0x02 | 0x01 | 0x80 | 0x20)  # left full, right half
    assert rows[0][1][0] == " "  # zero and missing: nothing drawn
    assert heat([0.0, 50.0, 100.0], COLOR, 10) == " ▄█"
    assert heat([0.0, 50.0, 100.0, 100.0], Glyphs("ascii", True), 2) == ":@"
    assert nice_top([0.3, 37.0]) == 50 and nice_top([]) == 1.0 and nice_top([120.0]) == 200


@aio
async def test_panes_render_as_text_through_render_line():
    app = make_app(store=make_store(120.0, throttle=0x4))
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
    app = make_app(store=make_store(120.0))
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
    app = make_app(glyphs=Glyphs("ascii", False), store=make_store(120.0))
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


def test_glyph_mode_detection():
    assert detect_mode({"LANG": "en_US.UTF-8", "TERM": "xterm-256color"}) == "braille"
    assert detect_mode({"LANG": "C", "TERM": "xterm"}) == "ascii"
    assert detect_mode({"LC_ALL": "en_US.UTF-8", "LANG": "C"}) == "braille"
    assert detect_mode({"TERM": "linux"}) == "ascii"
    assert detect_mode({"TRAINMON_GLYPHS": "block", "LANG": "C"}) == "block"
    assert detect_mode({}) == "braille"


def test_no_color_env_reaches_textual_and_the_charts(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = TrainmonApp(replay_at_end(make_store(10.0)), watchdog=False)
    assert app.no_color and not app.glyphs.color


# ---------------------------------------------------------------- keys


@aio
async def test_pause_key_freezes_and_resumes():
    clk = [0.0]
    feed = ReplayFeed(make_store(120.0), clock=lambda: clk[0])
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
    app = make_app(store=make_store(120.0, switch_at=60.0))
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
        store = make_store(20.0)
        monitor = SimpleNamespace(
            store=store,
            last_snapshot=None,
            listeners=[],
            interval=1.0,
            gpu=None,
            extra_pids={child.pid: "child"},
            dump_stacks=Monitor.dump_stacks,
        )
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


# ---------------------------------------------------------------- process table


@aio
async def test_process_table_updates_rows_by_key_without_refilling():
    store = make_store(30.0)
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
    feed = replay_at_end(make_store(20.0))
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


# ---------------------------------------------------------------- real commands in a real pseudo-terminal


def run_in_pty(
    args: list[str], cols: int, rows: int, until: list[str], timeout: float, env: dict[str, str]
) -> tuple[int, str]:
    """Start ``trainmon ARGS`` on a pty of the given size, wait for every string in ``until`` to appear, press q."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainmon", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        close_fds=True,
        start_new_session=True,
    )
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    break
            shown = out.decode("utf-8", "replace")
            if all(s in shown for s in until):
                break
        shown = out.decode("utf-8", "replace")
        missing = [s for s in until if s not in shown]
        assert not missing, f"never shown: {missing}\n{shown[-3000:]}"
        os.write(master, b"q")
        end = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    break
        rc = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return rc, out.decode("utf-8", "replace")


def test_replay_command_in_a_terminal_80x24(real_recording):
    env = child_env(TERM="xterm-256color", LANG="C.UTF-8", TZ="UTC")
    rc, shown = run_in_pty(
        ["replay", real_recording, "--speed", "8"],
        80,
        24,
        ["input.main_process", "step", "CPU", "no NVIDIA GPU", "END"],
        40,
        env,
    )
    assert rc == 0 and "Traceback" not in shown


@pytest.mark.slow
def test_demo_command_in_a_terminal_shows_a_verdict_and_quits_cleanly():
    env = child_env(TERM="xterm-256color", LANG="C.UTF-8")
    start = time.monotonic()
    rc, shown = run_in_pty(
        ["demo", "--scenario", "main-process", "--seconds", "12"],
        80,
        24,
        ["input.main_process", "step", "CPU", "GPU", "PID"],
        30,
        env,
    )
    assert time.monotonic() - start < 30
    assert rc == 0 and "Traceback" not in shown
    assert "trainmon report" in shown  # the report follows the screen


def test_chart_scale_is_not_pushed_up_by_float_noise():
    from trainmon.tui.charts import nice_top

    assert nice_top([0.05 * 1e3 + 1e-11]) == 50  # a 50 ms step, summed in floats
    assert nice_top([50.5]) == 100
    assert nice_top([0.2], floor=1.0) == 1
