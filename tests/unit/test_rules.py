"""Each rule on constructed windows: clear cases, borderline cases, and competing causes."""

from __future__ import annotations

import math

import pytest

from testsupport.stores import uniform_store, worker_figs
from trainmon.diagnose import Thresholds, VerdictTracker, evaluate
from trainmon.diagnose.findings import Finding, headline, ranked
from trainmon.store.store import Store


def codes(store: Store, t: float | None = None, th: Thresholds | None = None) -> list[str]:
    return [f.code for f in evaluate(store, t if t is not None else store.last_t, th)]


def test_healthy_is_compute_bound_and_nothing_else():
    assert codes(uniform_store(wait_ms=1.0)) == ["ok.compute_bound"]


def test_wait_threshold_borderline():
    assert codes(uniform_store(wait_ms=2.4))[0] == "ok.compute_bound"  # 4.8 % ≤ 5 %
    assert codes(uniform_store(wait_ms=2.6, procs=worker_figs(95)))[0] == "input.too_few_workers"  # 5.2 %


def test_main_process():
    f = evaluate(uniform_store(wait_ms=30, workers=0), 10.0)[0]
    assert f.code == "input.main_process" and f.severity == "critical"
    assert "num_workers=" in f.advice[0] and f.evidence["num_workers"] == 0


def test_too_few_workers_cpu_bound_with_idle_cores_names_the_new_value():
    f = evaluate(uniform_store(wait_ms=25, procs=worker_figs(98), host={"cpu.busy": 35}), 10.0)[0]
    assert f.code == "input.too_few_workers"
    assert "raise num_workers from 2 to" in f.advice[0]
    assert int(f.advice[0].split(" to ")[1].split(":")[0]) > 2
    assert f.evidence["sub_cause"] == "cpu"


def test_workers_cpu_when_the_host_is_saturated():
    f = evaluate(uniform_store(wait_ms=25, procs=worker_figs(60, runq=450), host={"cpu.busy": 97}), 10.0)[0]
    assert f.code == "input.workers_cpu"  # a worker starved at 60 % is still CPU-bound


def test_cpu_saturated_host_alone_without_busy_workers_is_not_workers_cpu():
    f = evaluate(uniform_store(wait_ms=25, procs=worker_figs(5), host={"cpu.busy": 95}), 10.0)[0]
    assert f.code == "input.too_few_workers" and f.evidence["sub_cause"] == "latency"


def test_disk_io_from_d_state_and_disk_busy():
    store = uniform_store(
        wait_ms=25, procs=worker_figs(15, d=0.6, read=40), host={"disk.vda.util_pct": 96, "disk.vda.r_await_ms": 4.0}
    )
    f = evaluate(store, 10.0)[0]
    assert f.code == "input.io" and f.evidence["sub_cause"] == "disk" and "vda" in f.summary


def test_remote_reads_are_io_not_workers():
    f = evaluate(uniform_store(wait_ms=25, procs=worker_figs(12, rchar=30.0, read=0.0)), 10.0)[0]
    assert f.code == "input.io" and f.evidence["sub_cause"] == "remote"


def test_io_beats_cpu_when_both_could_apply():
    store = uniform_store(wait_ms=25, procs=worker_figs(90, d=0.4, read=50), host={"cpu.busy": 95})
    assert codes(store, 10.0)[0] == "input.io"


def test_checkpoint_stall_beats_input_and_periodic():
    ckpts = [(k * 1000.0 + 100, k * 1000.0 + 500) for k in range(10)]
    store = uniform_store(wait_ms=1, checkpoints=ckpts)
    c = codes(store, 10.0)
    assert c[0] == "stall.checkpoint"
    f = evaluate(store, 10.0)[0]
    assert f.severity == "critical" and f.evidence["checkpoints"] >= 5


def test_rare_short_checkpoint_is_not_a_stall():
    assert "stall.checkpoint" not in codes(uniform_store(wait_ms=1, checkpoints=[(5000, 5100)]), 10.0)


