"""A live store keeps a run's steps as long as its samples (the screen's longest window and a minute more), so a
slow training's step table does not grow for hours toward the step budget; a recording's store keeps everything."""

from __future__ import annotations

from testsupport.stores import uniform_store
from trainmon.store.steps import KEEP_MIN_ROWS
from trainmon.store.store import SERIES_KEEP_S, Store


def test_a_live_store_keeps_steps_as_long_as_its_samples() -> None:
    store = uniform_store(wait_ms=10.0, step_ms=100.0, steps=15_000)  # 10 steps/s for 25 min
    steps = store.runs[1].steps
    assert steps.total == 15_000
    span = steps.end[-1] - steps.end[0]
    assert SERIES_KEEP_S <= span <= SERIES_KEEP_S * 1.25, span
    assert len(steps) < 15_000 * 0.8
    # What every window reads is still there: the latest 15 minutes, ending at the last step.
    assert steps.end[-1] == 1500.0


def test_a_slow_training_keeps_its_newest_rows_however_old() -> None:
    store = uniform_store(wait_ms=10.0, step_ms=5_000.0, steps=KEEP_MIN_ROWS + 500)  # a step every 5 s, ~2 h
    steps = store.runs[1].steps
    assert len(steps) >= KEEP_MIN_ROWS
    assert steps.end[-1] - steps.end[0] > SERIES_KEEP_S * 1.25


def test_a_recordings_store_keeps_every_step() -> None:
    store = uniform_store(wait_ms=10.0, step_ms=100.0, steps=15_000, store=Store(cap=None, series_cap=None))
    assert len(store.runs[1].steps) == 15_000
