"""input.epoch_restart: what non-persistent workers cost at every new iterator, as a share of wall time, over the
live window when restarts are frequent and over the whole run when they are rare."""

from __future__ import annotations

from array import array

import pytest

from trainmon import protocol as P
from trainmon.diagnose import Thresholds, evaluate
from trainmon.report import build_report
from trainmon.report.runs import run_summary
from trainmon.store.store import Store

NS = 1_000_000_000


def _epochs(
    *,
    epochs: int,
    batches: int,
    workers: int = 2,
    persistent: bool = False,
    startup_s: float = 0.3,
    create_s: float = 0.01,
    shutdown_s: float = 0.02,
    wait_s: float = 0.002,
    step_s: float = 0.05,
    start: float = 1.0,
) -> list[int]:
    """Records of a loop over ``epochs`` epochs of ``batches`` batches: each new iterator takes ``create_s`` to
    make; its workers' first batches wait ``startup_s`` (the first) and ``wait_s`` + 0.01 (the others'), the rest
    ``wait_s``; the last ``__next__`` of an epoch shuts the workers down in ``shutdown_s``. With persistent
    workers only the first epoch starts them."""
    recs: list[int] = []
    t = start
    for e in range(epochs):
        fresh = e == 0 or not persistent
        recs += [P.K_ITER_START | 1 << 8, int(t * NS), int((t + create_s) * NS), workers]
        t += create_s
        for b in range(batches):
            w = wait_s
            if fresh and b == 0:
                w = startup_s
            elif fresh and b < workers:
                w = wait_s + 0.01
            recs += [P.K_WAIT | 1 << 8, int(t * NS), int((t + w) * NS), 0]
            t += w + step_s
            recs += [P.K_OPT, int(t * NS), int(t * NS), 0]
        end = shutdown_s if not persistent else 0.0001
        recs += [P.K_ITER_END | 1 << 8, int(t * NS), int((t + end) * NS), 0]
        t += end
    return recs


def _store(recs: list[int], *, persistent: bool = False, workers: int = 2, chunk: int | None = None) -> Store:
    store = Store(cap=None, series_keep_s=None)
    store.hello(1, 0.0, {"pid": 10})
    cfg = {"id": 1, "batch_size": 32, "num_workers": workers, "persistent_workers": persistent}
    store.info(1, 0.0, {"loader": cfg | {"start_method": "fork"}})
    step = chunk * 4 if chunk else len(recs)
    end = recs[-2] / NS
    for i in range(0, len(recs), step):
        part = recs[i : i + step]
        store.events(1, part[-2] / NS, array("q", part))
    for s in range(int(end) + 2):
        store.sample(float(s), {"cpu.busy": 30.0, "cpu.cores": 8.0, "cpu.iowait": 0.0})
    return store


def test_a_restart_costs_shutdown_start_up_and_first_batches_beyond_a_normal_wait():
    store = _store(_epochs(epochs=4, batches=40))
    r = store.runs[1].restarts
    assert r.total == 3 and len(r) == 3  # the first iterator is start-up, not a restart
    # shutdown 0.02 + creation 0.01 + (0.3 − 0.002) + (0.012 − 0.002)
    assert list(r.cost) == pytest.approx([0.338] * 3, abs=1e-6)
    assert r.between(0, 1e9) == (3, pytest.approx(3 * 0.338))


def test_restarts_are_the_same_however_the_records_arrive():
    """Regular steps are folded in whole columns: the first batches of new workers are never folded away."""
    recs = _epochs(epochs=6, batches=60)
    whole = _store(recs).runs[1]
    for chunk in (3, 17, 101):
        run = _store(recs, chunk=chunk).runs[1]
        assert list(run.restarts.cost) == pytest.approx(list(whole.restarts.cost))
        assert list(run.steps.warm) == list(whole.steps.warm)


def test_persistent_workers_never_restart():
    store = _store(_epochs(epochs=6, batches=40, persistent=True), persistent=True)
    assert store.runs[1].restarts.total == 0
    t = store.last_t
    assert not [f for f in evaluate(store, t) if f.code == "input.epoch_restart"]


