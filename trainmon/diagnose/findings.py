"""Findings and the fixed verdict codes (the codes are a public contract: add, never rename; docs/architecture.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("ok", "warning", "critical")

# code → one-line meaning; order = priority when several hold (first wins at equal severity).
CODES: dict[str, str] = {
    "stall.hang": "no step for far longer than usual while the process lives (stacks dumped automatically)",
    "stall.checkpoint": "checkpoint saves take a material share of wall time",
    "dist.straggler": "one rank is slower than the rest",
    "input.main_process": "data loads in the main process (num_workers=0) and the loop waits on it",
    "input.io": "DataLoader workers mostly wait on reads rather than compute",
    "input.workers_cpu": "workers are CPU-bound and the host CPU is saturated",
    "input.too_few_workers": "workers are busy all the time while the host has idle cores",
    "input.epoch_restart": "worker start-up and first batches at every epoch (no persistent_workers) cost wall time",
    "input.host_to_device": "host→device copies are exposed",
    "dist.comm": "time in collectives is a material share of the step and no single rank explains it",
    "host.overhead": "the main thread is busy outside data waits while the accelerator idles",
    "host.sync": "the GPU drains every step because the host waits on it (.item(), .cpu(), synchronize)",
    "gpu.small_work": "the GPU reports busy but its SMs are mostly idle: small batches, tiny or launch-bound kernels",
    "gpu.no_tensor_cores": "SMs active, tensor pipes idle on a GPU that has them: AMP / bf16 / TF32 unused",
    "memory.host_pressure": "host memory nearly full or swapping",
    "memory.gpu_pressure": "accelerator memory nearly full",
    "gpu.throttled": "clocks held down by power or thermal limits",
    "stall.periodic": "recurring long steps (eval, logging bursts, GC)",
    "ok.compute_bound": "no starvation: the accelerator (or the compute) is the limit",
    "insufficient_data": "too few steps after warm-up to judge",
}
PRIORITY = {code: i for i, code in enumerate(CODES)}
IMMEDIATE = frozenset({"stall.hang"})  # shown as soon as they hold: a hang only gets worse with waiting


@dataclass
class Finding:
    code: str
    severity: str
    summary: str
    advice: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown verdict code {self.code!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    @property
    def rank(self) -> tuple[int, int]:
        """Sort key: worse severity first, then the table's priority."""
        return (-SEVERITIES.index(self.severity), PRIORITY[self.code])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def headline(findings: list[Finding]) -> Finding | None:
    return min(findings, key=lambda f: f.rank) if findings else None
