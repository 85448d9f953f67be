"""The floor under trainmon's screen: a bare Textual app of the same size, redrawn at the same 1 s refresh.

    python benchmarks/_bare_textual.py --mode idle|table|full

- ``idle``: a header, a footer and one static pane; nothing changes (what Textual costs doing nothing).
- ``table``: a process table of 12 rows × 8 columns and two text panes of 10 lines; every second each table row's
  figures and each pane's lines change, as trainmon's process table and panes change at a steady load.
- ``full``: one pane filling the screen whose every line changes every second (Textual redrawing all of it).

No trainmon code, no sources, no sockets: what is left is the framework's own cost for that much change.
"""

from __future__ import annotations

import argparse
import random

from textual.app import App, ComposeResult
from textual.widgets import DataTable, Footer, Header, Static

COLUMNS = ("PID", "USER", "CPU%", "MEM MB", "GPU%", "GPU MEM", "STATE", "COMMAND")


class Bare(App[None]):
    CSS = "Static { height: 1fr; } DataTable { height: 14; }"

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.rng = random.Random(0)
        self.tick = 0

    def compose(self) -> ComposeResult:
        yield Header()
        if self.mode == "table":
            yield DataTable(id="procs")
            yield Static(id="a")
            yield Static(id="b")
        else:
            yield Static(id="a")
        yield Footer()

    def on_mount(self) -> None:
        if self.mode == "table":
            table = self.query_one(DataTable)
            for name in COLUMNS:
                table.add_column(name, key=name)
            for row in range(12):
                table.add_row(*self._cells(row), key=str(row))
        self._paint()
        if self.mode != "idle":
            self.set_interval(1.0, self._paint)

    def _cells(self, row: int) -> list[str]:
        r = self.rng
        return [
            str(4000 + row),
            "user",
            f"{r.uniform(0, 100):.1f}",
            f"{r.uniform(100, 9000):.0f}",
            f"{r.uniform(0, 100):.0f}",
            f"{r.uniform(0, 80):.1f} GiB",
            r.choice("RSD"),
            f"python train.py --rank {row}",
        ]

    def _lines(self, n: int, width: int) -> str:
        self.tick += 1
        return "\n".join(
            f"{self.tick:6d} {k:3d} " + f"{self.rng.random():.6f} " * ((width - 11) // 9) for k in range(n)
        )

    def _paint(self) -> None:
        width = max(20, self.size.width - 2)
        if self.mode == "table":
            table = self.query_one(DataTable)
            for row in range(12):
                for name, value in zip(COLUMNS, self._cells(row), strict=True):
                    table.update_cell(str(row), name, value)
            self.query_one("#a", Static).update(self._lines(10, width))
            self.query_one("#b", Static).update(self._lines(10, width))
        elif self.mode == "full":
            self.query_one("#a", Static).update(self._lines(max(1, self.size.height - 4), width))
        else:
            self.query_one("#a", Static).update("idle")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("idle", "table", "full"), default="table")
    Bare(ap.parse_args().mode).run()


if __name__ == "__main__":
    main()
