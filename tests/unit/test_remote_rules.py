"""The input rule on constructed windows: network waits make remote storage whatever rchar says; sleeps, locks and
held-open connections do not; host iowait counts as CPUs against the run's workers, on any host size."""

from __future__ import annotations

from testsupport.stores import WORKERS, uniform_store, worker_figs
from trainmon.diagnose import evaluate


def figs(cpu: float, **extra: float) -> dict:
    base = worker_figs(cpu)
    return {pid: {**f, **extra} for pid, f in base.items()}


def no_d_state(cpu: float) -> dict:
    """Workers whose thread states were not seen (another pid namespace, unreadable /proc)."""
    return {pid: {"cpu_pct": cpu} for pid in WORKERS}


def test_workers_waiting_on_sockets_are_remote_though_rchar_is_zero():
    store = uniform_store(wait_ms=25, procs=figs(9, net_wait=0.77, wait_unresolved=0.0, net_sockets=2, rchar_mb_s=0.0))
    f = evaluate(store, 10.0)[0]
    assert f.code == "input.io" and f.evidence["sub_cause"] == "remote"
    assert f.evidence["workers_net_wait"] == 0.77 and f.evidence["workers_rchar_mb_s"] == 0.0
    assert "77%" in f.summary and any("thread pool" in a for a in f.advice)


def test_below_the_net_wait_share_is_not_remote():
    store = uniform_store(wait_ms=25, procs=figs(9, net_wait=0.2, net_sockets=2))
    f = evaluate(store, 10.0)[0]
    assert f.code == "input.too_few_workers" and f.evidence["sub_cause"] == "latency"


def test_slow_per_sample_with_a_connection_held_is_latency_not_remote():
    """A worker that sleeps or waits on a lock while it keeps a keep-alive connection open."""
    store = uniform_store(wait_ms=25, procs=figs(3, net_wait=0.0, wait_unresolved=0.0, net_sockets=2))
    f = evaluate(store, 10.0)[0]
    assert f.code == "input.too_few_workers" and f.evidence["sub_cause"] == "latency"
    assert f.evidence["workers_net_sockets"] == 4


def test_unresolved_waits_are_told_but_never_called_remote():
    store = uniform_store(wait_ms=25, procs=figs(5, net_wait=0.0, wait_unresolved=0.9, net_sockets=1))
    f = evaluate(store, 10.0)[0]
    assert f.code == "input.too_few_workers" and f.evidence["workers_wait_unresolved"] == 0.9


def test_cpu_bound_workers_with_some_network_wait_are_not_remote():
    store = uniform_store(wait_ms=25, procs=figs(95, net_wait=0.3), host={"cpu.busy": 40})
    f = evaluate(store, 10.0)[0]
    assert f.code == "input.too_few_workers" and f.evidence["sub_cause"] == "cpu"


def test_disk_waits_beyond_network_ones_stay_disk():
    store = uniform_store(wait_ms=25, procs=figs(10, net_wait=0.3, state_D=0.6, read_mb_s=40))
    f = evaluate(store, 10.0)[0]
    assert f.code == "input.io" and f.evidence["sub_cause"] == "disk"


def test_network_filesystem_waits_in_d_state_are_remote():
    """NFS reads sleep in D: when the kernel says they wait on the network, they are remote, not the disk."""
    store = uniform_store(wait_ms=25, procs=figs(10, net_wait=0.7, state_D=0.65, read_mb_s=0.0, rchar_mb_s=20.0))
    f = evaluate(store, 10.0)[0]
    assert f.code == "input.io" and f.evidence["sub_cause"] == "remote"


def test_one_blocked_worker_on_64_cores_is_disk_bound():
    """1.6 % iowait on 64 CPUs is one CPU: the run's one worker blocked all the time."""
    store = uniform_store(wait_ms=25, workers=1, procs=no_d_state(5), host={"cpu.cores": 64, "cpu.iowait": 1.6})
    f = evaluate(store, 10.0)[0]
    assert f.code == "input.io" and f.evidence["sub_cause"] == "disk"
    assert f.evidence["host_iowait_cores"] == 1.02 and f.evidence["iowait_cores_for_workers"] == 0.3


def test_a_checkpoint_fsync_on_two_cores_is_not_the_workers():
    """50 % iowait on 2 CPUs is the main process's fsync (its thread in D), not the workers'."""
    procs = no_d_state(5) | {10: {"cpu_pct": 20.0, "state_main_D": 0.95}}
    store = uniform_store(wait_ms=25, procs=procs, host={"cpu.cores": 2, "cpu.iowait": 50.0})
    f = evaluate(store, 10.0)[0]
    assert f.code == "input.too_few_workers", f.summary


def test_iowait_does_not_overrule_measured_d_states():
    """Workers seen running or sleeping, never in D: the host's iowait belongs to someone else."""
    store = uniform_store(wait_ms=25, procs=figs(5, state_D=0.0), host={"cpu.cores": 2, "cpu.iowait": 60.0})
    assert evaluate(store, 10.0)[0].code == "input.too_few_workers"


def test_healthy_run_with_network_waiting_workers_is_not_flagged():
    """Workers that wait on the network but keep well ahead: nothing starves, nothing to say."""
    store = uniform_store(wait_ms=1, procs=figs(9, net_wait=0.9, net_sockets=2))
    assert [f.code for f in evaluate(store, 10.0)] == ["ok.compute_bound"]
