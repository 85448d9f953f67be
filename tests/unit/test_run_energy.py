"""Joules per step, per sample and per token of each run on its own GPUs (trainmon.analyses.energy_per_step), and where
they are shown: the report (runs[].energy, the line under the runs table), the GPU pane, Prometheus.

Stores are built through the monitor's Ingest calls: steps as an agent sends them, GPU energy series as the GPU
source writes them (a cumulative ``energy_j`` and how each interval was measured), sampled every second. Within a
second the draw is constant, so a step's energy is its duration times that draw: the figures below are computed by
hand from that. The real source against the fake pynvml is tests/unit/test_gpu_energy.py; a real training under a
real monitor, tests/integration/test_energy_per_step.py.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from testsupport.energy_stores import BATCH, STEP_S, energy_store
from testsupport.stores import replay_at_end
from trainmon.analyses.energy_per_step import COUNTER, MIXED, POWER, Curve, live_energy, steady_energy
from trainmon.export.prometheus import MonitorCollector
from trainmon.metrics import GPU
from trainmon.monitor import RunStatus, Snapshot
from trainmon.report import build_report, render
from trainmon.store.store import Store
from trainmon.tui import panes
from trainmon.tui.lines import Geometry, crop_line
from trainmon.tui.theme import Glyphs
from trainmon.view import Layout, build_frame
from trainmon.view.extract import energy_views


def run_of(store: Store, pid: int):
    return next(r for r in store.runs.values() if r.pid == pid)


def steady_steps(store: Store, pid: int) -> list[int]:
    run = run_of(store, pid)
    return [k for k in range(len(run.steps)) if not run.steps.warm[k]]


def test_joules_per_step_sample_and_token_by_hand():
    store = energy_store({10: [0]}, draw=lambda g, k: 200.0 if k <= 10 else 320.0)
    run = run_of(store, 10)
    e = steady_energy(store, run)
    assert e is not None and e.method == COUNTER and e.gpus == [0] and e.shared_with == []
    steps = steady_steps(store, 10)
    by_hand = 0.0  # each step's duration in each second, times that second's draw
    for k in steps:
        a, b = run.steps.start[k], run.steps.end[k]
        by_hand += sum(max(0.0, min(b, s) - max(a, s - 1)) * (200.0 if s <= 10 else 320.0) for s in range(1, 21))
    assert e.steps == len(steps) and e.unmeasured_steps == 0
    assert e.joules == pytest.approx(by_hand) and e.joules_per_step == pytest.approx(by_hand / len(steps))
    assert 200 * STEP_S < e.joules_per_step < 320 * STEP_S
    assert e.joules_per_sample == pytest.approx(e.joules_per_step / BATCH)
    assert math.isnan(e.joules_per_token)  # no sequence batches


def test_tokens_come_from_the_loader_batches():
    measured = {"measured_batches": 10, "measured_samples": 320, "measured_token_batches": 10, "measured_tokens": 40960}
    store = energy_store({10: [0]}, loader=measured)
    e = steady_energy(store, run_of(store, 10))
    assert e is not None and e.joules_per_step == pytest.approx(200 * STEP_S)
    assert e.joules_per_token == pytest.approx(e.joules_per_sample / 128)  # 128 tokens a sample


def test_a_run_on_two_gpus_counts_both_and_the_method_says_how():
    store = energy_store({10: [0, 1]}, draw=lambda g, k: 100.0 * (g + 1), how=lambda g, k: 1.0 - g)
    e = steady_energy(store, run_of(store, 10))
    assert e is not None and e.gpus == [0, 1] and e.method == MIXED
    assert e.joules_per_step == pytest.approx(300 * STEP_S)
    only_power = energy_store({10: [1]}, how=lambda g, k: 0.0)
    assert steady_energy(only_power, run_of(only_power, 10)).method == POWER


def test_steps_touching_an_unmeasured_interval_are_left_out_not_counted_as_zero():
    store = energy_store({10: [0]}, how=lambda g, k: math.nan if k == 7 else 1.0)
    run = run_of(store, 10)
    e = steady_energy(store, run)
    touching = [k for k in steady_steps(store, 10) if run.steps.start[k] < 7.0 and run.steps.end[k] > 6.0]
    assert e is not None and e.unmeasured_steps == len(touching) >= 19
    assert e.steps == len(steady_steps(store, 10)) - len(touching)
    assert e.joules_per_step == pytest.approx(200 * STEP_S)


def test_a_shared_gpu_is_said_and_its_energy_not_split():
    store = energy_store({10: [0], 20: [0, 1]})
    a, b = steady_energy(store, run_of(store, 10)), steady_energy(store, run_of(store, 20))
    assert a is not None and b is not None
    assert a.shared_with == ["pid 20"] and b.shared_with == ["pid 10"]
    assert a.joules_per_step == pytest.approx(200 * STEP_S)  # the whole GPU 0, as if alone
    assert b.joules_per_step == pytest.approx(400 * STEP_S)
    alone = energy_store({10: [0], 20: [1]})
    assert steady_energy(alone, run_of(alone, 10)).shared_with == []


def test_no_figure_without_an_energy_series_or_a_gpu():
    store = energy_store({10: [0]})
    del store.series[GPU.key(0, "energy_j")]
    assert steady_energy(store, run_of(store, 10)) is None  # a recording made before energy was sampled
    cpu = energy_store({10: []})
    assert steady_energy(cpu, run_of(cpu, 10)) is None


def test_live_window_takes_the_steps_that_ended_in_it():
    store = energy_store({10: [0]}, draw=lambda g, k: 200.0 if k <= 10 else 320.0)
    run = run_of(store, 10)
    late = live_energy(store, run, 20.0, window_s=5.0)
    assert late is not None and late.joules_per_step == pytest.approx(320 * STEP_S)
    assert late.steps == pytest.approx(5.0 / STEP_S, abs=1) and late.t0 >= 15.0 - STEP_S
    assert live_energy(store, run, 60.0, window_s=5.0) is None  # no step in the window


def test_curve_reads_between_samples_and_refuses_outside_them():
    store = energy_store({10: [0]}, seconds=4)
    curve = Curve(store, 0)
    assert curve.rise(1.25, 1.75) == (pytest.approx(100.0), 1, 0)
    assert curve.rise(0.5, 2.5)[0] == pytest.approx(400.0) and curve.rise(0.5, 2.5)[1] == 3
    assert curve.rise(3.5, 4.5) is None and curve.rise(-1.0, 0.5) is None


# ---------------------------------------------------------------- where it is shown


def test_report_json_and_text_carry_the_steady_figures():
    store = energy_store({10: [0]}, how=lambda g, k: 0.0)
    report = build_report(store)
    (run,) = report["runs"]
    energy = run["energy"]
    assert energy["method"] == "power_integration" and energy["gpus"] == [0] and energy["shared_with"] == []
    assert energy["joules_per_step"] == pytest.approx(200 * STEP_S, abs=1e-3)
    assert energy["joules_per_sample"] == pytest.approx(200 * STEP_S / BATCH, abs=1e-4)
    assert energy["joules_per_token"] is None
    text = render(report, "text", store=store)
    assert "GPU energy (steady state, each run's own GPUs):" in text
    assert "pid 10 python: 10.0 J/step, 0.31 J/sample (power × time; GPU 0)" in text
    assert "- pid 10 python: 10.0 J/step" in render(report, "markdown", store=store)
    assert "<li>pid 10 python: 10.0 J/step" in render(report, "html", store=store)


def test_report_of_a_shared_gpu_says_so_and_a_run_without_energy_has_no_key():
    shared = build_report(energy_store({10: [0], 20: [0]}))
    assert [r["energy"]["shared_with"] for r in shared["runs"]] == [["pid 20"], ["pid 10"]]
    assert "shared with pid 20: whole-GPU energy, not split" in render(shared, "text")
    none = energy_store({10: [0]})
    del none.series[GPU.key(0, "energy_j")]
    report = build_report(none)
    assert "energy" not in report["runs"][0] and "GPU energy" not in render(report, "text")


def gpu_lines(store: Store, width: int, compact: bool, focused: bool = False) -> list[str]:
    frame = build_frame(replay_at_end(store), Layout(40, 2), 20.0, 60.0, None)
    geo = Geometry.for_width(width, compact)
    _, tracks = panes.gpu(frame, geo, Glyphs(True, True), panes.Size(compact=compact, focused=focused))
    return ["".join(seg[0] for seg in crop_line(v, geo.values_w)) for track in tracks for v in track.values]


def test_gpu_pane_shows_joules_per_step_readable_at_80_columns():
    store = energy_store({10: [0], 20: [1]}, draw=lambda g, k: 412.0)
    compact = gpu_lines(store, 80, True)
    assert compact[0].endswith("412W 20.6J/step") and compact[1].endswith("412W 20.6J/step")
    wide = gpu_lines(store, 120, False)
    assert "mem 40.0G/79.6G · 412W 20.6J/step" in wide
    assert gpu_lines(store, 80, True, focused=True)[1] == "mem 40.0G 412W 20.6J/step"
    focused = gpu_lines(store, 120, False, focused=True)
    assert "energy 20.6J/step 0.64J/smp counter" in focused
    shared = gpu_lines(energy_store({10: [0], 20: [0]}), 80, True)
    assert shared[0].endswith("10.0J/step*")  # the whole GPU's: marked, not split
    assert [e.run for e in energy_views(store, 20.0)] == ["pid 10", "pid 20"]


def test_gpu_pane_without_energy_is_as_before():
    store = energy_store({10: [0]})
    del store.series[GPU.key(0, "energy_j")]
    assert gpu_lines(store, 80, True)[0].endswith("W") and not any("J/step" in x for x in gpu_lines(store, 120, False))


def test_prometheus_has_the_gpu_energy_counter_and_per_run_gauges():
    store = energy_store({10: [0], 20: [0, 1]})
    runs = [
        RunStatus(r.id, r.pid, None, r.name, True, None, r.steps.total, 20.0, 0.1, 640.0, 50.0, 0, gpus)
        for r, gpus in zip(store.runs.values(), ([0], [0, 1]), strict=True)
    ]
    monitor = SimpleNamespace(store=store, last_snapshot=Snapshot(20.0, runs, None, []))
    fams = {f.name: f for f in MonitorCollector(monitor, host="h").collect()}
    counter = fams["trainmon_gpu_energy_joules"]
    assert counter.type == "counter"
    assert {s.labels["gpu"]: s.value for s in counter.samples if s.name.endswith("_total")} == {
        "0": 4000.0,
        "1": 4000.0,
    }
    per_step = {s.labels["pid"]: s.value for s in fams["trainmon_run_energy_per_step_joules"].samples}
    assert per_step == {"10": pytest.approx(200 * STEP_S), "20": pytest.approx(400 * STEP_S)}
    per_sample = {s.labels["pid"]: s.value for s in fams["trainmon_run_energy_per_sample_joules"].samples}
    assert per_sample["10"] == pytest.approx(200 * STEP_S / BATCH)
    assert {s.labels["pid"]: s.value for s in fams["trainmon_run_energy_shared"].samples} == {"10": 1.0, "20": 1.0}
