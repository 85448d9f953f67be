"""GpuSource against a fake pynvml (testsupport/fake_pynvml.py), plus one check of the real NVML on a GPU machine.

Per-tick cost is measured by benchmarks/gpu_source_cost.py, not here (no timed assertions in tests). One long
module: every test drives the same fake through the same source, section by section of what the source reads.
"""

from __future__ import annotations

import logging
import math
import random

import pytest

from testsupport import fake_pynvml as fk
from testsupport.fake_pynvml import GIB, FakeNvml
from trainmon.metrics import GPM_METRIC_IDS, GPU_NVML_FIELDS
from trainmon.sources.gpu.gpu_source import GpuSource


def here(pid: int) -> bool:
    """The pids these tests list are taken as the monitor's own (tests/unit/test_gpu_container.py: the host's)."""
    return True


def make(n: int = 2, **kw) -> tuple[FakeNvml, GpuSource]:
    fake = FakeNvml(n, **kw)
    return fake, GpuSource(fake, pid_exists=here)


def isnan(v: float) -> bool:
    return isinstance(v, float) and math.isnan(v)


def assert_all_floats(out: dict[str, float]) -> None:
    assert all(isinstance(v, float) for v in out.values()), out


# ---------------------------------------------------------------- values and units


def test_values_flow_through_with_unit_conversions():
    fake = FakeNvml(1)
    fake.devices[0].__dict__.update(
        util_gpu=93,
        util_mem=17,
        mem_total=80 * GIB,
        mem_used=12 * GIB + 512 * 1024**2,
        power_mw=456_789,
        power_limit_mw=700_000,
        temp_c=72,
        sm_clock=1755,
        mem_clock=2619,
        sm_clock_max=1980,
        pcie_rx_kb=3 * 1024 * 1024,
        pcie_tx_kb=1536,
        clock_reasons=fk.nvmlClocksEventReasonSwPowerCap | fk.nvmlClocksEventReasonSwThermalSlowdown,
    )
    src = GpuSource(fake, pid_exists=here)
    assert src.error is None and src.available
    out = src.sample(1.0)
    # Energy (tests/unit/test_gpu_energy.py): none used yet at the first sample, no interval measured.
    assert out.pop("gpu.0.energy_j") == 0.0 and isnan(out.pop("gpu.0.energy_counter"))
    assert out == {
        "gpu.0.util": 93.0,
        "gpu.0.util_min": 93.0,
        "gpu.0.util_max": 93.0,
        "gpu.0.mem_util": 17.0,
        "gpu.0.mem_used_mb": 12 * 1024 + 512.0,
        "gpu.0.mem_total_mb": 80 * 1024.0,
        "gpu.0.power_w": 456.789,
        "gpu.0.power_limit_w": 700.0,
        "gpu.0.temp_c": 72.0,
        "gpu.0.sm_clock_mhz": 1755.0,
        "gpu.0.mem_clock_mhz": 2619.0,
        "gpu.0.sm_clock_max_mhz": 1980.0,
        "gpu.0.throttle": float(0x4 | 0x20),
        "gpu.0.pcie_rx_mb_s": 3 * 1024.0,
        "gpu.0.pcie_tx_mb_s": 1.5,
    }
    assert_all_floats(out)
    assert src.na_reasons == {}


def test_every_device_has_every_series_and_values_follow_the_device():
    fake, src = make(3)
    fake.devices[2].util_gpu = 5
    fake.devices[1].temp_c = 80
    out = src.sample(1.0)
    assert set(out) == {f"gpu.{i}.{m}" for i in range(3) for m in GPU_NVML_FIELDS}
    assert out["gpu.2.util"] == 5.0 and out["gpu.0.util"] == 87.0
    assert out["gpu.1.temp_c"] == 80.0 and out["gpu.0.temp_c"] == 61.0
    fake.devices[0].util_gpu = 12
    assert src.sample(2.0)["gpu.0.util"] == 12.0


def test_handles_are_cached_and_static_values_asked_once():
    fake, src = make(2)
    for t in range(10):
        src.sample(float(t))
    assert fake.calls["nvmlDeviceGetHandleByIndex"] == 2
    assert fake.calls["nvmlDeviceGetMaxClockInfo"] == 2
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 20


# ---------------------------------------------------------------- utilisation samples


