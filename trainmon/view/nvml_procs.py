"""GPU memory for the process table where NVML's pids are not the monitor's (it runs in a container; NVML gives
host pids, kept apart as ``trainmon.metrics.NVML_PROC`` series).

Such a pid names another process here, so it is never taken for one of ours. A run gets the figure of an NVML
process only where nothing else could own it: the run is the only one on a GPU (by the CUDA device its agent
reported, ``run_gpus``) and NVML lists exactly one process there. Several runs on one GPU, or other processes
beside it, leave the figure n/a and the row says why. The row always says which pid namespace a figure is from.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmon.diagnose.evidence import run_gpus
from trainmon.metrics import GPU, NVML_PROC, mask_indices
from trainmon.numbers import is_nan
from trainmon.store.run import Run
from trainmon.store.store import Store
from trainmon.view.resample import value_at


@dataclass(frozen=True)
class NvmlFigure:
    """What the process table shows of a run's GPU memory when NVML's pids are another namespace's."""

    mem_mb: float  # NaN: not attributable
    source: str  # which pid, in which namespace, or why there is none


def nvml_figures(store: Store, runs: list[Run], t: float, fresh_s: float) -> dict[int, NvmlFigure]:
    """Run id → its GPU memory from NVML's own-namespace processes at ``t``; empty where NVML's pids are ours."""
    index = store.index()
    on_gpu: dict[int, list[int]] = {}  # GPU id → NVML pids listed there at t
    mem: dict[int, float] = {}
    for pid in index.int_ids(NVML_PROC, "gpu_mask"):
        mask = value_at(store.series.get(NVML_PROC.key(pid, "gpu_mask")), t, fresh_s)
        if is_nan(mask):
            continue  # not listed at t
        mem[pid] = value_at(store.series.get(NVML_PROC.key(pid, "gpu_mem_mb")), t, fresh_s)
        for g in mask_indices(mask):
            on_gpu.setdefault(g, []).append(pid)
    if not mem:
        return {}
    gpus = index.int_ids(GPU, "util")
    run_on = {run.id: run_gpus(store, run, gpus) for run in runs}
    runs_on: dict[int, list[int]] = {}
    for rid, own in run_on.items():
        for g in own:
            runs_on.setdefault(g, []).append(rid)
    out = {}
    for rid, own in run_on.items():
        if not own:
            out[rid] = NvmlFigure(float("nan"), "n/a: NVML gives host pids, and this run's GPU is unknown")
            continue
        sole = {on_gpu[g][0] for g in own if len(runs_on[g]) == 1 and len(on_gpu.get(g, ())) == 1}
        crowded = [g for g in own if len(runs_on[g]) > 1 or len(on_gpu.get(g, ())) > 1]
        if len(sole) == 1 and not crowded:
            (pid,) = sole
            out[rid] = NvmlFigure(mem[pid], f"host pid {pid} (NVML), the only process on its GPU")
        elif crowded:
            g = crowded[0]
            out[rid] = NvmlFigure(
                float("nan"),
                f"n/a: NVML gives host pids; {_label(store, g)} has {len(runs_on[g])} run(s) "
                f"and {len(on_gpu.get(g, ()))} process(es)",
            )
        else:
            out[rid] = NvmlFigure(float("nan"), f"n/a: NVML lists no process on {_label(store, own[0])}")
    return out


def _label(store: Store, gpu: int) -> str:
    for d in store.metadata.get("gpus") or []:
        if isinstance(d, dict) and d.get("index") == gpu and isinstance(mig := d.get("mig"), dict):
            return f"MIG{mig.get('parent')}.{mig.get('slot')}"
    return f"GPU{gpu}"