def test_periodic_long_steps():
    store = uniform_store(wait_ms=1, long_every=20, long_ms=600)
    f = evaluate(store, store.last_t)[0]
    assert f.code == "stall.periodic"
    assert f.evidence["long_steps"] >= 2 and f.evidence["period_s"] == pytest.approx(1.6, rel=0.1)


def test_one_long_step_is_not_periodic():
    assert "stall.periodic" not in codes(uniform_store(wait_ms=1, steps=200, long_every=150, long_ms=600))


def test_insufficient_data_until_enough_steps():
    assert codes(uniform_store(steps=8)) == ["insufficient_data"]
    assert codes(Store(), 0.0) == ["insufficient_data"]


def test_host_overhead_needs_an_idle_gpu_and_a_busy_main_thread():
    gpu = {"gpu.0.util": 35.0, "gpu.0.util_min": 0.0, "gpu.0.mem_used_mb": 1000.0, "gpu.0.mem_total_mb": 80000.0}
    busy_main = {10: {"cpu_pct": 99.0}}
    assert codes(uniform_store(wait_ms=1, host=gpu, procs=busy_main), 10.0)[0] == "host.overhead"
    assert (
        codes(uniform_store(wait_ms=1, host=gpu | {"gpu.0.util": 95.0}, procs=busy_main), 10.0)[0] == "ok.compute_bound"
    )
    # A GPU 35 % busy that drains to 0 within each second, no data wait, a quiet main thread: not "ok".
    assert codes(uniform_store(wait_ms=1, host=gpu, procs={10: {"cpu_pct": 30.0}}), 10.0)[0] == "host.sync"


def test_gpu_memory_pressure_and_throttling():
    gpu = {
        "gpu.0.util": 97.0,
        "gpu.0.mem_used_mb": 79000.0,
        "gpu.0.mem_total_mb": 80000.0,
        "gpu.0.throttle": float(0x4),  # the power cap, with the SM clock held well below its maximum
        "gpu.0.sm_clock_mhz": 1200.0,
        "gpu.0.sm_clock_max_mhz": 1980.0,
    }
    c = codes(uniform_store(wait_ms=1, host=gpu), 10.0)
    assert c[:2] == ["memory.gpu_pressure", "gpu.throttled"] and "ok.compute_bound" in c
    idle_only = gpu | {"gpu.0.throttle": 1.0, "gpu.0.mem_used_mb": 1000.0}
    assert codes(uniform_store(wait_ms=1, host=idle_only), 10.0) == ["ok.compute_bound"]


def test_host_memory_pressure():
    assert "memory.host_pressure" in codes(uniform_store(wait_ms=1, host={"mem.used_pct": 97.0}), 10.0)


def test_straggler_names_the_rank_and_its_own_sub_cause():
    job = {"job": {"MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"}, "world_size": 2}
    store = uniform_store(wait_ms=2, pid=10, run_id=1, hello=job | {"rank": 0}, workers=0)
    store = uniform_store(wait_ms=30, pid=11, run_id=2, hello=job | {"rank": 1}, workers=0, store=store)
    f = evaluate(store, 10.0)[0]
    assert f.code == "dist.straggler" and f.evidence["rank"] == 1
    assert f.evidence["sub_cause"] == "input.main_process" and "rank 1" in f.summary


def test_ranks_of_different_jobs_are_not_compared():
    store = uniform_store(wait_ms=2, pid=10, run_id=1, hello={"rank": 0, "job": {"MASTER_PORT": "1"}})
    store = uniform_store(wait_ms=30, pid=11, run_id=2, hello={"rank": 0, "job": {"MASTER_PORT": "2"}}, store=store)
    assert "dist.straggler" not in codes(store, 10.0)


def test_exposed_wait_hidden_by_gpu_work_is_not_starvation():
    store = uniform_store(wait_ms=10)
    run = store.runs[1]
    for k in range(len(run.steps)):
        run.steps.exposed[k] = 0.0001  # the GPU stayed busy through every wait
    assert codes(store, 10.0)[0] == "ok.compute_bound"


