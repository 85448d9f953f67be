"""A self-contained HTML report: inline SVG charts on one time axis, no scripts, no network."""

from __future__ import annotations

import html
from typing import Any

from trainmon.report.render import HEAD, _run_cells

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 960, 150, 56, 16, 22, 22
SEVERITY_COLOR = {"ok": "#2e7d32", "warning": "#f9a825", "critical": "#c62828"}
PALETTE = ["#1565c0", "#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#558b2f", "#4e342e", "#283593"]
CODE_COLORS = {
    "ok.compute_bound": "#2e7d32",
    "insufficient_data": "#9e9e9e",
    "stall.checkpoint": "#6a1b9a",
    "stall.periodic": "#8e24aa",
    "dist.straggler": "#00838f",
    "gpu.throttled": "#d84315",
    "memory.host_pressure": "#4e342e",
    "memory.gpu_pressure": "#4e342e",
    "host.overhead": "#283593",
}
INPUT_COLOR = "#c62828"

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1000px;color:#212121}
h1{font-size:20px;margin:0 0 12px} h2{font-size:16px;margin:22px 0 6px}
.verdict{border-left:8px solid var(--c);background:#fafafa;padding:10px 14px;margin:8px 0 14px}
.verdict code{font-size:16px;font-weight:600} .sev{color:var(--c);font-weight:600;text-transform:uppercase}
ul{margin:6px 0 0 18px;padding:0} table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #e0e0e0;padding:4px 6px;text-align:left} th{background:#f5f5f5}
svg{display:block;margin:4px 0} .muted{color:#757575} .legend span{margin-right:14px}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _code_color(code: str) -> str:
    return INPUT_COLOR if code.startswith("input.") else CODE_COLORS.get(code, "#616161")


def _x(t: float, duration: float) -> float:
    return PAD_L + (W - PAD_L - PAD_R) * (t / duration if duration > 0 else 0)


def _frame(title: str, y_max: float, unit: str, duration: float, body: str, legend: list[tuple[str, str]]) -> str:
    y0, y1 = H - PAD_B, PAD_T
    ticks = "".join(
        f'<text x="{_x(duration * f, duration):.1f}" y="{H - 6}" font-size="10" text-anchor="middle" '
        f'fill="#757575">{duration * f:.0f} s</text>'
        for f in (0, 0.25, 0.5, 0.75, 1)
    )
    leg = "".join(f'<span><i class="sw" style="background:{c}"></i>{_e(n)}</span>' for n, c in legend)
    return (
        f'<div class="chart"><b>{_e(title)}</b> <span class="legend muted">{leg}</span>'
        f'<svg viewBox="0 0 {W} {H}" width="100%" role="img" aria-label="{_e(title)}">'
        f'<rect x="{PAD_L}" y="{y1}" width="{W - PAD_L - PAD_R}" height="{y0 - y1}" fill="#fcfcfc" '
        f'stroke="#e0e0e0"/><text x="{PAD_L - 6}" y="{y1 + 10}" font-size="10" text-anchor="end" '
        f'fill="#757575">{y_max:.4g} {_e(unit)}</text><text x="{PAD_L - 6}" y="{y0}" font-size="10" '
        f'text-anchor="end" fill="#757575">0</text>{ticks}{body}</svg></div>'
    )


def _y(v: float, y_max: float) -> float:
    return (H - PAD_B) - (H - PAD_B - PAD_T) * min(1.0, v / y_max if y_max > 0 else 0)


def _polyline(values: list[float | None], dt: float, duration: float, y_max: float, color: str) -> str:
    out, seg = [], []
    for i, v in enumerate(values):
        if v is None:
            if len(seg) > 1:
                out.append(seg)
            seg = []
            continue
        seg.append(f"{_x((i + 0.5) * dt, duration):.1f},{_y(v, y_max):.1f}")
    if len(seg) > 1:
        out.append(seg)
    return "".join(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{" ".join(s)}"/>' for s in out)


def _bars(bottom: list[float], top: list[float], dt: float, duration: float, y_max: float, color: str) -> str:
    w = max(0.6, _x(dt, duration) - PAD_L)
    rects = []
    for i, (b, t) in enumerate(zip(bottom, top, strict=True)):
        if t <= b:
            continue
        y_top, y_bot = _y(t, y_max), _y(b, y_max)
        rects.append(
            f'<rect x="{_x(i * dt, duration):.1f}" y="{y_top:.1f}" width="{w:.2f}" '
            f'height="{max(0.0, y_bot - y_top):.1f}" fill="{color}"/>'
        )
    return "".join(rects)


def _nice_max(values: list[float | None], floor: float = 1.0) -> float:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return floor
    top = vals[min(len(vals) - 1, int(len(vals) * 0.98))] * 1.15
    return max(floor, top)


def _verdict_strip(report: dict, duration: float) -> str:
    entries = report.get("timeline") or []
    rects = []
    for i, e in enumerate(entries):
        t0 = e["t"]
        t1 = entries[i + 1]["t"] if i + 1 < len(entries) else duration
        x0, x1 = _x(t0, duration), _x(max(t0, t1), duration)
        rects.append(
            f'<rect x="{x0:.1f}" y="4" width="{max(1.0, x1 - x0):.1f}" height="20" '
            f'fill="{_code_color(e["code"])}"><title>{_e(e["code"])} from {t0:.1f} s</title></rect>'
        )
        if x1 - x0 > 90:
            rects.append(f'<text x="{x0 + 4:.1f}" y="18" font-size="11" fill="#fff">{_e(e["code"])}</text>')
    return (
        f'<div class="chart"><b>Verdict over time</b><svg viewBox="0 0 {W} 28" width="100%" role="img" '
        f'aria-label="verdict timeline">{"".join(rects)}</svg></div>'
    )


def render_html(report: dict) -> str:
    v = report["verdict"]
    series = report.get("series") or {}
    dt = series.get("dt") or 1.0
    duration = max(report.get("duration_s") or 0.0, dt * (series.get("bins") or 0), 1e-9)
    color = SEVERITY_COLOR.get(v["severity"], "#616161")
    parts = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>trainmon report — {_e(v['code'])}"
        f"</title><style>{CSS}</style></head><body>",
        f"<h1>trainmon report <span class=muted>— {report['duration_s']:.1f} s, {len(report['runs'])} run(s)"
        "</span></h1>",
        f'<div class="verdict" style="--c:{color}"><span class="sev">{_e(v["severity"])}</span> '
        f"<code>{_e(v['code'])}</code><div>{_e(v['summary'])}</div><ul>"
        + "".join(f"<li>{_e(a)}</li>" for a in v.get("advice", []))
        + "</ul></div>",
        _verdict_strip(report, duration),
    ]
    for run in series.get("runs", []):
        step = [s or 0.0 for s in run["step_ms"]]
        wait = [min(w or 0.0, s) for w, s in zip(run["wait_ms"], step, strict=True)]
        y_max = _nice_max(run["step_ms"])
        body = _bars([0.0] * len(step), wait, dt, duration, y_max, "#ef6c00") + _bars(
            wait, step, dt, duration, y_max, "#1565c0"
        )
        body += "".join(
            f'<line x1="{_x(c, duration):.1f}" x2="{_x(c, duration):.1f}" y1="{PAD_T}" y2="{H - PAD_B}" '
            f'stroke="#6a1b9a" stroke-dasharray="3,2"/>'
            for c in run.get("checkpoints", [])[:300]
        )
        parts.append(
            _frame(
                f"Step time, {run['run']}: data wait and compute",
                y_max,
                "ms",
                duration,
                body,
                [("data wait", "#ef6c00"), ("compute", "#1565c0"), ("checkpoint", "#6a1b9a")],
            )
        )
    metrics = series.get("metrics", {})
    gpu = sorted(k for k in metrics if k.endswith(".util") and k.startswith("gpu."))
    if gpu:
        body = "".join(_polyline(metrics[k], dt, duration, 100.0, PALETTE[i % 8]) for i, k in enumerate(gpu))
        parts.append(
            _frame(
                "GPU utilisation",
                100.0,
                "%",
                duration,
                body,
                [(k.removesuffix(".util"), PALETTE[i % 8]) for i, k in enumerate(gpu)],
            )
        )
    else:
        reason = (report.get("system") or {}).get("gpu_error") or "no GPU data"
        parts.append(f'<p class="muted">GPU: {_e(reason)}</p>')
    cpu = [("cpu.busy", "busy", "#1565c0"), ("cpu.iowait", "iowait", "#c62828")]
    body = "".join(_polyline(metrics[k], dt, duration, 100.0, c) for k, _, c in cpu if k in metrics)
    parts.append(_frame("Host CPU", 100.0, "%", duration, body, [(n, c) for k, n, c in cpu if k in metrics]))
    disks = sorted({k.split(".")[1] for k in metrics if k.startswith("disk.")})
    for d in disks:
        keys = [(f"disk.{d}.read_mb_s", "read MB/s", "#00838f"), (f"disk.{d}.write_mb_s", "write MB/s", "#ad1457")]
        y_max = _nice_max([x for k, _, _ in keys for x in metrics.get(k, [])])
        body = "".join(_polyline(metrics[k], dt, duration, y_max, c) for k, _, c in keys if k in metrics)
        util = metrics.get(f"disk.{d}.util_pct")
        legend = [(n, c) for _, n, c in keys]
        if util:
            body += _polyline(
                [u * y_max / 100 if u is not None else None for u in util], dt, duration, y_max, "#9e9e9e"
            )
            legend.append(("%util (scaled)", "#9e9e9e"))
        parts.append(_frame(f"Disk {d}", y_max, "MB/s", duration, body, legend))
    parts.append("<h2>Runs</h2><table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in HEAD) + "</tr>")
    for r in report["runs"]:
        parts.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in _run_cells(r)) + "</tr>")
    parts.append("</table>")
    if report.get("findings"):
        parts.append(
            "<h2>Other findings</h2><ul>"
            + "".join(
                f"<li><code>{_e(f['code'])}</code> ({_e(f['severity'])}): {_e(f['summary'])}</li>"
                for f in report["findings"]
            )
            + "</ul>"
        )
    if report.get("timeline"):
        parts.append(
            "<h2>Timeline</h2><ul>"
            + "".join(f"<li>{e['t']:.1f} s: <code>{_e(e['code'])}</code></li>" for e in report["timeline"])
            + "</ul>"
        )
    for w in report.get("warnings", []):
        parts.append(f'<p class="muted">warning: {_e(w)}</p>')
    parts.append('<p class="muted">Generated by trainmon.</p></body></html>')
    return "".join(parts) + "\n"
