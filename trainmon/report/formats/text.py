"""The plain-text report: verdict, runs table, other findings, timeline."""

from __future__ import annotations

from trainmon.labels import run_label
from trainmon.report.budget import BUDGET_NOTE, BUDGET_TITLE, budget_blocks
from trainmon.report.cells import RUN_HEADER, run_cells
from trainmon.report.energy import ENERGY_TITLE, energy_lines
from trainmon.report.formats.base import ReportInput, monitor_cost_line
from trainmon.report.schema import Report
from trainmon.report.stacks import printed_dumps


def render(source: ReportInput) -> str:
    report = source.report
    v = report["verdict"]
    lines = [f"trainmon report — {report['duration_s']:.1f} s recorded, {len(report['runs'])} run(s)", ""]
    lines.append(f"VERDICT  {v['code']}  [{v['severity']}]  held {v['held_s']:.0f} s")
    lines.append(f"  {v['summary']}")
    for advice in v["advice"]:
        lines.append(f"  → {advice}")
    lines.append("")
    rows = [RUN_HEADER] + [run_cells(r) for r in report["runs"]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(RUN_HEADER))]
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    if energy := energy_lines(report):
        lines += ["", f"{ENERGY_TITLE}:", *(f"  {line}" for line in energy)]
    lines += _budget(report)
    if report["findings"]:
        lines += ["", "Other findings:"]
        for f in report["findings"]:
            lines.append(f"  {f['code']} [{f['severity']}] held {f['held_s']:.0f} s: {f['summary']}")
    if report["timeline"]:
        lines += ["", "Timeline (phases):"]
        for e in report["timeline"]:
            lines.append(f"  {e['t']:7.1f} – {e['end']:7.1f} s  {e['code']} [{e['severity']}]  {e['summary']}")
    for heading, stack in printed_dumps(report):
        lines += ["", f"Stacks of {heading}:", *(f"  {line}" for line in stack)]
    if (cost := monitor_cost_line(report)) is not None:
        lines += ["", cost]
    for w in report.get("warnings", []):
        lines.append(f"warning: {w}")
    return "\n".join(lines) + "\n"


def _budget(report: Report) -> list[str]:
    blocks = budget_blocks(
        [(f"{run_label(r['rank'], r['pid'])} {r['name']}", r["time_budget"]) for r in report["runs"]]
    )
    if not blocks:
        return []
    out = ["", f"{BUDGET_TITLE} ({BUDGET_NOTE}):"]
    for heading, cells in blocks:
        out.append(f"  {heading}")
        width = max(len(label) for label, _, _ in cells if _) if cells else 0
        for label, seconds, share in cells:
            out.append(f"    {label.ljust(width)}  {seconds:>9}  {share:>6}".rstrip() if seconds else f"    {label}")
    return out
