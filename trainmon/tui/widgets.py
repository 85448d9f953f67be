"""The screen's widgets. Chart panes, the banner and the time axis use the Line API (``render_line``); the process
table is a DataTable updated by key, cell by cell."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from trainmon.numbers import finite
from trainmon.tui.charts import BLANK, Cell, fmt_mb, fmt_num, fmt_rate
from trainmon.tui.lines import (
    PLAIN,
    Geometry,
    Line,
    crop_line,
    grid_strip,
    line_text,
    text_strip,
    title_strip,
    wrap_line,
)
from trainmon.tui.panes import BUILDERS, Size
from trainmon.tui.theme import Glyphs
from trainmon.view import Frame, ProcRow

SEVERITY_BADGE = {"critical": " CRITICAL ", "warning": " WARNING ", "ok": " OK "}
STRIP_MONO = {"ok": "─", "warning": "═", "critical": "█", None: "·"}
STRIP_ASCII = {"ok": "-", "warning": "=", "critical": "#", None: "."}


class GridWidget(Widget):
    """A Line-API widget on the shared grid; subclasses fill ``self.lines`` (one callable per row)."""

    def __init__(self, glyphs: Glyphs, **kwargs) -> None:
        super().__init__(**kwargs)
        self.glyphs = glyphs
        self._strips: list[Strip] = []

    def set_strips(self, strips: list[Strip]) -> None:
        """Show ``strips``; only the rows that differ from those shown are repainted (none when nothing changed)."""
        old = self._strips
        self._strips = strips
        if len(strips) != len(old):
            self.styles.height = max(1, len(strips))
            self.refresh()
            return
        width = self.size.width
        for y, (a, b) in enumerate(zip(old, strips, strict=True)):
            if a is not b and a != b:
                self.refresh(Region(0, y, width, 1))

    def render_line(self, y: int) -> Strip:
        if 0 <= y < len(self._strips):
            return self._strips[y].crop_extend(0, self.size.width, PLAIN)
        return Strip.blank(self.size.width, PLAIN)

    def text_lines(self) -> list[str]:
        """The widget as plain text, one string per row (for tests and debugging)."""
        return [self.render_line(y).text for y in range(len(self._strips))]


class ChartPane(GridWidget):
    """One pane (training, GPU, CPU, disk): a title rule and its tracks, every plot on the same columns."""

    def __init__(self, pane: str, glyphs: Glyphs, **kwargs) -> None:
        super().__init__(glyphs, id=pane, **kwargs)
        self.pane = pane
        # The last frame's chart rows by what they show: a row the new frame shows unchanged (a full bar's body, an
        # idle device's empty row) is not turned into segments again (read and replaced whole: a frame drawn on the UI
        # thread at a resize at worst misses the memo).
        self._rows: dict[tuple, Strip] = {}

    def show(self, frame: Frame, geo: Geometry, size: Size, with_title: bool) -> None:
        self.set_strips(self.strips_for(frame, geo, size, with_title))

    def strips_for(self, frame: Frame, geo: Geometry, size: Size, with_title: bool) -> list[Strip]:
        """The pane's rows for ``frame``: pure (any thread; the frame thread calls it before the UI needs them)."""
        title, tracks = BUILDERS[self.pane](frame, geo, self.glyphs, size)
        cursor = frame.axis.cursor_col
        strips: list[Strip] = []
        last, rows = self._rows, {}
        if with_title:
            strips.append(title_strip(geo, self.glyphs, title, size.focused))
        for track in tracks:
            if track.text is not None:
                strips.append(text_strip(geo, self.glyphs, _indent(track.text, geo), "value"))
                continue
            for r in range(track.height):
                row: list[Cell] = track.rows[r] if r < len(track.rows) else [BLANK] * geo.cols
                gutter = track.gutter[r] if r < len(track.gutter) else ""
                values = track.values[r] if r < len(track.values) else None
                key = (geo, gutter, tuple(row), tuple(values) if values else None, cursor)
                strip = last.get(key)
                if strip is None:
                    strip = grid_strip(geo, self.glyphs, gutter, row, values, cursor)
                rows[key] = strip
                strips.append(strip)
        self._rows = rows
        return strips


