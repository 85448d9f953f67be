"""Styled text runs and rows of chart cells turned into Textual Strips, on the shared gutter | plot | values grid."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from trainmon.tui.charts import Cell
from trainmon.tui.theme import Glyphs, style

# A styled run of text: (text, colour role, bold). A Line is a list of runs.
TextRun = tuple[str, "str | None", bool]
Line = list[TextRun]

GUTTER = 7
PLAIN = Style()  # never a None style: Textual's NO_COLOR filter needs one on every segment


@dataclass(frozen=True)
class Geometry:
    """Every chart row is ``gutter | space | plot (cols) | space | values``: one time axis for every pane."""

    width: int
    values_w: int
    gutter: int = GUTTER

    @property
    def cols(self) -> int:
        return max(8, self.width - self.gutter - self.values_w - 2)

    @staticmethod
    def for_width(width: int, compact: bool) -> Geometry:
        values_w = 26 if compact else 36
        if width < 60:
            values_w = max(12, width // 3)
        return Geometry(width, values_w)


@dataclass
class Track:
    """A band of rows on the grid: a chart with gutter labels and value lines, or one free text line."""

    gutter: list[str] = field(default_factory=list)
    rows: list[list[Cell]] = field(default_factory=list)
    values: list[Line] = field(default_factory=list)
    text: Line | None = None  # instead of a chart: one full-width line

    @property
    def height(self) -> int:
        if self.text is not None:
            return 1
        return max(1, len(self.rows))


def plain(text: str, role: str | None = None, bold: bool = False) -> Line:
    return [(text, role, bold)]


def line_text(line: Line) -> str:
    return "".join(t for t, _, _ in line)


def crop_line(line: Line, width: int) -> Line:
    """At most ``width`` cells; a cut line ends with an ellipsis."""
    out: Line = []
    used = 0
    total = sum(len(t) for t, _, _ in line)
    for text, role, bold in line:
        if used >= width:
            break
        room = width - used
        if total > width and used + len(text) >= width:
            text = text[: max(0, room - 1)] + "…"
        else:
            text = text[:room]
        out.append((text, role, bold))
        used += len(text)
    return out


def wrap_line(line: Line, width: int, max_lines: int) -> list[Line]:
    """Word-wrap a line of runs into at most ``max_lines`` lines of ``width`` (the last one cropped)."""
    words: list[TextRun] = []
    for text, role, bold in line:
        for i, part in enumerate(text.split(" ")):
            words.append(((" " if i else "") + part, role, bold))
    lines: list[Line] = [[]]
    used = 0
    for text, role, bold in words:
        if used + len(text) > width and used > 0 and len(lines) < max_lines:
            lines.append([])
            used = 0
            text = text.lstrip(" ")
        lines[-1].append((text, role, bold))
        used += len(text)
    return [crop_line(ln, width) for ln in lines]


# One ASCII character for each non-ASCII one the screen prints, so widths do not change.
_ASCII = str.maketrans(
    {
        "…": "~",
        "·": "|",
        "–": "-",
        "—": "-",
        "→": ">",
        "°": "o",
        "×": "x",
        "■": "#",
        "▲": "^",
        "│": "|",
        "─": "-",
        "━": "-",
        "↑": "^",
        "↓": "v",
        "←": "<",
        "≥": ">",
        "≤": "<",
    }
)


def asciify(text: str) -> str:
    text = text.translate(_ASCII)
    return text if text.isascii() else "".join(ch if ch.isascii() else "?" for ch in text)


def runs_to_segments(line: Line, glyphs: Glyphs, base: str | None = None) -> list[Segment]:
    conv = (lambda t: t) if glyphs.unicode else asciify
    return [
        Segment(conv(text), style(role or base, bold=bold, color=glyphs.color)) for text, role, bold in line if text
    ]


def cells_to_segments(cells: Sequence[Cell], glyphs: Glyphs, cursor: int | None = None) -> list[Segment]:
    """Chart cells to segments, runs of the same style merged; the cursor column drawn reversed."""
    color = glyphs.color
    if cursor is not None and 0 <= cursor < len(cells):
        ch, fg, bg = cells[cursor]
        if ch == " ":
            mark: Cell = (("│" if glyphs.unicode else "|"), "cursor", None)
            rev = False
        else:
            mark, rev = (ch, fg, bg), True
        before, after = cells[:cursor], cells[cursor + 1 :]
        out = _runs(before, color)
        out.append(Segment(mark[0], style(mark[1], mark[2], reverse=rev, color=color)))
        return out + _runs(after, color)  # the cursor's cell is never in a run of its neighbours' style
    return _runs(cells, color)


def _runs(cells: Sequence[Cell], color: bool) -> list[Segment]:
    """One segment per run of cells of the same colours (grouped at C speed: a chart row is mostly long runs)."""
    return [
        Segment("".join(map(_char, group)), style(fg, bg, color=color)) for (fg, bg), group in groupby(cells, _colours)
    ]


_char = itemgetter(0)
_colours = itemgetter(1, 2)


def grid_strip(
    geo: Geometry,
    glyphs: Glyphs,
    gutter: str,
    cells: Sequence[Cell] | None,
    values: Line | None,
    cursor: int | None,
    gutter_role: str = "label",
    gutter_bold: bool = False,
) -> Strip:
    """One row of the grid."""
    gutter = gutter if glyphs.unicode else asciify(gutter)
    segs = [
        Segment(gutter[: geo.gutter].ljust(geo.gutter), style(gutter_role, bold=gutter_bold, color=glyphs.color)),
        Segment(" ", PLAIN),
    ]
    cells = list(cells or [])[: geo.cols]
    if len(cells) < geo.cols:
        cells += [(" ", None, None)] * (geo.cols - len(cells))
    segs += cells_to_segments(cells, glyphs, cursor)
    segs.append(Segment(" ", PLAIN))
    if values:
        segs += runs_to_segments(crop_line(values, geo.values_w), glyphs, "value")
    return Strip(segs).adjust_cell_length(geo.width, PLAIN)


def text_strip(geo: Geometry, glyphs: Glyphs, line: Line, base: str | None = None) -> Strip:
    return Strip(runs_to_segments(crop_line(line, geo.width), glyphs, base)).adjust_cell_length(geo.width, PLAIN)


def title_strip(geo: Geometry, glyphs: Glyphs, title: Line, focused: bool) -> Strip:
    """A pane title as a rule: ``── Training · demo-train ─────``."""
    rule = "─" if glyphs.unicode else "-"
    head: Line = [(rule * 2 + " ", "dim", False)]
    body = [(t, "cursor" if focused and i == 0 else r, b or (focused and i == 0)) for i, (t, r, b) in enumerate(title)]
    line = crop_line(head + body + [(" ", None, False)], geo.width)
    used = sum(len(t) for t, _, _ in line)
    line.append((rule * max(0, geo.width - used), "dim", False))
    return Strip(runs_to_segments(line, glyphs)).adjust_cell_length(geo.width, PLAIN)
