"""The agent's own cost: its calibration of the hooks, the records the meter sends, and the per-step figure the
monitor makes of them."""

from __future__ import annotations

import gc
import math
from array import array
from types import SimpleNamespace

import pytest

from testsupport.stores import MS, uniform_store
from trainmon import protocol as P
from trainmon.agent import _cost, _hot
from trainmon.store.agent_cost import largest_live, per_step_text


def test_calibration_prices_every_hook_and_writes_nothing_the_monitor_gets():
    _hot.reset_buffer()
    prices = _cost.calibrate()
    assert set(prices) == set(_cost.PRICED)
    assert all(math.isfinite(v) and v >= 0 for v in prices.values()), prices
    # Two clock reads and an append are not free; one price may still round to 0 on a loaded host (each is a
    # difference of two timings, clamped at 0), all of them cannot.
    assert sum(prices.values()) > 0, prices
    assert _hot.pending_records() == 0  # the copies wrote to a buffer of their own


def test_the_meter_sends_the_hooks_at_their_price_and_the_sender_time(monkeypatch):
    prices = {"wait": 300.0, "opt": 200.0, "step": 0.0, "gc": 0.0}
    monkeypatch.setattr(_cost, "calibrate", lambda kinds: {k: prices[k] for k in kinds})
    monkeypatch.setattr(_cost, "REPORT_S", 0.0)
    _hot.reset_buffer()
    meter = _cost.CostMeter()
    meter.tick()  # starts the first interval
    counts = SimpleNamespace(wait={1: 100}, opt=100, step=0, groups=100)
    meter.observe(counts)
    meter.tick()
    records = _hot.swap_buffer()
    kinds = {records[k] & 0xFF for k in range(0, len(records), 4)}
    assert kinds == {P.K_COST}
    by_part = {P.COST_PARTS[records[k] >> 8]: records[k + 3] for k in range(0, len(records), 4)}
    assert by_part["hooks"] == 100 * 300 + 100 * 200 and by_part["sender"] >= 0
    assert meter.totals["steps"] == 100 and meter.last_ns_per_step is not None
    assert set(meter.prices) == {"wait", "opt", "gc"}  # the kinds called, and the collector's once
    assert meter.last_ns_per_step == pytest.approx((50_000 + by_part["sender"]) / 100)


def test_a_loop_whose_model_the_agent_times_has_its_wrappers_priced_per_step(monkeypatch):
    from trainmon.agent import _model_wrappers

    monkeypatch.setattr(_cost, "calibrate", lambda kinds: dict.fromkeys(kinds, 100.0))
    monkeypatch.setattr(_cost, "REPORT_S", 0.0)
    monkeypatch.setattr(_model_wrappers, "_wrapped", [7, 3])  # seen before the meter began: not its interval's
    monkeypatch.setattr(_model_wrappers, "_price_per_step_ns", [20_000.0])  # as the probe measured it
    _hot.reset_buffer()
    meter = _cost.CostMeter()
    meter.observe(SimpleNamespace(wait={}, opt=0, step=0, groups=0))
    meter.tick()
    _model_wrappers._wrapped[:] = [7 + 4, 3 + 8]  # a burst: 4 steps measured (of the 10 made)
    meter.observe(SimpleNamespace(wait={}, opt=10, step=0, groups=10))
    meter.tick()
    records = _hot.swap_buffer()
    by_part = {P.COST_PARTS[records[k] >> 8]: records[k + 3] for k in range(0, len(records), 4)}
    assert by_part["hooks"] == 10 * 100 + 4 * 20_000  # optimizer hooks, then the wrappers
    assert meter.last_ns_per_step == pytest.approx((81_000 + by_part["sender"]) / 10)


