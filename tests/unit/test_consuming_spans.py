"""A train loader's workers are judged over the time the loop consumed that loader: not during evaluation, a
checkpoint or a paused iterator, when they fill their prefetch queue and idle. And a worker is called latency-bound
only when it was seen waiting (its thread blocked), never for a low CPU figure alone."""

from __future__ import annotations

from array import array

import pytest

from trainmon import protocol as P
from trainmon.diagnose import Thresholds, evaluate
from trainmon.diagnose.evidence import gather
from trainmon.diagnose.live.spans import Coverage, idle_spans
from trainmon.diagnose.live.window import run_window
from trainmon.store.store import Store

NS = 1_000_000_000
WORKER = 101


def lightning_like(*, seconds: int = 40, eval_every: int = 3, cores: int = 2, train_state: float = 1.0) -> Store:
    """One persistent train worker that computes flat out while the loop trains (50 ms steps, 40 ms of them
    waiting on it) and idles through a 1 s validation after every ``eval_every`` seconds of training (a step
    with no data wait: the validation runs between two train batches). Process figures every second: the worker
    at 100 % of a core and running (``train_state``) in training seconds, at 0 % and asleep in validation ones."""
    store = Store(cap=None, series_keep_s=None)
    store.hello(1, 0.0, {"pid": 10})
    store.info(1, 0.0, {"loader": {"id": 1, "batch_size": 32, "num_workers": 1, "persistent_workers": True}})
    store.info(1, 0.0, {"workers": {"loader": 1, "pids": [WORKER], "t_ns": 0}})
    recs: list[int] = []
    evals: list[int] = []
    t = 0.0
    second = 0
    while second < seconds:
        if second % (eval_every + 1) == eval_every:  # a validation second: one step that is all evaluation
            evals.append(second)
            t = second + 1.0
            recs += [P.K_WAIT | 1 << 8, int(t * NS), int((t + 0.04) * NS), 0]
            t += 0.05
            recs += [P.K_OPT, int(t * NS), int(t * NS), 0]
        else:
            while t < second + 1 - 1e-9:
                recs += [P.K_WAIT | 1 << 8, int(t * NS), int((t + 0.04) * NS), 0]
                t += 0.05
                recs += [P.K_OPT, int(t * NS), int(t * NS), 0]
        second += 1
    store.events(1, t, array("q", recs))
    for s in range(1, seconds + 1):
        evaluating = (s - 1) in evals  # the sample at s covers the second before it
        store.sample(
            float(s),
            {
                "cpu.busy": 60.0,
                "cpu.iowait": 0.0,
                "cpu.cores": float(cores),
                "proc.10.cpu_pct": 20.0,
                f"proc.{WORKER}.cpu_pct": 0.0 if evaluating else 100.0,
                f"proc.{WORKER}.state_main_R": 0.0 if evaluating else train_state,
                f"proc.{WORKER}.runq_wait_ms_s": 0.0,
            },
        )
    return store


def test_validation_steps_are_idle_spans_of_the_train_loader() -> None:
    store = lightning_like()
    run = store.runs[1]
    w = run_window(run, 0.0, 40.0, min_steps=0)
    holes = idle_spans(w, Thresholds().long_step_factor)
    # Every validation second is one long step that did not wait on data: a hole of its own.
    assert len(holes) == 9 and all(0.99 <= b - a <= 1.06 for a, b in holes), holes
    assert all(abs(a - round(a)) < 1e-6 for a, _ in holes)


