"""The cost budget of `make bench`: each fresh figure against its last committed value in benchmarks/results.json.

A figure is REGRESSED where it got more than TOLERANCE worse than that value. Where its row names peers measured in
the same run (nvitop, glances, TraceML: the anchor column), it is held at the same ratio to the first
of them, so a slower or busier host does not read as a regression (nor a faster one hide one). Which way is worse
follows the unit: a rate (``/s``) is worse lower, every cost (µs, ms, %, MB, MB/h) worse higher. Rows whose measured
text is not a figure ("not run", "failed") are not compared, nor floors ("floor: ..."): what a bare wrapper or a clock
read costs on this host is the host's figure, not trainmon's, and is there to read the others against.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks._common import RESULTS_JSON, Row, rows_of
from testsupport.paths import ROOT

TOLERANCE = 0.20
PEERS = ("nvitop", "glances --stdout", "glances", "TraceML")  # other tools measured in the same run (a floor is not)
_FIGURE = re.compile(r"([-+]?\d[\d,]*(?:\.\d+)?)\s*(µs|ns|ms|s|%|MB/h|MB|KB|GB|/s)(?![\w/])")


@dataclass
class Regression:
    figure: str
    before: str
    now: str
    change: float  # how much worse, as a share (0.35: 35 % worse)
    basis: str  # "raw", or the peer the ratio was taken to

    def line(self) -> str:
        by = "" if self.basis == "raw" else f" at its ratio to {self.basis}"
        return f"REGRESSED {self.figure}: {self.before} → {self.now} ({self.change:+.0%}{by})"


def figure(text: str) -> tuple[float, str] | None:
    """The first number with a unit in ``text`` ("3.72 µs", "1,174,100/s", "22.1 MB/h"), or None."""
    m = _FIGURE.search(text)
    return (float(m.group(1).replace(",", "")), m.group(2)) if m else None


def peer(anchor: str) -> tuple[str, float, str] | None:
    """The first peer an anchor names with a figure: ("nvitop", 1.05, "%") of "nvitop 1.05 % (2.48×) · glances …"."""
    m = re.match(r"\s*([A-Za-z][\w -]*?)\s+([-+]?\d[\d,]*(?:\.\d+)?\s*(?:µs|ns|ms|s|%|MB/h|MB|KB|GB|/s))", anchor)
    if not m or m.group(1).strip() not in PEERS:
        return None
    got = figure(m.group(2))
    return (m.group(1).strip(), *got) if got else None


def worse(before: float, now: float, unit: str) -> float:
    """How much worse ``now`` is than ``before``, as a share (negative: better)."""
    if before <= 0 or now < 0:
        return 0.0
    return before / now - 1.0 if unit == "/s" and now > 0 else now / before - 1.0


def regression(old: Row, new: Row, tolerance: float = TOLERANCE) -> Regression | None:
    a, b = figure(old.measured), figure(new.measured)
    if a is None or b is None or a[1] != b[1]:
        return None
    pa, pb = peer(old.anchor), peer(new.anchor)
    if pa and pb and pa[0] == pb[0] and pa[2] == pb[2] == a[1] and pa[1] > 0 and pb[1] > 0:
        change, basis = worse(a[0] / pa[1], b[0] / pb[1], a[1]), pa[0]
    else:
        change, basis = worse(a[0], b[0], a[1]), "raw"
    return Regression(new.figure, old.measured, new.measured, change, basis) if change > tolerance else None


def regressions(committed: Sequence[Row], fresh: Sequence[Row], tolerance: float = TOLERANCE) -> list[Regression]:
    """The fresh rows that got worse than the committed row of the same benchmark and figure."""
    by_key = {(r.source, r.figure): r for r in committed}
    out = []
    for r in fresh:
        if r.figure.startswith("floor:"):
            continue
        old = by_key.get((r.source, r.figure))
        if old is not None and (got := regression(old, r, tolerance)) is not None:
            out.append(got)
    return out


def committed_rows() -> list[Row]:
    """The rows of benchmarks/results.json as committed at HEAD (the file itself where git cannot say)."""
    try:
        text = subprocess.run(
            ["git", "show", f"HEAD:{RESULTS_JSON.relative_to(ROOT)}"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=10,
            check=True,
        ).stdout
        return rows_of(text)
    except (OSError, subprocess.SubprocessError, ValueError):
        return rows_of(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else []
