"""Stores with GPU energy series, built through the monitor's Ingest calls: runs of alike steps, each on its own
GPUs, and per GPU a cumulative ``energy_j`` with how each interval was measured, as the GPU source writes them."""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable

from trainmon import protocol as P
from trainmon.metrics import GPU, PROC, gpu_mask
from trainmon.store.store import Store

MS = 1_000_000
STEP_S = 0.05
BATCH = 32


def energy_store(
    runs: dict[int, list[int]],
    *,
    seconds: int = 20,
    draw: Callable[[int, int], float] = lambda gpu, k: 200.0,
    how: Callable[[int, int], float] = lambda gpu, k: 1.0,
    gpus: int = 2,
    loader: dict | None = None,
) -> Store:
    """Runs (pid → its GPUs) of alike STEP_S steps from t=0 to ``seconds``; each GPU draws ``draw(gpu, k)`` W over
    second k (from k-1 to k), measured as ``how(gpu, k)`` says (1 the counter, 0 power, NaN unmeasured)."""
    store = Store()
    for run_id, (pid, _) in enumerate(runs.items(), start=1):
        store.hello(run_id, 0.0, {"pid": pid})
        store.info(run_id, 0, {"loader": {"id": 1, "batch_size": BATCH, "num_workers": 0, **(loader or {})}})
        recs: list[int] = []
        t = 0.0
        while t + STEP_S <= seconds:
            recs += [P.K_WAIT | 1 << 8, int(t * 1e3 * MS), int((t + 0.005) * 1e3 * MS), 0]
            t += STEP_S
            recs += [P.K_OPT, int(t * 1e3 * MS), int(t * 1e3 * MS), 0]
        store.events(run_id, t, array("q", recs))
    total = dict.fromkeys(range(gpus), 0.0)
    for k in range(seconds + 1):
        values = {}
        for g in range(gpus):
            if k:
                total[g] += draw(g, k)
            values |= {GPU.key(g, "util"): 90.0, GPU.key(g, "energy_j"): total[g], GPU.key(g, "mem_used_mb"): 41_000.0}
            values |= {GPU.key(g, "mem_total_mb"): 81_559.0, GPU.key(g, "power_w"): draw(g, max(k, 1))}
            values[GPU.key(g, "energy_counter")] = how(g, k) if k else math.nan
        for pid, own in runs.items():
            values |= {PROC.key(pid, "rss_mb"): 100.0, PROC.key(pid, "gpu_mask"): gpu_mask(own)}
        store.sample(float(k), values)
    return store
