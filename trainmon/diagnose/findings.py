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


# Advice values that name a direction, not a value: never "already set".
HIGHER = "higher"
LOWER = "lower"


@dataclass(frozen=True)
class AdviceItem:
    """One piece of advice as data: what to set (``settings``: knob → value, e.g. ``{"num_workers": 2}``;
    ``HIGHER``/``LOWER`` for a direction), why, and the sentence a plain PyTorch loop's user reads (``text``).
    Knobs are the DataLoader's settings, ``non_blocking`` (the host→device copy), or ``env:NAME`` for an environment
    variable; an item without settings is a change to the code or the set-up. ``at_least`` names the knobs whose
    value is a minimum (``prefetch_factor≥2``); ``names`` the knobs it mentions without advising a value; ``loaders``
    the loaders it is about (by id) where they are not the judged one (epoch restarts of a validation loader)."""

    text: str
    settings: dict[str, Any] = field(default_factory=dict)
    why: str = ""
    at_least: tuple[str, ...] = ()
    names: tuple[str, ...] = ()  # knobs the sentence names without advising a new value ("do not raise ...")
    loaders: tuple[int, ...] = ()  # the loaders it is about, where not the one whose steps were judged

    @property
    def knobs(self) -> tuple[str, ...]:
        """Every knob the sentence names: those it sets, then those it only mentions."""
        return (*self.settings, *self.names)

    @property
    def kind(self) -> str:
        """ "setting", "env" (an environment variable) or "code" (no single knob: a change to code or set-up)."""
        if not self.settings:
            return "code"
        return "env" if all(k.startswith("env:") for k in self.settings) else "setting"

    def holds_in(self, config: dict[str, Any]) -> str | None:
        """Why this item advises nothing new for a loader configured as ``config`` (every setting it advises is
        already there), else None."""
        if not self.settings:
            return None
        for knob, value in self.settings.items():
            have = config.get(knob)
            if value in (HIGHER, LOWER) or have is None or isinstance(have, bool) != isinstance(value, bool):
                return None
            if not (have >= value if knob in self.at_least else have == value):
                return None
        return "already set: " + ", ".join(f"{k}={config[k]!r}" for k in self.settings)

    def to_dict(self) -> dict[str, Any]:
        knob, value = next(iter(self.settings.items()), (None, None))
        return {
            "kind": self.kind,
            "knob": knob,
            "value": value,
            "settings": dict(self.settings),
            "why": self.why,
            "text": self.text,
        }


def code_advice(*texts: str) -> list[AdviceItem]:
    """Advice that is a change to the code or the set-up, one item a sentence, with no single knob to set."""
    return [AdviceItem(text) for text in texts]


@dataclass
class Finding:
    """One cause that holds: its code and severity, a one-line summary with numbers, the evidence it used and the
    advice. A rule gives its advice as ``advice_items`` (data: the knob and value where there is one, ``code_advice``
    where it is a change to the code or the set-up); ``advice``, the sentences every report and screen prints, is
    rendered from them and never given on its own. ``set_advice`` replaces both."""

    code: str
    severity: str
    summary: str
    advice: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    advice_items: list[AdviceItem] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown verdict code {self.code!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")
        if self.advice and [item.text for item in self.advice_items] != list(self.advice):
            raise ValueError(f"{self.code}: advice is given as AdviceItems (advice_items); its sentences follow them")
        self.advice = [item.text for item in self.advice_items]

    def set_advice(self, items: list[AdviceItem]) -> None:
        self.advice_items = list(items)
        self.advice = [item.text for item in items]

    def add_advice(self, item: AdviceItem) -> None:
        self.set_advice([*self.advice_items, item])

    @property
    def rank(self) -> tuple[int, int]:
        """Sort key: worse severity first, then the table's priority."""
        return (-SEVERITIES.index(self.severity), PRIORITY[self.code])

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["advice_items"] = [item.to_dict() for item in self.advice_items]
        return out


def step_share(f: Finding) -> float | None:
    """The share of each step a finding's cause takes, where it names a part of the step: the data wait for an
    input finding, the loop's own code for ``host.loop_code``; None for any other."""
    key = "own_code_fraction" if f.code == "host.loop_code" else "data_wait_fraction" if f.code[:6] == "input." else ""
    share = f.evidence.get(key) if key else None
    return float(share) if isinstance(share, int | float) else None


def ranked(findings: list[Finding]) -> list[Finding]:
    """Worse severity first, then the table's priority; among findings of one severity that each name a part of
    the step (data wait, the loop's own code) the larger part leads, in the places those findings hold."""
    out = sorted(findings, key=lambda f: f.rank)
    for severity in SEVERITIES:
        places = [i for i, f in enumerate(out) if f.severity == severity and step_share(f) is not None]
        parts = sorted((out[i] for i in places), key=lambda f: -(step_share(f) or 0.0))
        for i, f in zip(places, parts, strict=True):
            out[i] = f
    return out


def headline(findings: list[Finding]) -> Finding | None:
    return ranked(findings)[0] if findings else None