def test_util_min_max_come_from_samples_since_the_last_call():
    fake, src = make(1)
    fake.push_util_samples(0, [100, 0, 100, 0, 35])  # sub-second swings: the starvation signature
    out = src.sample(1.0)
    assert (out["gpu.0.util_min"], out["gpu.0.util_max"]) == (0.0, 100.0)
    assert out["gpu.0.util"] == 87.0  # the snapshot is reported as is

    fake.push_util_samples(0, [40, 60, 55])
    out = src.sample(2.0)
    assert (out["gpu.0.util_min"], out["gpu.0.util_max"]) == (40.0, 60.0)  # older samples not seen again
    last_ts = fake.devices[0].util_samples[-1][0]
    assert src._devices[0].util_ts == last_ts


def test_util_range_falls_back_to_snapshot_when_buffer_is_dry():
    fake, src = make(1)
    fake.devices[0].util_gpu = 0
    out = src.sample(1.0)  # fake raises NVML_ERROR_NOT_FOUND: no samples newer than the timestamp
    assert (out["gpu.0.util_min"], out["gpu.0.util_max"]) == (0.0, 0.0)
    assert "gpu.0.util_min" not in src.na_reasons


def test_first_read_uses_only_the_newest_second_of_the_driver_buffer():
    fake, src = make(1)
    fake.push_util_samples(0, [0, 0, 0], period_us=400_000)  # old history
    fake.advance(5.0)
    fake.push_util_samples(0, [70, 90, 80], period_us=200_000)
    out = src.sample(1.0)
    assert (out["gpu.0.util_min"], out["gpu.0.util_max"]) == (70.0, 90.0)


def test_sample_values_are_decoded_by_value_type():
    fake, src = make(1)
    fake.devices[0].sample_value_type = fk.NVML_VALUE_TYPE_DOUBLE
    fake.push_util_samples(0, [12.5, 99.5])
    out = src.sample(1.0)
    assert (out["gpu.0.util_min"], out["gpu.0.util_max"]) == (12.5, 99.5)


# ---------------------------------------------------------------- GPM


def test_gpm_metrics_present_only_when_supported():
    fake = FakeNvml(2)
    fake.devices[0].gpm_supported = True
    src = GpuSource(fake, pid_exists=here)
    assert src.gpm_status()[0] == "ok"
    assert "Hopper" in src.gpm_status()[1]

    first = src.sample(1.0)
    for m in GPM_METRIC_IDS:
        assert isnan(first[f"gpu.0.{m}"])  # one sample is not a measurement
        assert "two samples" in src.na_reasons[f"gpu.0.{m}"]
        assert f"gpu.1.{m}" not in first

    second = src.sample(2.0)
    assert second["gpu.0.gpm.sm_active"] == 63.5
    assert second["gpu.0.gpm.sm_occupancy"] == 22.25
    assert second["gpu.0.gpm.tensor_active"] == 41.0
    assert second["gpu.0.gpm.dram_bw"] == 55.5
    assert not any(k.startswith("gpu.1.gpm") for k in second)
    assert not any(k.startswith("gpu.0.gpm") for k in src.na_reasons)

    fake.devices[0].gpm[fk.NVML_GPM_METRIC_SM_UTIL] = 12.0
    assert src.sample(3.0)["gpu.0.gpm.sm_active"] == 12.0


def test_gpm_pairs_need_a_minimum_interval():
    fake, src = make(1, gpm=True)
    src.sample(1.0)
    src.sample(2.0)
    gets = fake.calls["nvmlGpmSampleGet"]
    out = src.sample(2.01)  # too soon: the last pair's values are repeated, no new sample taken
    assert fake.calls["nvmlGpmSampleGet"] == gets
    assert out["gpu.0.gpm.sm_active"] == 63.5


def test_gpm_metric_failure_is_local_to_that_metric():
    fake, src = make(1, gpm=True)
    del fake.devices[0].gpm[fk.NVML_GPM_METRIC_DRAM_BW_UTIL]
    src.sample(1.0)
    out = src.sample(2.0)
    assert isnan(out["gpu.0.gpm.dram_bw"])
    assert "Not Supported" in src.na_reasons["gpu.0.gpm.dram_bw"]
    assert out["gpu.0.gpm.sm_active"] == 63.5


def test_gpm_sample_failure_restarts_the_pair():
    fake, src = make(1, gpm=True)
    src.sample(1.0)
    fake.fail("nvmlGpmSampleGet", fk.NVML_ERROR_TIMEOUT)
    out = src.sample(2.0)
    assert isnan(out["gpu.0.gpm.sm_active"]) and "Timeout" in src.na_reasons["gpu.0.gpm.sm_active"]
    assert out["gpu.0.util"] == 87.0
    fake.clear_failures()
    assert isnan(src.sample(3.0)["gpu.0.gpm.sm_active"])  # first of a new pair
    assert src.sample(4.0)["gpu.0.gpm.sm_active"] == 63.5


