"""Chart cells from numbers: stacked bars with eighth blocks, braille areas, and their ASCII forms.

Pure functions (no widget, no terminal): a chart is a list of rows, top first; a row is a list of
:data:`Cell` ``(char, fg_role, bg_role)``; roles are looked up in ``theme.PALETTE`` when drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainmon.numbers import finite
from trainmon.tui.theme import Glyphs

Cell = tuple[str, "str | None", "str | None"]
BLANK: Cell = (" ", None, None)
EIGHTHS = " ▁▂▃▄▅▆▇█"
HEAT_UNICODE = " ▁▂▃▄▅▆▇█"
HEAT_ASCII = " .:-=+*#%@"
# Braille dots of the left and right half of a cell, bottom to top.
_LEFT = (0x40, 0x04, 0x02, 0x01)
_RIGHT = (0x80, 0x20, 0x10, 0x08)


@dataclass(frozen=True)
class Layer:
    """One band of a stacked bar: its colour role, and the glyphs that tell it apart without colour."""

    role: str
    mono: str = "█"  # full cell under NO_COLOR
    ascii: str = "#"


def pairs(values: Sequence[float], sub: int) -> list[float]:
    """Down to one value per column: the mean of each column's ``sub`` samples (nan when all are nan)."""
    if sub <= 1:
        return list(values)
    if sub == 2:  # the braille layout: the hot case, without a list per column
        out = []
        for a, b in zip(values[0 : len(values) - 1 : 2], values[1::2], strict=False):
            fa, fb = a - a == 0.0, b - b == 0.0  # finite: nan and ±inf give nan
            out.append((a + b) / 2 if fa and fb else a if fa else b if fb else math.nan)
        return out
    out = []
    for c in range(0, len(values) - sub + 1, sub):
        group = [v for v in values[c : c + sub] if finite(v)]
        out.append(sum(group) / len(group) if group else math.nan)
    return out


def nice_top(values: Sequence[float], floor: float = 1.0) -> float:
    """A round upper bound for an auto-scaled chart: 1, 2 or 5 times a power of ten, at least ``floor``."""
    peak = max((v for v in values if finite(v)), default=0.0)
    peak = max(peak, floor)
    exp = 10 ** math.floor(math.log10(peak))
    for m in (1, 2, 5, 10):
        if peak <= m * exp * (1 + 1e-9):  # a 50 ms step summed in floats may come out a hair over 50
            return m * exp
    return 10 * exp


# What a column draws, by what decides it: the columns sit on absolute time (view/resample.py), so a complete
# column comes back with the same values frame after frame and is drawn once. Emptied when it grows past the bound.
_COLUMNS: dict[tuple, tuple[Cell, ...]] = {}
_COLUMNS_MAX = 20_000
_KINDS: dict[tuple, int] = {}  # a chart's settings as one small int, so a column's key hashes its values only


def _remember(key: tuple, cells: tuple[Cell, ...]) -> tuple[Cell, ...]:
    if len(_COLUMNS) >= _COLUMNS_MAX:
        _COLUMNS.clear()
    _COLUMNS[key] = cells
    return cells


def bars(
    layers: Sequence[Sequence[float]], specs: Sequence[Layer], top: float, height: int, glyphs: Glyphs
) -> list[list[Cell]]:
    """Stacked bars, one per column, ``layers[0]`` at the bottom. A cell where one band meets the next draws a
    lower-eighths block in the lower band's colour on the upper band's colour, so the split is exact to 1/8 row."""
    cols = len(layers[0]) if layers else 0
    if top <= 0 or height <= 0 or not cols:
        return [[BLANK] * cols for _ in range(height)]
    kind = ("bars", tuple(specs), top, height, glyphs)
    kind_id = _KINDS.get(kind)
    if kind_id is None:
        kind_id = _KINDS.setdefault(kind, len(_KINDS)) if len(_KINDS) < _COLUMNS_MAX else -1
    inf = math.inf
    clean = [[v if v > 0.0 and v != inf else 0.0 for v in layer] for layer in layers]  # nan, ±inf, < 0: nothing
    empty = (BLANK,) * height
    columns = []
    for values in zip(*clean, strict=True):
        if not any(values):
            columns.append(empty)
            continue
        key = (kind_id, values)
        cells = _COLUMNS.get(key) if kind_id >= 0 else None
        if cells is None:
            cells = _bar_column(values, specs, top, height, glyphs)
            if kind_id >= 0:
                _remember(key, cells)
        columns.append(cells)
    return [list(row) for row in zip(*columns, strict=True)]


def _bar_column(
    values: tuple[float, ...], specs: Sequence[Layer], top: float, height: int, glyphs: Glyphs
) -> tuple[Cell, ...]:
    """One column of ``bars``, top row first."""
    cell_h = top / height
    out = [BLANK] * height
    cum, bounds = 0.0, []
    for v in values:
        bounds.append((cum, cum + v))
        cum += v
    for r in range(height):
        lo = (height - 1 - r) * cell_h
        if cum <= lo:
            continue
        hi = lo + cell_h
        for i, (a, b) in enumerate(bounds):
            if a <= lo and b >= hi:
                out[r] = _full_cell(i, len(values), specs, glyphs)
                break
        else:
            fills = [max(0.0, min(b, hi) - max(a, lo)) / cell_h for a, b in bounds]
            out[r] = _bar_cell(fills, specs, glyphs)
    return tuple(out)


def _full_cell(i: int, n: int, specs: Sequence[Layer], glyphs: Glyphs) -> Cell:
    """A cell inside band ``i`` alone."""
    return _bar_cell([1.0 if k == i else 0.0 for k in range(n)], specs, glyphs)