def test_a_busy_persistent_worker_is_judged_over_training_not_its_lifetime() -> None:
    """Over its lifetime the worker averages 75 % of a core (idle a quarter of the time, through validation);
    while the loop took its batches it ran flat out. The verdict reads the latter: CPU-bound, never more
    workers than the usable cores."""
    store = lightning_like(eval_every=1)  # validation every other second: 50 % over the lifetime
    run = store.runs[1]
    w = run_window(run, 0.0, 40.0, min_steps=0)
    lifetime = gather(store, run, w.t0, w.last_end, loader_id=1)
    assert lifetime.workers_mean("cpu_pct") < 70  # what a lifetime average would have judged: not busy
    over = gather(store, run, w.t0, w.last_end, loader_id=1, idle=idle_spans(w, Thresholds().long_step_factor))
    assert over.workers_mean("cpu_pct") == pytest.approx(100.0)
    assert over.workers_mean("blocked") == pytest.approx(0.0)
    assert over.idle_s > 15
    (f,) = [f for f in evaluate(store, 40.0, Thresholds(window_s=40.0)) if f.code.startswith("input.")]
    assert f.evidence["sub_cause"] == "cpu" and f.evidence["workers_cpu_pct_mean"] == 100.0, f
    assert f.evidence["num_workers_bound"] == "usable_cores" and f.evidence["suggested_num_workers"] <= 2, f
    assert f.evidence["idle_s_left_out"] > 15


def test_low_cpu_without_thread_states_is_not_called_latency() -> None:
    """A worker at 10 % of a core whose thread states were not seen: nothing shows it waits, so the advice stays
    within the usable cores."""
    store = _steady(cpu=10.0, state_r=None)
    f = _input(store)
    assert f.code == "input.too_few_workers" and f.evidence["sub_cause"] == "unknown", f.summary
    assert f.evidence["num_workers_bound"] == "usable_cores" and f.evidence["suggested_num_workers"] <= 2
    assert "latency" not in f.summary


def test_a_worker_seen_blocked_is_latency_bound() -> None:
    store = _steady(cpu=10.0, state_r=0.1)
    f = _input(store)
    assert f.code == "input.too_few_workers" and f.evidence["sub_cause"] == "latency"
    assert f.evidence["workers_blocked"] == 0.9 and f.evidence["num_workers_bound"] == "latency_per_core"
    assert "blocked 90% of the time" in f.summary


def test_workers_ahead_of_a_loop_that_runs_through_its_waits_are_not_too_few() -> None:
    """The worker sleeps (waiting for indices: it is ahead) while the training thread runs through its data
    waits: the wait is the main process receiving each batch. More workers would not shorten it."""
    store = _steady(cpu=8.0, state_r=0.05, wait_ms=6.0, main_state_r=1.0)
    f = _input(store)
    assert f.code == "input.main_process" and f.evidence["sub_cause"] == "receive", f.summary
    assert not any(a.startswith("raise num_workers") for a in f.advice), f.advice
    assert "keep num_workers at 1" in f.advice[0]


def test_a_loop_blocked_in_its_waits_waits_on_its_workers() -> None:
    store = _steady(cpu=8.0, state_r=0.05, wait_ms=25.0, main_state_r=0.5)
    f = _input(store)
    assert f.code == "input.too_few_workers" and f.evidence["sub_cause"] == "latency"


def test_a_worker_waiting_on_its_index_queue_is_ahead_and_a_modest_wait_is_healthy() -> None:
    """A cache that warmed: the worker has its batches ready and waits to be asked for more (its main thread blocked
    on the index queue's pipe 90 % of the looks); the loop waits 8 % of each step taking them in. Not latency, not too
    few workers: the compute is the limit."""
    store = _steady(cpu=8.0, state_r=0.05, wait_ms=4.0, queue_wait=0.9)
    codes = [f.code for f in evaluate(store, 20.0)]
    assert "input.too_few_workers" not in codes and codes[0] == "ok.compute_bound", codes
    (ok,) = [f for f in evaluate(store, 20.0) if f.code == "ok.compute_bound"]
    assert ok.evidence["workers_ahead"] == 0.9 and "ahead" in ok.summary


def test_a_large_wait_beside_workers_ahead_is_the_main_process_taking_batches_in() -> None:
    store = _steady(cpu=8.0, state_r=0.05, wait_ms=25.0, main_state_r=0.5, queue_wait=0.9)
    f = _input(store)
    assert f.code == "input.main_process" and f.evidence["sub_cause"] == "receive", f.summary
    assert "index queue 90%" in f.summary and "keep num_workers at 1" in f.advice[0]


