"""Exposed GPU idle: CUDA event pairs around DataLoader waits (agent), late records placed by time (store),
the report's ``exposed_wait_fraction`` and the verdicts' evidence. All on CPU, through the fake ``torch.cuda``
of testsupport/fake_cuda.py: no GPU behaviour is observed here, only the agent's use of the CUDA API."""

from __future__ import annotations

import json
import math
import os
from array import array

import pytest
import torch
from torch.utils.data import DataLoader
from torch.utils.data import dataloader as dl

from testsupport.fake_cuda import MS, FakeCuda, ManualClock, install
from testsupport.procs import PY, child_env, report_json, start_recorder, stop
from trainmon import protocol as P
from trainmon.agent import _cuda, _hot
from trainmon.agent._torch_hooks import Registry, TorchHooks
from trainmon.diagnose.live.window import run_window
from trainmon.diagnose.rules.common import base_evidence
from trainmon.report.runs import run_summary
from trainmon.store.run import Run

WORKLOAD = os.path.join(os.path.dirname(__file__), "..", "workloads", "fake_cuda_train.py")


# ---------------------------------------------------------------- agent


class _It:
    """Stands for a DataLoader iterator: each ``next`` advances the clock by the wait it is given."""

    _trainmon_tag = P.K_WAIT | 1 << 8

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.waits: list[int] = []

    def __call__(self, _self: object) -> int:
        self.clock.advance(self.waits.pop(0) if self.waits else 0)
        return 0


@pytest.fixture
def rig(cuda_rig):
    return cuda_rig


def _records() -> list[tuple[int, int, int, int]]:
    buf = _hot.swap_buffer()
    return [tuple(buf[i : i + 4]) for i in range(0, len(buf), 4)]  # type: ignore[misc]


def _exposed(recs):
    return [r for r in recs if r[0] & 0xFF == P.K_EXPOSED]


def _measuring_next(clock, cuda, **kw):
    it = _It(clock)
    probe = _cuda.ExposedProbe(cuda, **kw)
    return it, probe, _hot.wrap_next_cuda(it, probe)


def test_exposed_is_the_wait_minus_the_queued_work(rig):
    clock, cuda = rig
    it, probe, nxt = _measuring_next(clock, cuda)
    cuda.gpu.launch(30 * MS)  # the queue holds 30 ms of kernels when the wait starts
    it.waits = [50 * MS, 1 * MS]
    t0 = clock()
    nxt(it)  # a 50 ms wait: its pair is pending (resolved at a later wait, never blocking)
    assert not _exposed(_records())
    nxt(it)  # the next wait resolves it with query() + elapsed_time()
    (rec,) = _exposed(_records())
    assert rec == (P.K_EXPOSED | 1 << 8, t0, t0 + 50 * MS, 20 * MS)
    assert probe.measured == 1 and cuda.calls["events"] == 2  # one pair, reused


def test_a_wait_hidden_behind_queued_work_exposes_nothing(rig):
    clock, cuda = rig
    it, _probe, nxt = _measuring_next(clock, cuda)
    cuda.gpu.launch(80 * MS)
    it.waits = [50 * MS]
    nxt(it)
    clock.advance(40 * MS)  # the host computes; the queue drains meanwhile
    nxt(it)
    (rec,) = _exposed(_records())
    assert rec[3] == 0


def test_pairs_resolve_only_once_complete_and_without_blocking(rig):
    clock, cuda = rig
    it, probe, nxt = _measuring_next(clock, cuda)
    cuda.gpu.launch(500 * MS)  # a deep queue: B completes long after the wait
    it.waits = [10 * MS, 10 * MS, 10 * MS]
    for _ in range(3):
        nxt(it)
    assert not _exposed(_records()) and probe.stats()["exposed_pending"] == 3
    assert cuda.calls["elapsed_time"] == 0  # never asked before query() said complete
    clock.advance(600 * MS)
    nxt(it)
    assert [r[3] for r in _exposed(_records())] == [0, 0, 0]


def test_no_measurement_while_a_cuda_graph_is_captured(rig):
    clock, cuda = rig
    it, probe, nxt = _measuring_next(clock, cuda)
    cuda.capturing = True
    it.waits = [5 * MS, 5 * MS]
    nxt(it)
    nxt(it)
    assert cuda.calls["record"] == 0 and probe.capturing == 2
    assert [r[0] & 0xFF for r in _records()] == [P.K_WAIT, P.K_WAIT]


