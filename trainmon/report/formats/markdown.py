"""The Markdown report (for a CI summary or a pull request comment)."""

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
    out = [
        f"## trainmon report ({report['duration_s']:.1f} s, {len(report['runs'])} run(s))",
        "",
        f"**Verdict: `{v['code']}`** ({v['severity']}, held {v['held_s']:.0f} s) — {v['summary']}",
        "",
    ]
    out += [f"- {a}" for a in v["advice"]]
    out += ["", "| " + " | ".join(RUN_HEADER) + " |", "|" + "---|" * len(RUN_HEADER)]
    for r in report["runs"]:
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in run_cells(r)) + " |")
    if energy := energy_lines(report):
        out += ["", f"{ENERGY_TITLE}:", "", *(f"- {line}" for line in energy)]
    out += _budget(report)
    if report["findings"]:
        out += ["", "### Other findings", ""]
        out += [
            f"- `{f['code']}` ({f['severity']}, held {f['held_s']:.0f} s): {f['summary']}" for f in report["findings"]
        ]
    if report["timeline"]:
        out += ["", "### Timeline", ""]
        out += [
            f"- {e['t']:.1f}–{e['end']:.1f} s: `{e['code']}` ({e['severity']}) — {e['summary']}"
            for e in report["timeline"]
        ]
    for heading, stack in printed_dumps(report):
        out += ["", f"### Stacks of {heading}", "", "```", *stack, "```"]
    if (cost := monitor_cost_line(report)) is not None:
        out += ["", f"_{cost}_"]
    warnings = report.get("warnings", [])
    if warnings:
        out += ["", *[f"> warning: {w}" for w in warnings]]
    return "\n".join(out) + "\n"


def _budget(report: Report) -> list[str]:
    blocks = budget_blocks(
        [(f"{run_label(r['rank'], r['pid'])} {r['name']}", r["time_budget"]) for r in report["runs"]]
    )
    if not blocks:
        return []
    out = ["", f"### {BUDGET_TITLE}", "", f"_{BUDGET_NOTE}_"]
    for heading, cells in blocks:
        out += ["", f"**{heading}**", "", "| part | time | share |", "|---|---:|---:|"]
        out += [f"| {label} | {seconds} | {share} |" for label, seconds, share in cells if seconds]
        out += [f"- {label}" for label, seconds, _ in cells if not seconds]
    return out
