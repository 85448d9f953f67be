"""MIG: each MIG device is a GPU of its own, and where NVML gives no utilisation on MIG every reader says
"n/a on MIG" instead of 0 %: the series (NaN), the screen's GPU pane and the report.

Through the fake pynvml (the one boundary faked) and the real GpuSource, Monitor, store, view, panes and report.
"""

from __future__ import annotations

import math
import os
import random
import time

import pytest

from testsupport import fake_pynvml as fk
from testsupport.fake_pynvml import GIB, FakeNvml
from testsupport.stores import replay_at_end
from trainmon.diagnose.evidence import gather, run_gpus
from trainmon.metrics import GPU, PROC, mask_indices
from trainmon.monitor import Monitor
from trainmon.report import build_report
from trainmon.sources.gpu.device_list import LOST_PROBE_INTERVAL_S
from trainmon.sources.gpu.gpu_source import GpuSource
from trainmon.tui import panes
from trainmon.tui.lines import Geometry
from trainmon.tui.theme import Glyphs
from trainmon.view import Layout, build_frame

PROFILES = ["3g.40gb", "2g.20gb", "2g.20gb"]
MIG_IDS = [2, 3, 4]  # GPUs 0 and 1 keep their NVML indices; GPU 0's MIG devices follow


def mig_host(**kw) -> tuple[FakeNvml, list[fk.FakeDevice]]:
    """Two H100s: GPU 0 in MIG mode with three MIG devices (GPU instances 2, 3, 4), GPU 1 whole."""
    fake = FakeNvml(2, **kw)
    migs = fake.enable_mig(0, PROFILES, gpu_instance_ids=[2, 3, 4])
    for m, used in zip(migs, (12, 3, 0), strict=True):
        m.mem_used = used * GIB
    return fake, migs


def isnan(v: float) -> bool:
    return isinstance(v, float) and math.isnan(v)


# ---------------------------------------------------------------- the fake answers as NVML does


def test_the_fake_answers_mig_queries_as_nvml_does():
    fake, migs = mig_host()
    fake.nvmlInit()
    gpu0, gpu1 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    assert fake.nvmlDeviceGetCount() == 2  # MIG devices are not counted
    assert fake.nvmlDeviceGetMigMode(gpu0) == [fk.NVML_DEVICE_MIG_ENABLE, fk.NVML_DEVICE_MIG_ENABLE]
    assert fake.nvmlDeviceGetMaxMigDeviceCount(gpu0) == 7 and fake.nvmlDeviceGetMaxMigDeviceCount(gpu1) == 0
    with pytest.raises(fk.NVMLError_NotSupported):
        fake.nvmlDeviceGetMigMode(gpu1)  # set up here as a GPU without MIG
    mig = fake.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 1)
    assert fake.nvmlDeviceGetUUID(mig) == migs[1].uuid and migs[1].uuid.startswith("MIG-")
    assert fake.nvmlDeviceGetName(mig) == "NVIDIA H100 80GB HBM3 MIG 2g.20gb"
    assert fake.nvmlDeviceGetMemoryInfo(mig).total == 20 * GIB
    assert fake.nvmlDeviceIsMigDeviceHandle(mig).value == 1 and not fake.nvmlDeviceIsMigDeviceHandle(gpu0)
    assert (fake.nvmlDeviceGetGpuInstanceId(mig), fake.nvmlDeviceGetComputeInstanceId(mig)) == (3, 0)
    assert fake.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig).device is fake.devices[0]
    with pytest.raises(fk.NVMLError_NotFound):
        fake.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 3)  # a free MIG index
    with pytest.raises(fake.NVMLError) as e:
        fake.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 7)
    assert e.value.value == fk.NVML_ERROR_INVALID_ARGUMENT
    for fn, args in [
        ("nvmlDeviceGetUtilizationRates", ()),
        ("nvmlDeviceGetSamples", (fk.NVML_GPU_UTILIZATION_SAMPLES, 0)),
        ("nvmlDeviceGetProcessUtilization", (0,)),
        ("nvmlDeviceGetPowerUsage", ()),
        ("nvmlDeviceGetPcieThroughput", (fk.NVML_PCIE_UTIL_RX_BYTES,)),
    ]:
        with pytest.raises(fk.NVMLError_NotSupported):
            getattr(fake, fn)(mig, *args)
    for fn, args in [("nvmlDeviceGetUtilizationRates", ()), ("nvmlDeviceGetProcessUtilization", (0,))]:
        with pytest.raises(fk.NVMLError_NotSupported):
            getattr(fake, fn)(gpu0, *args)  # the GPU in MIG mode has none of its own
    assert fake.nvmlDeviceGetPowerUsage(gpu0) == 412_345  # but keeps its power, clocks, PCIe
    migs[0].processes = [(4242, 2 * GIB)]
    with pytest.raises(fake.NVMLError) as e:
        fake.nvmlDeviceGetComputeRunningProcesses_v3(gpu0)
    assert type(e.value).__name__ == "NVMLError_NoPermission"  # the aggregate list is for the privileged
    fake.devices[0].privileged = True
    (p,) = fake.nvmlDeviceGetComputeRunningProcesses_v3(gpu0)
    assert (p.pid, p.gpuInstanceId, p.computeInstanceId) == (4242, 2, 0)


