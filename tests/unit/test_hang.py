"""stall.hang on constructed runs: the threshold max(30 s, 10 × p95 step), what counts as the training being
alive and active, the evidence (stacks the monitor dumped), and the verdict shown at once."""

from __future__ import annotations

from testsupport.stores import HUNG_PID, hung_dump, hung_store
from trainmon.diagnose import Thresholds, VerdictTracker, evaluate
from trainmon.diagnose.findings import CODES, IMMEDIATE, Finding
from trainmon.store.store import Store


def last_step(store: Store) -> float:
    return store.runs[1].steps.end[-1]


def codes_at(store: Store, t: float, th: Thresholds | None = None) -> list[str]:
    return [f.code for f in evaluate(store, t, th)]


def hang_at(store: Store, t: float, th: Thresholds | None = None) -> Finding | None:
    return next((f for f in evaluate(store, t, th) if f.code == "stall.hang"), None)


def test_stall_hang_is_the_first_code_by_priority_and_shown_at_once():
    assert next(iter(CODES)) == "stall.hang"
    assert "stall.hang" in IMMEDIATE


def test_no_step_for_longer_than_30_s_while_alive_is_a_critical_hang():
    store = hung_store()
    end = last_step(store)
    assert codes_at(store, end + 29.0) == ["ok.compute_bound"]
    f = hang_at(store, end + 31.0)
    assert f is not None and f.severity == "critical"
    assert codes_at(store, end + 31.0) == ["stall.hang"]  # the stale window of the stopped run is judged no more
    assert f.evidence["silent_s"] == 31.0 and f.evidence["limit_s"] == 30.0
    assert f.evidence["step_time_ms_p95"] == 50.0 and f.evidence["main_cpu_pct"] == 0.5
    assert "no step for 31 s" in f.summary and f"pid {HUNG_PID}" in f.summary


def test_the_limit_is_ten_times_the_p95_step_when_that_is_longer():
    store = hung_store(steps_s=60.0, step_ms=5000.0, silent_s=70.0)  # five-second steps: the limit is 50 s
    end = last_step(store)
    assert hang_at(store, end + 40.0) is None
    f = hang_at(store, end + 51.0)
    assert f is not None and f.evidence["limit_s"] == 50.0


def test_the_thresholds_are_configurable():
    store = hung_store(silent_s=20.0)
    end = last_step(store)
    assert hang_at(store, end + 12.0) is None
    assert hang_at(store, end + 12.0, Thresholds(hang_min_s=10.0)) is not None


def test_a_brief_pause_below_the_limit_is_never_a_hang():
    store = hung_store(steps_s=60.0, silent_s=5.0, pause=(20.0, 25.0), dump_after_s=None)
    run = store.runs[1]
    assert max(run.steps.dur) > 24.0  # the pause is there: one step of 25 s
    for t in range(int(store.first_t), int(store.last_t) + 1):
        assert "stall.hang" not in codes_at(store, float(t)), t


def test_a_run_that_ended_is_not_hung():
    store = hung_store(silent_s=45.0)
    end = last_step(store)
    store.closed(1, end + 40.0, "lost")
    assert hang_at(store, end + 35.0) is not None  # replayed: it lived until its close
    assert hang_at(store, end + 41.0) is None
    store2 = hung_store(silent_s=45.0)
    store2.info(1, end + 1.0, {"bye": "exit"})  # the goodbye of a process that exits
    assert hang_at(store2, end + 35.0) is None


def test_garbage_collections_while_the_loop_is_stuck_are_no_sign_of_life():
    store = hung_store(during_silence="gc")
    assert len(store.runs[1].gc) > 50
    assert hang_at(store, last_step(store) + 31.0) is not None


def test_batches_of_another_loader_are_progress_not_a_hang():
    store = hung_store(during_silence="eval")  # a long evaluation without optimizer steps
    assert hang_at(store, last_step(store) + 40.0) is None


