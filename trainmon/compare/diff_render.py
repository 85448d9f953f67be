"""A ``Diff`` as text, markdown or JSON (``FORMATS``)."""

from __future__ import annotations

import json
from typing import Any

from trainmon.compare.diff import Diff, FigureDiff, PairDiff, Side
from trainmon.compare.samples import WINDOW_S
from trainmon.numbers import rounded
from trainmon.report.budget import LABELS

FORMATS = ("text", "markdown", "json")
HEADER = ["figure", "A", "B", "change", "interval", "noise"]
BUDGET_HEADER = ["time budget", "A", "B", "change"]


def _is_share(fd: FigureDiff) -> bool:
    return fd.figure.key.endswith("_fraction")


def _value(fd: FigureDiff, v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:.1%}" if _is_share(fd) else f"{v:.1f}"


def _delta(fd: FigureDiff, v: float | None) -> str:
    if v is None:
        return "n/a"
    if fd.figure.relative:
        return f"{v:+.1%}"
    return f"{v * 100:+.1f} pt" if _is_share(fd) else f"{v:+.1f} pt"


def _noise(fd: FigureDiff) -> str:
    c = fd.change
    if c.beyond_noise is None:
        return "n/a"
    if not c.beyond_noise or c.change is None:
        return "within noise"
    worse = (c.change > 0) == fd.figure.higher_is_worse
    return "worse" if worse else "better"


def cells(fd: FigureDiff) -> list[str]:
    c = fd.change
    interval = f"{_delta(fd, c.low)} .. {_delta(fd, c.high)}" if c.low is not None else "n/a"
    return [fd.figure.label, _value(fd, c.a), _value(fd, c.b), _delta(fd, c.change), interval, _noise(fd)]


def _side_line(name: str, side: Side) -> str:
    r = side.report
    runs = ", ".join(f"{row['rank'] if row['rank'] is not None else row['pid']}" for row, _ in side.runs)
    what = f"run {runs}" if side.selector is not None else f"{len(side.runs)} run(s)"
    return f"{name}: {side.source} ({r['duration_s']:.1f} s, {what})"


def _timeline(side: Side) -> str:
    return " · ".join(f"{e['t']:.1f} s {e['code']}" for e in side.report["timeline"]) or "none"


def _method(d: Diff) -> str:
    return (
        f"noise: {d.confidence:.0%} percentile interval of {d.resamples} bootstrap resamples (seed {d.seed}) of "
        f"whole time windows (up to {WINDOW_S:g} s) of steady steps and samples; beyond noise when it excludes 0"
    )


