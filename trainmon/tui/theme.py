"""Glyph sets and colours: braille where the terminal has it, ASCII where it does not, glyphs instead of colour
under NO_COLOR."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from rich.style import Style

MODES = ("braille", "block", "ascii")

# Colour per role; a chart cell names a foreground and a background role.
PALETTE: dict[str, str] = {
    "wait": "#f0883e",
    "compute": "#39c5cf",
    "rate": "#39c5cf",
    "util": "#3fb950",
    "swing": "#1d5a2c",
    "busy": "#58a6ff",
    "iowait": "#d29922",
    "read": "#a371f7",
    "write": "#db61a2",
    "mark": "#ff7b72",
    "label": "#8b949e",
    "dim": "#6e7681",
    "ok": "#3fb950",
    "warning": "#d29922",
    "critical": "#f85149",
    "none": "#6e7681",
    "cursor": "#e3b341",
    "text": "#c9d1d9",
    "value": "#e6edf3",
}


# Severity badges: dark text on the severity colour.
for _sev in ("ok", "warning", "critical", "none"):
    PALETTE[f"badge-{_sev}"] = f"#0d1117 on {PALETTE[_sev]}"


@dataclass(frozen=True)
class Glyphs:
    mode: str = "braille"
    color: bool = True

    @property
    def unicode(self) -> bool:
        return self.mode != "ascii"

    @property
    def braille(self) -> bool:
        return self.mode == "braille"

    @property
    def sub(self) -> int:
        """Samples per plot column."""
        return 2 if self.braille else 1


def detect_mode(env: Mapping[str, str] | None = None) -> str:
    """braille unless told otherwise (TRAINMON_GLYPHS), or the locale is not UTF-8, or the console lacks braille.

    tmux replaces characters it believes the client cannot show with '_', judging by LC_ALL/LC_CTYPE/LANG, so a
    non-UTF-8 locale gets ASCII rather than a screen of underscores.
    """
    env = os.environ if env is None else env
    asked = env.get("TRAINMON_GLYPHS", "").strip().lower()
    if asked in MODES:
        return asked
    for var in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = env.get(var, "")
        if value:
            if "utf-8" not in value.lower() and "utf8" not in value.lower():
                return "ascii"
            break
    term = env.get("TERM", "")
    if term == "linux" or term.startswith(("vt1", "vt2", "vt5")) or term == "dumb":
        return "ascii"  # the Linux console font has no braille and few block elements
    return "braille"


def detect(env: Mapping[str, str] | None = None) -> Glyphs:
    env = os.environ if env is None else env
    return Glyphs(detect_mode(env), color="NO_COLOR" not in env)


@lru_cache(maxsize=512)
def style(
    fg: str | None, bg: str | None = None, *, bold: bool = False, reverse: bool = False, color: bool = True
) -> Style:
    """The Rich style of a chart cell or a text run (cached: rendering asks for the same few all the time)."""
    if not color:
        return Style(bold=bold or None, reverse=reverse or None)
    fg_color = PALETTE.get(fg, fg) if fg else None
    if fg_color and " on " in fg_color:
        fg_color, bg = fg_color.split(" on ")
    return Style(
        color=fg_color, bgcolor=PALETTE.get(bg, bg) if bg else None, bold=bold or None, reverse=reverse or None
    )