def test_frequent_restarts_are_judged_over_the_live_window():
    """Epochs of 2 s, each restart costing 0.34 s: about 15 % of wall time, the steady steps themselves healthy."""
    store = _store(_epochs(epochs=20, batches=40))
    t = store.last_t
    findings = evaluate(store, t)
    f = findings[0]
    assert f.code == "input.epoch_restart" and f.severity == "warning"
    ev = f.evidence
    assert ev["judged_over"] == "window" and ev["restarts"] >= 8
    assert ev["restart_cost_ms_mean"] == pytest.approx(338, abs=1)
    assert 0.12 < ev["restart_share"] < 0.18
    assert ev["persistent_workers"] is False and ev["start_method"] == "fork" and ev["loaders"] == [1]
    assert "persistent_workers=True" in f.advice[0]
    assert "ok.compute_bound" in [g.code for g in findings]  # steady steps exclude every new worker's first batch


def test_critical_share_and_the_spawn_start_method_in_the_advice():
    recs = _epochs(epochs=20, batches=10, startup_s=1.5)
    store = Store(cap=None, series_keep_s=None)
    store.hello(1, 0.0, {"pid": 10})
    cfg = {"id": 1, "batch_size": 32, "num_workers": 2, "persistent_workers": False, "start_method": "spawn"}
    store.info(1, 0.0, {"loader": cfg})
    store.events(1, recs[-2] / NS, array("q", recs))
    f = next(f for f in evaluate(store, recs[-2] / NS) if f.code == "input.epoch_restart")
    assert f.severity == "critical" and f.evidence["start_method"] == "spawn"
    assert any("spawn start method" in a and "re-imports" in a for a in f.advice)


def test_a_rare_restart_is_weighed_against_the_whole_run():
    """One epoch every 10 minutes: in a 20 s window its restart would look huge; over the run it is what it is."""
    cheap = _store(_epochs(epochs=3, batches=12000, startup_s=3.0))  # 3 s every ~600 s: 0.5 %
    run = cheap.runs[1]
    (t_restart, *_), cost = run.restarts.t, run.restarts.cost[0]
    assert cost == pytest.approx(3.04, abs=0.01)
    for t in (t_restart + 5, t_restart + 15, cheap.last_t):
        assert not [f for f in evaluate(cheap, t) if f.code == "input.epoch_restart"]
    costly = _store(_epochs(epochs=3, batches=12000, startup_s=60.0))  # epochs of 624 s, each first batch 60 s
    t_restart = costly.runs[1].restarts.t[0]
    f = next(f for f in evaluate(costly, t_restart + 70) if f.code == "input.epoch_restart")
    assert f.evidence["judged_over"] == "run" and f.evidence["restarts_in_run"] == 1
    assert f.evidence["restart_share"] == pytest.approx(60.04 / (t_restart + 70 - 1.0), rel=1e-3)  # from its start
    summary = run_summary(costly.runs[1])
    assert summary["epoch_restarts"] == 2
    assert summary["epoch_restart_s"] == pytest.approx(2 * 60.04, abs=0.05)
    wall = costly.runs[1].last_seen - 1.0
    assert summary["epoch_restart_fraction"] == pytest.approx(2 * 60.04 / wall, rel=1e-3)


def test_thresholds_decide():
    store = _store(_epochs(epochs=20, batches=40))
    th = Thresholds(epoch_restart_share=0.5)
    assert not [f for f in evaluate(store, store.last_t, th) if f.code == "input.epoch_restart"]


def test_the_report_weighs_rare_restarts_over_the_run():
    """A report judges the whole recording: an epoch every ~11 minutes whose workers take 60 s to start is 6 % of
    it; one whose workers take 3 s is not a finding."""
    costly = build_report(_store(_epochs(epochs=3, batches=12000, startup_s=60.0)))
    assert costly["verdict"]["code"] == "input.epoch_restart", costly["timeline"]
    assert costly["verdict"]["evidence"]["restarts"] == 2 and costly["runs"][0]["epoch_restarts"] == 2
    cheap = build_report(_store(_epochs(epochs=3, batches=12000, startup_s=3.0)))
    codes = {cheap["verdict"]["code"]} | {f["code"] for f in cheap["findings"]} | {e["code"] for e in cheap["timeline"]}
    assert "input.epoch_restart" not in codes and cheap["runs"][0]["epoch_restarts"] == 2
