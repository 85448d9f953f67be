"""The time budget (trainmon.analyses.time_budget) on constructed runs: every second of a run's wall time in exactly one
part, spans laid in precedence order, steady steps split into their measured parts, long steps by cause, and a
freeze inside one step kept as frozen time, in the report's findings, timeline and budget."""

from __future__ import annotations

import math
from array import array

import pytest

from testsupport.freeze import freeze_store
from testsupport.stores import uniform_store
from trainmon.analyses.time_budget import PARTS, paint, time_budget
from trainmon.diagnose.thresholds import Thresholds
from trainmon.report import build_report
from trainmon.store.store import Store

TH = Thresholds()


def assert_adds_up(budget) -> None:
    assert list(budget.parts) == list(PARTS)
    assert all(v >= -1e-9 for v in budget.parts.values()), budget.parts
    assert math.isclose(budget.total_s, budget.wall_s, rel_tol=1e-9, abs_tol=1e-6), (budget.total_s, budget.wall_s)


def test_paint_lays_spans_in_precedence_order_and_never_twice():
    pieces = paint(
        [
            ("frozen", [(10.0, 20.0)]),
            ("checkpoints", [(5.0, 12.0), (18.0, 25.0), (24.0, 26.0)]),
            ("gc", [(0.0, 1.0), (11.0, 11.5), (30.0, 31.0)]),
        ],
        0.5,
        30.5,
    )
    assert pieces == [
        (0.5, 1.0, "gc"),
        (5.0, 10.0, "checkpoints"),
        (10.0, 20.0, "frozen"),
        (20.0, 26.0, "checkpoints"),
        (30.0, 30.5, "gc"),
    ]


def test_a_steady_run_is_warm_up_then_data_wait_and_compute_to_the_millisecond():
    store = uniform_store(wait_ms=5.0, step_ms=50.0, steps=200)
    run = store.runs[1]
    budget = time_budget(run, run.last_seen, TH)
    assert budget is not None
    assert_adds_up(budget)
    p = budget.parts
    assert p["warmup"] == pytest.approx(5 * 0.050)  # the first five steps
    assert p["data_wait"] == pytest.approx(195 * 0.005)
    assert p["compute"] == pytest.approx(195 * 0.045)
    assert budget.wall_s == pytest.approx(10.0) and not budget.freezes
    assert p["frozen"] == p["long_steps"] == p["unobserved_gaps"] == 0.0


def test_checkpoints_take_their_time_out_of_the_steps_they_lie_in():
    store = uniform_store(steps=200, checkpoints=[(3000.0, 3400.0), (6400.0, 6800.0)], long_at=(59, 119), long_ms=400)
    run = store.runs[1]
    budget = time_budget(run, run.last_seen, TH)
    assert budget is not None
    assert_adds_up(budget)
    assert budget.parts["checkpoints"] == pytest.approx(0.8)
    assert budget.parts["long_steps"] == pytest.approx(0.0, abs=1e-9)  # the saves explain the long steps


def test_a_long_step_is_split_into_the_median_step_and_its_excess_by_cause():
    store = uniform_store(steps=200, long_at=(50, 150), long_ms=1000)
    run = store.runs[1]
    run.phases.append((8.6, 8.8, "logging"))  # the training's own phase inside the second long step
    budget = time_budget(run, run.last_seen, TH)
    assert budget is not None
    assert_adds_up(budget)
    assert budget.parts["long_steps"] == pytest.approx(2.0)
    assert budget.long_steps == pytest.approx({"unexplained": 1.0, "logging": 1.0})
    assert budget.parts["data_wait"] == pytest.approx(195 * 0.005)


def test_an_evaluation_loop_in_a_step_is_evaluation_and_an_eval_phase_is_too():
    store = uniform_store(steps=200, long_at=(100,), long_ms=2000)
    run = store.runs[1]
    run.iter_starts.append((5.06, 2))  # loader 2 (not the train loader) starts an iterator inside step 100
    run.phases.append((8.0, 8.5, "validation"))
    budget = time_budget(run, run.last_seen, TH)
    assert budget is not None
    assert_adds_up(budget)
    assert budget.parts["evaluation"] == pytest.approx(2.0 + 0.5)
    assert budget.parts["long_steps"] == 0.0


def test_garbage_collection_inside_a_checkpoint_is_the_checkpoints_time():
    store = uniform_store(steps=200, checkpoints=[(3000.0, 3400.0)])
    run = store.runs[1]
    run.gc.extend(array("d", [3.1, 6.0]), array("d", [3.2, 6.05]), array("b", [2, 2]))
    budget = time_budget(run, run.last_seen, TH)
    assert budget is not None
    assert_adds_up(budget)
    assert budget.parts["checkpoints"] == pytest.approx(0.4)
    assert budget.parts["gc"] == pytest.approx(0.05)


def test_time_outside_any_step_is_unobserved_before_between_and_after():
    store = uniform_store(steps=100, t_start_ms=2000.0)  # hello at 2 s, first step at 2 s
    run = store.runs[1]
    run.first_seen = 0.5  # the process said hello 1.5 s before its first step
    store.closed(1, 10.0, "exit")  # and closed 3 s after its last
    budget = time_budget(run, math.inf, TH)
    assert budget is not None
    assert_adds_up(budget)
    assert budget.start == 0.5 and budget.end == 10.0
    assert budget.parts["unobserved_before"] == pytest.approx(1.5)
    assert budget.parts["unobserved_after"] == pytest.approx(3.0)
    assert budget.parts["unobserved_gaps"] == pytest.approx(0.0, abs=1e-9)


