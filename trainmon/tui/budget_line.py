"""The training pane's time-budget line: where a run's wall time went so far, in one line of the values column."""

from __future__ import annotations

from trainmon.tui.lines import Line
from trainmon.view.frames import RunView

BUDGET_ROLES = {"wait": "wait", "compute": "compute", "model": "compute", "frozen": "critical", "long": "warning"}
LABEL = "time "


def budget_line(run: RunView, width: int) -> Line:
    """ "time compute 52% frozen 39% wait 7%": the run's wall time so far by part, largest first, as many parts as
    fit in ``width`` (without the label where it would keep one out); empty before its first step."""
    labelled = _parts(run, width - len(LABEL))
    bare = _parts(run, width)
    if not bare:
        return []
    if len(labelled) >= len(bare):
        return [(LABEL, "label", False), *labelled]
    return bare


def _parts(run: RunView, width: int) -> Line:
    line: Line = []
    used = 0
    for name, share in run.budget:
        text = f"{name} {share:.0%}"
        sep = " " if line else ""
        if used + len(sep) + len(text) > width:
            break
        line += [(f"{sep}{name} ", "label", False), (f"{share:.0%}", BUDGET_ROLES.get(name, "value"), name == "frozen")]
        used += len(sep) + len(text)
    return line
