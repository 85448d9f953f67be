"""Durations as the screen prints them: relative offsets on the live axis, elapsed time in replay."""

from __future__ import annotations


def fmt_rel(seconds: float) -> str:
    """A signed offset from now: "-15s", "-1m", "-2m30"."""
    s = round(seconds)
    sign = "-" if s < 0 else ""
    s = abs(s)
    if s >= 60:
        return f"{sign}{s // 60}m{s % 60:02d}" if s % 60 else f"{sign}{s // 60}m"
    return f"{sign}{s}s"


def fmt_elapsed(seconds: float) -> str:
    """Time since a start: "M:SS", or "H:MM:SS" from an hour on."""
    s = max(0, round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
