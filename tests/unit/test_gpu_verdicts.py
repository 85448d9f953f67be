"""With a GPU present, "ok" needs the run's GPUs busy; otherwise the cause is named: host.sync, gpu.small_work,
gpu.no_tensor_cores. Figures come through the fake NVML's series names; GPM exists on Hopper and newer only."""

from __future__ import annotations

from testsupport.stores import uniform_store
from trainmon.diagnose.engine import evaluate
from trainmon.metrics import GPU


def one_gpu(util: float, util_min: float, **gpm: float) -> dict[str, float]:
    host = {
        GPU.key(0, "util"): util,
        GPU.key(0, "util_min"): util_min,
        GPU.key(0, "mem_used_mb"): 20_000.0,
        GPU.key(0, "mem_total_mb"): 80_000.0,
    }
    host |= {GPU.key(0, f"gpm.{name}"): value for name, value in gpm.items()}
    return host


def findings(host: dict[str, float], wait_ms: float = 1.0, main_cpu: float = 60.0) -> dict[str, object]:
    store = uniform_store(wait_ms=wait_ms, host=host, procs={10: {"cpu_pct": main_cpu}}, workers=0)
    return {f.code: f for f in evaluate(store, 10.0)}


def test_a_busy_gpu_with_busy_sms_and_tensor_pipes_is_ok():
    got = findings(one_gpu(96.0, 90.0, sm_active=85.0, tensor_active=40.0))
    assert list(got) == ["ok.compute_bound"]


def test_a_half_idle_gpu_that_drains_every_second_is_host_sync_not_ok():
    got = findings(one_gpu(20.0, 0.0))
    assert "ok.compute_bound" not in got
    f = got["host.sync"]
    assert f.severity == "critical" and f.evidence["gpu_util_min_pct"] == 0.0
    assert findings(one_gpu(40.0, 2.0))["host.sync"].severity == "warning"
    assert any(".item()" in a for a in f.advice)


def test_a_half_idle_gpu_that_never_drains_is_not_called_sync():
    got = findings(one_gpu(40.0, 35.0))
    assert "host.sync" not in got and "ok.compute_bound" not in got


def test_a_data_starved_loop_is_an_input_verdict_not_sync():
    got = findings(one_gpu(30.0, 0.0), wait_ms=30.0)
    assert "host.sync" not in got and next(iter(got)).startswith("input.")


def test_nvml_busy_but_sms_mostly_idle_is_small_work():
    got = findings(one_gpu(95.0, 80.0, sm_active=12.0, tensor_active=5.0))
    assert next(iter(got)) == "gpu.small_work" and "ok.compute_bound" not in got
    assert got["gpu.small_work"].evidence["sm_active_pct"] == 12.0


def test_sms_busy_tensor_pipes_idle_is_no_tensor_cores():
    got = findings(one_gpu(97.0, 92.0, sm_active=80.0, tensor_active=0.0))
    assert "gpu.no_tensor_cores" in got
    assert any("bfloat16" in a for a in got["gpu.no_tensor_cores"].advice)


def test_without_gpm_only_nvml_utilisation_decides():
    assert list(findings(one_gpu(96.0, 90.0))) == ["ok.compute_bound"]
    assert "gpu.small_work" not in findings(one_gpu(96.0, 90.0))