@pytest.mark.parametrize(
    ("code", "words"), [(fk.NVML_ERROR_FUNCTION_NOT_FOUND, "driver"), (fk.NVML_ERROR_NOT_SUPPORTED, "Hopper")]
)
def test_gpm_unsupported_by_driver_says_why(code, words):
    fake = FakeNvml(1, gpm=True)
    fake.fail("nvmlGpmQueryDeviceSupport", code)
    src = GpuSource(fake, pid_exists=here)
    assert words in src.gpm_status()[0]
    out = src.sample(1.0)
    assert not any("gpm" in k for k in out)
    assert not any("gpm" in k for k in src.na_reasons)
    assert out["gpu.0.util"] == 87.0


def test_gpm_absent_from_binding():
    fake = FakeNvml(1, gpm=True)
    fake.hide("nvmlGpmQueryDeviceSupport")
    src = GpuSource(fake, pid_exists=here)
    assert "GPM" in src.gpm_status()[0]
    assert not any("gpm" in k for k in src.sample(1.0))


# ---------------------------------------------------------------- faults

# function → the series it feeds
FEEDS = {
    "nvmlDeviceGetUtilizationRates": ["util", "mem_util"],
    "nvmlDeviceGetSamples": ["util_min", "util_max"],
    "nvmlDeviceGetMemoryInfo": ["mem_used_mb", "mem_total_mb"],
    "nvmlDeviceGetPowerUsage": ["power_w"],
    "nvmlDeviceGetEnforcedPowerLimit": ["power_limit_w"],
    "nvmlDeviceGetTemperature": ["temp_c"],
    "nvmlDeviceGetClockInfo": ["sm_clock_mhz", "mem_clock_mhz"],
    "nvmlDeviceGetMaxClockInfo": ["sm_clock_max_mhz"],
    "nvmlDeviceGetPcieThroughput": ["pcie_rx_mb_s", "pcie_tx_mb_s"],
}
ERRORS = {
    fk.NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    fk.NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    fk.NVML_ERROR_TIMEOUT: "Timeout",
    fk.NVML_ERROR_UNKNOWN: "Unknown Error",
}


@pytest.mark.parametrize("code", list(ERRORS))
@pytest.mark.parametrize("function", list(FEEDS))
def test_a_failing_call_makes_only_its_series_nan(function, code):
    clean_src = GpuSource(FakeNvml(2))
    clean_src.sample(1.0)
    clean = clean_src.sample(2.0)  # the second tick, as below: its energy measures an interval
    fake = FakeNvml(2)
    fake.fail(function, code, device=1)
    src = GpuSource(fake, pid_exists=here)
    src.sample(1.0)
    out = src.sample(2.0)  # the second tick too: permanent failures are remembered, not re-asked
    hit = {f"gpu.1.{m}" for m in FEEDS[function]}
    # util_min/max lean on the snapshot while the sample buffer is dry: with no snapshot they are n/a too.
    if function == "nvmlDeviceGetUtilizationRates":
        hit |= {"gpu.1.util_min", "gpu.1.util_max"}
    for key in hit:
        assert isnan(out[key]), key
        assert ERRORS[code] in src.na_reasons.get(key, ""), (key, src.na_reasons)
    for key, value in clean.items():
        if key not in hit:
            assert out[key] == value, key
    assert set(src.na_reasons) <= hit


def test_util_failure_leaves_min_max_from_samples():
    fake, src = make(1)
    fake.fail("nvmlDeviceGetUtilizationRates", fk.NVML_ERROR_TIMEOUT)
    fake.push_util_samples(0, [10, 90])
    out = src.sample(1.0)
    assert isnan(out["gpu.0.util"]) and (out["gpu.0.util_min"], out["gpu.0.util_max"]) == (10.0, 90.0)


def test_permanent_failures_are_not_retried_and_transient_ones_recover():
    fake, src = make(1)
    fake.fail("nvmlDeviceGetPowerUsage", fk.NVML_ERROR_NOT_SUPPORTED)
    fake.fail("nvmlDeviceGetTemperature", fk.NVML_ERROR_TIMEOUT)
    for t in range(5):
        src.sample(float(t))
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1
    assert fake.calls["nvmlDeviceGetTemperature"] == 5
    fake.clear_failures()
    out = src.sample(6.0)
    assert out["gpu.0.temp_c"] == 61.0 and "gpu.0.temp_c" not in src.na_reasons
    assert isnan(out["gpu.0.power_w"]) and "Not Supported" in src.na_reasons["gpu.0.power_w"]


