"""The input rules judge the train loader's own workers, each over the span it served it, and never advise more
workers than the host can run."""

from __future__ import annotations

from array import array

import pytest

from trainmon import protocol as P
from trainmon.diagnose import Thresholds, evaluate
from trainmon.diagnose.evidence import gather
from trainmon.diagnose.findings import Finding
from trainmon.diagnose.live.window import run_window
from trainmon.store.store import Store

NS = 1_000_000_000
TRAIN, VAL = 1, 2


def _store(
    *,
    cores: int,
    train_gens: list[tuple[float, list[int]]],
    val_gens: list[tuple[float, list[int]]] = (),  # type: ignore[assignment]
    procs: dict[int, tuple[float, float, float]],
    host_busy: float = 55.0,
    wait_ms: float = 40.0,
    step_ms: float = 50.0,
    seconds: int = 30,
    workers: int = 1,
    main_cpu: float = 20.0,
) -> Store:
    """A run whose train loader (``workers`` workers, not persistent) steps every ``step_ms`` and waits
    ``wait_ms`` of it; its sets of workers begin at ``train_gens``' times, the validation loader's at
    ``val_gens``'. ``procs``: pid → (from s, to s, CPU %), sampled every second while alive."""
    store = Store(cap=None, series_keep_s=None)
    store.hello(1, 0.0, {"pid": 10})
    for lid in (TRAIN, VAL):
        cfg = {"id": lid, "batch_size": 32, "num_workers": workers, "persistent_workers": False}
        store.info(1, 0.0, {"loader": cfg})
    for lid, gens in ((TRAIN, train_gens), (VAL, val_gens)):
        for t, pids in gens:
            store.info(1, t, {"workers": {"loader": lid, "pids": pids, "t_ns": int(t * NS)}})
    recs: list[int] = []
    t = 0.5
    while t < seconds:
        recs += [P.K_WAIT | TRAIN << 8, int(t * NS), int((t + wait_ms / 1e3) * NS), 0]
        t += step_ms / 1e3
        recs += [P.K_OPT, int(t * NS), int(t * NS), 0]
    store.events(1, t, array("q", recs))
    for s in range(seconds + 1):
        values = {"cpu.busy": host_busy, "cpu.iowait": 0.0, "cpu.cores": float(cores), "proc.10.cpu_pct": main_cpu}
        for pid, (a, b, cpu) in procs.items():
            if a <= s <= b:
                values[f"proc.{pid}.cpu_pct"] = cpu
                values[f"proc.{pid}.runq_wait_ms_s"] = 0.0
                values[f"proc.{pid}.state_main_R"] = cpu / 100  # the thread states the sampler sees
        store.sample(float(s), values)
    return store


def _input(store: Store, t: float = 30.0) -> Finding:
    return next(f for f in evaluate(store, t) if f.code.startswith("input."))


def test_a_cpu_bound_train_worker_is_not_averaged_with_an_idle_validation_worker():
    """The Lightning case: one train worker at 99 % of a core, one validation worker idling at 6 %, 2 cores."""
    store = _store(
        cores=2,
        train_gens=[(0.0, [101])],
        val_gens=[(0.0, [201])],
        procs={101: (0, 30, 99.0), 201: (0, 30, 6.0)},
    )
    f = _input(store)
    assert f.code == "input.too_few_workers"
    assert f.evidence["sub_cause"] == "cpu" and f.evidence["workers_cpu_pct_mean"] == pytest.approx(99.0)
    assert f.evidence["workers_loader"] == TRAIN and f.evidence["other_loader_workers"] == 1
    assert f.evidence["suggested_num_workers"] == 2 and f.evidence["num_workers_bound"] == "usable_cores"
    assert "raise num_workers from 1 to 2" in f.advice[0]