def test_verdict_hysteresis_holds_before_switching():
    a = Finding("input.main_process", "critical", "a")
    b = Finding("ok.compute_bound", "ok", "b")
    tr = VerdictTracker(hold_s=3.0)
    assert tr.update(0.0, [a]).code == "input.main_process"
    assert tr.update(1.0, [b]).code == "input.main_process"
    assert tr.update(2.0, [a]).code == "input.main_process"  # flicker back resets the candidate
    assert tr.update(3.0, [b]).code == "input.main_process"
    assert tr.update(5.9, [b]).code == "input.main_process"
    assert tr.update(6.1, [b]).code == "ok.compute_bound"
    assert [c for _, c in tr.changes] == ["input.main_process", "ok.compute_bound"]


def test_severity_outranks_priority():
    fs = [
        Finding("ok.compute_bound", "ok", ""),
        Finding("stall.periodic", "critical", ""),
        Finding("input.io", "warning", ""),
    ]
    assert headline(fs).code == "stall.periodic"


def test_of_two_parts_of_the_step_at_one_severity_the_larger_leads_in_their_places():
    receive = Finding("input.main_process", "critical", "", evidence={"data_wait_fraction": 0.21})
    own = Finding("host.loop_code", "critical", "", evidence={"data_wait_fraction": 0.21, "own_code_fraction": 0.3})
    hang = Finding("stall.hang", "critical", "")
    small = Finding("input.io", "warning", "", evidence={"data_wait_fraction": 0.5})
    assert [f.code for f in ranked([receive, own, small])] == ["host.loop_code", "input.main_process", "input.io"]
    assert headline([receive, own]).code == "host.loop_code"
    own.evidence["own_code_fraction"] = 0.2
    assert headline([own, receive]).code == "input.main_process"
    assert ranked([own, hang, receive])[0] is hang  # a finding that names no part of the step keeps its place


def test_thresholds_are_configurable():
    store = uniform_store(wait_ms=5, procs=worker_figs(95))  # 10 % wait
    assert codes(store, 10.0)[0] == "input.too_few_workers"
    assert codes(store, 10.0, Thresholds(wait_warning=0.15))[0] == "ok.compute_bound"


def test_host_to_device_copies_from_pageable_memory():
    gpu = {"gpu.0.util": 45.0, "gpu.0.pcie_rx_mb_s": 9000.0, "gpu.0.mem_used_mb": 1000.0, "gpu.0.mem_total_mb": 80000.0}
    store = uniform_store(wait_ms=1, host=gpu, procs={10: {"cpu_pct": 95.0}})
    f = evaluate(store, 10.0)[0]
    assert f.code == "input.host_to_device" and "pin_memory=True" in f.advice[0]
    store.runs[1].loaders[1].config["pin_memory"] = True
    assert codes(store, 10.0)[0] == "host.overhead"  # pinned already: the idle GPU is host overhead
    low_traffic = uniform_store(wait_ms=1, host=gpu | {"gpu.0.pcie_rx_mb_s": 50.0}, procs={10: {"cpu_pct": 95.0}})
    assert codes(low_traffic, 10.0)[0] == "host.overhead"


def test_irregular_hiccups_are_not_a_periodic_stall():
    # Contention spikes at irregular intervals, long and many enough to be a material share of the time.
    store = uniform_store(wait_ms=1, steps=300, long_at=(30, 37, 120, 126, 250), long_ms=600)
    end = store.runs[1].steps.end[-1]
    assert "stall.periodic" in codes(store, end, Thresholds(periodic_irregularity=math.inf))  # what the check stops
    assert "stall.periodic" not in codes(store, end)


def test_long_steps_spent_waiting_on_data_are_input_not_periodic():
    store = uniform_store(wait_ms=1, long_every=20, long_ms=600)
    run = store.runs[1]
    for k in range(len(run.steps)):
        if run.steps.end[k] - run.steps.start[k] > 0.3:
            run.steps.wait[k] = 0.55  # the long steps are data waits (an epoch restart, a slow shard)
    assert "stall.periodic" not in codes(store, store.last_t)


def test_block_reads_with_idle_workers_are_disk_io():
    f = evaluate(uniform_store(wait_ms=25, procs=worker_figs(20, d=0.05, read=30.0, rchar=31.0)), 10.0)[0]
    assert f.code == "input.io" and f.evidence["sub_cause"] == "disk"