def test_function_missing_from_binding_is_nan_with_reason():
    fake = FakeNvml(1)
    fake.hide("nvmlDeviceGetPcieThroughput")
    src = GpuSource(fake, pid_exists=here)
    out = src.sample(1.0)
    assert isnan(out["gpu.0.pcie_rx_mb_s"]) and isnan(out["gpu.0.pcie_tx_mb_s"])
    assert "not in this pynvml binding" in src.na_reasons["gpu.0.pcie_rx_mb_s"]
    assert out["gpu.0.util"] == 87.0


def test_attribute_error_inside_a_call_is_contained():
    _, src = make(1)

    def broken(handle):
        raise AttributeError("'c_nvmlMemory_t' object has no attribute 'reserved'")

    src._binding.fns["memory"] = [("nvmlDeviceGetMemoryInfo", broken)]
    out = src.sample(1.0)
    assert isnan(out["gpu.0.mem_used_mb"]) and "reserved" in src.na_reasons["gpu.0.mem_used_mb"]
    assert out["gpu.0.util"] == 87.0


def test_throttle_uses_the_older_name_where_the_driver_lacks_the_new_one():
    fake, src = make(1)
    fake.devices[0].clock_reasons = fk.nvmlClocksEventReasonHwSlowdown
    fake.fail("nvmlDeviceGetCurrentClocksEventReasons", fk.NVML_ERROR_FUNCTION_NOT_FOUND)
    assert src.sample(1.0)["gpu.0.throttle"] == 8.0
    assert src.sample(2.0)["gpu.0.throttle"] == 8.0
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1  # not asked again
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 2


def test_throttle_with_an_old_binding():
    fake = FakeNvml(1)
    fake.hide("nvmlDeviceGetCurrentClocksEventReasons")
    fake.devices[0].clock_reasons = 4
    assert GpuSource(fake, pid_exists=here).sample(1.0)["gpu.0.throttle"] == 4.0


def test_failures_are_logged_once_per_metric_and_reason(caplog):
    fake, src = make(1)
    fake.fail("nvmlDeviceGetTemperature", fk.NVML_ERROR_TIMEOUT)
    with caplog.at_level(logging.DEBUG, logger="trainmon.gpu"):
        for t in range(5):
            src.sample(float(t))
        fake.fail("nvmlDeviceGetTemperature", fk.NVML_ERROR_UNKNOWN)
        for t in range(5, 8):
            src.sample(float(t))
    temp = [r for r in caplog.records if "temp_c" in r.getMessage()]
    assert len(temp) == 2, [r.getMessage() for r in temp]
    assert all(r.name == "trainmon.gpu" for r in temp)


def test_gpu_lost_makes_only_that_device_nan():
    fake, src = make(3, gpm=True)
    src.sample(1.0)
    fake.devices[1].lost = True
    out = src.sample(2.0)
    for m in (*GPU_NVML_FIELDS, *GPM_METRIC_IDS):
        assert isnan(out[f"gpu.1.{m}"])
        assert src.na_reasons[f"gpu.1.{m}"] == "GPU lost"
    for i in (0, 2):
        assert out[f"gpu.{i}.util"] == 87.0 and out[f"gpu.{i}.gpm.sm_active"] == 63.5
    assert src.devices()[1]["lost"] == "GPU lost"
    assert not any(k.startswith(("gpu.0", "gpu.2")) for k in src.na_reasons)


def test_gpu_lost_mid_sample_discards_the_partial_read_and_probes_later():
    fake, src = make(2)
    src.sample(1.0)
    fake.fail("nvmlDeviceGetPowerUsage", fk.NVML_ERROR_GPU_IS_LOST, device=0)  # util etc. still answered
    out = src.sample(2.0)
    assert all(isnan(out[f"gpu.0.{m}"]) for m in GPU_NVML_FIELDS)
    assert out["gpu.1.power_w"] == 412.345
    util_calls = fake.calls["nvmlDeviceGetUtilizationRates"]
    src.sample(3.0)  # lost: not asked again until the probe interval passed
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == util_calls + 1  # only device 1
    fake.clear_failures()
    out = src.sample(10.0)
    assert out["gpu.0.power_w"] == 412.345 and src.devices()[0]["lost"] is None
    assert not any(k.startswith("gpu.0") for k in src.na_reasons)


