"""A self-contained HTML report: inline SVG charts on one time axis, no scripts, no network."""

from __future__ import annotations

from trainmon.diagnose.verdicts import verdict
from trainmon.labels import run_label
from trainmon.metrics import DISK, GPU, SeriesIndex
from trainmon.report.budget import BUDGET_NOTE, BUDGET_TITLE, COLOURS, budget_blocks, budget_parts
from trainmon.report.cells import RUN_HEADER, run_cells
from trainmon.report.energy import ENERGY_TITLE, energy_lines
from trainmon.report.formats.base import ReportInput
from trainmon.report.formats.svg import PAD_B, PAD_T, H, W, bars, esc, frame, nice_max, polyline, x_of
from trainmon.report.schema import Report, SeriesSection, TimeBudgetRow, TimelineEntry
from trainmon.report.stacks import printed_dumps

SEVERITY_COLOR = {"ok": "#2e7d32", "warning": "#f9a825", "critical": "#c62828"}
PALETTE = ["#1565c0", "#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#558b2f", "#4e342e", "#283593"]

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1000px;color:#212121}
h1{font-size:20px;margin:0 0 12px} h2{font-size:16px;margin:22px 0 6px}
.verdict{border-left:8px solid var(--c);background:#fafafa;padding:10px 14px;margin:8px 0 14px}
.verdict code{font-size:16px;font-weight:600} .sev{color:var(--c);font-weight:600;text-transform:uppercase}
ul{margin:6px 0 0 18px;padding:0} table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #e0e0e0;padding:4px 6px;text-align:left} th{background:#f5f5f5}
svg{display:block;margin:4px 0} .muted{color:#757575} .legend span{margin-right:14px}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.budget{display:flex;height:14px;margin:4px 0} .budget span{display:block;height:100%}
"""


def _code_color(code: str) -> str:
    return verdict(code).colour


def _verdict_strip(timeline: list[TimelineEntry], duration: float) -> str:
    rects = []
    for e in timeline:
        t0, t1 = e["t"], e["end"]
        x0, x1 = x_of(t0, duration), x_of(max(t0, t1), duration)
        rects.append(
            f'<rect x="{x0:.1f}" y="4" width="{max(1.0, x1 - x0):.1f}" height="20" '
            f'fill="{_code_color(e["code"])}"><title>{esc(e["code"])} from {t0:.1f} to {t1:.1f} s: '
            f"{esc(e['summary'])}</title></rect>"
        )
        if x1 - x0 > 90:
            rects.append(f'<text x="{x0 + 4:.1f}" y="18" font-size="11" fill="#fff">{esc(e["code"])}</text>')
    return (
        f'<div class="chart"><b>Verdict over time</b><svg viewBox="0 0 {W} 28" width="100%" role="img" '
        f'aria-label="verdict timeline">{"".join(rects)}</svg></div>'
    )


def _step_charts(series: SeriesSection, dt: float, duration: float) -> list[str]:
    """Per run: each bin's mean step split into data wait (bottom) and compute, with checkpoint marks."""
    charts = []
    for run in series["runs"]:
        step = [s or 0.0 for s in run["step_ms"]]
        wait = [min(w or 0.0, s) for w, s in zip(run["wait_ms"], step, strict=True)]
        y_max = nice_max(run["step_ms"])
        body = bars([0.0] * len(step), wait, dt, duration, y_max, "#ef6c00") + bars(
            wait, step, dt, duration, y_max, "#1565c0"
        )
        body += "".join(
            f'<line x1="{x_of(c, duration):.1f}" x2="{x_of(c, duration):.1f}" y1="{PAD_T}" y2="{H - PAD_B}" '
            f'stroke="#6a1b9a" stroke-dasharray="3,2"/>'
            for c in run["checkpoints"][:300]
        )
        charts.append(
            frame(
                f"Step time, {run['run']}: data wait and compute",
                y_max,
                "ms",
                duration,
                body,
                [("data wait", "#ef6c00"), ("compute", "#1565c0"), ("checkpoint", "#6a1b9a")],
            )
        )
    return charts


def _host_charts(report: Report, dt: float, duration: float) -> list[str]:
    """GPU utilisation (or why there is none), host CPU, and each disk the report kept series for."""
    charts = []
    metrics = report["series"]["metrics"]
    index = SeriesIndex(metrics)
    gpu = sorted(GPU.key(g, "util") for g in index.ids(GPU, "util"))
    if gpu:
        body = "".join(polyline(metrics[k], dt, duration, 100.0, PALETTE[i % 8]) for i, k in enumerate(gpu))
        charts.append(
            frame(
                "GPU utilisation",
                100.0,
                "%",
                duration,
                body,
                [(k.removesuffix(".util"), PALETTE[i % 8]) for i, k in enumerate(gpu)],
            )
        )
    else:
        reason = report["system"].get("gpu_error") or "no GPU data"
        charts.append(f'<p class="muted">GPU: {esc(reason)}</p>')
    cpu = [("cpu.busy", "busy", "#1565c0"), ("cpu.iowait", "iowait", "#c62828")]
    body = "".join(polyline(metrics[k], dt, duration, 100.0, c) for k, _, c in cpu if k in metrics)
    charts.append(frame("Host CPU", 100.0, "%", duration, body, [(n, c) for k, n, c in cpu if k in metrics]))
    for d in sorted(index.ids(DISK)):
        keys = [
            (DISK.key(d, "read_mb_s"), "read MB/s", "#00838f"),
            (DISK.key(d, "write_mb_s"), "write MB/s", "#ad1457"),
        ]
        y_max = nice_max([x for k, _, _ in keys for x in metrics.get(k, [])])
        body = "".join(polyline(metrics[k], dt, duration, y_max, c) for k, _, c in keys if k in metrics)
        util = metrics.get(DISK.key(d, "util_pct"))
        legend = [(n, c) for _, n, c in keys]
        if util:
            body += polyline([u * y_max / 100 if u is not None else None for u in util], dt, duration, y_max, "#9e9e9e")
            legend.append(("%util (scaled)", "#9e9e9e"))
        charts.append(frame(f"Disk {d}", y_max, "MB/s", duration, body, legend))
    return charts


def _lists(report: Report) -> list[str]:
    """The runs table, other findings, timeline and warnings."""
    parts = ["<h2>Runs</h2><table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in RUN_HEADER) + "</tr>"]
    for r in report["runs"]:
        parts.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in run_cells(r)) + "</tr>")
    parts.append("</table>")
    if energy := energy_lines(report):
        parts.append(f"<p>{esc(ENERGY_TITLE)}:</p><ul>" + "".join(f"<li>{esc(e)}</li>" for e in energy) + "</ul>")
    parts += _budget(report)
    if report["findings"]:
        parts.append(
            "<h2>Other findings</h2><ul>"
            + "".join(
                f"<li><code>{esc(f['code'])}</code> ({esc(f['severity'])}, held {f['held_s']:.0f} s): "
                f"{esc(f['summary'])}</li>"
                for f in report["findings"]
            )
            + "</ul>"
        )
    if report["timeline"]:
        parts.append(
            "<h2>Timeline</h2><ul>"
            + "".join(
                f"<li>{e['t']:.1f}–{e['end']:.1f} s: <code>{esc(e['code'])}</code> ({esc(e['severity'])}): "
                f"{esc(e['summary'])}</li>"
                for e in report["timeline"]
            )
            + "</ul>"
        )
    for heading, stack in printed_dumps(report):
        parts.append(f"<h2>Stacks of {esc(heading)}</h2><pre>{esc(chr(10).join(stack))}</pre>")
    for w in report.get("warnings", []):
        parts.append(f'<p class="muted">warning: {esc(w)}</p>')
    return parts


def _budget(report: Report) -> list[str]:
    """Each run's time budget: a bar of its parts and their table."""
    blocks = budget_blocks(
        [(f"{run_label(r['rank'], r['pid'])} {r['name']}", r["time_budget"]) for r in report["runs"]]
    )
    rows = [row for r in report["runs"] if (row := r["time_budget"]) is not None]
    if not blocks:
        return []
    out = [f"<h2>{esc(BUDGET_TITLE)}</h2><p class=muted>{esc(BUDGET_NOTE)}</p>"]
    for (heading, cells), row in zip(blocks, rows, strict=True):
        out.append(f"<p><b>{esc(heading)}</b></p>{_budget_bar(row)}")
        out.append("<table><tr><th>part</th><th>time</th><th>share</th></tr>")
        out += [
            f"<tr><td>{esc(label)}</td><td>{esc(seconds)}</td><td>{esc(share)}</td></tr>"
            for label, seconds, share in cells
            if seconds
        ]
        out.append("</table>")
        out += [f"<p>{esc(label)}</p>" for label, seconds, _ in cells if not seconds]
    return out


def _budget_bar(row: TimeBudgetRow) -> str:
    """The parts as one bar, each as wide as its share of the wall time."""
    parts = budget_parts(row)
    spans = "".join(
        f'<span style="width:{share * 100:.2f}%;background:{COLOURS.get(key, "#757575")}" '
        f'title="{esc(label)}: {seconds:.1f} s ({share:.1%})"></span>'
        for key, label, seconds, share in parts
    )
    return f'<div class="budget">{spans}</div>'


def render(source: ReportInput) -> str:
    report = source.report
    v = report["verdict"]
    series = report["series"]
    dt = series["dt"] or 1.0
    duration = max(report["duration_s"] or 0.0, dt * (series["bins"] or 0), 1e-9)
    color = SEVERITY_COLOR.get(v["severity"], "#616161")
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>trainmon report — {esc(v['code'])}"
        f"</title><style>{CSS}</style></head><body>",
        f"<h1>trainmon report <span class=muted>— {report['duration_s']:.1f} s, {len(report['runs'])} run(s)"
        "</span></h1>",
        f'<div class="verdict" style="--c:{color}"><span class="sev">{esc(v["severity"])}</span> '
        f"<code>{esc(v['code'])}</code> <span class=muted>held {v['held_s']:.0f} s</span>"
        f"<div>{esc(v['summary'])}</div><ul>" + "".join(f"<li>{esc(a)}</li>" for a in v["advice"]) + "</ul></div>",
        _verdict_strip(report["timeline"], duration),
        *_step_charts(series, dt, duration),
        *_host_charts(report, dt, duration),
        *_lists(report),
        '<p class="muted">Generated by trainmon.</p></body></html>',
    ]
    return "".join(parts) + "\n"
