"""How trainmon names things to people: a run, a process's role, the step-rate status line.

Every view (TUI, status line, report, diagnosis evidence) calls these, so a run is called the same everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trainmon.numbers import is_nan


def run_label(rank: int | None, pid: int) -> str:
    """ "rank N" for a distributed run, else "pid N"."""
    return f"rank {rank}" if rank is not None else f"pid {pid}"


def main_role(hello: dict[str, Any]) -> str:
    """The role of a run's main process in the process table: "rank" in a multi-process job, else "main"."""
    return "rank" if (hello.get("world_size") or 1) > 1 else "main"


def loader_summary(config: Mapping[str, Any]) -> str:
    """A DataLoader's settings in a few words for a screen: "bs 32 · 2 workers · no pin · persistent"."""
    parts = []
    if isinstance(config.get("batch_size"), int):
        parts.append(f"bs {config['batch_size']}")
    workers = config.get("num_workers")
    if isinstance(workers, int):
        parts.append(f"{workers} worker{'s' if workers != 1 else ''}")
    if "pin_memory" in config:
        parts.append("pin" if config.get("pin_memory") else "no pin")
    if config.get("persistent_workers"):
        parts.append("persistent")
    return " · ".join(parts)


def status_run_part(label: str, steps_per_s: float, wait_fraction: float, steps: int) -> str:
    """One run's part of the status line (NaN wait → n/a)."""
    wait = "  n/a" if is_nan(wait_fraction) else f"{wait_fraction:5.1%}"
    return f"{label}: {steps_per_s:6.1f} steps/s, data wait {wait}, {steps} steps"


def status_sampled_part(label: str, name: str, wait_fraction: float) -> str:
    """A training found running without an agent: its sampled data-wait estimate (NaN → n/a)."""
    wait = "n/a" if is_nan(wait_fraction) else f"~{wait_fraction:.0%}"
    return f"{label} {name}: not attached, sampled data wait {wait}"


def status_text(parts: Iterable[str], verdict: tuple[str, str] | None, idle: str) -> str:
    """The runs' parts joined, then the verdict (code, summary) or "…" while none holds yet."""
    runs = " | ".join(parts) or idle
    shown = f"{verdict[0]}: {verdict[1]}" if verdict is not None else "…"
    return f"{runs}  ▶ {shown}"