# ---------------------------------------------------------------- the source


def test_mig_devices_are_devices_of_their_own():
    fake, migs = mig_host()
    src = GpuSource(fake)
    devs = src.devices()
    assert [d["index"] for d in devs] == [0, 1, *MIG_IDS]
    assert devs[0]["mig_mode"] is True and "mig" not in devs[0] and "mig_mode" not in devs[1]
    for d, m, slot in zip(devs[2:], migs, range(3), strict=True):
        assert d["uuid"] == m.uuid and d["name"] == m.name
        assert d["mig"] == {"parent": 0, "slot": slot, "gi": 2 + slot, "ci": 0}
    assert [d["mem_total_mb"] for d in devs[2:]] == [40 * 1024.0, 20 * 1024.0, 20 * 1024.0]


def test_no_utilisation_on_mig_is_nan_with_its_reason_never_zero():
    fake, _ = mig_host()
    src = GpuSource(fake)
    out = src.sample(1.0)
    reasons = src.na_reasons
    for i in MIG_IDS:
        for field in ("util", "util_min", "util_max", "mem_util", "power_w", "pcie_rx_mb_s"):
            assert isnan(out[GPU.key(i, field)]), field
            assert reasons[GPU.key(i, field)].startswith("n/a on MIG: Not Supported"), reasons[GPU.key(i, field)]
    assert [out[GPU.key(i, "mem_used_mb")] for i in MIG_IDS] == [12 * 1024.0, 3 * 1024.0, 0.0]
    assert isnan(out["gpu.0.util"]) and reasons["gpu.0.util"].startswith("n/a in MIG mode")
    assert out["gpu.0.power_w"] == 412.345 and out["gpu.0.temp_c"] == 61.0 and "gpu.0.power_w" not in reasons
    assert out["gpu.1.util"] == 87.0 and "gpu.1.util" not in reasons
    asked = fake.calls["nvmlDeviceGetUtilizationRates"]
    src.sample(2.0)
    assert fake.calls["nvmlDeviceGetUtilizationRates"] - asked == 1  # NotSupported is not asked again: GPU 1 only


def test_processes_are_listed_per_mig_device_never_twice():
    fake, migs = mig_host()
    fake.devices[0].privileged = True  # the GPU's aggregate list would count each process a second time
    migs[0].processes = [(1001, 10 * GIB)]
    migs[2].processes = [(1002, 4 * GIB), (1003, None)]
    fake.devices[1].processes = [(1004, GIB)]
    fake.push_process_samples(1, [(1004, 40)])
    src = GpuSource(fake, pid_exists=lambda pid: True)  # these made-up pids taken as the monitor's own
    usage = src.process_usage()
    assert usage[1001]["gpus"] == [2] and usage[1001]["mem_mb"] == 10 * 1024.0 and isnan(usage[1001]["sm_pct"])
    assert usage[1002]["gpu"] == 4 and isnan(usage[1002]["sm_pct"]) and isnan(usage[1003]["mem_mb"])
    assert usage[1004] == {"gpu": 1, "mem_mb": 1024.0, "sm_pct": 40.0, "gpus": [1]}
    assert src.na_reasons["gpu.2.proc_sm"].startswith("n/a on MIG")
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 4  # GPU 1 and the three MIG devices


def test_cuda_visible_devices_names_mig_devices():
    fake, migs = mig_host()
    src = GpuSource(fake)
    assert src.resolve_visible(migs[1].uuid) == [3]
    assert src.resolve_visible(f"{migs[2].uuid[:13].lower()},1") == [4, 1]  # a unique prefix, any case
    assert src.resolve_visible(f"MIG-{fake.devices[0].uuid}/2/0") == [2]  # the older MIG-GPU-<uuid>/gi/ci form
    gone = "MIG-00000000-0000-0000-0000-000000000000"
    assert src.resolve_visible(f"{gone},{migs[0].uuid}") == [2] and src.unresolved_visible == [gone]
    assert [d["visible"] for d in src.devices()] == [False, False, True, False, False]


