"""Usable cores in the diagnosis: a run's own affinity and cgroup quota (else the monitor's, else the host's) set
`cores` and the busy share the input rules read; runs of one host drawing on the same cores share the idle ones."""

from __future__ import annotations

import pytest

from testsupport.stores import uniform_store, worker_figs
from trainmon.diagnose import evaluate
from trainmon.diagnose.live.host_window import host_window

POD = {"cpu_usable": 4.0, "cpu_affinity": 64.0, "cpu_quota_v2": 4.0, "cpu_usable_busy": 50.0, "cpu_budget_id": 7.0}


def test_a_4_core_pod_on_a_64_core_node_is_judged_on_its_4_cores():
    host = {"cpu.cores": 64, "cpu.busy": 10.0}
    store = uniform_store(wait_ms=40, procs=worker_figs(98) | {10: POD}, host=host)
    run = store.runs[1]
    h = host_window(store, 0.0, 10.0, run)
    assert (h.cores, h.cores_source, h.cores_of, h.host_cores) == (4, "cgroup v2 cpu.max", "run", 64)
    assert h.cpu_busy == 50.0 and h.host_cpu_busy == 10.0 and h.idle_cores == pytest.approx(2.0)
    f = evaluate(store, 10.0)[0]
    assert f.code == "input.too_few_workers"
    assert f.evidence["cores"] == 4 and f.evidence["cores_source"] == "cgroup v2 cpu.max"
    assert f.evidence["cores_usable"] == 4.0 and f.evidence["host_cores"] == 64
    assert f.evidence["suggested_num_workers"] == 4  # 2 idle of 4 usable: +2, never the node's 57 idle cores


def test_a_saturated_quota_is_saturated_on_an_idle_node():
    procs = worker_figs(95) | {10: POD | {"cpu_usable_busy": 97.0}}
    store = uniform_store(wait_ms=40, procs=procs, host={"cpu.cores": 64, "cpu.busy": 8.0})
    f = evaluate(store, 10.0)[0]
    assert f.code == "input.workers_cpu" and f.evidence["host_cpu_busy_pct"] == 97.0


def test_affinity_alone_limits():
    pinned = {"cpu_usable": 2.0, "cpu_affinity": 2.0, "cpu_usable_busy": 25.0, "cpu_budget_id": 3.0}
    store = uniform_store(wait_ms=40, procs=worker_figs(98) | {10: pinned}, host={"cpu.cores": 16})
    h = host_window(store, 0.0, 10.0, store.runs[1])
    assert (h.cores, h.cores_source) == (2, "affinity") and h.cpu_busy == 25.0


def test_the_monitors_own_limits_stand_in_for_a_run_without_figures():
    host = {"cpu.cores": 32, "cpu.busy": 5.0, "cpu.usable": 2.5, "cpu.affinity": 32, "cpu.quota_v1": 2.5}
    store = uniform_store(wait_ms=40, procs=worker_figs(98), host=host | {"cpu.usable_busy": 60.0})
    h = host_window(store, 0.0, 10.0, store.runs[1])
    assert (h.cores, h.cores_source, h.cores_of) == (2, "cgroup v1 cpu.cfs_quota_us", "monitor")
    assert h.cores_usable == 2.5 and h.idle_cores == pytest.approx(1.0)


def test_an_unlimited_host_keeps_the_host_figures():
    store = uniform_store(wait_ms=40, procs=worker_figs(98) | {10: {"cpu_usable": 8.0, "cpu_affinity": 8.0}})
    h = host_window(store, 0.0, 10.0, store.runs[1])
    assert (h.cores, h.cores_source, h.cpu_busy) == (8, "host", 40.0)


def two_ranks(same_cores: bool) -> dict:
    host = {"cpu.cores": 8, "cpu.busy": 50.0}
    store = uniform_store(
        wait_ms=40, procs=worker_figs(98) | {10: {"cpu_budget_id": 1.0}}, host=host, hello={"host": "n1"}
    )
    other = {20: {"cpu_budget_id": 1.0 if same_cores else 2.0}}
    uniform_store(
        wait_ms=40, procs=worker_figs(98) | other, host=host, pid=20, run_id=2, hello={"host": "n1"}, store=store
    )
    return {f.evidence["run"]: f for f in evaluate(store, 10.0) if f.code == "input.too_few_workers"}


def test_two_ranks_on_one_host_share_its_idle_cores():
    """8 cores, 4 idle, two ranks: 2 more workers each, not 4 each."""
    findings = two_ranks(same_cores=True)
    assert len(findings) == 2
    for f in findings.values():
        assert f.evidence["cores_shared_by_runs"] == 2 and f.evidence["idle_cores_share"] == 2.0
        assert f.evidence["suggested_num_workers"] == 4  # from 2


def test_ranks_pinned_to_different_cores_do_not_share():
    for f in two_ranks(same_cores=False).values():
        assert f.evidence["cores_shared_by_runs"] == 1 and f.evidence["suggested_num_workers"] == 6