def _table(rows: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        return out + ["| " + " | ".join(r) + " |" for r in rows[1:]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def render_text(d: Diff, markdown: bool = False) -> str:
    lines = ["## trainmon diff" if markdown else "trainmon diff", ""]
    bullet = "- " if markdown else ""
    lines += [bullet + _side_line("A", d.a), bullet + _side_line("B", d.b), ""]
    for name, side in (("A", d.a), ("B", d.b)):
        v = side.report["verdict"]
        code = f"`{v['code']}`" if markdown else v["code"]
        lines.append(f"{bullet}verdict {name}: {code} [{v['severity']}] {v['summary']}")
    for name, side in (("A", d.a), ("B", d.b)):
        lines.append(f"{bullet}timeline {name}: {_timeline(side)}")
    for pair in d.pairs:
        title = pair.a if pair.a == pair.b else f"{pair.a} → {pair.b}"
        lines += ["", f"### {title}" if markdown else title]
        lines += _table([HEADER, *(cells(fd) for fd in pair.figures)], markdown)
        budget = budget_cells(pair)
        if budget:
            lines += ["", *_table([BUDGET_HEADER, *budget], markdown)]
    if d.unpaired:
        lines += ["", f"without a partner: {', '.join(d.unpaired)}"]
    if d.system:
        lines += ["", "### system" if markdown else "system"]
        lines += _table([HEADER, *(cells(fd) for fd in d.system)], markdown)
    lines += ["", _method(d)]
    if d.gate.get("failed"):
        lines.append(f"gate failed: {d.gate['failed']}")
    return "\n".join(lines) + "\n"


def budget_cells(pair: PairDiff) -> list[list[str]]:
    """Both sides' time budgets part by part (seconds and share of each side's wall time), the change in share;
    the parts either side holds time in, in the order of the budget, then the wall time."""
    a, b = pair.budgets
    if a is None and b is None:
        return []
    parts_a = a["parts_s"] if a is not None else {}
    parts_b = b["parts_s"] if b is not None else {}
    wall_a = a["wall_s"] if a is not None else 0.0
    wall_b = b["wall_s"] if b is not None else 0.0

    def share(parts: dict[str, float], wall: float, key: str) -> float | None:
        return parts.get(key, 0.0) / wall if wall > 0 and parts else None

    def cell(parts: dict[str, float], wall: float, key: str) -> str:
        s = share(parts, wall, key)
        return "n/a" if s is None else f"{parts.get(key, 0.0):.1f} s ({s:.1%})"

    rows = []
    for key in [*parts_a, *(k for k in parts_b if k not in parts_a)]:
        if parts_a.get(key, 0.0) < 0.05 and parts_b.get(key, 0.0) < 0.05:
            continue
        sa, sb = share(parts_a, wall_a, key), share(parts_b, wall_b, key)
        change = f"{round((sb - sa) * 100, 1) or 0.0:+.1f} pt" if sa is not None and sb is not None else "n/a"
        rows.append([LABELS.get(key, key), cell(parts_a, wall_a, key), cell(parts_b, wall_b, key), change])
    walls = [f"{w:.1f} s" if side is not None else "n/a" for side, w in ((a, wall_a), (b, wall_b))]
    growth = f"{round((wall_b - wall_a) / wall_a, 3) or 0.0:+.1%}" if a and b and wall_a > 0 else "n/a"
    rows.append(["wall time", *walls, growth])
    return rows


def _figure_json(fd: FigureDiff) -> dict[str, Any]:
    c = fd.change
    return {
        "a": rounded(c.a, 4),
        "b": rounded(c.b, 4),
        "change": rounded(c.change, 4),
        "relative": fd.figure.relative,
        "interval": [rounded(c.low, 4), rounded(c.high, 4)],
        "beyond_noise": c.beyond_noise,
        "higher_is_worse": fd.figure.higher_is_worse,
    }


def _side_json(side: Side) -> dict[str, Any]:
    r = side.report
    return {
        "source": side.source,
        "file": side.path,
        "run": side.selector,
        "duration_s": r["duration_s"],
        "runs": [row["rank"] if row["rank"] is not None else row["pid"] for row, _ in side.runs],
        "verdict": {k: r["verdict"][k] for k in ("code", "severity", "summary")},
        "timeline": r["timeline"],
        "findings": [{"code": f["code"], "severity": f["severity"], "held_s": f["held_s"]} for f in r["findings"]],
    }


def to_json(d: Diff) -> dict[str, Any]:
    return {
        "trainmon_diff": 1,
        "a": _side_json(d.a),
        "b": _side_json(d.b),
        "runs": [
            {
                "a": p.a,
                "b": p.b,
                "figures": {fd.figure.key: _figure_json(fd) for fd in p.figures},
                "time_budget": {"a": p.budgets[0], "b": p.budgets[1]},
            }
            for p in d.pairs
        ],
        "unpaired": d.unpaired,
        "system": {fd.figure.key: _figure_json(fd) for fd in d.system},
        "method": {
            "bootstrap": "whole time windows of steady steps and samples, both sides drawn independently",
            "window_s": WINDOW_S,
            "resamples": d.resamples,
            "seed": d.seed,
            "confidence": d.confidence,
        },
        "gate": d.gate,
    }


def render(d: Diff, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(to_json(d), indent=2) + "\n"
    return render_text(d, markdown=fmt == "markdown")