def test_a_lost_gpu_takes_its_mig_devices_along_and_they_come_back():
    fake, _ = mig_host()
    src = GpuSource(fake)
    src.sample(1.0)
    fake.devices[0].lost = True
    out = src.sample(2.0)
    assert all(isnan(out[GPU.key(i, "mem_used_mb")]) for i in MIG_IDS)
    assert [d["lost"] for d in src.devices()] == ["GPU lost", None, "GPU lost", "GPU lost", "GPU lost"]
    assert out["gpu.1.util"] == 87.0
    fake.devices[0].lost = False
    out = src.sample(2.0 + LOST_PROBE_INTERVAL_S + 0.1)
    assert [out[GPU.key(i, "mem_used_mb")] for i in MIG_IDS] == [12 * 1024.0, 3 * 1024.0, 0.0]
    assert [d["lost"] for d in src.devices()] == [None] * 5
    assert isnan(out["gpu.2.util"]) and src.na_reasons["gpu.2.util"].startswith("n/a on MIG")

    fake.devices[0].lost = True
    src.sample(20.0)
    fake.devices[0].lost = False
    fake.devices[0].migs[2] = None  # the GPU came back with that MIG device destroyed
    out = src.sample(20.0 + LOST_PROBE_INTERVAL_S + 0.1)
    assert [d["lost"] for d in src.devices()][2:] == [
        None,
        None,
        "MIG device gone: its GPU answers, this MIG index holds none",
    ]
    assert isnan(out["gpu.4.mem_used_mb"]) and out["gpu.3.mem_used_mb"] == 3 * 1024.0


@pytest.mark.parametrize("seed", [3, 17])
def test_never_raises_with_mig_under_random_faults(seed):
    rng = random.Random(seed)
    fake, migs = mig_host()
    src = GpuSource(fake)
    functions = [n for n in dir(fake) if n.startswith("nvml") and n not in ("nvmlInit", "nvmlShutdown")]
    codes = [fk.NVML_ERROR_NOT_SUPPORTED, fk.NVML_ERROR_UNKNOWN, fk.NVML_ERROR_GPU_IS_LOST, fk.NVML_ERROR_TIMEOUT]
    for tick in range(60):
        fake.clear_failures()
        for _ in range(rng.randrange(4)):
            target = rng.choice([None, *migs])
            fn, code = rng.choice(functions), rng.choice(codes)
            if target is None:
                fake.fail(fn, code)
            else:
                target.failures[fn] = code
        fake.devices[0].lost = rng.random() < 0.1
        out = src.sample(float(tick))
        assert all(isinstance(v, float) for v in out.values())
        assert isinstance(src.process_usage(), dict) and isinstance(src.devices(), list)
    src.close()


# ---------------------------------------------------------------- attribution


def _store_with_run(monitor: Monitor, hello: dict) -> None:
    monitor.store.hello(1, time.monotonic(), hello)
    monitor.ingest.meta(time.monotonic(), {"gpus": monitor.gpu.devices() if monitor.gpu else []})


def test_the_monitor_attributes_a_run_to_its_mig_device_from_nvml_process_lists():
    fake, migs = mig_host()
    me = os.getpid()
    migs[1].processes = [(me, 8 * GIB)]
    monitor = Monitor(listen=False, nvml_module=fake)
    try:
        _store_with_run(monitor, {"pid": me})
        for _ in range(3):
            monitor.tick()
        store = monitor.store
        assert mask_indices(store.latest(PROC.key(me, "gpu_mask"))) == [3]
        assert store.latest(PROC.key(me, "gpu_mem_mb")) == 8 * 1024.0
        assert math.isnan(store.latest(PROC.key(me, "gpu_sm_pct")))  # n/a on MIG, not 0
        run = store.runs[1]
        assert run_gpus(store, run, store.index().int_ids(GPU, "util")) == [3]
        ev = gather(store, run, 0.0, time.monotonic() + 1)
        assert ev.gpus == [3] and math.isnan(ev.gpu_util)  # judged without a utilisation it does not have
    finally:
        monitor.stop()


