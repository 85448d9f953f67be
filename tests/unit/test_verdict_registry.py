"""The verdict registry is the one list every consumer reads: the verdict reference (docs/verdicts.md), every report
format, the thresholds it names, the engine's priorities, the monitor's state sampling and the automatic dumps agree
with it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from testsupport.report_stores import SYNTHETIC_STORES
from trainmon.diagnose.findings import CODES, IMMEDIATE, PRIORITY, Finding
from trainmon.diagnose.thresholds import Thresholds
from trainmon.diagnose.verdicts import GREY, VERDICTS, verdict
from trainmon.monitor import states_matter
from trainmon.report import FORMATS, build_report, render
from trainmon.report.formats.html import _code_color

ROOT = Path(__file__).resolve().parents[2]


def reference_entries() -> list[str]:
    text = (ROOT / "docs" / "verdicts.md").read_text()
    return re.findall(r"^### `([a-z_.]+)`$", text, flags=re.M)


def test_the_verdict_reference_lists_every_code_once_in_the_registrys_order():
    assert reference_entries() == [v.code for v in VERDICTS]


def test_every_placeholder_of_a_verdicts_conditions_is_one_of_its_thresholds():
    for v in VERDICTS:
        named = set(re.findall(r"\{(\w+)(?::%)?\}", v.when))
        assert named <= set(v.thresholds), (v.code, named - set(v.thresholds))
        assert v.explains and v.evidence and v.advice and v.when, v.code


def test_every_threshold_a_verdict_names_exists_and_every_verdict_has_a_colour():
    fields = {f.name for f in dataclasses.fields(Thresholds)}
    for v in VERDICTS:
        assert set(v.thresholds) <= fields, (v.code, set(v.thresholds) - fields)
        assert v.colour != GREY and _code_color(v.code) == v.colour, v.code
        assert v.meaning and v.family == v.code.split(".")[0]
    assert verdict("no.such_code").colour == GREY  # a code from a newer recording renders, neutrally


def test_the_findings_tables_are_the_registrys():
    assert list(CODES) == [v.code for v in VERDICTS]
    assert all(CODES[v.code] == v.meaning for v in VERDICTS)
    assert frozenset({"stall.hang"}) == IMMEDIATE
    assert PRIORITY["stall.hang"] == 0 and PRIORITY["insufficient_data"] == len(VERDICTS) - 1
    with pytest.raises(ValueError):
        Finding("no.such_code", "ok", "x")


def test_the_monitor_samples_states_fast_for_the_codes_whose_rules_read_them():
    ok = Finding("ok.compute_bound", "ok", "fine")
    for v in VERDICTS:
        f = Finding(v.code, "ok", "x")
        assert states_matter([f], ok) == v.reads_states, v.code
    assert states_matter([], Finding("gpu.throttled", "warning", "x"))  # any non-ok verdict: a cause may follow


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "chrome-trace"])
def test_every_format_renders_a_report_headed_by_each_code(fmt):
    store = SYNTHETIC_STORES["gpu-ranks"]()
    report = build_report(store)
    for v in VERDICTS:
        report["verdict"] = {**report["verdict"], "code": v.code, "summary": f"summary of {v.code}"}
        out = render(report, fmt, store=store)
        assert v.code in out, (fmt, v.code)
