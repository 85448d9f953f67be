"""The GPU pane's energy figures: a run's joules per step (and per sample) over the live window, as cells."""

from __future__ import annotations

from trainmon.numbers import finite
from trainmon.tui.charts import fmt_num
from trainmon.tui.lines import Line
from trainmon.view.frames import EnergyView

METHOD_WORDS = {"nvml_counter": "counter", "power_integration": "power×t", "mixed": "mixed"}


def joules(j: float) -> str:
    return fmt_num(j, 2 if finite(j) and j < 10 else 1, "J")


def per_step(e: EnergyView) -> Line:
    """ "41.2J/step" ("*": the GPU is shared with another run and the figure is the whole GPU's)."""
    return [(joules(e.j_step), "value", False), ("/step" + ("*" if e.shared else ""), "label", False)]


def energy_line(e: EnergyView) -> Line:
    """A focused GPU's energy line: per step, per sample, and how it was measured (or that it is shared)."""
    line: Line = [("energy ", "label", False), *per_step(e)]
    if finite(e.j_sample):
        line += [(" ", "label", False), (joules(e.j_sample), "value", False), ("/smp", "label", False)]
    how = " shared" if e.shared else " " + METHOD_WORDS.get(e.method, e.method)
    return [*line, (how, "label", False)]
