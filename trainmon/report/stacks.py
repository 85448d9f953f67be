"""The stacks the monitor dumped for a run when a critical verdict fired, as the report lists and prints them."""

from __future__ import annotations

import copy
from typing import Any

from trainmon.labels import run_label
from trainmon.report.schema import Report
from trainmon.store.run import Run
from trainmon.store.stacks import stack_lines


def stack_dumps(run: Run, first: float) -> list[dict[str, Any]]:
    """The run's dumps, oldest first, their ``t`` in seconds from the report's start ``first``."""
    out = []
    for dump in sorted(run.stack_dumps, key=lambda d: d["t"]):
        entry = copy.deepcopy(dump)
        entry["t"] = round(dump["t"] - first, 2)
        out.append(entry)
    return out


def printed_dumps(report: Report) -> list[tuple[str, list[str]]]:
    """(heading, lines) for the human-readable formats: per run, the latest dump of each cause the report names
    (its verdict or another finding); the JSON report lists every dump."""
    named = {report["verdict"]["code"], *(f["code"] for f in report["findings"])}
    out: list[tuple[str, list[str]]] = []
    for run in report["runs"]:
        latest = {dump["reason"]: dump for dump in run["stack_dumps"] if dump["reason"] in named}
        for dump in sorted(latest.values(), key=lambda d: d["t"]):
            heading = f"{run_label(run['rank'], run['pid'])}: dumped when {dump['reason']} fired, at {dump['t']:.1f} s"
            out.append((heading, stack_lines(dump)))
    return out
