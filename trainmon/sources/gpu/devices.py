"""What the GPU source keeps of each GPU, and the pure parts of reading them: merging one process's usage
over several GPUs, and CUDA_VISIBLE_DEVICES parsing.

MIG: each MIG device (an A100/H100 slice a job sees as its own GPU) is a device of its own, with an id after the
physical GPUs' NVML indices (GPUs 0-7 and their MIG devices 8, 9, …, in order of GPU and MIG index). A process's
GPUs are kept as a float bitmask (``trainmon.metrics.gpu_mask``): ids from 53 on (eight GPUs cut in seven) do not
fit, and a run on one of those is found by the CUDA device UUID its agent reports.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from trainmon.metrics import GPM_METRIC_IDS, GPU, GPU_NVML_FIELDS, MIG_MODE_NOTE, MIG_NOTE
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


@dataclass(frozen=True)
class Mig:
    """Where a MIG device sits: its GPU (NVML index), its MIG index there, its GPU and compute instance ids."""

    parent: int
    slot: int
    gpu_instance: int | None
    compute_instance: int | None

    def as_json(self) -> dict[str, Any]:
        return {"parent": self.parent, "slot": self.slot, "gi": self.gpu_instance, "ci": self.compute_instance}


class Device:
    """One GPU (or MIG device) as NVML showed it: handle, identity, permanent failures, GPM buffers, its series."""

    def __init__(self, index: int, handle: Any, mig: Mig | None = None) -> None:
        self.index = index
        self.mig = mig
        self.mig_mode = False  # a GPU in MIG mode: its MIG devices carry utilisation and processes, not it
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

    @property
    def unsupported_note(self) -> str:
        """What a "Not Supported" from NVML means on this device: MIG devices and GPUs in MIG mode lack figures."""
        return MIG_NOTE if self.mig is not None else MIG_MODE_NOTE if self.mig_mode else ""

    def set_gpm(self, gpm: Gpm | None) -> None:
        self.gpm = gpm
        self.series = [self.keys[m] for m in (*GPU_NVML_FIELDS, *(GPM_METRIC_IDS if gpm is not None else ()))]


def parse_visible(value: str, present: list[Device]) -> tuple[list[int], list[str]]:
    """Device ids named by a CUDA_VISIBLE_DEVICES value (see `GpuSource.resolve_visible`), and the MIG entries
    that name no MIG device present."""
    result: list[int] = []
    unresolved: list[str] = []
    for raw in value.split(","):
        tok = raw.strip()
        if tok.upper().startswith("MIG-"):
            mig = _match_mig(tok, present)
            if mig is None:
                unresolved.append(tok)
            elif mig not in result:
                result.append(mig)
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
    hits = [d.index for d in present if d.mig is None and d.uuid and d.uuid.upper().startswith(want)]
    return hits[0] if len(hits) == 1 else None


def _match_mig(tok: str, present: list[Device]) -> int | None:
    """The MIG device named "MIG-<uuid>" (or a unique prefix), or in the older "MIG-GPU-<uuid>/<gi>/<ci>" form."""
    want = tok.upper()
    migs = [d for d in present if d.mig is not None]
    if want.startswith("MIG-GPU-"):
        gpu, _, rest = want.removeprefix("MIG-").partition("/")
        gi, _, ci = rest.partition("/")
        parents = {d.index for d in present if d.mig is None and d.uuid.upper() == gpu}
        hits = [
            d.index
            for d in migs
            if d.mig is not None
            and d.mig.parent in parents
            and str(d.mig.gpu_instance) == gi
            and str(d.mig.compute_instance) == ci
        ]
    else:
        hits = [d.index for d in migs if d.uuid and d.uuid.upper().startswith(want)]
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


def nvml_pid_namespace(pids: Iterable[int], pid_exists: Callable[[int], bool]) -> str | None:
    """Whose pids NVML gives: "own" where they name processes here, "other" where at least half name none (the
    monitor in a container without the host's pid namespace: NVML speaks in host pids); None with no pids."""
    present = absent = 0
    for pid in pids:
        if pid_exists(pid):
            present += 1
        else:
            absent += 1
    if not present and not absent:
        return None
    return "other" if absent >= present else "own"


def proc_exists(pid: int) -> bool:
    """Whether ``pid`` names a process in this pid namespace (as /proc shows it)."""
    try:
        return pid > 0 and os.path.exists(f"/proc/{pid}")
    except (OSError, ValueError):
        return False