def test_pool_exhaustion_skips_and_counts(rig):
    clock, cuda = rig
    it, probe, nxt = _measuring_next(clock, cuda, pool=2)
    cuda.gpu.launch(10_000 * MS)  # nothing completes
    for _ in range(5):
        nxt(it)
    assert probe.stats() == {"exposed_measured": 0, "exposed_skipped": 3, "exposed_capturing": 0, "exposed_pending": 2}
    assert cuda.calls["events"] == 4  # bounded: two pairs, never more
    assert sum(r[0] & 0xFF == P.K_WAIT for r in _records()) == 5  # every wait is still timed


def test_every_nth_wait(rig, monkeypatch):
    clock, cuda = rig
    monkeypatch.setenv(_cuda.EVERY_ENV, "3")
    it, probe, nxt = _measuring_next(clock, cuda, every=_cuda.every_from_env())
    for _ in range(9):
        it.waits = [MS]
        nxt(it)
    clock.advance(MS)
    nxt(it)
    assert (probe.measured, probe.stats()["exposed_pending"]) == (3, 1)  # waits 1, 4, 7 resolved; 10 pending
    assert len(_exposed(_records())) == 3
    for raw, want in (("", 1), ("0", 0), ("x", 1), ("-2", 0), ("8", 8)):
        monkeypatch.setenv(_cuda.EVERY_ENV, raw)
        assert _cuda.every_from_env() == want


def test_stop_iteration_returns_the_pair(rig):
    clock, cuda = rig
    probe = _cuda.ExposedProbe(cuda, pool=1)

    def done(_self):
        raise StopIteration

    nxt = _hot.wrap_next_cuda(done, probe)
    for _ in range(3):
        with pytest.raises(StopIteration):
            nxt(_It(clock))
    assert probe.skipped == 0 and [r[0] & 0xFF for r in _records()] == [P.K_ITER_END] * 3


