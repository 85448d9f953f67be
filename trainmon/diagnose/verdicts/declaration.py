"""What a verdict declares: its code, meaning and colour, what every consumer does with it, and its reference text."""

from __future__ import annotations

from dataclasses import dataclass

INPUT_COLOUR = "#c62828"
GREY = "#616161"


@dataclass(frozen=True)
class Verdict:
    code: str
    meaning: str  # one line: what holds when this code is given
    colour: str = GREY  # in the HTML report's timeline and charts
    immediate: bool = False  # shown as soon as it holds, and heads a report that has it (a hang only gets worse)
    reads_states: bool = False  # its rule reads the thread states: they are sampled fast while it stands
    dump_workers: int = 1  # stack dumps when it turns critical: the main process and this many workers
    thresholds: tuple[str, ...] = ()  # the Thresholds fields its rule reads (the reference lists them, with defaults)
    # The verdict reference (docs/verdicts.md, written from these by scripts/reference.py): what holds when it is given,
    # the evidence its rule reads, the advice it gives, and when it is given, its figures as placeholders ({name} a
    # threshold's default, {name:%} a share's as a percentage), so the page follows Thresholds
    explains: str = ""
    evidence: str = ""
    advice: str = ""
    when: str = ""

    @property
    def family(self) -> str:
        """``input``, ``stall``, ``gpu``...: the part before the dot (the code itself when it has none)."""
        return self.code.split(".", 1)[0]


INPUT_THRESHOLDS = ("wait_warning", "wait_critical")  # the input verdicts' wait thresholds
