"""The report's phases: where the recording is cut (within 3 s of the true change, never on a steady noisy run),
how each phase is judged, which cause heads the report and how long every finding held."""

from __future__ import annotations

import pytest

from testsupport.phase_stores import Noise, Regime, phased_store
from testsupport.stores import T0, timeline_store
from trainmon.analyses.phases import bin_width, features, segment, steady_span
from trainmon.diagnose import Finding, Thresholds
from trainmon.report import build_report
from trainmon.report.verdict import TimelinePhase, headline_phase, held_seconds
from trainmon.store.store import Store

NOISY = Noise(jitter=0.5, long_every=0.05, figures=10.0)
INPUT = Regime(0, wait_ms=30, compute_ms=40, workers_cpu=95)  # workers busy all the time: too few of them
FED = Regime(0, wait_ms=0.5, compute_ms=40, workers_cpu=10)  # workers keep ahead: compute-bound


def cut_times(store: Store) -> list[float]:
    span = steady_span(store)
    assert span is not None
    s0, s1 = span
    dt = bin_width(s0, s1)
    return [s0 + k * dt for k in segment(features(store, s0, s1, dt), round(Thresholds().phase_min_s / dt))]


def at(r: Regime, seconds: float) -> Regime:
    return Regime(seconds, r.wait_ms, r.compute_ms, r.workers_cpu, r.main_cpu, r.loader, r.workers)


CHANGES = {
    "input then fed": [at(INPUT, 60), at(FED, 30)],
    "a short input phase at the end": [at(FED, 70), at(INPUT, 12)],
    "an 8 s input phase in the middle": [at(FED, 30), at(INPUT, 8), at(FED, 40)],
    "the step time doubles": [Regime(50, 5, 40), Regime(30, 5, 80)],
    "the workers alone get busy": [Regime(50, 5, 40, workers_cpu=20), Regime(30, 5, 40, workers_cpu=80)],
    "a little more wait": [Regime(40, 2, 40, workers_cpu=10), Regime(40, 8, 40, workers_cpu=15)],
}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(CHANGES))
def test_cuts_land_within_3_s_of_each_change(name: str, seed: int) -> None:
    store, truth = phased_store(CHANGES[name], seed=seed, noise=NOISY)
    cuts = cut_times(store)
    assert len(cuts) == len(truth), (cuts, truth)
    assert all(abs(c - t) <= 3.0 for c, t in zip(cuts, truth, strict=True)), (cuts, truth)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("regime", [INPUT, FED, Regime(0, wait_ms=10, compute_ms=60, workers_cpu=50)])
def test_a_steady_noisy_run_is_one_phase(regime: Regime, seed: int) -> None:
    store, _ = phased_store([at(regime, 90)], seed=seed, noise=NOISY)
    assert cut_times(store) == []
    judged = [e for e in build_report(store)["timeline"] if e["code"] != "insufficient_data"]
    assert len(judged) == 1, judged


def test_a_steady_input_bound_run_keeps_one_verdict_for_its_life() -> None:
    report = build_report(phased_store([at(INPUT, 120)], seed=7, noise=NOISY)[0])
    codes = [e["code"] for e in report["timeline"]]
    assert codes == ["input.too_few_workers"], report["timeline"]
    assert report["verdict"]["code"] == "input.too_few_workers"
    only = report["timeline"][0]
    assert report["verdict"]["held_s"] == pytest.approx(only["end"] - only["t"], abs=0.2)


def test_each_phase_is_judged_on_its_own_steps() -> None:
    store, (switch,) = phased_store([at(INPUT, 60), at(FED, 30)], seed=3)
    report = build_report(store)
    first = store.first_t or 0.0
    judged = [e for e in report["timeline"] if e["code"] != "insufficient_data"]
    assert [e["code"] for e in judged] == ["input.too_few_workers", "ok.compute_bound"]
    assert abs(judged[1]["t"] - (switch - first)) <= 3.0
    assert judged[0]["end"] == judged[1]["t"]  # phases tile the steady state
    assert judged[0]["severity"] == "critical" and "%" in judged[0]["summary"]
    assert judged[1]["summary"].startswith("data wait is")  # judged on the fed steps alone, not a mix


def test_a_phase_shorter_than_the_live_window_at_the_end_is_found_and_heads_the_report() -> None:
    """12 s of starvation after 70 s of compute: less than the live window, about a seventh of the run. The
    report names it in the timeline; a critical cause under a quarter of the steady state does not head it."""
    store, (switch,) = phased_store([at(FED, 70), at(INPUT, 12)], seed=4)
    report = build_report(store)
    first = store.first_t or 0.0
    last = report["timeline"][-1]
    assert last["code"] == "input.too_few_workers" and abs(last["t"] - (switch - first)) <= 3.0
    assert report["verdict"]["code"] == "ok.compute_bound"
    held = {f["code"]: f["held_s"] for f in report["findings"]}
    assert held["input.too_few_workers"] == pytest.approx(last["end"] - last["t"], abs=0.2)