def test_a_worker_blocked_elsewhere_than_its_index_queue_is_latency_bound() -> None:
    store = _steady(cpu=8.0, state_r=0.05, wait_ms=25.0, main_state_r=0.5, queue_wait=0.0)
    f = _input(store)
    assert f.code == "input.too_few_workers" and f.evidence["sub_cause"] == "latency"
    assert f.evidence["workers_ahead"] == 0.0


def test_coverage_weighs_each_sample_by_its_time_outside_the_holes() -> None:
    cov = Coverage([(1.5, 2.0), (3.0, 4.0)])
    assert cov.weights([1.0, 2.0, 3.0, 4.0, 5.0], 0.0) == [1.0, 0.5, 1.0, 0.0, 1.0]
    assert Coverage([(0.0, 10.0)]).weights([1.0, 2.0], 0.0) == [0.0, 0.0]  # none outside: all weigh nothing
    assert not Coverage([])


def _steady(
    *,
    cpu: float,
    state_r: float | None,
    wait_ms: float = 40.0,
    main_state_r: float | None = None,
    queue_wait: float | None = None,
) -> Store:
    """One worker, 50 ms steps waiting ``wait_ms`` each for 20 s, on 2 cores with room; ``queue_wait``: the share of
    looks that found the worker's main thread waiting on its index queue."""
    store = Store(cap=None, series_keep_s=None)
    store.hello(1, 0.0, {"pid": 10})
    store.info(1, 0.0, {"loader": {"id": 1, "batch_size": 32, "num_workers": 1, "persistent_workers": True}})
    store.info(1, 0.0, {"workers": {"loader": 1, "pids": [WORKER], "t_ns": 0}})
    recs: list[int] = []
    t = 0.0
    while t < 20.0:
        recs += [P.K_WAIT | 1 << 8, int(t * NS), int((t + wait_ms / 1e3) * NS), 0]
        t += 0.05
        recs += [P.K_OPT, int(t * NS), int(t * NS), 0]
    store.events(1, t, array("q", recs))
    for s in range(1, 21):
        values = {
            "cpu.busy": 40.0,
            "cpu.iowait": 0.0,
            "cpu.cores": 2.0,
            "proc.10.cpu_pct": 60.0,
            f"proc.{WORKER}.cpu_pct": cpu,
            f"proc.{WORKER}.runq_wait_ms_s": 0.0,
        }
        if state_r is not None:
            values[f"proc.{WORKER}.state_main_R"] = state_r
        if main_state_r is not None:
            values["proc.10.state_main_R"] = main_state_r
        if queue_wait is not None:
            values[f"proc.{WORKER}.queue_wait"] = queue_wait
        store.sample(float(s), values)
    return store


def _input(store: Store):
    (f,) = [f for f in evaluate(store, 20.0) if f.code.startswith("input.")]
    return f


def test_weights_at_reuses_the_weights_of_the_same_instants_only():
    cov = Coverage([(1.5, 2.0), (3.0, 4.0)])
    times = array("d", [1.0, 2.0, 3.0, 4.0])
    first = cov.weights_at(times, 0.0)
    assert first == cov.weights(times, 0.0)
    assert cov.weights_at(array("d", times), 0.0) is first  # another series sampled at the same instants
    # Same ends, count and start, other instants in between: worked out afresh, not taken from the memo.
    other = array("d", [1.0, 1.2, 3.0, 4.0])
    assert cov.weights_at(other, 0.0) == cov.weights(other, 0.0) != first


def test_last_known_is_the_latest_measured_value_in_the_window():
    store = Store()
    for t, v in ((1.0, 5.0), (2.0, 6.0), (3.0, float("nan")), (4.0, float("nan"))):
        store.sample(t, {"x": v})
    assert store.last_known("x", 0.0, 4.0) == 6.0
    assert store.last_known("x", 0.0, 1.5) == 5.0
    assert store.last_known("x", 1.0, 1.0) == 5.0  # both ends inclusive
    assert store.last_known("x", 2.5, 4.0) != store.last_known("x", 2.5, 4.0)  # only nan there
    assert store.last_known("missing", 0.0, 4.0) != store.last_known("missing", 0.0, 4.0)
