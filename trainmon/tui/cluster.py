"""``trainmon cluster``: every job, node and rank that Prometheus holds of trainmon, in the live screen's look.

The banner is the worst job's headline (the severity badge and colours of the live screen); the table has one
row per job, per node of the job and per rank on each node, updated in place by key. A worker thread queries
Prometheus (``trainmon.cluster``, headless) every ``interval`` seconds; enter or ``e`` on a row shows its
evidence. An unreachable Prometheus is one line in the banner; the rows keep their last values.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Footer, Static

from trainmon.cluster.prom import ClusterError, Prometheus
from trainmon.cluster.rows import COLUMNS, Row, evidence, rows
from trainmon.cluster.state import ClusterState, fetch
from trainmon.diagnose.thresholds import Thresholds
from trainmon.tui.screens import _Modal
from trainmon.tui.theme import Glyphs, detect, style
from trainmon.tui.widgets import SEVERITY_BADGE

VERDICT_COLUMN = COLUMNS.index("verdict")
RIGHT = {3, 4, 5, 6, 7}


class StateReady(Message):
    def __init__(self, state: ClusterState | None, error: str | None) -> None:
        super().__init__()
        self.state = state
        self.error = error


class ClusterEvidence(_Modal):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,e,enter", "close", "Close")]

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def compose(self) -> ComposeResult:
        text = Text()
        for n, line in enumerate(self.lines):
            heading = n == 0 or (not line.startswith(" ") and ":" not in line)
            text.append(line + "\n", style="bold" if heading else "")
        with VerticalScroll():
            yield Static(text, id="evidence-text")


class ClusterTable(DataTable[Text | str]):
    """The rows keyed by job, node (monitor) and rank (monitor, pid); unchanged cells are never written."""

    def __init__(self, glyphs: Glyphs, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, cell_padding=1, **kwargs)  # type: ignore[arg-type]
        self.glyphs = glyphs
        self.shown: list[Row] = []

    def on_mount(self) -> None:
        for n, label in enumerate(COLUMNS):
            self.add_column(label, key=str(n))

    def show(self, wanted: list[Row]) -> None:
        if [r.key for r in wanted] != [r.key for r in self.shown]:
            selected = self.selected_key()
            self.clear()
            for r in wanted:
                self.add_row(*self._cells(r), key=r.key)
            keys = [r.key for r in wanted]
            if selected in keys:
                self.move_cursor(row=keys.index(selected))
        else:
            for old, new in zip(self.shown, wanted, strict=True):
                for i, (a, b) in enumerate(zip(old.cells, new.cells, strict=True)):
                    if a != b or (i == VERDICT_COLUMN and old.severity != new.severity):
                        self.update_cell(new.key, str(i), self._cell(new, i))
        self.shown = wanted

    def _cells(self, r: Row) -> list[Text | str]:
        return [self._cell(r, i) for i in range(len(r.cells))]

    def _cell(self, r: Row, i: int) -> Text | str:
        text = r.cells[i]
        bold = r.kind == "job"
        if i == VERDICT_COLUMN and r.severity is not None and r.cells[i] != "insufficient_data":
            return Text(text, style=style(r.severity, bold=True, color=self.glyphs.color))
        if i in RIGHT:
            return Text(text, justify="right", style="bold" if bold else "")
        return Text(text, style="bold" if bold else "")

    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return str(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)
        except Exception:
            return None


class ClusterApp(App[int]):
    TITLE = "trainmon cluster"
    ENABLE_COMMAND_PALETTE = False
    CSS_PATH: ClassVar[list[str | PurePath]] = ["widgets.tcss", "cluster.tcss"]  # beside this module
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("enter,e", "evidence", "Evidence"),
        Binding("r", "refresh", "Refresh"),
    ]

    def __init__(
        self, url: str, *, interval: float = 2.0, glyphs: Glyphs | None = None, th: Thresholds | None = None
    ) -> None:
        super().__init__()
        self.th = th  # the straggler thresholds the cluster's jobs are judged by (a config file's)
        self.prom = Prometheus(url)
        self.interval = interval
        self.glyphs = glyphs or detect()
        self.state: ClusterState | None = None
        self.error: str | None = None
        self.updates = 0  # states applied, for tests

    def compose(self) -> ComposeResult:
        yield Static(Text("… asking Prometheus", style="dim"), id="banner")
        yield ClusterTable(self.glyphs, id="table")
        yield Static(Text(self.prom.url, style="dim"), id="status")
        yield Footer()

    def on_mount(self) -> None:
        if not self.glyphs.unicode:
            self.add_class("-ascii")
        self.action_refresh()
        self.set_interval(self.interval, self.action_refresh)

    def action_refresh(self) -> None:
        self.run_worker(self._fetch, thread=True, exclusive=True, group="fetch")

    def _fetch(self) -> None:
        try:
            self.post_message(StateReady(fetch(self.prom, self.th), None))
        except ClusterError as exc:
            self.post_message(StateReady(None, str(exc)))

    def on_state_ready(self, msg: StateReady) -> None:
        self.error = msg.error
        with self.batch_update():
            if msg.state is not None:
                self.state = msg.state
                self.query_one(ClusterTable).show(rows(msg.state))
            self.query_one("#banner", Static).update(self._banner())
            self.query_one("#status", Static).update(self._status())
        self.updates += 1

    def _banner(self) -> Text:
        color = self.glyphs.color
        text = Text()
        if self.error is not None:
            text.append(
                " UNREACHABLE " if "reach" in self.error else " NO DATA ", style=style("badge-critical", color=color)
            )
            text.append(" " + self.error, style=style("critical", color=color))
            return text
        if self.state is None or not self.state.jobs:
            text.append("no trainmon runs in Prometheus yet", style="dim")
            return text
        job = self.state.jobs[0]  # the worst headline first
        v = job.headline
        sev = v.severity if v.code != "insufficient_data" else "none"
        text.append(SEVERITY_BADGE.get(v.severity, f" {v.severity.upper()} "), style=style(f"badge-{sev}", color=color))
        text.append(f" {v.code}", style=style(sev, bold=True, color=color))
        text.append(f"  {job.label}", style="bold")
        if v.summary:
            text.append(f"  {v.summary}", style=style("text", color=color))
        return text

    def _status(self) -> Text:
        if self.state is None:
            return Text(self.prom.url, style="dim")
        s = self.state
        ranks = sum(len(j.ranks) for j in s.jobs)
        firing = sum(1 for a in s.alerts if a.get("state") == "firing")
        return Text(
            f"{s.url}  ·  {len(s.jobs)} job(s), {len(s.nodes)} node(s), {ranks} rank(s)  ·  {firing} alert(s) firing",
            style="dim",
        )

    def on_data_table_row_selected(self, _msg: DataTable.RowSelected) -> None:
        self.action_evidence()  # enter on the table selects the row

    def action_evidence(self) -> None:
        key = self.query_one(ClusterTable).selected_key()
        if self.state is None or key is None:
            return
        self.push_screen(ClusterEvidence(evidence(self.state, key)))


def run_cluster(url: str, interval: float, th: Thresholds | None = None) -> int:
    app = ClusterApp(url, interval=interval, th=th)
    app.run()
    return app.return_code or 0
