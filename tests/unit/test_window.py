"""Window figures over long step tables: exact sums and maxima, sampled quantiles, exact long steps."""

from __future__ import annotations

import math
from array import array

from trainmon import protocol as P
from trainmon.diagnose.live.slices import MAX_DETAIL
from trainmon.diagnose.live.window import run_window
from trainmon.diagnose.stats import quantile
from trainmon.store.run import Run

US = 1000


def _run_with_steps(
    n: int, slow_every: int, loaders: tuple[int, ...] = (1,), restart_every: int = 0, boundary: int = P.K_STEP
) -> Run:
    """Steps (explicit, or optimizer steps) of 1 ms (a 200 µs wait each); every ``slow_every``-th takes 10 ms;
    the train loader changes to the next of ``loaders`` at equal shares; an epoch restart (warm-up steps) every
    ``restart_every``."""
    run = Run(1, {"pid": 1}, 0.0, cap=None)
    for lid in loaders:
        run.apply_info({"loader": {"id": lid, "batch_size": 4, "num_workers": 2}})
    t = 10**9
    recs: list[int] = []
    for k in range(n):
        lid = loaders[k * len(loaders) // n]
        if restart_every and k % restart_every == 0:
            recs += [lid << 8 | P.K_ITER_START, t, t, 2]
        step = 10_000 * US if slow_every and k % slow_every == slow_every - 1 else 1_000 * US
        recs += [lid << 8 | P.K_WAIT, t, t + 200 * US, 0, boundary, t + step, t + step, 0]
        t += step
    for i in range(0, len(recs), 4 * 997):  # batches as a sender cuts them, not aligned to steps
        run.apply_events(array("q", recs[i : i + 4 * 997]))
    return run


def _reference(run: Run, t0: float, t1: float) -> dict:
    """The window's steady steps, one by one in plain Python."""
    s = run.steps
    idx = [k for k in range(len(s)) if t0 <= s.end[k] <= t1]
    current = s.loader[idx[-1]]
    steady = [k for k in idx if s.loader[k] == current and not s.warm[k]]
    durs = [s.end[k] - s.start[k] for k in steady]
    return {
        "steps": len(steady),
        "warm": sum(1 for k in idx if s.loader[k] == current and s.warm[k]),
        "time": math.fsum(durs),
        "wait": math.fsum(s.wait[k] for k in steady),
        "samples": sum(s.samples[k] for k in steady),
        "max": max(durs),
        "p50": quantile(durs, 0.5),
        "p95": quantile(durs, 0.95),
        "long": [(s.start[k], s.end[k]) for k, d in zip(steady, durs, strict=True) if d > 0.005],
    }


def _check(run: Run, t0: float, t1: float) -> None:
    ref = _reference(run, t0, t1)
    w = run_window(run, t0, t1)
    assert (w.steps, w.warm_steps, w.samples) == (ref["steps"], ref["warm"], ref["samples"])
    assert math.isclose(w.step_time_s, ref["time"], rel_tol=1e-9)
    assert math.isclose(w.wait_s, ref["wait"], rel_tol=1e-9)
    assert [(s, e) for s, e, _ in w.long_steps(0.005)] == ref["long"]
    assert math.isclose(math.fsum(w.long_durations(0.005)), math.fsum(e - s for s, e in ref["long"]), rel_tol=1e-9)
    spans, waits = w.spans_and_waits()
    assert len(spans) == len(waits) == ref["steps"]
    # Quantiles of a long window come from a sample; p50 and p95 within a few per cent.
    assert math.isclose(w.step_p50_s, ref["p50"], rel_tol=0.02)
    assert math.isclose(w.step_p95_s, ref["p95"], rel_tol=0.05)


def test_long_window_sums_are_exact_and_quantiles_see_every_phase():
    run = _run_with_steps(60_000, slow_every=10)
    end = run.steps.end[-1]
    w = run_window(run, end - 20.0, end)
    assert w.steps > MAX_DETAIL * 4 and len(w.sorted_durations) <= MAX_DETAIL
    assert math.isclose(w.step_p95_s, 0.010, rel_tol=0.01)  # a stride that aliased with 10 would miss them all
    _check(run, end - 20.0, end)


def test_window_across_warm_up_and_a_loader_switch_matches_step_by_step():
    run = _run_with_steps(30_000, slow_every=50, loaders=(1, 2), restart_every=997, boundary=P.K_OPT)
    end = run.steps.end[-1]
    for span in (5.0, 20.0, 30.0, 60.0):
        _check(run, end - span, end)
    mid = run.steps.end[15_100]  # just after the switch to loader 2: loader 1's steps are history
    _check(run, mid - 20.0, mid)
    assert run_window(run, mid - 20.0, mid).loader_id == 2


def test_window_columns_survive_the_table_being_trimmed():
    run = _run_with_steps(5_000, slow_every=10)
    end = run.steps.end[-1]
    w = run_window(run, end - 2.0, end)
    before = w.spans_and_waits()[0]
    run.steps.cap = 1_000
    run.steps.trim()
    after = w.spans_and_waits()[0]
    assert after and after == before[len(before) - len(after) :]


def test_long_steps_stay_exact_as_the_window_slides_and_the_median_moves():
    """The incremental scan for long steps against a full scan, tick by tick: the table grows and is
    trimmed, and the step time changes (so the long-step limit falls and rises)."""
    run = Run(1, {"pid": 1}, 0.0, cap=3_000)
    run.apply_info({"loader": {"id": 1, "batch_size": 4}})
    t = 10**9
    for tick in range(40):
        base = (1_000 if tick < 15 else 400 if tick < 25 else 3_000) * US
        recs: list[int] = []
        for k in range(500):
            step = base * (7 if k % 37 == 0 else 2 if k % 11 == 0 else 1)
            recs += [1 << 8 | P.K_WAIT, t, t + 50 * US, 0, P.K_STEP, t + step, t + step, 0]
            t += step
        run.apply_events(array("q", recs))
        end = run.steps.end[-1]
        w = run_window(run, end - 1.5, end)
        for limit in (w.step_p50_s * 1.5, w.step_p50_s * 3, w.step_p50_s * 5):
            start, stop, dur, _ = w.columns()
            expected = [(s, e) for s, e, d in zip(start, stop, dur, strict=True) if d > limit]
            assert [(s, e) for s, e, _ in w.long_steps(limit)] == expected, (tick, limit)


def test_prefix_sums_follow_the_table_through_growth_trims_and_a_clear():
    from trainmon.store.steps import Steps

    steps = Steps(cap=500)
    for k in range(2_000):
        steps.add(k * 0.01, k * 0.01 + 0.004 + (k % 7) * 1e-4, 0.001 * (k % 3), k % 5, False, math.nan)
        if k % 97 == 0:
            cum_dur, cum_wait, cum_samples = steps.prefix_sums()
            assert len(cum_dur) == len(steps) + 1
            i, j = len(steps) // 3, len(steps)
            assert math.isclose(cum_dur[j] - cum_dur[i], math.fsum(steps.dur[i:j]), rel_tol=1e-9)
            assert math.isclose(cum_wait[j] - cum_wait[i], math.fsum(steps.wait[i:j]), rel_tol=1e-9, abs_tol=1e-12)
            assert cum_samples[j] - cum_samples[i] == sum(steps.samples[i:j])
    steps.clear()
    steps.add(0.0, 1.0, 0.25, 3, False, math.nan)
    cum_dur, cum_wait, cum_samples = steps.prefix_sums()
    assert list(cum_dur) == [0.0, 1.0] and list(cum_wait) == [0.0, 0.25] and list(cum_samples) == [0.0, 3.0]
