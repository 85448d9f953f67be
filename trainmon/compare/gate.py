"""CI gates on a report: fail on verdict codes, on too much data wait. Headless; the CLI turns a failure into
one line and ``GATE_FAILED``.

``--fail-on`` checks the codes that held: the headline verdict and every finding of the report's ``findings``
(each held over at least one judged phase, as that phase's headline or beside it). A code is a full code
(``input.io``) or a family (``input.*``); both are checked against the code table at use, so codes added later
are accepted without a change here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from trainmon.diagnose.findings import CODES
from trainmon.report.schema import Report

GATE_FAILED = 1  # the exit status of a gate that failed (bad arguments stay 2)


class GateError(ValueError):
    """A gate argument that cannot be used: one line for the user."""


@dataclass(frozen=True)
class CodePattern:
    text: str

    def matches(self, code: str) -> bool:
        if self.text.endswith(".*"):
            return code.startswith(self.text[:-1])
        return code == self.text


def parse_codes(arg: str, known: Iterable[str] | None = None) -> list[CodePattern]:
    """``"input.io,stall.*"`` as patterns; an empty list, an unknown code or a family without codes is an error."""
    table = list(CODES if known is None else known)
    out: list[CodePattern] = []
    for part in (p.strip() for p in arg.split(",")):
        if not part:
            continue
        pattern = CodePattern(part)
        if not any(pattern.matches(code) for code in table):
            raise GateError(f"--fail-on: unknown verdict code {part!r} (see docs/verdicts.md)")
        out.append(pattern)
    if not out:
        raise GateError("--fail-on needs at least one verdict code")
    return out


_FRACTION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*$")


def parse_fraction(arg: str, option: str) -> float:
    """``"0.3"`` or ``"30%"`` as 0.3. A bare number above 1 is refused: it is ambiguous (a share or percent?)."""
    m = _FRACTION.match(arg)
    if m is None:
        raise GateError(f"{option}: expected a share 0..1 or a percentage like 30%, got {arg!r}")
    value = float(m.group(1))
    if m.group(2):
        value /= 100.0
    elif value > 1.0:
        raise GateError(f"{option}: {arg} is above 1; write a share 0..1 or a percentage like {arg}%")
    if value > 1.0:
        raise GateError(f"{option}: {arg} is above 100%")
    return value


def held_codes(report: Report) -> list[str]:
    """The codes that held in the report: the verdict first, then its findings (worst first), each once."""
    codes = [report["verdict"]["code"], *(f["code"] for f in report["findings"])]
    return list(dict.fromkeys(codes))


def fail_on(report: Report, patterns: list[CodePattern]) -> str | None:
    """Why the report fails ``--fail-on``, or None when no code that held is listed."""
    verdict = report["verdict"]["code"]
    for code in held_codes(report):
        if any(p.matches(code) for p in patterns):
            if code == verdict:
                return f"verdict {code} is listed in --fail-on"
            held = next((f.get("held_s") for f in report["findings"] if f["code"] == code), None)
            during = f" for {held:g} s" if isinstance(held, (int, float)) else ""
            return f"{code} held{during} (verdict {verdict}) and is listed in --fail-on"
    return None


def max_data_wait(report: Report, limit: float) -> str | None:
    """Why the report fails ``--max-data-wait``: a run waited on data for more than ``limit`` of its steady
    step time, or no run measured a data wait at all (a gate that cannot check fails rather than passes)."""
    measured = [(r, r["data_wait_fraction"]) for r in report["runs"] if r["data_wait_fraction"] is not None]
    if not measured:
        return "no run has steady steps with a measured data wait to check against --max-data-wait"
    run, worst = max(measured, key=lambda rw: rw[1] or 0.0)
    if worst is not None and worst > limit:
        who = f"rank {run['rank']}" if run["rank"] is not None else f"pid {run['pid']}"
        return f"{who} waited on data {worst:.1%} of its step time, above --max-data-wait {limit:.1%}"
    return None
