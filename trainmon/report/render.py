"""The format registry: format name → renderer, and ``render(report, fmt, store=None)``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmon.report.formats import chrome_trace, html, json_format, markdown, text
from trainmon.report.formats.base import Renderer, ReportInput
from trainmon.report.schema import Report

if TYPE_CHECKING:
    from trainmon.store.store import Store

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
