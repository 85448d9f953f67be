"""One module per report format; each exposes ``render(source: ReportInput) -> str``.

The registry of format names is ``trainmon.report.RENDERERS``.
"""
