"""What every report renderer takes and returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainmon.report.schema import Report

if TYPE_CHECKING:
    from trainmon.store.store import Store


@dataclass(frozen=True)
class ReportInput:
    """The built report and, for formats that go back to every sample (chrome-trace), the store it came from."""

    report: Report
    store: Store | None = None


Renderer = Callable[[ReportInput], str]


def monitor_cost_line(report: Report) -> str | None:
    """What the watching cost, in one sentence; None for a recording without the monitor's own series."""
    cost = report["system"].get("monitor_cost")
    if not cost or cost["cpu_percent_p50"] is None:
        return None
    line = f"trainmon itself: {cost['cpu_percent_p50']:.1f} % of a core (p50; p95 {cost['cpu_percent_p95']:.1f} %)"
    if cost["helpers_cpu_percent_p50"]:
        line += f", py-spy sampling {cost['helpers_cpu_percent_p50']:.1f} %"
    if cost["rss_mb_max"] is not None:
        line += f", {cost['rss_mb_max']:.0f} MB resident at most"
    return line
