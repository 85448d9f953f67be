"""Modal screens: help, the evidence behind the verdict (with the stacks dumped when it fired), and a py-spy stack
dump of the selected process."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from trainmon.view import VerdictView

KEYS = (
    ("← →", "move the time cursor one column (shift: ten); every pane shows its values at that instant"),
    ("home end", "cursor to the start / end of what is kept (the whole recording in replay)"),
    ("esc", "drop the cursor and follow the newest data again"),
    ("p  space", "pause / resume (replay: stop / play)"),
    ("w", "time window: 1, 5 or 15 minutes"),
    ("f", "focus the next pane: it gets the room (training, GPU, CPU, disk, processes)"),
    ("↑ ↓", "select a process in the table"),
    ("d", "stack dump of the selected process (py-spy)"),
    ("e", "evidence behind the verdict at the shown instant, with the stacks dumped when it fired"),
    ("+ -", "replay speed"),
    ("? h", "this help"),
    ("q", "quit"),
)


class _Modal(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q", "close", "Close")]

    def action_close(self) -> None:
        self.dismiss(None)


class HelpScreen(_Modal):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark,h", "close", "Close")]

    def __init__(self, extra: str = "") -> None:
        super().__init__()
        self.extra = extra

    def compose(self) -> ComposeResult:
        text = Text()
        text.append("trainmon keys\n\n", style="bold")
        for key, what in KEYS:
            text.append(f"{key:>10}  ", style="bold")
            text.append(what + "\n")
        text.append(
            "\nTRAINMON_GLYPHS=braille|block|ascii picks the chart characters; NO_COLOR turns colour off.\n",
            style="dim",
        )
        if self.extra:
            text.append(self.extra + "\n", style="dim")
        with VerticalScroll():
            yield Static(text, id="help-text")


class EvidenceScreen(_Modal):
    """The verdict at the shown instant, every finding that held then, and the figures each one used."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,e", "close", "Close")]

    def __init__(self, verdict: VerdictView | None) -> None:
        super().__init__()
        self.verdict = verdict

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(evidence_text(self.verdict), id="evidence-text")


def evidence_text(v: VerdictView | None) -> Text:
    text = Text()
    if v is None:
        text.append("no verdict yet: the rules need a few steps after warm-up")
        return text
    text.append(f"{v.code}", style="bold")
    text.append(f"  ({v.severity}) at {v.at_label}\n")
    text.append(v.summary + "\n")
    for advice in v.advice:
        text.append(f"  → {advice}\n", style="bold")
    for f in v.findings:
        text.append(f"\n{f.code}", style="bold")
        text.append(f" [{f.severity}]  {f.summary}\n")
        for key, value in f.evidence.items():
            shown = value if isinstance(value, (str, int)) else json.dumps(value, default=str)
            if isinstance(value, float):
                shown = f"{value:.4g}"
            text.append(f"    {key}: ", style="dim")
            text.append(f"{shown}\n")
    for stacks in v.stacks:
        text.append(f"\nstacks of {stacks.run}", style="bold")
        text.append(f"  dumped by py-spy when {stacks.reason} fired, at {stacks.at_label}\n")
        for line in stacks.lines:
            text.append(line + "\n", style="bold" if line.lstrip().startswith("thread ") else "")
    return text


class StackScreen(_Modal):
    """py-spy dump of one process, fetched on a worker thread (py-spy can take a second or time out)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,d", "close", "Close")]

    def __init__(self, pid: int, role: str, dump: Callable[[int], list[str]]) -> None:
        super().__init__()
        self.pid = pid
        self.role = role
        self._dump = dump
        self.lines: list[str] | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text(f"py-spy dump of pid {self.pid} ({self.role}) …", style="bold"), id="stack-text")

    def on_mount(self) -> None:
        self.fetch()

    @work(thread=True, exit_on_error=False, group="stack")
    def fetch(self) -> None:
        try:
            lines = self._dump(self.pid)
        except Exception as exc:  # a monitor must survive whatever py-spy does
            lines = [f"pid {self.pid}: stack dump failed: {exc}"]
        self.app.call_from_thread(self.show_lines, lines)

    def show_lines(self, lines: list[str]) -> None:
        self.lines = lines
        text = Text()
        text.append(f"py-spy dump of pid {self.pid} ({self.role})\n\n", style="bold")
        for line in lines:
            style = "bold" if line.startswith("thread ") else ""
            if "permission denied" in line or "cannot attach" in line or "not found" in line:
                style = "bold red"
            text.append(line + "\n", style=style)
        self.query_one("#stack-text", Static).update(text)
