"""The agent tells the monitor which CUDA device its training thread uses (index and UUID), once, from that
thread; the monitor matches the UUID to NVML's devices, so a run is attributed its GPU even where NVML's pids
match none of the monitor's (a container without --pid=host)."""

from __future__ import annotations

import threading

import pytest

from testsupport.stores import uniform_store
from trainmon import protocol as P
from trainmon.agent import _cuda
from trainmon.diagnose.evidence import gather, run_gpus
from trainmon.metrics import GPU


@pytest.fixture
def cuda(cuda_rig):
    return cuda_rig[1]


def test_the_probe_reports_the_training_threads_device_once(cuda):
    cuda.device = 3
    told: list[tuple[dict, str]] = []
    probe = _cuda.ExposedProbe(cuda, on_device=lambda d: told.append((d, threading.current_thread().name)))
    for _ in range(3):
        pair = probe.begin()
        assert pair is not None
        probe.end(pair, P.K_WAIT | 1 << 8, 0, 1)
    assert told == [({"index": 3, "uuid": cuda.uuid, "name": "Fake H100"}, threading.current_thread().name)]


def test_a_failing_identity_lookup_costs_nothing_but_the_identity(cuda, monkeypatch):
    def broken(index):
        raise RuntimeError("no properties")

    monkeypatch.setattr(cuda, "get_device_properties", broken, raising=False)
    told: list[dict] = []
    probe = _cuda.ExposedProbe(cuda, on_device=told.append)
    assert probe.begin() is not None and probe.enabled and told == []


def test_clean_info_keeps_a_typed_cuda_device_only():
    good = P.clean_info({"cuda_device": {"index": 1, "uuid": "abc", "name": "H100", "x": 1}})
    assert good == {"cuda_device": {"index": 1, "uuid": "abc", "name": "H100"}}
    assert P.clean_info({"cuda_device": {"index": "1"}}) == {}
    assert P.clean_info({"cuda_device": "cuda:0"}) == {}


def _eight_gpus(store, uuids):
    store.meta(0.0, {"gpus": [{"index": i, "name": "H100", "uuid": f"GPU-{u}"} for i, u in enumerate(uuids)]})


def test_the_monitor_attributes_the_gpu_by_uuid_where_pids_do_not_match():
    uuids = [f"{i:08x}-aaaa-bbbb-cccc-dddddddddddd" for i in range(8)]
    host = {GPU.key(g, "util"): 90.0 if g == 6 else 3.0 for g in range(8)}
    store = uniform_store(host=host, workers=0)
    _eight_gpus(store, uuids)
    run = next(iter(store.runs.values()))
    assert run_gpus(store, run, list(range(8))) == []  # no per-process list, several GPUs: none
    store.info(run.id, 1.0, P.clean_info({"cuda_device": {"index": 0, "uuid": uuids[6].upper(), "name": "H100"}}))
    assert run_gpus(store, run, list(range(8))) == [6]
    assert gather(store, run, 0.0, 10.0).gpu_util == 90.0


def test_an_unmapped_run_is_still_matched_by_uuid():
    store = uniform_store(
        host={GPU.key(g, "util"): 50.0 for g in range(2)}, workers=0, hello={"pid_namespace": "unmapped"}
    )
    _eight_gpus(store, ["u0", "u1"])
    run = next(iter(store.runs.values()))
    assert run.proc_pid is None and run_gpus(store, run, [0, 1]) == []
    store.info(run.id, 1.0, {"cuda_device": {"index": 0, "uuid": "u1", "name": ""}})
    assert run_gpus(store, run, [0, 1]) == [1]
