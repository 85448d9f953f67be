"""The monitor in a container: NVML gives host pids, which name no process here (or, by chance, another one).

Through the fake pynvml (the one boundary faked: its process lists hold pids absent from this machine's /proc,
as a containerised monitor sees them) and the real GpuSource, Monitor, store, view and process-table cells.
A host pid is never taken for one of ours; a run gets an NVML process's GPU memory only where nothing else can
own it (the only run on its GPU, by the CUDA device its agent reported, with one process listed there), and the
row says which pid namespace the figure came from, or why there is none.
"""

from __future__ import annotations

import math
import os
import time

from testsupport.fake_pynvml import GIB, FakeNvml
from testsupport.stores import replay_at_end
from trainmon.diagnose.evidence import run_gpus
from trainmon.metrics import GPU, NVML_PROC, PROC, mask_indices
from trainmon.monitor import Monitor
from trainmon.sources.gpu.devices import nvml_pid_namespace, proc_exists
from trainmon.sources.gpu.gpu_source import GpuSource
from trainmon.tui.widgets import proc_cells
from trainmon.view import Layout, build_frame

HOST_PIDS = (3_456_789, 3_456_790, 3_456_791)  # what NVML says from outside the container: none exist here


def test_host_pids_are_told_apart_from_ours_by_proc():
    assert not any(proc_exists(p) for p in HOST_PIDS) and proc_exists(os.getpid())
    ours = [os.getpid(), os.getppid(), 1]
    assert nvml_pid_namespace(ours, proc_exists) == "own"
    assert nvml_pid_namespace(HOST_PIDS, proc_exists) == "other"
    assert nvml_pid_namespace([*ours, HOST_PIDS[0]], proc_exists) == "own"  # one just exited: still ours
    assert nvml_pid_namespace([HOST_PIDS[0], os.getpid()], proc_exists) == "other"  # a host pid that exists here
    assert nvml_pid_namespace([], proc_exists) is None


def test_the_source_keeps_host_pids_apart_and_never_hands_them_out():
    fake = FakeNvml(2)
    fake.devices[0].processes = [(HOST_PIDS[0], 12 * GIB)]
    fake.devices[1].processes = [(HOST_PIDS[1], 3 * GIB), (os.getpid(), GIB)]  # a host pid that is ours by chance
    src = GpuSource(fake)
    out = src.sample(1.0)
    assert src.nvml_pids == "other" and src.process_usage() == {}
    assert out[NVML_PROC.key(HOST_PIDS[0], "gpu_mem_mb")] == 12 * 1024.0
    assert mask_indices(out[NVML_PROC.key(HOST_PIDS[1], "gpu_mask")]) == [1]
    assert mask_indices(out[NVML_PROC.key(os.getpid(), "gpu_mask")]) == [1]  # kept apart, under NVML's pid
    assert not any(PROC.parse(k) for k in out)
    listed = fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"]
    assert src.process_usage() == {} and fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == listed + 2

    fake.devices[0].processes = [(os.getpid(), GIB)]  # the lists name our processes again
    fake.devices[1].processes = []
    src.sample(2.0)
    assert src.nvml_pids == "own" and src.process_usage()[os.getpid()]["gpus"] == [0]


def test_a_sample_and_the_process_usage_after_it_read_the_lists_once():
    fake = FakeNvml(1)
    fake.devices[0].processes = [(os.getpid(), GIB)]
    src = GpuSource(fake)
    src.sample(1.0)
    assert src.process_usage()[os.getpid()]["mem_mb"] == 1024.0
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1


# ---------------------------------------------------------------- through the monitor to the process table


def _monitor(fake: FakeNvml, runs: dict[int, tuple[int, str]]) -> Monitor:
    """A monitor over ``fake`` with runs (id → (pid, reported CUDA UUID)) ticked three times."""
    monitor = Monitor(listen=False, nvml_module=fake)
    t = time.monotonic()
    monitor.ingest.meta(t, {"gpus": monitor.gpu.devices() if monitor.gpu else []})
    for rid, (pid, uuid) in runs.items():
        monitor.store.hello(rid, t, {"pid": pid})
        torch_uuid = uuid.removeprefix("GPU-").removeprefix("MIG-")  # as torch reports it
        monitor.store.info(rid, t, {"cuda_device": {"index": 0, "uuid": torch_uuid, "name": "H100"}})
    for _ in range(3):
        monitor.tick()
        time.sleep(0.02)
    monitor.stop()
    return monitor