def test_the_stacks_dumped_for_the_hang_name_where_the_main_thread_waits():
    store = hung_store()
    end = last_step(store)
    before = hang_at(store, end + 31.5)  # fired; the monitor is still dumping
    assert before is not None and before.evidence["stack_dumps"] == 0 and "main_thread_in" not in before.evidence
    f = hang_at(store, end + 33.0)
    assert f is not None and f.evidence["stack_dumps"] == 1
    assert f.evidence["main_thread_in"] == "MetricsLog.log (trainmon/demo/stalls.py:37)"
    assert f.summary.endswith("main thread in MetricsLog.log (trainmon/demo/stalls.py:37)")
    # A dump for another verdict, or from before the silence, is not this hang's evidence.
    other = hung_store(dump_after_s=None)
    other.info(1, end + 32.0, {"stacks": hung_dump(end + 32.0, reason="input.io")})
    other.info(1, end - 5.0, {"stacks": hung_dump(end - 5.0)})
    g = hang_at(other, end + 33.0)
    assert g is not None and g.evidence["stack_dumps"] == 0


def test_a_run_in_another_pid_namespace_has_no_stacks():
    store = hung_store(dump_after_s=None, hello={"pid_namespace": "unmapped", "peer_pid": None})
    f = hang_at(store, last_step(store) + 31.0)
    assert f is not None and f.evidence["stacks"] == "n/a (other pid namespace)"
    assert "main_cpu_pct" not in f.evidence  # its pid names another process here: never read


def test_the_hang_is_shown_without_the_hold_other_verdicts_need():
    tracker = VerdictTracker(hold_s=3.0)
    ok = Finding("ok.compute_bound", "ok", "fine")
    periodic = Finding("stall.periodic", "critical", "long steps")
    hang = Finding("stall.hang", "critical", "no step")
    assert tracker.update(0.0, [ok]).code == "ok.compute_bound"
    assert tracker.update(1.0, [periodic]).code == "ok.compute_bound"  # held back
    assert tracker.update(2.0, [hang]).code == "stall.hang"  # at once
    assert tracker.changes[-1] == (2.0, "stall.hang")


def test_a_report_heads_with_the_hang_however_short_it_was_beside_the_training():
    from trainmon.report import build_report

    store = hung_store(steps_s=120.0, silent_s=40.0)  # two minutes of healthy steps, then 40 s frozen (hung 10)
    report = build_report(store)
    v = report["verdict"]
    assert v["code"] == "stall.hang" and v["severity"] == "critical"
    assert v["evidence"]["main_thread_in"] == "MetricsLog.log (trainmon/demo/stalls.py:37)"
    assert v["evidence"]["resumed"] is False  # it never stepped again: heads however short a share it took
    # The freeze is kept from the last step on: the 40 s without one, of which the rule held the last 10.
    assert v["evidence"]["silent_s"] >= 39.0 and 39.0 <= v["held_s"] <= 41.0
    hung = [e for e in report["timeline"] if e["code"] == "stall.hang"]
    healthy = [e for e in report["timeline"] if e["code"] == "ok.compute_bound"]
    assert len(hung) == 1 and hung[0]["t"] >= healthy[-1]["end"]
    assert [f["code"] for f in report["findings"]] == ["ok.compute_bound"]


def test_a_report_of_a_run_that_paused_below_the_limit_has_no_hang():
    from trainmon.report import build_report

    report = build_report(hung_store(steps_s=60.0, silent_s=5.0, pause=(20.0, 25.0), dump_after_s=None))
    assert "stall.hang" not in {e["code"] for e in report["timeline"]} | {report["verdict"]["code"]}


def test_the_episodes_of_a_hang_that_ended_with_its_process():
    from trainmon.diagnose.rules import hang_episodes

    store = hung_store(silent_s=45.0)
    run = store.runs[1]
    end = last_step(store)
    store.closed(1, end + 40.0, "lost")
    ((a, b),) = hang_episodes(run, store.first_t, store.last_t, Thresholds())
    assert abs(a - (end + 30.0)) <= 0.5 and b == end + 40.0
