"""The vocabulary the panes share: a column's values from a frame's sub-columns, a label cell, a value cell, and the
utilisation layer (the GPU pane and the MIG rows draw it)."""

from __future__ import annotations

from trainmon.tui.charts import Layer, pairs
from trainmon.view import Frame

UTIL = Layer("util", "█", "#")


def columns(values: list[float], frame: Frame) -> list[float]:
    return pairs(values, frame.axis.sub)


def label(text: str) -> tuple[str, str, bool]:
    return (text, "label", False)


def value(text: str, role: str | None = "value", bold: bool = False) -> tuple[str, str | None, bool]:
    return (text, role, bold)
