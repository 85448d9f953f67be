"""The live verdict follows a change: the window is cut where the recent steps differ from the rest, the banner
follows the new cause within seconds, and a steady noisy run never flickers."""

from __future__ import annotations

import pytest

from testsupport.phase_stores import T0, Noise, Regime, feed, phased_store
from trainmon.diagnose import Finding, Thresholds, VerdictTracker, evaluate
from trainmon.diagnose.live.change import Change, latest_change, live_window
from trainmon.diagnose.live.window import run_window
from trainmon.monitor import Monitor

NOISY = Noise(jitter=0.5, long_every=0.05, figures=10.0)
# Long steps rarer than in NOISY: there, a fed loop's long steps take about 15 % of the time, where stall.periodic
# itself starts, and the rules, not the window, would flicker.
JITTERY = Noise(jitter=0.5, long_every=0.02, figures=10.0)
INPUT = Regime(60, wait_ms=30, compute_ms=40, workers_cpu=95)
FED = Regime(30, wait_ms=0.5, compute_ms=40, workers_cpu=10)


@pytest.mark.parametrize("seed", range(4))
def test_the_window_is_cut_at_the_change_once_a_second_of_steps_follows_it(seed: int) -> None:
    store, (switch,) = phased_store([INPUT, FED], seed=seed, noise=NOISY)
    run = store.runs[1]
    th = Thresholds()
    before = run_window(run, switch - 0.5 - th.window_s, switch - 0.5)
    assert latest_change(before, th) is None
    w, change = live_window(run, switch + 2.0 - th.window_s, switch + 2.0, th)
    assert change is not None and change.what in ("data_wait", "step_time")
    assert abs(change.t - switch) <= 0.5, change  # a few steps: one long step looks fed too
    assert w.t0 >= change.t - 1e-9 and w.steps >= th.min_steps
    assert w.wait_fraction < 0.05  # the fed steps alone


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("regime", [INPUT, FED])
def test_a_steady_noisy_run_never_cuts_its_window_nor_flickers(regime: Regime, seed: int) -> None:
    steady = Regime(80, regime.wait_ms, regime.compute_ms, regime.workers_cpu)
    store, _ = phased_store([steady], seed=seed, noise=JITTERY)
    th = Thresholds()
    tracker = VerdictTracker(th.hold_s, th.change_hold_s)
    cuts: list[Change] = []
    for k in range(1, 81):
        changes: list[Change] = []
        tracker.update(T0 + k, evaluate(store, T0 + k, th, changes=changes), changes)
        cuts += changes
    assert [c for c in cuts if c.t > T0 + 5] == []  # past the first steps' settling
    assert [code for _, code in tracker.changes][1:] in ([], ["input.too_few_workers"], ["ok.compute_bound"])
    assert len(tracker.changes) <= 2, tracker.changes


def test_the_monitor_follows_a_new_cause_within_5_s() -> None:
    """Through the real Monitor: the run's events and the host's figures go through its Ingest a second at a
    time, as the agent's sender and the sources would deliver them, and it ticks once a second."""
    monitor = Monitor(listen=False, sources=[])
    monitor.autodump = None  # never py-spy a pid this synthetic run borrows
    shown: list[tuple[float, str]] = []

    def tick(now: float) -> None:
        verdict = monitor.tick(now).verdict
        if verdict is not None and (not shown or shown[-1][1] != verdict.code):
            shown.append((now, verdict.code))

    for _ in feed(monitor.ingest, [INPUT, FED], seed=11, noise=JITTERY, each_second=tick):
        pass
    switch = T0 + INPUT.seconds
    assert [code for _, code in shown] == ["insufficient_data", "input.too_few_workers", "ok.compute_bound"], shown
    lag = shown[-1][0] - switch
    assert 0 < lag <= 5.0, shown


def test_a_dataloader_switch_keeps_the_old_verdict_until_the_new_loader_can_be_judged() -> None:
    """Two workers, then num_workers=0 on a new DataLoader: until it has fed enough steps, the old loader's steps
    say what holds (no 'insufficient data' in between), then the new cause shows after the short hold."""
    slow = Regime(20, wait_ms=200, compute_ms=100, loader=2, workers=0)  # about 3 steps a second
    store, (switch,) = phased_store([Regime(40, wait_ms=0.5, compute_ms=100, workers_cpu=5), slow], seed=2)
    th = Thresholds()
    tracker = VerdictTracker(th.hold_s, th.change_hold_s)
    shown = []
    for k in range(1, 61):
        changes: list[Change] = []
        verdict = tracker.update(T0 + k, evaluate(store, T0 + k, th, changes=changes), changes)
        if verdict is not None and (not shown or shown[-1][1] != verdict.code):
            shown.append((T0 + k, verdict.code))
    assert [code for _, code in shown] == ["insufficient_data", "ok.compute_bound", "input.main_process"], shown
    settled = store.runs[1].steps.start[store.runs[1].steps.index_range(switch, switch)[1] + th.min_steps]
    assert shown[-1][0] - settled <= 2.0, (shown, settled - T0)


def test_the_short_hold_is_for_a_change_not_yet_reflected() -> None:
    a, b, c = (Finding(code, "critical", code) for code in ("input.main_process", "input.io", "stall.periodic"))
    tr = VerdictTracker(hold_s=3.0, change_hold_s=1.0)
    change = [Change(10.0, "data_wait", 0.4, 0.0)]
    tr.update(0.0, [a])
    tr.update(11.0, [b], change)
    assert tr.update(12.0, [b], change).code == "input.io"  # a fresh change: one second is enough
    tr.update(20.0, [c], change)
    assert tr.update(21.0, [c], change).code == "input.io"  # the same change again: the usual hold
    assert tr.update(23.0, [c], change).code == "stall.periodic"
    tr.update(30.0, [a], [Change(29.0, "step_time", 0.1, 0.2)])
    assert tr.update(31.0, [a], [Change(29.0, "step_time", 0.1, 0.2)]).code == "input.main_process"
    # A run that stops (nothing to judge) is never switched to in a hurry.
    tr.update(40.0, [Finding("insufficient_data", "ok", "")], [Change(39.0, "loader", 0.0, 0.0)])
    assert tr.update(41.0, [Finding("insufficient_data", "ok", "")], [Change(39.0, "loader", 0.0, 0.0)]).code == (
        "input.main_process"
    )
