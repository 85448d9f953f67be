"""The stacks the monitor dumped for a run when a critical verdict fired, as the report lists and prints them."""

from __future__ import annotations

import copy
from typing import Any

from trainmon.labels import run_label
from trainmon.report.schema import RunRow
from trainmon.store.run import Run
from trainmon.store.stacks import stack_lines


def stack_dumps(run: Run, first: float) -> list[dict[str, Any]]:
    """The run's dumps, oldest first, their ``t`` in seconds from the report's start ``first``."""
    out = []
    for dump in run.stack_dumps:
        entry = copy.deepcopy(dump)
        entry["t"] = round(dump["t"] - first, 2)
        out.append(entry)
    return out


def printed_dumps(runs: list[RunRow]) -> list[tuple[str, list[str]]]:
    """Every run's dumps as (heading, lines) for the human-readable formats."""
    return [
        (
            f"{run_label(run['rank'], run['pid'])}: dumped when {dump['reason']} fired, at {dump['t']:.1f} s",
            stack_lines(dump),
        )
        for run in runs
        for dump in run["stack_dumps"]
    ]
