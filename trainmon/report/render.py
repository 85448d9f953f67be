"""Render a report dict as text, Markdown or JSON."""

from __future__ import annotations

import json
from typing import Any

FORMATS = ("text", "markdown", "json", "html", "chrome-trace")


def _fmt(value: Any, suffix: str = "", digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}{suffix}"
    return f"{value}{suffix}"


def _loader(cfg: dict | None) -> str:
    if not cfg:
        return "n/a"
    return (
        f"bs={_fmt(cfg.get('batch_size'))} workers={_fmt(cfg.get('num_workers'))} "
        f"pin={_fmt(cfg.get('pin_memory'))} prefetch={_fmt(cfg.get('prefetch_factor'))} "
        f"persistent={_fmt(cfg.get('persistent_workers'))}"
    )


def _run_cells(run: dict) -> list[str]:
    st = run.get("step_time_ms") or {}
    wait = run.get("data_wait_fraction")
    who = f"rank {run['rank']}" if run.get("rank") is not None else f"pid {run.get('pid')}"
    return [
        f"{who} {run.get('name', '')}".strip(),
        str(run.get("steps")),
        f"{_fmt(st.get('p50'))} / {_fmt(st.get('p95'))}",
        _fmt(wait * 100 if wait is not None else None, "%"),
        _fmt(run.get("samples_per_s")),
        _loader(run.get("dataloader")),
    ]


HEAD = ["run", "steps", "step ms p50 / p95", "data wait", "samples/s", "loader"]


def render_text(report: dict) -> str:
    v = report["verdict"]
    lines = [f"trainmon report — {report['duration_s']:.1f} s recorded, {len(report['runs'])} run(s)", ""]
    lines.append(f"VERDICT  {v['code']}  [{v['severity']}]")
    lines.append(f"  {v['summary']}")
    for advice in v.get("advice", []):
        lines.append(f"  → {advice}")
    lines.append("")
    rows = [HEAD] + [_run_cells(r) for r in report["runs"]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEAD))]
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    if report.get("findings"):
        lines += ["", "Other findings:"]
        for f in report["findings"]:
            lines.append(f"  {f['code']} [{f['severity']}] {f['summary']}")
    if report.get("timeline"):
        lines += ["", "Timeline:"]
        for entry in report["timeline"]:
            lines.append(f"  {entry['t']:8.1f} s  {entry['code']}")
    for w in report.get("warnings", []):
        lines.append(f"warning: {w}")
    return "\n".join(lines) + "\n"


def render_markdown(report: dict) -> str:
    v = report["verdict"]
    out = [
        f"## trainmon report ({report['duration_s']:.1f} s, {len(report['runs'])} run(s))",
        "",
        f"**Verdict: `{v['code']}`** ({v['severity']}) — {v['summary']}",
        "",
    ]
    out += [f"- {a}" for a in v.get("advice", [])]
    out += ["", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for r in report["runs"]:
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in _run_cells(r)) + " |")
    if report.get("findings"):
        out += ["", "### Other findings", ""]
        out += [f"- `{f['code']}` ({f['severity']}): {f['summary']}" for f in report["findings"]]
    if report.get("timeline"):
        out += ["", "### Timeline", ""]
        out += [f"- {e['t']:.1f} s: `{e['code']}`" for e in report["timeline"]]
    if report.get("warnings"):
        out += ["", *[f"> warning: {w}" for w in report["warnings"]]]
    return "\n".join(out) + "\n"


def render(report: dict, fmt: str, store=None) -> str:
    if fmt == "html":
        from trainmon.report.html import render_html

        return render_html(report)
    if fmt == "chrome-trace":
        from trainmon.report.chrome_trace import render_chrome_trace

        return render_chrome_trace(report, store)
    if fmt == "json":
        return json.dumps(report, indent=2, default=str) + "\n"
    if fmt == "markdown":
        return render_markdown(report)
    return render_text(report)