def test_a_critical_cause_held_a_quarter_of_the_time_heads_the_report_with_ok_beside_it() -> None:
    store, _ = phased_store([at(FED, 60), at(INPUT, 25)], seed=5)  # input critical about 30 % of the time
    report = build_report(store)
    assert report["verdict"]["code"] == "input.too_few_workers"
    assert report["verdict"]["severity"] == "critical"
    codes = [e["code"] for e in report["timeline"] if e["code"] != "insufficient_data"]
    assert codes == ["ok.compute_bound", "input.too_few_workers"]
    ok = next(f for f in report["findings"] if f["code"] == "ok.compute_bound")
    assert ok["held_s"] > report["verdict"]["held_s"]  # held longer, yet not the headline


def test_the_synthetic_switch_store_has_two_phases_split_at_the_switch() -> None:
    """The timeline store's host figures wander (a slow sine on CPU and disk): cuts there are judged and joined."""
    report = build_report(timeline_store(90.0, switch_at=45.0))
    judged = [e for e in report["timeline"] if e["code"] != "insufficient_data"]
    assert [e["code"] for e in judged] == ["input.too_few_workers", "ok.compute_bound"]
    assert abs(judged[1]["t"] - 45.0) <= 3.0


def test_findings_that_never_headed_carry_the_seconds_they_held() -> None:
    """The timeline store's GPU is under 70 % busy with 2.9 GB/s of PCIe traffic from pageable memory while the
    loop starves: input.host_to_device holds beside the headline for the whole input phase."""
    report = build_report(timeline_store(90.0, switch_at=45.0))
    judged = [e for e in report["timeline"] if e["code"] != "insufficient_data"]
    h2d = next(f for f in report["findings"] if f["code"] == "input.host_to_device")
    assert h2d["held_s"] == pytest.approx(judged[0]["end"] - judged[0]["t"], abs=0.2)
    assert h2d["code"] not in {e["code"] for e in report["timeline"]}  # it never headed a phase
    assert {f["code"] for f in report["findings"]} >= {"ok.compute_bound"}
    assert all(f["held_s"] > 0 for f in report["findings"])


def phase(start: float, end: float, *findings: tuple[str, str]) -> TimelinePhase:
    return TimelinePhase(start, end, [Finding(code, severity, code) for code, severity in findings])


def test_headline_weighs_severity_then_time() -> None:
    th = Thresholds()
    ok, crit, warn = ("ok.compute_bound", "ok"), ("input.io", "critical"), ("stall.periodic", "warning")
    # 51 % ok, 49 % critical: the critical cause heads.
    assert headline_phase([phase(0, 51, ok), phase(51, 100, crit)], th).top.code == "input.io"
    # A critical cause for a fifth of the time does not; the longest held does.
    assert headline_phase([phase(0, 80, ok), phase(80, 100, crit)], th).top.code == "ok.compute_bound"
    # Two weighty causes: the worse one, however long the other held.
    phases = [phase(0, 30, crit), phase(30, 100, warn)]
    assert headline_phase(phases, th).top.code == "input.io"
    # The same severity: the one held longer.
    phases = [phase(0, 30, ("input.main_process", "critical")), phase(30, 100, crit)]
    assert headline_phase(phases, th).top.code == "input.io"
    # A cause split over two phases adds up: 2 × 15 % is a quarter or more.
    phases = [phase(0, 15, crit), phase(15, 85, ok), phase(85, 100, crit)]
    assert headline_phase(phases, th).top.code == "input.io"
    # Time not judged (too few steps) does not count.
    phases = [phase(0, 300, ("insufficient_data", "ok")), phase(300, 330, ok), phase(330, 340, crit)]
    assert headline_phase(phases, th).top.code == "input.io"


def test_held_seconds_count_every_finding_of_every_phase() -> None:
    phases = [
        phase(0, 20, ("input.io", "critical"), ("gpu.throttled", "warning")),
        phase(20, 50, ("ok.compute_bound", "ok"), ("gpu.throttled", "warning")),
    ]
    assert held_seconds(phases) == {"input.io": 20.0, "gpu.throttled": 50.0, "ok.compute_bound": 30.0}


def test_a_recording_without_steps_is_one_phase() -> None:
    store = Store()
    store.sample(T0, {"cpu.busy": 10.0, "mem.used_pct": 99.0})
    store.sample(T0 + 30, {"cpu.busy": 10.0, "mem.used_pct": 99.0})
    report = build_report(store)
    assert [e["code"] for e in report["timeline"]] == [report["verdict"]["code"]] == ["memory.host_pressure"]
    assert report["timeline"][0]["end"] == pytest.approx(30.0)
