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
