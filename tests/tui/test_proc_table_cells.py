"""The process table draws its plain cells without Rich's pipeline: the result must be what DataTable draws."""

from __future__ import annotations

import math
from itertools import chain

from rich.segment import Segment
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable

from testsupport.tui import aio
from trainmon.tui.widgets import ProcTable
from trainmon.view import ProcRow


def _row(pid: int, role: str, name: str, cpu: float = 50.0, note: str = "") -> ProcRow:
    return ProcRow(pid, role, name, cpu, 0.2, 0.7, 0.1, 512.0, 3.5, math.nan, note=note, run_id=1)


ROWS = [
    _row(4100, "main", "python train.py --epochs 3"),
    _row(4101, "worker", "pt_data_worker", cpu=97.0),
    _row(4102, "worker", "a-very-long-process-name-that-the-name-column-must-crop-here", cpu=150.0),
    _row(4103, "worker", "naïve-ünïcode"),  # not ASCII: drawn by DataTable itself
    _row(4104, "worker", "bracket [markup]"),  # would be markup to DataTable
    _row(77, "main", "train.py", note="n/a (other pid namespace)"),
]


class _TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ProcTable(id="procs")


def _shown(table: ProcTable) -> list[str]:
    """The table's top rows as the compositor gets them: through the widget's line cache, which keeps every
    line that was not refreshed."""
    return [strip.text for strip in table.render_lines(Region(0, 0, table.size.width, 4))]


def _strip(lines: list[list[Segment]]) -> Strip:
    return Strip(list(chain.from_iterable(lines))).simplify()


@aio
async def test_plain_cells_match_what_datatable_draws_in_every_state() -> None:
    app = _TableApp()
    async with app.run_test(size=(110, 20)) as pilot:
        table = app.query_one(ProcTable)
        table.fit(110)
        table.show(ROWS)
        await pilot.pause()
        table.move_cursor(row=1)
        await pilot.pause()
        base = table.rich_style
        header = table.get_component_styles("datatable--header").rich_style
        compared = fast = 0
        for row in range(-1, table.row_count):
            for col, column in enumerate(table.ordered_columns):
                width = column.get_render_width(table)
                for cursor in (False, True):
                    for hover in (False, True):
                        style = header if row == -1 else base
                        ours = table._render_cell(row, col, style, width, cursor, hover)
                        theirs = DataTable._render_cell(table, row, col, style, width, cursor, hover)
                        assert _strip(ours) == _strip(theirs), (row, col, cursor, hover)
                        assert _strip(ours).text == _strip(theirs).text
                        compared += 1
                        fast += table._plain_cell(row, col, width) is not None
        assert compared == (table.row_count + 1) * len(table.ordered_columns) * 4
        # Most cells take the direct path; the non-ASCII, bracketed and other-namespace names do not.
        assert compared * 0.75 < fast < compared
        assert table._direct  # the pinned Textual has every internal the direct paths use


@aio
async def test_a_changed_cell_is_repainted_and_only_its_row() -> None:
    await _repaint_check(direct=True)


@aio
async def test_without_datatable_internals_cells_change_through_its_public_path() -> None:
    await _repaint_check(direct=False)


async def _repaint_check(direct: bool) -> None:
    app = _TableApp()
    async with app.run_test(size=(110, 20)) as pilot:
        table = app.query_one(ProcTable)
        table._direct = direct
        table.fit(110)
        table.show(ROWS[:2])
        await pilot.pause()
        await pilot.pause()
        before = _shown(table)
        assert any("97" in line for line in before), before
        table.show([ROWS[0], _row(4101, "worker", "pt_data_worker", cpu=12.0)])
        await pilot.pause()
        await pilot.pause()
        after = _shown(table)
        worker = next(line for line in after if "4101" in line)
        assert " 12 " in worker and " 97 " not in worker
        assert after[0] == before[0]  # the header is unchanged
        assert next(line for line in after if "4100" in line) == next(line for line in before if "4100" in line)
