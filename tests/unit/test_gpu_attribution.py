"""Each run is judged on its own GPUs, and a GPU at its power limit at full clock is not "throttled".

Regressions: every GPU of the host was attributed to every run (utilisation averaged, PCIe summed over all
eight), and the software power-cap bit alone, which an A100/H100 at full load sets as a matter of course,
made `gpu.throttled`.
"""

from __future__ import annotations

import os

from testsupport.stores import uniform_store
from trainmon.diagnose.engine import evaluate
from trainmon.diagnose.evidence import gather, run_gpus
from trainmon.metrics import GPU, PROC, gpu_mask, mask_indices

H100_MAX_MHZ = 1980.0


def gpu_host(
    n: int, *, busy: dict[int, float], rx_mb_s: float = 150.0, throttle: int = 0, clock: float = H100_MAX_MHZ
) -> dict[str, float]:
    host: dict[str, float] = {}
    for g in range(n):
        host |= {
            GPU.key(g, "util"): busy.get(g, 3.0),
            GPU.key(g, "util_min"): busy.get(g, 3.0),
            GPU.key(g, "mem_used_mb"): 1000.0,
            GPU.key(g, "mem_total_mb"): 80_000.0,
            GPU.key(g, "pcie_rx_mb_s"): rx_mb_s,
            GPU.key(g, "throttle"): float(throttle),
            GPU.key(g, "sm_clock_mhz"): clock,
            GPU.key(g, "sm_clock_max_mhz"): H100_MAX_MHZ,
            GPU.key(g, "temp_c"): 60.0 + g,
        }
    return host


def two_ranks_on_eight_gpus():
    """rank 0 (pid 10) on GPU 2 at 90 %, rank 1 (pid 20) on GPU 5 at 40 %; the six other GPUs idle."""
    host = gpu_host(8, busy={2: 90.0, 5: 40.0})
    procs = {10: {"gpu_mask": gpu_mask([2]), "gpu_mem_mb": 1000.0}, 20: {"gpu_mask": gpu_mask([5])}}
    store = uniform_store(wait_ms=1, host=host, procs=procs, pid=10, workers=0, hello={"rank": 0, "world_size": 2})
    uniform_store(
        wait_ms=1, host=host, procs=procs, pid=20, run_id=2, workers=0, store=store, hello={"rank": 1, "world_size": 2}
    )
    return store


def test_mask_round_trip():
    assert mask_indices(gpu_mask([0, 3, 7])) == [0, 3, 7]
    assert mask_indices(float("nan")) == [] and mask_indices(0.0) == []


def test_each_rank_gets_only_its_own_gpu():
    store = two_ranks_on_eight_gpus()
    runs = {run.pid: run for run in store.runs.values()}
    ev0 = gather(store, runs[10], 0.0, 10.0)
    ev1 = gather(store, runs[20], 0.0, 10.0)
    assert ev0.gpus == [2] and ev0.gpu_util == 90.0 and ev0.gpu_temp_c == 62.0
    assert ev1.gpus == [5] and ev1.gpu_util == 40.0


def test_pcie_is_per_gpu_never_summed_over_the_host():
    store = two_ranks_on_eight_gpus()
    run = next(r for r in store.runs.values() if r.pid == 20)
    ev = gather(store, run, 0.0, 10.0)
    assert ev.gpu_pcie_rx_mb_s == 150.0  # eight GPUs at 150 MB/s summed to 1200: over the 1000 MB/s threshold
    codes = {f.code for f in evaluate(store, 10.0)}
    assert "input.host_to_device" not in codes


def test_without_per_process_gpus_a_multi_gpu_host_attributes_none_a_single_gpu_host_its_one():
    store = uniform_store(host=gpu_host(8, busy={0: 90.0}), workers=0)
    run = next(iter(store.runs.values()))
    assert run_gpus(store, run, list(range(8))) == []
    single = uniform_store(host=gpu_host(1, busy={0: 90.0}), workers=0)
    assert gather(single, next(iter(single.runs.values())), 0.0, 10.0).gpus == [0]