def test_a_run_reporting_a_mig_uuid_is_matched_to_that_mig_device():
    fake, migs = mig_host()
    migs[2].processes = [(3_456_789, 8 * GIB)]  # a host pid from inside a container: matches none of ours
    monitor = Monitor(listen=False, nvml_module=fake)
    try:
        _store_with_run(monitor, {"pid": os.getpid()})
        monitor.tick()
        store = monitor.store
        gpus = store.index().int_ids(GPU, "util")
        assert run_gpus(store, store.runs[1], gpus) == []
        torch_uuid = migs[2].uuid.removeprefix("MIG-")  # torch formats the MIG UUID without NVML's prefix
        store.info(1, time.monotonic(), {"cuda_device": {"index": 0, "uuid": torch_uuid, "name": migs[2].name}})
        assert run_gpus(store, store.runs[1], gpus) == [4]
    finally:
        monitor.stop()


# ---------------------------------------------------------------- what the screen and the report say


def _recorded(ticks: int = 3) -> tuple[Monitor, FakeNvml]:
    fake, _ = mig_host()
    monitor = Monitor(listen=False, nvml_module=fake)
    _store_with_run(monitor, {"pid": os.getpid()})
    for _ in range(ticks):
        fake.push_util_samples(1, [80, 95])
        monitor.tick()
        time.sleep(0.02)
    monitor.stop()
    return monitor, fake


def _text(lines) -> str:
    return "\n".join("".join(part[0] for part in line) for line in lines)


def test_the_gpu_pane_says_n_a_on_mig_never_zero():
    monitor, _ = _recorded()
    feed = replay_at_end(monitor.store)
    frame = build_frame(feed, Layout(40, 1), feed.clock.end, 60.0, None)
    views = {g.index: g for g in frame.gpus}
    assert sorted(views) == [0, 1, *MIG_IDS]
    mig = views[2]
    assert (mig.label, mig.util_note, mig.mig_of, mig.mig_profile) == ("MIG0.0", "n/a on MIG", 0, "3g.40gb")
    assert all(math.isnan(u) for u in mig.util) and any(p > 0 for p in mig.mem_pct if not math.isnan(p))
    assert views[0].util_note == "n/a in MIG mode" and views[1].util_note == "" and views[1].label == "GPU1"

    glyphs = Glyphs("block", False)
    title, tracks = panes.gpu(frame, Geometry(100, 40), glyphs, panes.Size())  # five devices: one line each
    one_line = {t.gutter[0]: _text(t.values) for t in tracks}
    assert list(one_line) == ["GPU0", "GPU1", "MIG0.0", "MIG0.1", "MIG0.2"]
    assert one_line["MIG0.0"] == "n/a on MIG 12.0G/40.0G 3g.40gb", one_line
    assert one_line["GPU0"].startswith("n/a in MIG mode") and one_line["GPU1"].startswith("87%")
    assert "3 MIG devices" in _text([title]) and "MIG 3g" not in _text([title])

    _, tracks = panes.gpu(frame, Geometry(100, 40), glyphs, panes.Size(focused=True))
    focused = {t.gutter[0]: t for t in tracks}
    assert _text(focused["MIG0.1"].values) == "util n/a on MIG\nmem 3.0G/20.0G"
    assert focused["MIG0.1"].gutter == ["MIG0.1", "mem%"]  # the chart is its memory: utilisation has none
    assert _text(focused["GPU0"].values) == "util n/a in MIG mode\nmem 30.0G/80.0G · pwr 412/700W"
    assert _text(focused["GPU1"].values).startswith("util 87%")
    assert not any("0%" in _text(focused[k].values) for k in ("GPU0", "MIG0.0", "MIG0.1", "MIG0.2"))


def test_the_report_says_n_a_on_mig_beside_empty_utilisation():
    monitor, _ = _recorded()
    gpus = {g["index"]: g for g in build_report(monitor.store)["system"]["gpus"]}
    mig = gpus[3]
    assert mig["util_percent_p50"] is None and mig["util_percent_max"] is None
    assert mig["util_note"] == "n/a on MIG" and mig["mig"] == {"parent": 0, "slot": 1, "gi": 3, "ci": 0}
    assert mig["mem_used_mb_max"] == 3 * 1024.0 and mig["uuid"].startswith("MIG-")
    assert gpus[0]["mig_mode"] is True and gpus[0]["util_note"] == "n/a in MIG mode"
    assert gpus[0]["power_w_p50"] == 412.35  # rounded to 2 places
    assert gpus[1]["util_percent_p50"] == 87.0 and "util_note" not in gpus[1] and "mig" not in gpus[1]