def test_lost_at_enumeration_does_not_break_the_others():
    fake = FakeNvml(2)
    fake.devices[0].lost = True
    src = GpuSource(fake, pid_exists=here)
    out = src.sample(1.0)
    assert src.error is None
    assert isnan(out["gpu.0.util"]) and src.na_reasons["gpu.0.util"] == "GPU lost"
    assert out["gpu.1.util"] == 87.0


@pytest.mark.parametrize("seed", [1234, 7, 99])
def test_never_raises_under_random_faults_and_hotplug(seed, caplog):
    rng = random.Random(seed)
    fake, src = make(4, gpm=True)
    functions = [
        *FEEDS,
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlGpmSampleGet",
        "nvmlGpmMetricsGet",
        "nvmlGpmQueryDeviceSupport",
        "nvmlGpmSampleAlloc",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetProcessUtilization",
    ]
    codes = [
        fk.NVML_ERROR_NOT_SUPPORTED,
        fk.NVML_ERROR_FUNCTION_NOT_FOUND,
        fk.NVML_ERROR_GPU_IS_LOST,
        fk.NVML_ERROR_TIMEOUT,
        fk.NVML_ERROR_UNKNOWN,
        fk.NVML_ERROR_NO_PERMISSION,
        fk.NVML_ERROR_RESET_REQUIRED,
        fk.NVML_ERROR_UNINITIALIZED,
        fk.NVML_ERROR_INSUFFICIENT_SIZE,
        12345,
    ]
    for dev in fake.devices:
        dev.processes = [(100, GIB), (200, None)]
    for step in range(300):
        roll = rng.random()
        present = len(fake._present())
        if roll < 0.3:
            fake.fail(rng.choice(functions), rng.choice(codes), device=rng.randrange(present) if present else None)
        elif roll < 0.4:
            fake.clear_failures()
        elif roll < 0.45 and present < 8:
            fake.add_device(gpm_supported=rng.random() < 0.5)
        elif roll < 0.5 and present > 0:
            fake.remove_device(rng.randrange(present))
        elif roll < 0.55 and present > 0:
            fake._present()[rng.randrange(present)].lost = rng.random() < 0.5
        if fake._present():
            fake.push_util_samples(0, [rng.randint(0, 100)])
        out = src.sample(step * 0.5)
        assert_all_floats(out)
        for pid, info in src.process_usage().items():
            assert isinstance(pid, int) and set(info) >= {"gpu", "mem_mb", "sm_pct"}
        src.devices()
        src.resolve_visible(rng.choice([None, "", "0,1", "GPU-1", "1,0,-1", "MIG-x"]))
    src.close()
    # The guards that keep a bug from escaping must not have been needed.
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info]


# ---------------------------------------------------------------- init failures


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (fk.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"),
        (fk.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
    ],
)
def test_no_driver_makes_the_source_unavailable(code, text):
    fake = FakeNvml(2, init_error=code)
    src = GpuSource(fake, pid_exists=here)
    assert not src.available
    assert src.error == f"no NVIDIA driver: {text}"
    assert "\n" not in src.error
    assert src.sample(1.0) == {}
    assert src.process_usage() == {}
    assert src.devices() == [] and src.gpm_status() == {}
    assert src.resolve_visible("0") == [] and src.resolve_visible(None) == []
    src.close()
    assert fake.shutdown_count == 0 and fake.calls["nvmlShutdown"] == 0


def test_driver_library_mismatch_is_explained():
    src = GpuSource(FakeNvml(1, init_error=fk.NVML_ERROR_LIB_RM_VERSION_MISMATCH))
    assert src.error is not None and "version" in src.error and src.sample(1.0) == {}


