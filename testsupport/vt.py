"""A small terminal emulator: what a browser's xterm.js shows, rebuilt from the bytes the page's websocket received.

It knows what Textual writes: cursor positioning, erases, SGR (ignored: text only), private modes, OSC strings.
Good enough to read a screen as rows of text; not a general VT100.
"""

from __future__ import annotations

import re
import unicodedata

_CSI = re.compile(r"\x1b\[([0-9;:?<=>]*)([ -/]*)([@-~])")
_OSC = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_ESC_ONE = re.compile(r"\x1b[()*+][0-9A-Za-z]|\x1b[^\[\]()*+]")


def _width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


class Screen:
    """Rows of cells; ``feed`` terminal output (str), read ``lines()`` or ``text()``."""

    def __init__(self, width: int = 80, height: int = 24) -> None:
        self.width, self.height = width, height
        self.rows = [[" "] * width for _ in range(height)]
        self.x = self.y = 0
        self._pending = ""

    def resize(self, width: int, height: int) -> None:
        rows = [[" "] * width for _ in range(height)]
        for y in range(min(height, self.height)):
            rows[y][: min(width, self.width)] = self.rows[y][: min(width, self.width)]
        self.rows, self.width, self.height = rows, width, height
        self.x, self.y = min(self.x, width - 1), min(self.y, height - 1)

    def lines(self) -> list[str]:
        return ["".join(row).rstrip() for row in self.rows]

    def text(self) -> str:
        return "\n".join(self.lines())

    def feed(self, data: str) -> None:
        data = self._pending + data
        self._pending = ""
        i, n = 0, len(data)
        while i < n:
            ch = data[i]
            if ch == "\x1b":
                end = self._escape(data, i)
                if end is None:  # cut in the middle of a sequence: the rest comes with the next message
                    self._pending = data[i:]
                    return
                i = end
                continue
            i += 1
            if ch == "\r":
                self.x = 0
            elif ch == "\n":
                self.y = min(self.y + 1, self.height - 1)
            elif ch == "\b":
                self.x = max(self.x - 1, 0)
            elif ch >= " ":
                self._put(ch)

    def _put(self, ch: str) -> None:
        w = _width(ch)
        if w == 0 or self.y >= self.height:
            return
        if self.x + w > self.width:
            self.x = 0
            self.y = min(self.y + 1, self.height - 1)
        self.rows[self.y][self.x] = ch
        if w == 2 and self.x + 1 < self.width:
            self.rows[self.y][self.x + 1] = ""
        self.x += w

    def _escape(self, data: str, i: int) -> int | None:
        if i + 1 >= len(data):
            return None
        if data[i + 1] == "[":
            m = _CSI.match(data, i)
            if m is None:
                return None if re.fullmatch(r"\x1b\[[0-9;:?<=>]*[ -/]*", data[i:]) else i + 2
            self._csi(m.group(1), m.group(2), m.group(3))
            return m.end()
        if data[i + 1] == "]":
            m = _OSC.match(data, i)
            return m.end() if m else None
        m = _ESC_ONE.match(data, i)
        if m is None:
            return None
        return m.end()

    def _csi(self, params: str, inter: str, final: str) -> None:
        if params.startswith("?") or inter:
            if params in ("?1049h", "?1049l") or (params == "?1049" and final in "hl"):
                self._erase(2)
            return
        args = [int(p) if p.isdigit() else 0 for p in params.split(";")] if params else []

        def arg(k: int, default: int = 1) -> int:
            return args[k] if len(args) > k and args[k] else default

        if final in "Hf":
            self.y, self.x = min(arg(0) - 1, self.height - 1), min(arg(1) - 1, self.width - 1)
        elif final == "A":
            self.y = max(self.y - arg(0), 0)
        elif final == "B":
            self.y = min(self.y + arg(0), self.height - 1)
        elif final == "C":
            self.x = min(self.x + arg(0), self.width - 1)
        elif final == "D":
            self.x = max(self.x - arg(0), 0)
        elif final == "G":
            self.x = min(arg(0) - 1, self.width - 1)
        elif final == "d":
            self.y = min(arg(0) - 1, self.height - 1)
        elif final == "J":
            self._erase(arg(0, 0))
        elif final == "K":
            row, mode = self.rows[self.y], arg(0, 0)
            lo, hi = {0: (self.x, self.width), 1: (0, self.x + 1)}.get(mode, (0, self.width))
            row[lo:hi] = [" "] * (hi - lo)
        elif final == "X":
            row = self.rows[self.y]
            hi = min(self.x + arg(0), self.width)
            row[self.x : hi] = [" "] * (hi - self.x)

    def _erase(self, mode: int) -> None:
        if mode == 2 or mode == 3:
            self.rows = [[" "] * self.width for _ in range(self.height)]
        elif mode == 0:
            self.rows[self.y][self.x :] = [" "] * (self.width - self.x)
            for y in range(self.y + 1, self.height):
                self.rows[y] = [" "] * self.width
        elif mode == 1:
            for y in range(self.y):
                self.rows[y] = [" "] * self.width
            self.rows[self.y][: self.x + 1] = [" "] * (self.x + 1)
