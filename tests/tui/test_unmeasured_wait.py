"""A loop with no loader on the screen and the status line: its data wait is n/a where nothing measured it, and the
measured share where the agent timed the model (trainmon/agent/_outside.py)."""

from __future__ import annotations

from array import array

from testsupport.tui import aio, make_app, settle, text
from trainmon import protocol as P
from trainmon.monitor import Monitor, status_line
from trainmon.store.store import Store
from trainmon.tui.widgets import ChartPane

MS = 1_000_000
T0 = 1000.0


def _loaderless(store: Store, outside_ms: float | None, steps: int = 400) -> Store:
    """50 ms optimizer steps from T0 with no loader; each told ``outside_ms`` outside the model (None: never)."""
    store.hello(1, T0, {"pid": 4242, "name": "train.py"})
    recs: list[int] = []
    t = int(T0 * 1e9)
    for _ in range(steps):
        end = t + 50 * MS
        if outside_ms is not None:
            recs += [P.K_OUTSIDE, t, end - MS, int(outside_ms * MS)]
        recs += [P.K_OPT, end, end, 0]
        t = end
    store.events(1, t / 1e9, array("q", recs))
    for k in range(int(steps * 0.05) + 1):
        store.sample(T0 + k, {"cpu.busy": 40.0, "cpu.cores": 8.0})
    return store


def _training_pane(store: Store) -> str:
    """The training pane's text, the screen replaying ``store`` at its end."""
    out: list[str] = []

    @aio
    async def read() -> None:
        app = make_app(store=store)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot, app)
            out.append(text(app.query_one("#training", ChartPane)))

    read()
    return out[0]


def test_the_training_pane_says_na_where_nothing_measured_the_wait():
    pane = _training_pane(_loaderless(Store(), None))
    assert "data wait n/a" in pane and "data wait 0%" not in pane, pane


def test_the_training_pane_shows_the_wait_measured_outside_the_model():
    pane = _training_pane(_loaderless(Store(), 20.0))
    assert "data wait 40%" in pane, pane


def test_the_status_line_says_na_where_nothing_measured_the_wait():
    monitor = Monitor(listen=False, sources=[], dump_on_critical=False)
    _loaderless(monitor.store, None)
    line = status_line(monitor.tick(T0 + 20.0))
    assert "data wait   n/a" in line and "0.0%" not in line, line
    measured = Monitor(listen=False, sources=[], dump_on_critical=False)
    _loaderless(measured.store, 20.0)
    assert "data wait 40.0%" in status_line(measured.tick(T0 + 20.0))