def test_a_run_without_steps_has_no_budget():
    store = Store()
    store.hello(1, 0.0, {"pid": 5, "name": "x.py", "measured_by": "sampling"})
    assert time_budget(store.runs[1], 10.0, TH) is None


def test_a_freeze_inside_one_step_is_frozen_time_of_its_true_length():
    store = freeze_store(before_s=30.0, freeze_s=45.0, after_s=30.0)
    run = store.runs[1]
    assert max(run.steps.dur) > 45.0  # the freeze lies inside one step
    budget = time_budget(run, math.inf, TH)
    assert budget is not None
    assert_adds_up(budget)
    (freeze,) = budget.freezes
    assert freeze.resumed and abs(freeze.start - 32.0) <= 0.1 and abs(freeze.seconds - 45.0) <= 0.1
    assert budget.parts["frozen"] == pytest.approx(freeze.seconds)
    assert budget.parts["long_steps"] == pytest.approx(0.0, abs=1e-9)  # never counted twice


def test_the_report_keeps_a_freeze_that_resumed_in_its_findings_timeline_and_budget():
    store = freeze_store(before_s=30.0, freeze_s=45.0, after_s=30.0)
    report = build_report(store)
    v = report["verdict"]
    assert v["code"] == "stall.hang", report["timeline"]  # 45 s of 106: a material share, it heads the report
    assert v["evidence"]["resumed"] is True and v["evidence"]["frozen_share"] >= 0.4
    assert "froze for 45 s" in v["summary"] and "then resumed" in v["summary"]
    assert 44.0 <= v["held_s"] <= 46.0
    (hung,) = [e for e in report["timeline"] if e["code"] == "stall.hang"]
    assert abs(hung["t"] - 32.0) <= 0.5 and abs(hung["end"] - hung["t"] - 45.0) <= 0.5
    after = [e for e in report["timeline"] if e["t"] >= hung["end"]]
    assert after and all(e["code"] != "stall.hang" for e in after)  # it stepped again: judged again after it
    (run,) = report["runs"]
    tb = run["time_budget"]
    assert tb["freezes"] == [{"t": hung["t"], "length_s": pytest.approx(45.0, abs=0.1), "resumed": True}]
    assert tb["parts_s"]["frozen"] == pytest.approx(45.0, abs=0.1)
    assert sum(tb["parts_s"].values()) == pytest.approx(tb["wall_s"], rel=1e-3)


def test_a_short_freeze_in_a_long_run_is_kept_without_heading_the_report():
    store = freeze_store(before_s=600.0, freeze_s=32.0, after_s=300.0, step_s=0.1)
    report = build_report(store)
    assert report["verdict"]["code"] != "stall.hang"  # 32 s of 15 min: under freeze_headline_share
    (hang,) = [f for f in report["findings"] if f["code"] == "stall.hang"]
    assert hang["evidence"]["frozen_share"] < Thresholds().freeze_headline_share
    assert 31.0 <= hang["held_s"] <= 33.0
    assert [e["code"] for e in report["timeline"]].count("stall.hang") == 1
    assert report["runs"][0]["time_budget"]["parts_s"]["frozen"] == pytest.approx(32.0, abs=0.2)
    # The same freeze heads once the threshold says so.
    lower = build_report(store, Thresholds(freeze_headline_share=0.01))
    assert lower["verdict"]["code"] == "stall.hang"


def test_a_pause_under_the_hang_limit_is_a_long_step_not_a_freeze():
    store = freeze_store(before_s=60.0, freeze_s=20.0, after_s=20.0)
    budget = time_budget(store.runs[1], math.inf, TH)
    assert budget is not None
    assert_adds_up(budget)
    assert not budget.freezes and budget.parts["frozen"] == 0.0
    assert budget.parts["long_steps"] == pytest.approx(20.0, abs=0.1)
    assert budget.long_steps.keys() == {"unexplained"}


def test_live_the_freeze_counts_while_it_lasts():
    store = freeze_store(before_s=30.0, freeze_s=60.0, after_s=0.0, closed=False)
    run = store.runs[1]
    last = run.steps.end[-1]
    early = time_budget(run, last + 20.0, TH)  # 20 s without a step: not yet over the limit
    late = time_budget(run, last + 40.0, TH)
    assert early is not None and late is not None
    assert_adds_up(early)
    assert_adds_up(late)
    assert early.parts["frozen"] == 0.0 and early.parts["unobserved_after"] == pytest.approx(20.0, abs=0.6)
    (freeze,) = late.freezes
    assert not freeze.resumed and late.parts["frozen"] == pytest.approx(40.0, abs=0.6)


def test_every_freeze_is_kept_each_a_phase_and_all_listed_in_the_finding():
    store = freeze_store(before_s=30.0, freeze_s=40.0, after_s=60.0, second=(100.0, 35.0))
    report = build_report(store)
    hung = [e for e in report["timeline"] if e["code"] == "stall.hang"]
    assert [round(e["end"] - e["t"]) for e in hung] == [40, 35]
    (finding,) = [f for f in [report["verdict"], *report["findings"]] if f["code"] == "stall.hang"]
    listed = finding["evidence"]["freezes"]
    assert [(round(f["t"]), round(f["length_s"]), f["resumed"]) for f in listed] == [
        (round(hung[0]["t"]), 40, True),
        (round(hung[1]["t"]), 35, True),
    ]
    budget = report["runs"][0]["time_budget"]
    assert [round(f["length_s"]) for f in budget["freezes"]] == [40, 35]
    assert budget["parts_s"]["frozen"] == pytest.approx(75.0, abs=0.2)
    assert finding["held_s"] == pytest.approx(75.0, abs=1.0)  # both phases
