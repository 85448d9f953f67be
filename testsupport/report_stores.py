"""Stores for the synthetic golden reports: what the committed recordings (CPU-only demo trainings) never hold.

``gpu_ranks_store``: two ranks of one job on two throttled GPUs, checkpoints, busy workers, two disks.
``periodic_pyspy_store``: periodic long steps on a saturated, throttled GPU, a process seen only by py-spy and
an idle launcher. Both are built from ``uniform_store``; their reports are under tests/data/reports.
"""

from __future__ import annotations

from testsupport.stores import uniform_store, worker_figs
from trainmon.metrics import gpu_mask
from trainmon.store.store import Store


def gpu_host(n: int = 2, util: float = 30.0, throttle: float = 4.0) -> dict[str, float]:
    """Host figures with ``n`` GPUs (GPU ``i`` at ``util + i`` % and throttle bits ``throttle + 64 i``) and two
    disks, one of them busy."""
    host: dict[str, float] = {}
    for i in range(n):
        g = f"gpu.{i}."
        host |= {
            g + "util": util + i,
            g + "util_min": util - 5,
            g + "mem_used_mb": 1000.0 * (i + 1),
            g + "mem_total_mb": 16000.0,
            g + "power_w": 100.0,
            g + "power_limit_w": 300.0,
            g + "temp_c": 60.0,
            g + "sm_clock_mhz": 1400.0,
            g + "pcie_rx_mb_s": 10.0,
            g + "pcie_tx_mb_s": 2.0,
            g + "gpm.sm_active": 20.0,
            g + "throttle": throttle + i * 64,
        }
    host |= {
        "disk.sda.read_mb_s": 50.0,
        "disk.sda.write_mb_s": 1.0,
        "disk.sda.util_pct": 80.0,
        "disk.sda.r_await_ms": 3.0,
        "disk.sdb.util_pct": 5.0,
        "disk.sdb.read_mb_s": 1.5,
    }
    return host


def gpu_ranks_store() -> Store:
    """Rank 0 waits on data (busy, CPU-starved workers), rank 1 loads in its main process; each rank on its own
    GPU (NVML's per-process list); two GPUs in the meta (and a value JSON cannot hold, which the JSON report writes
    as a string)."""
    store = uniform_store(
        wait_ms=30,
        step_ms=50,
        steps=400,
        host=gpu_host(),
        procs=worker_figs(95.0, runq=40.0) | {10: {"gpu_mask": gpu_mask([0])}},
        checkpoints=[(2000.0, 2600.0), (9000.0, 9400.0)],
        hello={"rank": 0, "name": "t|rain.py", "world_size": 2},
    )
    uniform_store(
        wait_ms=2,
        step_ms=70,
        steps=300,
        store=store,
        pid=11,
        run_id=2,
        hello={"rank": 1, "world_size": 2},
        workers=0,
        procs={11: {"gpu_mask": gpu_mask([1])}},
    )
    store.meta(0.0, {"gpus": [{"name": "A100", "uuid": "GPU-1"}, {"name": "A100", "uuid": "GPU-2"}], "x": {1, 2}})
    return store


def periodic_pyspy_store() -> Store:
    """A long step every 25 on a GPU at 95 %; pid 777 known only from py-spy and /proc, pid 10 also sampled by
    py-spy, and a launcher (run 9) that said hello and never trained."""
    store = uniform_store(
        wait_ms=1, step_ms=40, steps=300, long_every=25, long_ms=900, host=gpu_host(1, util=95.0, throttle=8.0)
    )
    for k in range(15):
        store.sample(
            float(k),
            {
                "pyspy.777.samples": 10.0,
                "pyspy.777.data_wait_share": 0.5,
                "proc.777.cpu_pct": 50.0,
                "pyspy.10.samples": 5.0,
                "pyspy.10.data_wait_share": 0.2,
                "proc.777.rss_mb": 300.0 + k,
            },
        )
    store.hello(9, 0.5, {"pid": 4242, "name": "launcher"})
    return store


SYNTHETIC_STORES = {"gpu-ranks": gpu_ranks_store, "periodic-pyspy": periodic_pyspy_store}
