"""The CI gate's parsing and decisions on report dicts (trainmon.compare.gate)."""

from __future__ import annotations

import pytest

from trainmon.compare.gate import GateError, fail_on, max_data_wait, parse_codes, parse_fraction


def _report(verdict: str, findings: list[tuple[str, float]], waits: list[float | None]) -> dict:
    return {
        "verdict": {"code": verdict},
        "findings": [{"code": c, "held_s": s} for c, s in findings],
        "runs": [{"rank": k, "pid": 100 + k, "data_wait_fraction": w} for k, w in enumerate(waits)],
    }


def test_codes_are_checked_against_the_table_given_at_use():
    table = ["input.io", "input.new_cause", "ok.compute_bound"]
    assert [p.text for p in parse_codes("input.new_cause, ok.*", table)] == ["input.new_cause", "ok.*"]
    with pytest.raises(GateError, match=r"unknown verdict code 'input\.new_cause'"):
        parse_codes("input.new_cause", ["input.io"])


@pytest.mark.parametrize(("text", "value"), [("0.3", 0.3), ("30%", 0.3), (" 7.5 % ", 0.075), (".05", 0.05), ("1", 1.0)])
def test_fractions_and_percentages(text, value):
    assert parse_fraction(text, "--x") == pytest.approx(value)


def test_fail_on_names_the_verdict_before_a_finding():
    report = _report("input.io", [("stall.periodic", 12.5)], [0.2])
    assert fail_on(report, parse_codes("stall.periodic,input.io")) == "verdict input.io is listed in --fail-on"
    why = fail_on(report, parse_codes("stall.*"))
    assert why == "stall.periodic held for 12.5 s (verdict input.io) and is listed in --fail-on"
    assert fail_on(report, parse_codes("gpu.throttled")) is None


def test_max_data_wait_takes_the_worst_run_and_fails_when_nothing_was_measured():
    assert max_data_wait(_report("ok.compute_bound", [], [0.1, 0.35, None]), 0.3) == (
        "rank 1 waited on data 35.0% of its step time, above --max-data-wait 30.0%"
    )
    assert max_data_wait(_report("ok.compute_bound", [], [0.1, 0.29]), 0.3) is None
    assert "no run has steady steps" in (max_data_wait(_report("insufficient_data", [], [None]), 0.3) or "")