def test_workers_of_earlier_epochs_count_for_the_time_they_ran():
    """Non-persistent workers: a new process each epoch. Each counts over its own epoch, weighed by it."""
    store = _store(
        cores=8,
        train_gens=[(0.0, [101]), (8.0, [102]), (16.0, [103])],
        procs={101: (0, 8, 40.0), 102: (8, 16, 40.0), 103: (16, 30, 100.0)},
    )
    w = run_window(store.runs[1], 10.0, 30.0, min_steps=20)
    ev = gather(store, store.runs[1], 10.0, 30.0)
    by_pid = {e.pid: e for e in ev.workers}
    assert set(by_pid) == {102, 103} and w.loader_id == TRAIN  # 101 ended before the window
    # Samples at 10..16 and 17..30: the one at 16 covers the second before it, the set before's.
    assert by_pid[102].samples == 7 and by_pid[103].samples == 14
    assert ev.workers_mean("cpu_pct") == pytest.approx((7 * 40 + 14 * 100) / 21)
    # A rate adds up over the window: a worker present for 7 of the 21 samples adds 7/21 of its rate.
    assert ev.workers_sum("cpu_pct") == pytest.approx(40 * 7 / 21 + 100 * 14 / 21)


def test_reports_without_worker_times_judge_the_current_workers():
    """Agents that do not send ``t_ns`` (older ones, older recordings): the latest set, as before."""
    store = Store()
    store.hello(1, 0.0, {"pid": 10})
    store.info(1, 0.0, {"workers": {"loader": 1, "pids": [101, 102]}})
    store.info(1, 5.0, {"workers": {"loader": 1, "pids": [103]}})
    assert store.runs[1].loaders[1].workers_between(0.0, 30.0) == [(103, 0.0, 30.0)]


@pytest.mark.parametrize("cores", [1, 2, 8])
def test_a_latency_bound_worker_count_is_bounded_by_a_multiple_of_the_cores(cores):
    """Workers that mostly sleep (5 % of a core) while the loop waits 95 %: N / (1 − f) would be 20 per worker;
    the advice stops at 4 per usable core."""
    store = _store(cores=cores, train_gens=[(0.0, [101])], procs={101: (0, 30, 5.0)}, wait_ms=47.5)
    f = _input(store)
    th = Thresholds()
    assert f.code == "input.too_few_workers" and f.evidence["sub_cause"] == "latency"
    assert f.evidence["num_workers_bound"] == "latency_per_core"
    assert f.evidence["suggested_num_workers"] == min(20, int(th.latency_workers_per_core * cores))
    assert f.evidence["num_workers_cap"] == int(th.latency_workers_per_core * cores)


def test_latency_bound_workers_already_at_the_bound_are_not_told_to_grow():
    store = _store(
        cores=2, train_gens=[(0.0, list(range(101, 117)))], procs={p: (0, 30, 5.0) for p in range(101, 117)}, workers=16
    )
    f = _input(store)
    assert f.code == "input.too_few_workers" and f.evidence["suggested_num_workers"] == 8
    assert not any(a.startswith("raise num_workers") for a in f.advice)
    assert "do not raise num_workers beyond 16" in f.advice[0]


def test_cpu_bound_workers_as_many_as_the_cores_are_cpu_bound_not_too_few():
    """Two workers at 85 % on 2 cores, the host 80 % busy (below saturation): no core left to give."""
    store = _store(
        cores=2,
        train_gens=[(0.0, [101, 102])],
        procs={101: (0, 30, 85.0), 102: (0, 30, 85.0)},
        host_busy=80.0,
        workers=2,
    )
    f = _input(store)
    assert f.code == "input.workers_cpu" and f.evidence["suggested_num_workers"] == 2
    assert "there are already 2 workers for 2 usable cores" in f.summary


@pytest.mark.parametrize(
    ("cores", "main_cpu", "bound", "suggested"),
    [
        (1, 99, "usable_cores", 1),
        (2, 99, "usable_cores", 2),
        (16, 99, "usable_cores", 16),
        (2, 10, "latency_per_core", 8),
    ],
)
def test_main_process_advice_is_bounded_by_the_cores(cores, main_cpu, bound, suggested):
    """num_workers=0 and 95 % of each step loading: 19 workers would hide it, as many as the host can run."""
    store = _store(cores=cores, train_gens=[], procs={}, wait_ms=47.5, workers=0, main_cpu=main_cpu)
    f = _input(store)
    assert f.code == "input.main_process"
    assert f.evidence["num_workers_bound"] == bound and f.evidence["suggested_num_workers"] == suggested
    assert f"num_workers={suggested})" in f.advice[0]