def _indent(line: Line, geo: Geometry) -> Line:
    return [(" " * (geo.gutter + 1), None, False), *line]


class Banner(GridWidget):
    """The verdict: severity, code, summary with numbers, advice; below it the verdict history on the time axis."""

    def show(self, frame: Frame, geo: Geometry, compact: bool) -> None:
        self.set_strips(self.strips_for(frame, geo, compact))

    def strips_for(self, frame: Frame, geo: Geometry, compact: bool) -> list[Strip]:
        g = self.glyphs
        v = frame.verdict
        strips: list[Strip] = []
        if v is None:
            strips.append(text_strip(geo, g, [(" … ", "none", True), (" waiting for the first verdict", "dim", False)]))
        else:
            sev = v.severity if v.code != "insufficient_data" else "none"
            badge = SEVERITY_BADGE.get(v.severity, f" {v.severity.upper()} ")
            head: Line = [
                (badge, f"badge-{sev}" if g.color else None, True),
                (" ", None, False),
                (v.code, sev, True),
                ("  ", None, False),
                (v.summary, "text", False),
            ]
            if compact:
                strips.append(text_strip(geo, g, crop_line(head, geo.width)))
            else:
                strips += [text_strip(geo, g, ln) for ln in wrap_line(head, geo.width, 2)]
            arrow = "→ " if g.unicode else "-> "
            advice: Line = [(arrow, "cursor", True), (" · ".join(v.advice) or "nothing to change", "value", False)]
            if compact:
                strips.append(text_strip(geo, g, advice))
            else:
                strips += [text_strip(geo, g, ln) for ln in wrap_line(advice, geo.width, 2)]
        strips.append(self._strip_row(frame, geo))
        return strips

    def _strip_row(self, frame: Frame, geo: Geometry) -> Strip:
        g = self.glyphs
        cells: list[Cell] = []
        labels: dict[int, str] = {}
        for c, cell in enumerate(frame.strip):
            sev = cell.severity if cell.code != "insufficient_data" else None
            if cell.code is None:
                cells.append((" ", None, None))
                continue
            if not g.unicode:
                ch = STRIP_ASCII[sev]
            elif g.color:
                ch = "▆"
            else:
                ch = STRIP_MONO[sev]
            cells.append((ch, sev or "none", None))
            if cell.change or (c == 0 or frame.strip[c - 1].code is None):
                labels[c] = cell.code
        # Name each cause where it starts, if it fits before the next change.
        starts = sorted(labels)
        for i, c in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else len(cells)
            name = labels[c]
            if end - c >= len(name) + 2:
                sev = cells[c][1]
                for k, ch in enumerate(name):
                    cells[c + 1 + k] = (ch, "#0d1117", sev) if g.color else (ch, None, None)
        v = frame.verdict
        since: Line = []
        if v is not None and v.since_s is not None:
            since = [("held ", "label", False), (fmt_num(v.since_s, 0) + "s", "value", False)]
        if v is not None:
            since += [
                (" · ", "label", False),
                (f"{len(v.findings)} finding{'s' if len(v.findings) != 1 else ''}", "label", False),
            ]
        return grid_strip(geo, g, "cause", cells, since, frame.axis.cursor_col)


class TimeAxis(GridWidget):
    """Tick labels under the plots, the cursor's instant, and the playback/pause state."""

    def show(self, frame: Frame, geo: Geometry) -> None:
        self.set_strips(self.strips_for(frame, geo))

    def strips_for(self, frame: Frame, geo: Geometry) -> list[Strip]:
        g = self.glyphs
        axis = frame.axis
        cols = geo.cols
        chars = [" "] * cols
        for col, label in axis.ticks:
            if col >= cols:
                continue
            start = max(0, min(cols - len(label), col - len(label) + 1))
            if all(ch == " " for ch in chars[max(0, start - 1) : start + len(label)]):
                chars[start : start + len(label)] = list(label)
        cells: list[Cell] = [(ch, "label", None) for ch in chars]
        cursor = axis.cursor_col
        if cursor is not None and cursor < cols:
            cells[cursor] = ("▲" if g.unicode else "^", "cursor", None)
        state, detail = frame.status
        values: Line = []
        if axis.cursor_t is not None:
            values += [(axis.cursor_label, "cursor", True), (" · ", "label", False)]
        values.append((fmt_window(frame.window_s), "label", False))
        if detail:
            values += [(" · ", "label", False), (detail, "value", False)]
        if frame.self_cost:
            values += [(" · ", "label", False), (frame.self_cost, "label", False)]
        role = "ok" if state in ("LIVE", "REPLAY") else "cursor"
        strips = [grid_strip(geo, g, state, cells, values, None, gutter_role=role, gutter_bold=True)]
        if frame.notice:
            strips.append(text_strip(geo, g, [(" " * (geo.gutter + 1), None, False), (frame.notice, "warning", True)]))
        return strips