def test_missing_binding_makes_the_source_unavailable(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # `import pynvml` raises ImportError
    src = GpuSource()
    assert src.error is not None and "nvidia-ml-py" in src.error
    assert src.sample(1.0) == {} and src.process_usage() == {}
    src.close()


def test_init_raising_something_unexpected_is_contained():
    class Weird:
        def nvmlInit(self):
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    src = GpuSource(Weird())
    assert src.error is not None and src.error.startswith("no NVIDIA driver") and src.sample(0.0) == {}


def test_no_gpu_at_all():
    fake, src = make(0)
    assert src.available and src.error == "NVML sees no GPU"
    assert src.sample(1.0) == {}
    fake.add_device()
    assert src.sample(2.0)["gpu.0.util"] == 87.0
    assert src.error is None


def test_close_shuts_nvml_down_once_and_frees_gpm_samples():
    fake, src = make(2, gpm=True)
    src.sample(1.0)
    src.close()
    src.close()
    assert fake.shutdown_count == 1
    assert fake.gpm_freed == 4
    assert src.sample(2.0) == {} and src.process_usage() == {}


# ---------------------------------------------------------------- CUDA_VISIBLE_DEVICES


def test_resolve_visible_by_index():
    _, src = make(4)
    assert src.resolve_visible(None) == [0, 1, 2, 3]
    assert src.resolve_visible("2,3") == [2, 3]
    assert src.resolve_visible(" 3, 1 ") == [3, 1]  # CUDA's order is the job's device order
    assert src.resolve_visible("") == []
    assert src.resolve_visible("0,-1,1") == [0]  # CUDA stops at the first invalid entry
    assert src.resolve_visible("1,7,2") == [1]
    assert src.resolve_visible("1,1") == [1]


def test_resolve_visible_by_uuid_and_prefix():
    fake, src = make(4)
    uuids = [d.uuid for d in fake.devices]
    assert src.resolve_visible(f"{uuids[2]},{uuids[0]}") == [2, 0]
    assert src.resolve_visible(uuids[3].lower()) == [3]
    assert src.resolve_visible("GPU-2222") == [1]
    assert src.resolve_visible(f"1,{uuids[3]}") == [1, 3]
    assert src.resolve_visible("33333333") == []  # all digits: an index, and there is no GPU 33333333
    fake.add_device(uuid="GPU-ab12cd34-0000-0000-0000-000000000000")
    src.sample(1.0)
    assert src.resolve_visible("ab12cd,0") == [4, 0]  # a prefix without "GPU-"


def test_ambiguous_or_unknown_uuid_ends_the_list():
    fake = FakeNvml(0)
    fake.add_device(uuid="GPU-aaaa1111-0000-0000-0000-000000000000")
    fake.add_device(uuid="GPU-aaaa2222-0000-0000-0000-000000000000")
    src = GpuSource(fake, pid_exists=here)
    assert src.resolve_visible("GPU-aaaa,0") == []
    assert src.resolve_visible("GPU-aaaa2,GPU-ffff,0") == [1]


def test_mig_uuids_are_reported_unresolved():
    _, src = make(2)
    assert src.resolve_visible("MIG-4f0c1b2a-1111-2222-3333-444455556666,1") == [1]
    assert src.unresolved_visible == ["MIG-4f0c1b2a-1111-2222-3333-444455556666"]


def test_devices_lists_names_uuids_memory_and_visibility():
    fake = FakeNvml(3)
    fake.devices[1].name = "NVIDIA A100-SXM4-40GB"
    fake.devices[1].mem_total = 40 * GIB
    src = GpuSource(fake, pid_exists=here)
    devs = src.devices()
    assert [d["index"] for d in devs] == [0, 1, 2]
    assert devs[1]["name"] == "NVIDIA A100-SXM4-40GB" and devs[1]["uuid"] == fake.devices[1].uuid
    assert devs[1]["mem_total_mb"] == 40 * 1024.0
    assert all(d["visible"] for d in devs)
    src.resolve_visible(f"{fake.devices[2].uuid},0")
    assert [d["visible"] for d in src.devices()] == [True, False, True]
    src.resolve_visible(None)
    assert all(d["visible"] for d in src.devices())


# ---------------------------------------------------------------- hot-plug


def test_device_count_change_re_enumerates():
    fake, src = make(2)
    assert {k.split(".")[1] for k in src.sample(1.0)} == {"0", "1"}
    fake.add_device(util_gpu=3)
    out = src.sample(2.0)
    assert out["gpu.2.util"] == 3.0 and len(src.devices()) == 3
    fake.remove_device(0)
    out = src.sample(3.0)
    assert {k.split(".")[1] for k in out} == {"0", "1"}
    assert out["gpu.1.util"] == 3.0  # NVML indices shift down
    assert [d["uuid"] for d in src.devices()] == [d.uuid for d in fake._present()]


def test_count_failure_keeps_the_known_devices():
    fake, src = make(2)
    fake.fail("nvmlDeviceGetCount", fk.NVML_ERROR_TIMEOUT)
    out = src.sample(1.0)
    assert out["gpu.1.util"] == 87.0


# ---------------------------------------------------------------- processes


def test_process_usage_memory_and_sm_share():
    fake, src = make(2)
    fake.devices[0].processes = [(1001, 20 * GIB), (1002, 512 * 1024**2)]
    fake.devices[1].processes = [(1003, 10 * GIB)]
    fake.push_process_samples(0, [(1001, 80), (1001, 90), (1002, 5)])
    usage = src.process_usage()
    assert usage[1001] == {"gpu": 0, "mem_mb": 20 * 1024.0, "sm_pct": 85.0, "gpus": [0]}
    assert usage[1002] == {"gpu": 0, "mem_mb": 512.0, "sm_pct": 5.0, "gpus": [0]}
    assert usage[1003] == {"gpu": 1, "mem_mb": 10 * 1024.0, "sm_pct": 0.0, "gpus": [1]}  # listed, no samples

    fake.push_process_samples(0, [(1001, 30)])
    usage = src.process_usage()
    assert usage[1001]["sm_pct"] == 30.0 and usage[1002]["sm_pct"] == 0.0  # only samples since the last call


def test_process_usage_sm_nan_where_unsupported():
    fake, src = make(1)
    fake.devices[0].processes = [(7, GIB)]
    fake.fail("nvmlDeviceGetProcessUtilization", fk.NVML_ERROR_NOT_SUPPORTED)  # e.g. MIG
    usage = src.process_usage()
    assert usage[7]["mem_mb"] == 1024.0 and isnan(usage[7]["sm_pct"])
    assert "Not Supported" in src.na_reasons["gpu.0.proc_sm"]


def test_process_usage_ignores_garbage_utilisation():
    fake, src = make(1)
    fake.devices[0].processes = [(7, GIB)]
    fake.push_process_samples(0, [(7, 4_000_000_000)])
    assert src.process_usage()[7]["sm_pct"] == 0.0


def test_process_memory_unavailable_is_nan():
    fake, src = make(1)
    fake.devices[0].processes = [(7, None)]  # what the binding gives under WDDM or without permission
    assert isnan(src.process_usage()[7]["mem_mb"])


def test_process_on_several_gpus():
    fake, src = make(2)
    fake.devices[0].processes = [(9, GIB)]
    fake.devices[1].processes = [(9, 3 * GIB)]
    fake.push_process_samples(1, [(9, 70)])
    fake.push_process_samples(0, [(9, 10)])
    assert src.process_usage()[9] == {"gpu": 1, "mem_mb": 4096.0, "sm_pct": 70.0, "gpus": [0, 1]}


def test_process_on_three_gpus_primary_is_the_largest_single_share():
    fake, src = make(3)
    fake.devices[0].processes = [(9, 2 * GIB)]
    fake.devices[1].processes = [(9, GIB)]
    fake.devices[2].processes = [(9, GIB + GIB // 2)]
    usage = src.process_usage()[9]
    assert usage["gpu"] == 0 and usage["mem_mb"] == 4608.0 and usage["gpus"] == [0, 1, 2]


@pytest.mark.parametrize("how", ["driver", "binding"])
def test_process_list_falls_back_to_older_entry_points(how):
    fake = FakeNvml(1)
    fake.devices[0].processes = [(5, GIB)]
    if how == "driver":
        fake.fail("nvmlDeviceGetComputeRunningProcesses_v3", fk.NVML_ERROR_FUNCTION_NOT_FOUND)
    else:
        fake.hide("nvmlDeviceGetComputeRunningProcesses_v3")
    src = GpuSource(fake, pid_exists=here)
    assert src.process_usage()[5]["mem_mb"] == 1024.0
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 1


def test_process_list_unversioned_mismatch_is_contained():
    fake = FakeNvml(1)
    fake.devices[0].processes = [(5, GIB)]
    fake.hide("nvmlDeviceGetComputeRunningProcesses_v3")
    fake.hide("nvmlDeviceGetComputeRunningProcesses_v2")
    fake.fail("nvmlDeviceGetComputeRunningProcesses", fk.NVML_ERROR_FUNCTION_NOT_FOUND)
    src = GpuSource(fake, pid_exists=here)
    assert src.process_usage() == {}
    assert "Function Not Found" in src.na_reasons["gpu.0.proc_mem"]


def test_process_usage_with_a_lost_gpu():
    fake, src = make(2)
    fake.devices[0].processes = [(1, GIB)]
    fake.devices[1].processes = [(2, GIB)]
    fake.devices[0].lost = True
    assert set(src.process_usage()) == {2}
    assert src.devices()[0]["lost"] == "GPU lost"


# ---------------------------------------------------------------- the real NVML


@pytest.mark.gpu
def test_real_nvml_reports_util_and_memory():
    src = GpuSource()
    try:
        if not src.available or not src.devices():
            pytest.skip(src.error or "NVML sees no GPU")
        src.sample(0.0)
        import time

        time.sleep(0.3)
        out = src.sample(0.3)
        devices = src.devices()
        assert devices and all(d["uuid"].startswith(("GPU-", "MIG-")) for d in devices)
        numeric = [
            i for i in range(len(devices)) if not isnan(out[f"gpu.{i}.util"]) and out[f"gpu.{i}.mem_total_mb"] > 0
        ]
        assert numeric, (out, src.na_reasons)
        assert src.resolve_visible(devices[0]["uuid"]) == [0]
        assert all(isinstance(p, int) for p in src.process_usage())
        for i, status in src.gpm_status().items():
            if status == "ok":
                time.sleep(0.2)
                out = src.sample(0.6)
                assert not isnan(out[f"gpu.{i}.gpm.sm_active"]), src.na_reasons
    finally:
        src.close()


# ---------------------------------------------------------------- more state transitions


def test_gpm_reasons_clear_after_a_lost_gpu_comes_back():
    fake, src = make(1, gpm=True)
    src.sample(1.0)
    src.sample(2.0)
    fake.devices[0].lost = True
    src.sample(3.0)
    assert src.na_reasons["gpu.0.gpm.sm_active"] == "GPU lost"
    fake.devices[0].lost = False
    src.sample(9.0)  # reopened: the GPM pair starts again
    out = src.sample(10.0)
    assert out["gpu.0.gpm.sm_active"] == 63.5 and out["gpu.0.util"] == 87.0
    assert src.na_reasons == {}


def test_gpm_sampling_unsupported_updates_the_status():
    fake, src = make(1, gpm=True)
    fake.fail("nvmlGpmSampleGet", fk.NVML_ERROR_NOT_SUPPORTED)  # e.g. a GPU in MIG mode
    out = src.sample(1.0)
    assert isnan(out["gpu.0.gpm.sm_active"])
    assert "Not Supported" in src.gpm_status()[0]


def test_na_reasons_is_a_snapshot():
    fake, src = make(1)
    fake.fail("nvmlDeviceGetPowerUsage", fk.NVML_ERROR_TIMEOUT)
    src.sample(1.0)
    reasons = src.na_reasons
    reasons.clear()
    assert "gpu.0.power_w" in src.na_reasons


# ---------------------------------------------------------------- the fake stays faithful to the binding


def test_fake_mirrors_the_real_binding():
    import inspect

    real = pytest.importorskip("pynvml")
    fake = FakeNvml(1)
    for name in dir(FakeNvml):
        if name.startswith("nvml"):
            assert hasattr(real, name), name
            want = [p for p in inspect.signature(getattr(real, name)).parameters if p != "kwargs"]
            got = list(inspect.signature(getattr(fake, name)).parameters)
            assert got == want, (name, got, want)
    for code in (
        fk.NVML_ERROR_NOT_SUPPORTED,
        fk.NVML_ERROR_FUNCTION_NOT_FOUND,
        fk.NVML_ERROR_GPU_IS_LOST,
        fk.NVML_ERROR_TIMEOUT,
        fk.NVML_ERROR_LIBRARY_NOT_FOUND,
        fk.NVML_ERROR_DRIVER_NOT_LOADED,
    ):
        assert type(fake.NVMLError(code)).__name__ == type(real.NVMLError(code)).__name__
        assert str(fake.NVMLError(code)) == str(real.NVMLError(code))
    for const in [n for n in vars(fk) if n.startswith(("NVML_", "nvmlClocksEventReason"))]:
        assert getattr(real, const) == getattr(fk, const), const
    for struct in (
        "c_nvmlUtilization_t",
        "c_nvmlMemory_t",
        "c_nvmlSample_t",
        "c_nvmlValue_t",
        "c_nvmlProcessUtilizationSample_t",
        "c_nvmlGpmMetricsGet_t",
        "c_nvmlGpmMetric_t",
        "c_nvmlGpmSupport_t",
    ):
        assert [f[0] for f in getattr(fk, struct)._fields_] == [f[0] for f in getattr(real, struct)._fields_], struct
