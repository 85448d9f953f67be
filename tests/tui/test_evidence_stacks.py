"""The evidence screen (``e``) of a hung run shows the stacks the monitor dumped when stall.hang fired: in a replay,
and live once the dump has landed in the store and the next tick's frame was built."""

from __future__ import annotations

from types import SimpleNamespace

from textual.widgets import Static

from testsupport.stores import HUNG_PID, hung_dump, hung_store, replay_at_end
from testsupport.tui import aio, fake_monitor, make_app, settle, until
from trainmon.diagnose import evaluate
from trainmon.diagnose.engine import VerdictTracker
from trainmon.tui.screens import EvidenceScreen
from trainmon.view import LiveFeed


async def evidence(pilot, app) -> str:
    await pilot.press("e")
    await pilot.pause()
    assert isinstance(app.screen, EvidenceScreen)
    shown = str(app.screen.query_one("#evidence-text", Static).render())
    await pilot.press("escape")
    await pilot.pause()
    return shown


@aio
async def test_a_replayed_hang_shows_its_stacks():
    app = make_app(replay_at_end(hung_store()))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        assert app.frame.verdict.code == "stall.hang"
        shown = await evidence(pilot, app)
    assert "stall.hang" in shown and "main_thread_in: MetricsLog.log (trainmon/demo/stalls.py:37)" in shown
    assert f"stacks of pid {HUNG_PID}" in shown and "dumped by py-spy when stall.hang fired" in shown
    assert f"main pid {HUNG_PID}: 2 Python threads (py-spy 32 ms)" in shown
    assert "thread 4249 'metrics-rotate' (idle)" in shown
    assert "MetricsLog._rotate_later (trainmon/demo/stalls.py:50)" in shown


@aio
async def test_live_the_stacks_appear_with_the_tick_after_the_dump_landed():
    store = hung_store(dump_after_s=None)
    end = store.runs[1].steps.end[-1]
    monitor = fake_monitor(store)
    tracker = VerdictTracker()

    def tick(t: float) -> None:
        findings = evaluate(store, t)
        monitor.listeners[0](SimpleNamespace(t=t, verdict=tracker.update(t, findings), findings=findings))

    app = make_app(LiveFeed(monitor))
    async with app.run_test(size=(120, 40)) as pilot:
        tick(end + 31.0)  # stall.hang fires; the monitor starts dumping
        await settle(pilot, app)
        assert await until(pilot, lambda: app.frame.verdict is not None and app.frame.verdict.code == "stall.hang")
        assert "stacks of" not in await evidence(pilot, app)
        store.info(1, end + 31.3, {"stacks": hung_dump(end + 31.1)})  # the dump lands
        tick(end + 32.0)
        assert await until(pilot, lambda: app.frame.axis.t1 >= end + 32.0 and bool(app.frame.verdict.stacks))
        shown = await evidence(pilot, app)
    assert f"stacks of pid {HUNG_PID}" in shown and "MetricsLog.log (trainmon/demo/stalls.py:37)" in shown
