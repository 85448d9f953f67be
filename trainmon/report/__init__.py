"""Reports from a store (a recording or a live monitor): build the report once, render it in any of FORMATS.

``build_report(store, thresholds)`` gives the typed report (``trainmon.report.schema.Report``, written as JSON
key for key); ``render(report, fmt, store=None)`` looks the format up in ``RENDERERS``, one module per format
under ``trainmon.report.formats``.
"""

from trainmon.report.build import build_report
from trainmon.report.formats.base import Renderer, ReportInput
from trainmon.report.render import FORMATS, RENDERERS, render  # the function: it shadows its module's name here
from trainmon.report.runs import run_summary
from trainmon.report.schema import Report

__all__ = ["FORMATS", "RENDERERS", "Renderer", "Report", "ReportInput", "build_report", "render", "run_summary"]
