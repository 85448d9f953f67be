"""A cause that changes inside one DataLoader: one persistent worker whose cache is cold for the first half of the
run (it decodes every sample, flat out) and warm after (it serves from memory and sleeps). The report cuts two
phases, each judged on its own steps and its own worker figures (never the half-and-half average), and the live
banner follows the warm cache within seconds."""

from __future__ import annotations

from testsupport.phase_stores import T0, Noise, Regime, feed, phased_store
from trainmon.diagnose import Thresholds, VerdictTracker, evaluate
from trainmon.diagnose.live.change import Change
from trainmon.monitor import Monitor
from trainmon.report import build_report

NOISY = Noise(jitter=0.4, long_every=0.02, figures=8.0)
COLD = Regime(15, wait_ms=50, compute_ms=40, workers_cpu=98, workers=1)  # decodes every sample: busy
WARM = Regime(15, wait_ms=0.4, compute_ms=40, workers_cpu=5, workers=1)  # cache hits: the worker sleeps


def test_a_warming_cache_is_two_phases_with_their_own_worker_figures() -> None:
    store, (warm,) = phased_store([COLD, WARM], seed=4, noise=NOISY)
    report = build_report(store)
    first = store.first_t or 0.0
    judged = [e for e in report["timeline"] if e["code"] != "insufficient_data"]
    assert [e["code"] for e in judged] == ["input.too_few_workers", "ok.compute_bound"], report["timeline"]
    assert abs(judged[1]["t"] - (warm - first)) <= 3.0
    cold = report["verdict"]  # critical for half the steady state: it heads the report
    assert cold["code"] == "input.too_few_workers" and cold["evidence"]["sub_cause"] == "cpu"
    # The cold phase's worker figures are the cold phase's: busy, not the 50 % of the whole run.
    assert cold["evidence"]["workers_cpu_pct_mean"] >= 85 and cold["evidence"]["workers_blocked"] <= 0.05
    assert cold["advice"][0].startswith("raise num_workers from 1 to ")  # 8 cores, 3.7 of them idle
    assert not any("persistent_workers" in a for a in cold["advice"])  # the loader has it


def test_the_live_verdict_changes_within_seconds_of_the_warm_cache() -> None:
    store, (warm,) = phased_store([COLD, WARM], seed=5, noise=NOISY)
    th = Thresholds()
    tracker = VerdictTracker(th.hold_s, th.change_hold_s)
    for k in range(1, 31):
        changes: list[Change] = []
        tracker.update(T0 + k, evaluate(store, T0 + k, th, changes=changes), changes)
    codes = [code for _, code in tracker.changes if code != "insufficient_data"]
    assert codes == ["input.too_few_workers", "ok.compute_bound"], tracker.changes
    assert 0 < tracker.changes[-1][0] - warm <= 5.0, tracker.changes


def test_the_monitor_banner_follows_the_warm_cache() -> None:
    """Through the real Monitor, fed a second at a time as the agent's sender and the sources would."""
    monitor = Monitor(listen=False, sources=[])
    monitor.autodump = None  # never py-spy a pid this synthetic run borrows
    shown: list[tuple[float, str]] = []

    def tick(now: float) -> None:
        verdict = monitor.tick(now).verdict
        if verdict is not None and (not shown or shown[-1][1] != verdict.code):
            shown.append((now, verdict.code))

    for _ in feed(monitor.ingest, [COLD, WARM], seed=6, noise=NOISY, each_second=tick):
        pass
    assert [code for _, code in shown][-2:] == ["input.too_few_workers", "ok.compute_bound"], shown
    assert 0 < shown[-1][0] - (T0 + COLD.seconds) <= 5.0, shown


def test_phases_with_one_code_and_two_causes_stay_apart() -> None:
    """The same verdict code, two causes: a worker that computes flat out, then one that sleeps on a slow source.
    Joined, the phases would be judged on the average of both halves (a half-busy worker) and neither described."""
    busy = Regime(15, wait_ms=50, compute_ms=40, workers_cpu=98, workers=1)
    waits = Regime(15, wait_ms=30, compute_ms=40, workers_cpu=8, workers=1)
    store, _ = phased_store([busy, waits], seed=8, noise=NOISY)
    report = build_report(store)
    judged = [e for e in report["timeline"] if e["code"] != "insufficient_data"]
    assert [e["code"] for e in judged] == ["input.too_few_workers"] * 2, report["timeline"]
    assert "busy 9" in judged[0]["summary"] and "blocked 9" in judged[1]["summary"], judged


def test_the_cut_lands_where_the_figures_agree_not_where_the_wait_first_eased() -> None:
    """The wait eases for 2 s before the cache is warm (the worker still busy), then drops: the wait alone would
    cut where it first eased; every figure that moved (the worker's CPU, the step time) puts the cut at the warm
    cache, within a bin of it."""
    ease = Regime(2, wait_ms=12, compute_ms=40, workers_cpu=95, workers=1)
    errors = []
    for seed in range(6):
        store, (_, warm) = phased_store([Regime(12, 50, 40, 98, workers=1), ease, WARM], seed=seed, noise=NOISY)
        report = build_report(store)
        (fed,) = [e for e in report["timeline"] if e["code"] == "ok.compute_bound"]
        errors.append(abs(fed["t"] - (warm - (store.first_t or 0.0))))
    assert sum(errors) / len(errors) <= 1.0, errors