class _Items(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> int:
        return i


@pytest.fixture
def hooks():
    sent: list[dict] = []
    h = TorchHooks(Registry(sent.append))
    h.install()
    _hot.reset_buffer()
    yield h
    h.uninstall()
    _hot.reset_buffer()


def test_cpu_only_jobs_keep_the_plain_wrapper(hooks, monkeypatch):
    """CUDA not initialised: poll_cuda swaps nothing, the hot path is the CPU wrapper and never asks CUDA."""
    plain = dl._BaseDataLoaderIter.__next__
    cuda = install(monkeypatch, FakeCuda(initialized=False))
    for _ in range(3):
        hooks.poll_cuda()
    assert dl._BaseDataLoaderIter.__next__ is plain and hooks.probe is None
    assert list(DataLoader(_Items(), batch_size=None)) == list(range(6))
    assert cuda.calls == {"record": 0, "query": 0, "elapsed_time": 0, "events": 0}
    monkeypatch.setattr(torch, "cuda", None)  # torch without cuda at all
    hooks.poll_cuda()
    assert dl._BaseDataLoaderIter.__next__ is plain


def test_cuda_initialised_later_switches_the_wrapper_once(hooks, monkeypatch):
    cuda = install(monkeypatch, FakeCuda(initialized=False))
    hooks.poll_cuda()
    cuda.initialized = True  # the job initialised CUDA
    hooks.poll_cuda()
    measuring = dl._BaseDataLoaderIter.__next__
    assert measuring is not hooks._plain_next and hooks.probe is not None
    hooks.poll_cuda()
    assert dl._BaseDataLoaderIter.__next__ is measuring
    assert list(DataLoader(_Items(), batch_size=None)) == list(range(6))
    assert cuda.calls["record"] == 13  # A and B around each of the six batches; A of the 7th, which ended the epoch
    hooks.uninstall()
    assert not hasattr(dl._BaseDataLoaderIter.__next__, "__trainmon_original__")


def test_exposed_every_zero_keeps_the_plain_wrapper(hooks, monkeypatch):
    monkeypatch.setenv(_cuda.EVERY_ENV, "0")
    install(monkeypatch, FakeCuda())
    hooks.poll_cuda()
    assert dl._BaseDataLoaderIter.__next__ is hooks._plain_next


def test_a_failing_cuda_call_disables_the_path_and_training_goes_on(hooks, monkeypatch, capfd):
    monkeypatch.setenv("TRAINMON_DEBUG", "1")
    cuda = install(monkeypatch, FakeCuda())
    hooks.poll_cuda()
    cuda.fail_record = True
    assert list(DataLoader(_Items(), batch_size=None)) == list(range(6))
    assert dl._BaseDataLoaderIter.__next__ is hooks._plain_next  # back to the CPU wrapper for good
    assert cuda.calls["record"] == 1 and not hooks.probe.enabled  # type: ignore[union-attr]
    recs = _records()
    assert sum(r[0] & 0xFF == P.K_WAIT for r in recs) == 6 and not _exposed(recs)
    err = capfd.readouterr().err
    assert err.count("exposed GPU idle off") == 1


# ---------------------------------------------------------------- store


def _run() -> Run:
    run = Run(1, {"pid": 1}, 0.0, cap=None)
    run.apply_info({"loader": {"id": 1, "batch_size": 8}})
    run.apply_info({"loader": {"id": 2, "batch_size": 8}})
    return run


def _steps(n: int, wait_ms: int = 50, step_ms: int = 60, t: int = 10**9) -> tuple[list[tuple], int]:
    """Optimizer-driven steps: a train wait, then the optimizer step ``step_ms`` after the wait began."""
    recs = []
    for _ in range(n):
        recs.append((P.K_WAIT | 1 << 8, t, t + wait_ms * MS, 0))
        t += step_ms * MS
        recs.append((P.K_OPT, t, t, 0))
    return recs, t


def _batch(recs) -> array:
    return array("q", [x for r in recs for x in r])


def test_a_late_exposed_record_joins_the_step_that_held_its_wait():
    run = _run()
    recs, _ = _steps(12)
    run.apply_events(_batch(recs))
    waits = [r for r in recs if r[0] & 0xFF == P.K_WAIT]
    # Arriving two batches later, out of order, for waits of steps 3 and 7 (and one for an eval loader).
    late = [
        (P.K_EXPOSED | 1 << 8, waits[7][1], waits[7][2], 20 * MS),
        (P.K_EXPOSED | 1 << 8, waits[3][1], waits[3][2], 5 * MS),
        (P.K_EXPOSED | 2 << 8, waits[5][1], waits[5][2], 5 * MS),
        (P.K_EXPOSED | 1 << 8, waits[3][1], waits[3][2], 10**15),  # clamped to the wait
    ]
    run.apply_events(_batch(late))
    exposed = run.steps.exposed.tolist()
    # Steps close at optimizer steps: the first wait's step is step 0 in the table.
    assert [k for k, e in enumerate(exposed) if e == e] == [3, 7]
    assert exposed[7] == pytest.approx(0.020) and exposed[3] == pytest.approx(0.005 + 0.050)
    assert run.steps.exposed_wait[3] == pytest.approx(0.100) and run.steps.exposed_wait[7] == pytest.approx(0.050)


def test_an_exposed_record_of_the_step_being_built_waits_for_its_close():
    run = _run()
    recs, t = _steps(3)
    run.apply_events(_batch(recs))
    run.apply_events(_batch([(P.K_WAIT | 1 << 8, t, t + 40 * MS, 0), (P.K_EXPOSED | 1 << 8, t, t + 40 * MS, 15 * MS)]))
    assert len(run.steps) == 3
    run.apply_events(_batch([(P.K_OPT, t + 60 * MS, t + 60 * MS, 0)]))
    assert run.steps.exposed[3] == pytest.approx(0.015) and run.steps.exposed_wait[3] == pytest.approx(0.040)


def test_exposed_records_leave_the_column_fold_as_it_was():
    """A CUDA batch (an exposed record after every step) gives the same steps as the batch without them."""
    recs, _ = _steps(40)
    with_exposed = []
    for r in recs:
        with_exposed.append(r)
        if r[0] & 0xFF == P.K_WAIT:
            with_exposed.append((P.K_EXPOSED | 1 << 8, r[1], r[2], 7 * MS))
    a, b = _run(), _run()
    a.apply_events(_batch(recs))
    b.apply_events(_batch(with_exposed))
    for col in ("start", "end", "dur", "wait", "samples", "warm", "loader"):
        assert getattr(a.steps, col) == getattr(b.steps, col), col
    assert b.records == a.records + 40
    assert all(e == pytest.approx(0.007) for e in b.steps.exposed.tolist()[1:])


# ---------------------------------------------------------------- report and verdicts


def _measured_run(every: int = 1) -> Run:
    """60 ms steps of which 50 ms wait on data; 30 ms of each wait left the GPU idle (every Nth wait measured)."""
    run = _run()
    recs, _ = _steps(40)
    waits = [r for r in recs if r[0] & 0xFF == P.K_WAIT]
    late = [(P.K_EXPOSED | 1 << 8, w[1], w[2], 30 * MS) for w in waits[::every]]
    run.apply_events(_batch(recs))
    run.apply_events(_batch(late))
    return run


def test_report_exposed_wait_fraction():
    summary = run_summary(_measured_run())
    assert summary["data_wait_fraction"] == pytest.approx(50 / 60, abs=1e-3)
    assert summary["exposed_wait_fraction"] == pytest.approx(30 / 60, abs=1e-3)
    assert list(summary).index("exposed_wait_fraction") == list(summary).index("data_wait_fraction") + 1


def test_report_estimates_from_the_measured_waits_only():
    """Every third wait measured: the others are unknown, not 0 exposed."""
    assert run_summary(_measured_run(every=3))["exposed_wait_fraction"] == pytest.approx(30 / 60, abs=1e-3)


def test_report_exposed_wait_fraction_is_null_without_cuda():
    run = _run()
    run.apply_events(_batch(_steps(20)[0]))
    assert run_summary(run)["exposed_wait_fraction"] is None


def test_verdict_evidence_gives_the_raw_and_the_exposed_share():
    run = _measured_run()
    t1 = run.steps.end[-1]
    ev = base_evidence(run_window(run, t1 - 20, t1))
    assert ev["data_wait_fraction"] == pytest.approx(50 / 60, abs=1e-3)
    assert ev["exposed_wait_fraction"] == pytest.approx(30 / 60, abs=1e-3)
    plain = _run()
    plain.apply_events(_batch(_steps(20)[0]))
    assert "exposed_wait_fraction" not in base_evidence(run_window(plain, 0, 1e9))


# ---------------------------------------------------------------- end to end


def test_record_of_a_fake_cuda_training_reports_the_share_that_left_the_gpu_idle(tmp_path):
    """A real ``trainmon record`` and a real training whose ``torch.cuda`` is the fake: each 50 ms wait meets
    20 ms of queued work, so 30 ms of it leaves the GPU idle; step ≈ 60 ms (50 ms wait + 10 ms host)."""
    addr, rec = str(tmp_path / "m.sock"), str(tmp_path / "run.tmrec")
    recorder = start_recorder(addr, rec)
    try:
        import subprocess

        res = subprocess.run(
            [PY, WORKLOAD, "60", "50", "30", "10"],
            env=child_env(TRAINMON_ADDR=addr),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        own = json.loads(res.stdout.strip().splitlines()[-1])
        import time

        time.sleep(1.0)
    finally:
        stop(recorder)
    assert own["attached"] and own["agent"]["exposed_measured"] >= 40, own
    (run,) = report_json(rec)["runs"]
    assert run["data_wait_fraction"] == pytest.approx(own["wait_fraction"], abs=0.05), (run, own)
    assert run["exposed_wait_fraction"] == pytest.approx(own["exposed_fraction"], abs=0.05), (run, own)
    assert run["exposed_wait_fraction"] < run["data_wait_fraction"] - 0.2
    assert math.isclose(own["exposed_fraction"], 0.5, abs_tol=0.1)
    assert run["device"] == "cuda:0"  # the agent's cuda_device message, through the wire and the recording


def test_the_live_window_estimates_the_exposed_share_from_the_measured_waits_only():
    """Every other wait measured (sampling): 10 ms of each measured 20 ms wait left the GPU idle, steps last 50 ms.
    The share is 10/20 of a 40 % wait share = 0.2, not the 0.1 that counting skipped waits as hidden would give."""
    run = Run(1, {"pid": 1}, 0.0)
    recs: list[int] = []
    for i in range(60):
        t0 = i * 50 * MS
        recs += [P.K_WAIT | 1 << 8, t0, t0 + 20 * MS, 0, P.K_OPT, t0 + 50 * MS, t0 + 50 * MS, 0]
        if i % 2:
            recs += [P.K_EXPOSED | 1 << 8, t0, t0 + 20 * MS, 10 * MS]
    run.apply_events(array("q", recs))
    w = run_window(run, 0.0, 3.0)
    assert w.wait_fraction == pytest.approx(0.4)
    assert w.exposed_fraction == pytest.approx(0.2, abs=1e-9)
    assert run_summary(run)["exposed_wait_fraction"] == pytest.approx(0.2, abs=1e-3)