def fmt_window(window_s: float) -> str:
    return f"{window_s / 60:g}m" if window_s >= 60 else f"{window_s:g}s"


# ---------------------------------------------------------------- process table

COLUMNS = (
    ("pid", "PID", 7),
    ("role", "ROLE", 6),
    ("cpu", "CPU%", 4),
    ("rsd", "R/S/D %", 9),
    ("rss", "RSS", 6),
    ("read", "READ", 7),
    ("gpu", "GPU MEM", 7),
    ("name", "NAME", 16),
)
CELL_PADDING = 1
_DATATABLE_INTERNALS = (
    "_data",
    "_update_count",
    "_row_locations",
    "_pseudo_class_state",
    "_show_hover_cursor",
    "_get_styles_to_render_cell",
)
FAST_CELLS = 4096  # rendered cells kept (a table of 80 rows × 8 columns in a few states)
_ROLE_RANK = {"main": 0, "rank": 0, "child": 1, "worker": 2}


def proc_cells(row: ProcRow) -> tuple[str, ...]:
    def pct(x: float) -> str:
        return f"{x * 100:.0f}" if finite(x) else "-"

    if row.note:  # another pid namespace's pid: no figures (they would be another process's)
        name = f"{row.note} · {row.name}" if row.name else row.note
        return (f"ns:{row.pid}", row.role, "-", "-/-/-", "-", "-", "-", name)
    rsd = f"{pct(row.state_r)}/{pct(row.state_s)}/{pct(row.state_d)}"
    return (
        str(row.pid),
        row.role,
        fmt_num(row.cpu_pct, 0),
        rsd,
        fmt_mb(row.rss_mb),
        fmt_rate(row.read_mb_s),
        fmt_mb(row.gpu_mb) if finite(row.gpu_mb) else "-",
        row.name or "",
    )


