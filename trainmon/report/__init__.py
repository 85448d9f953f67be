"""Reports from recordings: text, Markdown, JSON."""

from trainmon.report.build import build_report, run_summary
from trainmon.report.render import FORMATS, render

__all__ = ["FORMATS", "build_report", "render", "run_summary"]
