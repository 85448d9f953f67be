"""The stacks shown with the evidence: the dumps the monitor took for the findings that hold at the shown instant."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainmon.store.stacks import stack_lines
from trainmon.store.store import Store
from trainmon.view.frames import StackEvidenceView, VerdictView

RECENT_S = 600.0  # dumps older than this are another episode's (a cause that holds is dumped every 5 min)


def stack_views(
    store: Store, verdict: VerdictView, instant: float, at_label: Callable[[float], str]
) -> list[StackEvidenceView]:
    """Per run, the latest dump taken by ``instant`` (and within RECENT_S of it) for each code shown."""
    codes = {verdict.code, *(f.code for f in verdict.findings)}
    out: list[StackEvidenceView] = []
    for run in store.runs.values():
        latest: dict[str, dict[str, Any]] = {}
        for dump in run.stack_dumps:
            if dump["reason"] in codes and instant - RECENT_S <= dump["t"] <= instant:
                latest[dump["reason"]] = dump
        out.extend(
            StackEvidenceView(run.label, reason, at_label(dump["t"]), stack_lines(dump))
            for reason, dump in latest.items()
        )
    return out
