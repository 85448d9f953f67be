"""Findings and the fixed verdict codes (the codes are a public contract: add, never rename; docs/architecture.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from trainmon.diagnose.verdicts import VERDICTS

SEVERITIES = ("ok", "warning", "critical")

# code → one-line meaning, in priority order (first wins at equal severity): from the verdict registry.
CODES: dict[str, str] = {v.code: v.meaning for v in VERDICTS}
PRIORITY = {code: i for i, code in enumerate(CODES)}
IMMEDIATE = frozenset(v.code for v in VERDICTS if v.immediate)  # shown as soon as they hold


@dataclass
class Finding:
    code: str
    severity: str
    summary: str
    advice: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown verdict code {self.code!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    @property
    def rank(self) -> tuple[int, int]:
        """Sort key: worse severity first, then the table's priority."""
        return (-SEVERITIES.index(self.severity), PRIORITY[self.code])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def headline(findings: list[Finding]) -> Finding | None:
    return min(findings, key=lambda f: f.rank) if findings else None