def _bar_cell(fills: list[float], specs: Sequence[Layer], glyphs: Glyphs) -> Cell:
    total = sum(fills)
    present = [i for i, f in enumerate(fills) if f > 1e-9]
    if not present or total < 1 / 16:
        return BLANK
    dominant = max(present, key=lambda i: fills[i])
    if not glyphs.unicode:
        if total < 0.5:
            return (".", specs[dominant].role, None)
        return (specs[dominant].ascii, specs[dominant].role, None)
    if not glyphs.color:
        if dominant == 0 and specs[0].mono == "█":
            return (EIGHTHS[max(1, round(total * 8))], None, None)
        return (specs[dominant].mono, None, None) if total >= 0.5 else BLANK
    lower = present[0]
    if len(present) == 1 or total < 0.99:
        return (EIGHTHS[max(1, round(total * 8))], specs[dominant].role, None)
    eighths = round(fills[lower] * 8)
    upper = max(present[1:], key=lambda i: fills[i])
    if eighths <= 0:
        return ("█", specs[upper].role, None)
    if eighths >= 8:
        return ("█", specs[lower].role, None)
    return (EIGHTHS[eighths], specs[lower].role, specs[upper].role)


def area(values: Sequence[float], top: float, height: int, role: str, glyphs: Glyphs) -> list[list[Cell]]:
    """A filled area: braille (two samples per cell, four dots per row) or one bar per column otherwise."""
    if not glyphs.braille:
        return bars([values], [Layer(role, "█", ":")], top, height, glyphs)
    cols = len(values) // 2
    if top <= 0 or height <= 0 or not cols:
        return [[BLANK] * cols for _ in range(height)]
    levels = height * 4

    def level(v: float) -> int | None:
        if not finite(v):
            return None
        n = round(max(0.0, min(v, top)) / top * levels)
        return max(n, 1) if v > 0 else 0

    empty = (BLANK,) * height
    columns = []
    for c in range(cols):
        left, right = level(values[2 * c]), level(values[2 * c + 1])
        if left is None and right is None:
            columns.append(empty)
            continue
        key = ("area", left, right, height, role)
        cells = _COLUMNS.get(key)
        if cells is None:
            cells = _remember(key, _braille_column(left, right, height, role))
        columns.append(cells)
    return [list(row) for row in zip(*columns, strict=True)]


def _braille_column(left: int | None, right: int | None, height: int, role: str) -> tuple[Cell, ...]:
    """One column of ``area``'s braille: ``left`` and ``right`` dots high (None: no sample), top row first."""
    out = [BLANK] * height
    for r in range(height):
        base = (height - 1 - r) * 4
        bits = 0
        for lv, dots in ((left, _LEFT), (right, _RIGHT)):
            if lv is None:
                continue
            for k in range(max(0, min(4, lv - base))):
                bits |= dots[k]
        if bits:
            out[r] = (chr(0x2800 + bits), role, None)
    return tuple(out)


def heat(values: Sequence[float], glyphs: Glyphs, width: int) -> str:
    """A strip of per-core load 0-100, one character per core (cores averaged in groups when they do not fit)."""
    if width <= 0 or not values:
        return ""
    scale = HEAT_UNICODE if glyphs.unicode else HEAT_ASCII
    group = max(1, math.ceil(len(values) / width))
    out = []
    for i in range(0, len(values), group):
        chunk = [v for v in values[i : i + group] if finite(v)]
        if not chunk:
            out.append("?")
            continue
        v = sum(chunk) / len(chunk)
        out.append(scale[min(len(scale) - 1, max(1 if v > 0.5 else 0, round(v / 100 * (len(scale) - 1))))])
    return "".join(out)


def overlay_marks(row: list[Cell], marks: Sequence[str]) -> list[Cell]:
    """Checkpoint/eval/user marks written over a chart row."""
    out = list(row)
    for c, m in enumerate(marks[: len(out)]):
        if m:
            out[c] = (m, "mark", None)
    return out


# ---------------------------------------------------------------- numbers


def fmt_num(x: float | None, digits: int = 1, unit: str = "") -> str:
    if not finite(x):
        return "n/a"
    assert x is not None
    if abs(x) >= 1000 and unit not in ("%",):
        return f"{x / 1000:.{digits}f}k{unit}"
    if abs(x) >= 100:
        return f"{x:.0f}{unit}"
    return f"{x:.{digits}f}{unit}"


def fmt_pct(x: float | None) -> str:
    return f"{x:.0f}%" if finite(x) else "n/a"


def fmt_ms(x: float | None) -> str:
    if not finite(x):
        return "n/a"
    assert x is not None
    if x >= 10000:
        return f"{x / 1000:.0f}s"
    if x >= 1000:
        return f"{x / 1000:.1f}s"
    return f"{x:.0f}ms" if x >= 10 else f"{x:.1f}ms"


def fmt_mb(mb: float | None) -> str:
    """MiB as the shortest readable size."""
    if not finite(mb):
        return "n/a"
    assert mb is not None
    if mb >= 1024 * 100:
        return f"{mb / 1024:.0f}G"
    if mb >= 1024:
        return f"{mb / 1024:.1f}G"
    return f"{mb:.0f}M"


def fmt_rate(mb_s: float | None) -> str:
    """MiB/s as MB/s or GB/s."""
    if not finite(mb_s):
        return "n/a"
    assert mb_s is not None
    if mb_s >= 1024:
        return f"{mb_s / 1024:.1f}G/s"
    if mb_s >= 100:
        return f"{mb_s:.0f}M/s"
    return f"{mb_s:.1f}M/s"
