"""Inline SVG charts for the HTML report: one frame per chart, all on the recording's time axis (seconds)."""

from __future__ import annotations

import html

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 960, 150, 56, 16, 22, 22


def esc(x: object) -> str:
    """Text or an attribute value, escaped for HTML and SVG."""
    return html.escape(str(x), quote=True)


def x_of(t: float, duration: float) -> float:
    return PAD_L + (W - PAD_L - PAD_R) * (t / duration if duration > 0 else 0)


def y_of(v: float, y_max: float) -> float:
    return (H - PAD_B) - (H - PAD_B - PAD_T) * min(1.0, v / y_max if y_max > 0 else 0)


def frame(title: str, y_max: float, unit: str, duration: float, body: str, legend: list[tuple[str, str]]) -> str:
    """A titled chart with its legend (name, colour), y scale 0…``y_max`` and time ticks around ``body``."""
    y0, y1 = H - PAD_B, PAD_T
    ticks = "".join(
        f'<text x="{x_of(duration * f, duration):.1f}" y="{H - 6}" font-size="10" text-anchor="middle" '
        f'fill="#757575">{duration * f:.0f} s</text>'
        for f in (0, 0.25, 0.5, 0.75, 1)
    )
    leg = "".join(f'<span><i class="sw" style="background:{c}"></i>{esc(n)}</span>' for n, c in legend)
    return (
        f'<div class="chart"><b>{esc(title)}</b> <span class="legend muted">{leg}</span>'
        f'<svg viewBox="0 0 {W} {H}" width="100%" role="img" aria-label="{esc(title)}">'
        f'<rect x="{PAD_L}" y="{y1}" width="{W - PAD_L - PAD_R}" height="{y0 - y1}" fill="#fcfcfc" '
        f'stroke="#e0e0e0"/><text x="{PAD_L - 6}" y="{y1 + 10}" font-size="10" text-anchor="end" '
        f'fill="#757575">{y_max:.4g} {esc(unit)}</text><text x="{PAD_L - 6}" y="{y0}" font-size="10" '
        f'text-anchor="end" fill="#757575">0</text>{ticks}{body}</svg></div>'
    )


def polyline(values: list[float | None], dt: float, duration: float, y_max: float, color: str) -> str:
    """One line per run of consecutive values; a missing value (None) breaks the line."""
    out: list[list[str]] = []
    seg: list[str] = []
    for i, v in enumerate(values):
        if v is None:
            if len(seg) > 1:
                out.append(seg)
            seg = []
            continue
        seg.append(f"{x_of((i + 0.5) * dt, duration):.1f},{y_of(v, y_max):.1f}")
    if len(seg) > 1:
        out.append(seg)
    return "".join(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{" ".join(s)}"/>' for s in out)


def bars(bottom: list[float], top: list[float], dt: float, duration: float, y_max: float, color: str) -> str:
    """One bar per bin from ``bottom`` to ``top`` (stacked bars share a bottom with the bar below)."""
    w = max(0.6, x_of(dt, duration) - PAD_L)
    rects = []
    for i, (b, t) in enumerate(zip(bottom, top, strict=True)):
        if t <= b:
            continue
        y_top, y_bot = y_of(t, y_max), y_of(b, y_max)
        rects.append(
            f'<rect x="{x_of(i * dt, duration):.1f}" y="{y_top:.1f}" width="{w:.2f}" '
            f'height="{max(0.0, y_bot - y_top):.1f}" fill="{color}"/>'
        )
    return "".join(rects)


def nice_max(values: list[float | None], floor: float = 1.0) -> float:
    """A y scale top that ignores the highest 2 % of values (one spike does not flatten the chart)."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return floor
    top = vals[min(len(vals) - 1, int(len(vals) * 0.98))] * 1.15
    return max(floor, top)
