"""What the GPU source keeps of each GPU, and the pure parts of reading them: merging one process's usage
over several GPUs, and CUDA_VISIBLE_DEVICES parsing."""

from __future__ import annotations

import math
from typing import Any

from trainmon.metrics import GPM_METRIC_IDS, GPU, GPU_NVML_FIELDS
from trainmon.numbers import NAN, is_nan


class Gpm:
    """Two GPM sample buffers used alternately: each tick's sample is compared with the previous one."""

    def __init__(self, samples: list[Any], query: Any) -> None:
        self.samples = samples
        self.query = query  # one reusable nvmlGpmMetricsGet_t
        self.cur = 0
        self.have_prev = False
        self.prev_t = -math.inf
        self.values = dict.fromkeys(GPM_METRIC_IDS, NAN)


class Device:
    """One GPU as NVML showed it: handle, identity, permanent failures, GPM buffers, the series it writes."""

    def __init__(self, index: int, handle: Any) -> None:
        self.index = index
        self.handle = handle
        self.prefix = GPU.id_prefix(index)
        self.keys = GPU.keys(index)
        self.name = ""
        self.uuid = ""
        self.mem_total_mb = NAN
        self.sm_clock_max = NAN
        self.skip: dict[str, str] = {}  # function key → reason, for permanent failures
        self.lost: str | None = None
        self.lost_probe_t = -math.inf
        self.util_ts = 0  # newest utilisation sample seen (NVML's clock, µs)
        self.proc_ts = 0  # newest per-process utilisation sample seen
        self.gpm: Gpm | None = None
        self.gpm_status = "not checked"
        self.series = [self.keys[m] for m in GPU_NVML_FIELDS]

    def set_gpm(self, gpm: Gpm | None) -> None:
        self.gpm = gpm
        self.series = [self.keys[m] for m in (*GPU_NVML_FIELDS, *(GPM_METRIC_IDS if gpm is not None else ()))]


def parse_visible(value: str, present: list[Device]) -> tuple[list[int], list[str]]:
    """NVML indices named by a CUDA_VISIBLE_DEVICES value (see `GpuSource.resolve_visible`), and the MIG UUIDs
    left unresolved."""
    result: list[int] = []
    unresolved: list[str] = []
    for raw in value.split(","):
        tok = raw.strip()
        if tok.upper().startswith("MIG-"):
            unresolved.append(tok)
            continue
        index = _match_device(tok, present)
        if index is None or index in result:
            break
        result.append(index)
    return result, unresolved


def _match_device(tok: str, present: list[Device]) -> int | None:
    if not tok:
        return None
    if tok.isdigit():
        i = int(tok)
        return i if any(d.index == i for d in present) else None
    want = tok.upper()
    if not want.startswith("GPU-"):
        want = "GPU-" + want
    hits = [d.index for d in present if d.uuid and d.uuid.upper().startswith(want)]
    return hits[0] if len(hits) == 1 else None


def merge_processes(per_gpu: dict[int, dict[int, tuple[float, float]]]) -> dict[int, dict[str, Any]]:
    by_pid: dict[int, list[tuple[int, float, float]]] = {}
    for gpu, procs in sorted(per_gpu.items()):
        for pid, (mem, sm) in procs.items():
            by_pid.setdefault(pid, []).append((gpu, mem, sm))
    out: dict[int, dict[str, Any]] = {}
    for pid, rows in by_pid.items():
        # The GPU holding most of its memory is "its" GPU; an unknown amount (NaN) never wins.
        gpu, _, sm = max(rows, key=lambda r: (not is_nan(r[1]), 0.0 if is_nan(r[1]) else r[1], -r[0]))
        known = [r[1] for r in rows if not is_nan(r[1])]
        out[pid] = {"gpu": gpu, "mem_mb": sum(known) if known else NAN, "sm_pct": sm, "gpus": [r[0] for r in rows]}
    return out
