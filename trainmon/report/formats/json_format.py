"""The report as JSON, keys in the order the builder writes them (the machine-readable contract)."""

from __future__ import annotations

import json

from trainmon.report.formats.base import ReportInput


def render(source: ReportInput) -> str:
    # default=str: a value JSON has no type for (in evidence or recording metadata) is written as text.
    return json.dumps(source.report, indent=2, default=str) + "\n"