def test_the_monitor_divides_by_the_steps_in_the_intervals():
    store = uniform_store(step_ms=10.0, steps=1000)  # 10 s of 10 ms steps
    recs = []
    for k in range(10):  # a second each: 800 ns of hooks and 200 ns of sender per step
        recs += [P.K_COST, k * 1000 * MS, (k + 1) * 1000 * MS, 100 * 800]
        recs += [P.K_COST | 1 << 8, k * 1000 * MS, (k + 1) * 1000 * MS, 100 * 200]
    store.events(1, 10.0, array("q", recs))
    run = store.runs[1]
    figures = run.agent_cost.per_step(run.steps, 5.0, 10.0)
    assert figures is not None
    assert figures["hooks"] == pytest.approx(800, rel=0.02) and figures["sender"] == pytest.approx(200, rel=0.02)
    assert largest_live(store.runs.values(), 10.0) == pytest.approx(1000, rel=0.02)
    assert largest_live(store.runs.values(), 30.0) is None  # nothing measured in the last 5 s


def test_per_step_text():
    assert per_step_text(940) == "0.9µs"
    assert per_step_text(390_000) == "390µs"
    assert per_step_text(1_240_000) == "1.2ms"


def test_an_optimizer_step_is_recorded_through_its_step_code_unless_a_class_overrides_it():
    import torch

    from trainmon.agent._torch_hooks import step_code_hookable

    cls = torch.optim.Optimizer
    assert step_code_hookable(cls)  # torch's step wrapper calls it, and no optimizer of torch's has its own
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([p], lr=0.1)
    own = vars(cls)["_optimizer_step_code"]
    try:
        cls._optimizer_step_code = _hot.optimizer_step_code
        _hot.reset_buffer()
        for _ in range(3):
            opt.step()
        records = _hot.swap_buffer()
        assert [records[k] & 0xFF for k in range(0, len(records), 4)] == [P.K_OPT] * 3
        assert not step_code_hookable(cls)  # already ours: not patched twice

        class Profiled(torch.optim.SGD):
            def _optimizer_step_code(self) -> None:  # a class of its own: its steps would bypass ours
                return None

        cls._optimizer_step_code = own
        assert not step_code_hookable(cls)
        del Profiled
        gc.collect()  # a class is in its base's __subclasses__ until collected
        assert step_code_hookable(cls)
    finally:
        cls._optimizer_step_code = own


def test_the_records_are_packed_in_order_and_a_malformed_one_is_left_out():
    records = [(P.K_WAIT | 1 << 8, i, i + 1, 0) for i in range(2500)]
    records[1500] = (P.K_OPT, 1.5, 2, 0)  # a float where an int goes: that record is dropped, not its chunk
    records[2400] = (P.K_OPT, 1 << 70, 2, 0)  # beyond int64
    flat = _hot.flat([x for r in records for x in r])
    kept = [r for k, r in enumerate(records) if k not in (1500, 2400)]
    assert flat.tolist() == [x for r in kept for x in r]
    _hot.reset_buffer()
    _hot.step()
    _hot.mark(3)
    got = _hot.swap_buffer()
    assert [got[k] & 0xFF for k in (0, 4)] == [P.K_STEP, P.K_MARK] and _hot.pending_records() == 0


def test_status_line_gives_a_slow_loops_agent_cost_as_a_share_of_its_step():
    """At 6 steps a second the agent's costs per second fall on few steps (the demo: ~640 µs a step); the status line
    then says what that is of a step. A fast loop's figure stays as it was."""
    from trainmon.monitor import agent_cost_part

    def run(ns: float, p50_ms: float, connected: bool = True) -> SimpleNamespace:
        return SimpleNamespace(connected=connected, agent_step_ns=ns, step_p50_ms=p50_ms)

    assert agent_cost_part([run(640_000, 160.0)]) == "  · agent 640µs/step (0.4% of a step)"
    assert agent_cost_part([run(900.0, 1.0), run(20_000, 500.0)]) == "  · agent 20µs/step (<0.1% of a step)"
    assert agent_cost_part([run(900.0, 1.0)]) == "  · agent 0.9µs/step"
    assert agent_cost_part([run(50_000, math.nan)]) == "  · agent 50µs/step"  # no step time: the figure alone
    assert agent_cost_part([run(math.nan, 1.0), run(640_000, 160.0, connected=False)]) == ""
