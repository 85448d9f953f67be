"""Reports from a store (a recording or a live monitor): build the report once, render it in any of FORMATS.

``build_report(store, thresholds)`` gives the typed report (``trainmon.report.schema.Report``, written as JSON
key for key); ``render(report, fmt, store=None)`` looks the format up in ``RENDERERS``, one module per format
under ``trainmon.report.formats``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmon.report.build import build_report
from trainmon.report.formats import chrome_trace, html, json_format, markdown, text
from trainmon.report.formats.base import Renderer, ReportInput
from trainmon.report.runs import run_summary
from trainmon.report.schema import Report

if TYPE_CHECKING:
    from trainmon.store.store import Store

# The format registry, in the order `trainmon report --format` lists them.
RENDERERS: dict[str, Renderer] = {
    "text": text.render,
    "markdown": markdown.render,
    "json": json_format.render,
    "html": html.render,
    "chrome-trace": chrome_trace.render,
}
FORMATS = tuple(RENDERERS)


def render(report: Report, fmt: str, store: Store | None = None) -> str:
    """``report`` in format ``fmt`` (an unknown name gives text). chrome-trace also needs the ``store``."""
    return RENDERERS.get(fmt, text.render)(ReportInput(report, store))


__all__ = ["FORMATS", "RENDERERS", "Renderer", "Report", "ReportInput", "build_report", "render", "run_summary"]