def _rows(monitor: Monitor) -> dict[int, object]:
    feed = replay_at_end(monitor.store)
    frame = build_frame(feed, Layout(40, 1), feed.clock.end, 60.0, None)
    return {row.pid: row for row in frame.procs}


def test_the_only_run_on_a_gpu_gets_its_one_nvml_process_and_says_whose_pid_it_is():
    me = os.getpid()
    fake = FakeNvml(2)
    fake.devices[1].processes = [(HOST_PIDS[0], 12 * GIB)]  # our training, seen from the host
    fake.devices[0].processes = [(HOST_PIDS[1], 30 * GIB)]  # someone else's job on the other GPU
    monitor = _monitor(fake, {1: (me, fake.devices[1].uuid)})
    store = monitor.store
    assert store.latest(PROC.key(me, "gpu_mem_mb")) is None  # no host pid was taken for ours
    assert run_gpus(store, store.runs[1], store.index().int_ids(GPU, "util")) == [1]
    row = _rows(monitor)[me]
    assert row.gpu_mb == 12 * 1024.0
    assert row.gpu_source == "host pid 3456789 (NVML), the only process on its GPU"
    cells = proc_cells(row)
    assert cells[0] == str(me) and cells[6] == "12.0G" and "GPU mem host pid 3456789 (NVML)" in cells[7]


def test_two_runs_on_one_gpu_get_no_figure_and_say_why():
    fake = FakeNvml(1)
    fake.devices[0].processes = [(HOST_PIDS[0], 12 * GIB), (HOST_PIDS[1], 4 * GIB)]
    uuid = fake.devices[0].uuid
    monitor = _monitor(fake, {1: (os.getpid(), uuid), 2: (os.getppid(), uuid)})
    rows = _rows(monitor)
    for pid in (os.getpid(), os.getppid()):
        if pid not in rows:
            continue  # the parent is tracked as a run, but only pids the process source reads have rows
        assert math.isnan(rows[pid].gpu_mb)
        assert rows[pid].gpu_source == "n/a: NVML gives host pids; GPU0 has 2 run(s) and 2 process(es)"
        assert proc_cells(rows[pid])[6] == "-"
    assert os.getpid() in rows


def test_one_run_beside_another_containers_process_gets_no_figure():
    fake = FakeNvml(1)
    fake.devices[0].processes = [(HOST_PIDS[0], 12 * GIB), (HOST_PIDS[1], 4 * GIB)]
    monitor = _monitor(fake, {1: (os.getpid(), fake.devices[0].uuid)})
    row = _rows(monitor)[os.getpid()]
    assert math.isnan(row.gpu_mb) and row.gpu_source.endswith("GPU0 has 1 run(s) and 2 process(es)")


def test_a_run_on_a_mig_device_in_a_container_gets_its_figure():
    fake = FakeNvml(1)
    migs = fake.enable_mig(0, ["3g.40gb", "3g.40gb"])
    migs[1].processes = [(HOST_PIDS[2], 9 * GIB)]
    migs[0].processes = [(HOST_PIDS[0], 20 * GIB)]
    monitor = _monitor(fake, {1: (os.getpid(), migs[1].uuid)})
    row = _rows(monitor)[os.getpid()]
    assert row.gpu_mb == 9 * 1024.0 and row.gpu_source.startswith("host pid 3456791 (NVML)")


def test_where_nvml_pids_are_ours_the_table_is_as_before():
    me = os.getpid()
    fake = FakeNvml(1)
    fake.devices[0].processes = [(me, 5 * GIB)]
    monitor = _monitor(fake, {1: (me, fake.devices[0].uuid)})
    assert not monitor.store.index().ids(NVML_PROC)
    row = _rows(monitor)[me]
    assert row.gpu_mb == 5 * 1024.0 and row.gpu_source == "" and "GPU mem" not in row.name