class ProcTable(DataTable):
    """Mains, ranks and DataLoader workers at the shown instant; rows keyed by pid and updated in place."""

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, cell_padding=CELL_PADDING, **kwargs)
        self._cells: dict[str, tuple[str, ...]] = {}
        self.updates = 0  # cell writes, for tests: an unchanged frame writes none
        self.row_adds = 0
        self.name_width = COLUMNS[-1][2]
        self._fast_cells: dict[tuple, list[list[Segment]]] = {}
        # The direct paths below use DataTable's internals (Textual is pinned; another 8.x may differ): without
        # them the table draws and updates cells through DataTable's public path.
        self._direct = all(hasattr(self, name) for name in _DATATABLE_INTERNALS)

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, key=key, width=width)

    def fit(self, width: int) -> None:
        """Give the NAME column what the screen has left, so the table never scrolls sideways."""
        fixed = sum(w for _, _, w in COLUMNS[:-1]) + 2 * CELL_PADDING * len(COLUMNS) + 1
        name_width = max(8, width - fixed)
        if name_width == self.name_width or not self.is_mounted:
            return
        self.name_width = name_width
        key, label, _ = COLUMNS[-1]
        self.remove_column(key)
        self.add_column(label, key=key, width=name_width)
        for row_key, cells in self._cells.items():
            self.update_cell(row_key, key, cells[-1])

    def show(self, rows: list[ProcRow]) -> None:
        wanted = {r.key: r for r in rows}
        changed_set = False
        changed_rows: list[str] = []
        for key in [k for k in self._cells if k not in wanted]:
            self.remove_row(key)
            del self._cells[key]
            changed_set = True
        for key, row in wanted.items():
            cells = proc_cells(row)
            old = self._cells.get(key)
            if old is None:
                self.add_row(*(_cell(i, c) for i, c in enumerate(cells)), key=key)
                self.row_adds += 1
                changed_set = True
            elif old != cells and not self._direct:
                for i, (a, b) in enumerate(zip(old, cells, strict=True)):
                    if a != b:
                        self.update_cell(key, COLUMNS[i][0], _cell(i, b))
                        self.updates += 1
            elif old != cells:
                data = self._data[RowKey(key)]
                for i, (a, b) in enumerate(zip(old, cells, strict=True)):
                    if a != b:
                        data[ColumnKey(COLUMNS[i][0])] = _cell(i, b)
                        self.updates += 1
                changed_rows.append(key)
            self._cells[key] = cells
        if changed_set and self.row_count > 1:
            self.sort("role", "pid", key=lambda cells: (_ROLE_RANK.get(str(cells[0]), 3), _pid_order(str(cells[1]))))
        elif changed_rows:
            # update_cell would repaint the whole table for each cell; the rows whose cells changed are enough.
            self._update_count += 1
            for key in changed_rows:
                self.refresh_row(self.get_row_index(key))

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> list[list[Segment]]:
        # DataTable renders every cell through Rich (Padding, Text, wrapping) again whenever any cell changed, which
        # was half the UI thread's time. A one-line ASCII cell is one segment: built directly and kept by content.
        content = self._plain_cell(row_index, column_index, width) if self._direct else None
        if content is None:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        key = (row_index, column_index, content, base_style, width, cursor, hover, self._pseudo_class_state)
        lines = self._fast_cells.get(key)
        if lines is None:
            header = row_index == -1
            component, post = self._get_styles_to_render_cell(
                header,
                False,
                not header and (row_index < self.fixed_rows or column_index < self.fixed_columns),
                hover,
                cursor,
                self.show_cursor,
                self._show_hover_cursor,
                self.cursor_foreground_priority == "css",
                self.cursor_background_priority == "css",
            )
            style = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component + post
            pad = " " * self.cell_padding
            lines = [[Segment(pad + content + pad, style)]]
            if len(self._fast_cells) > FAST_CELLS:
                self._fast_cells.clear()
            self._fast_cells[key] = lines
        return lines

    def _plain_cell(self, row_index: int, column_index: int, width: int) -> str | None:
        """The cell's text padded or cropped to its column when it is one line of plain ASCII, else None."""
        if column_index < 0:
            return None
        column = self.ordered_columns[column_index]
        if row_index == -1:
            value: object = column.label
        else:
            row_key = self._row_locations.get_key(row_index)
            if row_key is None or self.rows[row_key].height != 1:
                return None
            value = self._data[row_key].get(column.key)
        justify = "left"
        if isinstance(value, Text):
            if value.spans or value.style or value.justify not in (None, "default", "left", "right"):
                return None
            justify = value.justify or "left"
            value = value.plain
        if not isinstance(value, str) or not value.isascii() or "[" in value:
            return None
        inner = width - 2 * self.cell_padding
        if inner <= 0 or not value.isprintable():
            return None
        value = value[:inner]
        return value.rjust(inner) if justify == "right" else value.ljust(inner)

    def selected_pid(self) -> int | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None
        return int(key) if key is not None and key.isdigit() else None

    def selected_role(self) -> str:
        pid = self.selected_pid()
        cells = self._cells.get(str(pid)) if pid is not None else None
        return cells[1] if cells else ""


def _pid_order(cell: str) -> tuple[int, int]:
    """Rows of the monitor's pids first by pid, then those of another pid namespace ("ns:N")."""
    if cell.isdigit():
        return (0, int(cell))
    rest = cell.removeprefix("ns:")
    return (1, int(rest) if rest.isdigit() else 0)


def _cell(i: int, text: str) -> Text | str:
    if i in (0, 2, 4, 5, 6):
        return Text(text, justify="right")
    return text


def plain_lines(widget: GridWidget) -> str:
    return "\n".join(line.rstrip() for line in widget.text_lines())


__all__ = ["Banner", "ChartPane", "GridWidget", "ProcTable", "TimeAxis", "line_text", "plain_lines"]