def _throttle_codes(throttle: int, clock: float) -> set[str]:
    store = uniform_store(wait_ms=1, host=gpu_host(1, busy={0: 97.0}, throttle=throttle, clock=clock), workers=0)
    return {f.code for f in evaluate(store, 10.0)}


def test_power_cap_at_full_clock_is_not_throttling():
    assert "gpu.throttled" not in _throttle_codes(0x4, H100_MAX_MHZ)  # at the power limit, clock at its maximum
    assert "gpu.throttled" not in _throttle_codes(0x4 | 0x1, 0.9 * H100_MAX_MHZ)


def test_power_cap_with_the_clock_held_down_is_throttling_and_says_by_how_much():
    store = uniform_store(wait_ms=1, host=gpu_host(1, busy={0: 97.0}, throttle=0x4, clock=1200.0), workers=0)
    (finding,) = [f for f in evaluate(store, 10.0) if f.code == "gpu.throttled"]
    assert finding.evidence["reasons"] == ["power cap"]
    assert finding.evidence["sm_clock_mhz"] == 1200 and finding.evidence["sm_clock_max_mhz"] == 1980
    assert finding.evidence["temp_c"] == 60
    assert finding.summary.endswith("(power cap): SM clock 1200 of 1980 MHz, 60 °C"), finding.summary


def test_thermal_and_hardware_slowdown_always_count():
    assert "gpu.throttled" in _throttle_codes(0x40, H100_MAX_MHZ)
    assert "gpu.throttled" in _throttle_codes(0x8, H100_MAX_MHZ)


def test_the_monitor_writes_each_process_gpus_as_a_mask():
    assert PROC.parse(PROC.key(4242, "gpu_mask")) == ("4242", "gpu_mask")


def test_the_monitor_records_which_gpus_each_tracked_process_holds():
    from testsupport.fake_pynvml import GIB, FakeNvml
    from trainmon.monitor import Monitor

    me, other = os.getpid(), os.getppid()  # real processes: NVML's pids are this namespace's
    nvml = FakeNvml(4)
    nvml.devices[1].processes = [(me, GIB)]
    nvml.devices[3].processes = [(me, 2 * GIB), (other, GIB)]  # other: not part of the training
    monitor = Monitor(listen=False, nvml_module=nvml)
    try:
        monitor.track(me, "main")
        values = monitor.sample_sources(1.0)
    finally:
        monitor.stop()
    assert mask_indices(values[PROC.key(me, "gpu_mask")]) == [1, 3]
    assert values[PROC.key(me, "gpu_mem_mb")] == 3 * 1024
    assert PROC.key(other, "gpu_mask") not in values


def test_report_runs_and_prometheus_name_each_runs_own_gpus():
    from types import SimpleNamespace

    from trainmon.export.prometheus import MonitorCollector
    from trainmon.monitor import Monitor
    from trainmon.report import build_report

    store = two_ranks_on_eight_gpus()
    assert [(r["rank"], r["gpus"]) for r in build_report(store)["runs"]] == [(0, [2]), (1, [5])]

    monitor = Monitor(listen=False, sources=[])
    monitor.store = store
    statuses = monitor.run_statuses(10.0)
    collector = MonitorCollector(
        SimpleNamespace(store=store, last_snapshot=SimpleNamespace(runs=statuses, verdict=None, findings=[]))
    )
    (family,) = [f for f in collector.collect() if f.name == "trainmon_run_gpu"]
    assert sorted((s.labels["rank"], s.labels["gpu"]) for s in family.samples) == [("0", "2"), ("1", "5")]


def test_a_cpu_run_beside_a_gpu_job_gets_no_gpu():
    host = gpu_host(1, busy={0: 90.0})
    store = uniform_store(host=host, procs={77: {"gpu_mask": gpu_mask([0])}}, workers=0)  # pid 77: another job
    run = next(iter(store.runs.values()))
    assert run_gpus(store, run, [0]) == []
