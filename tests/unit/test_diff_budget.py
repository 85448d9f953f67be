"""trainmon diff shows both sides' time budgets part by part, from the reports' own runs[].time_budget."""

from __future__ import annotations

import pytest

from testsupport.paths import RECORDINGS
from trainmon.compare.diff import diff, load_side
from trainmon.compare.diff_render import budget_cells, render, to_json

HEALTHY = str(RECORDINGS / "healthy.tmrec")
FEW = str(RECORDINGS / "few-workers.tmrec")


def test_the_budgets_of_both_sides_are_side_by_side():
    d = diff(load_side(HEALTHY), load_side(FEW))
    (pair,) = d.pairs
    a, b = pair.budgets
    assert a == d.a.report["runs"][0]["time_budget"] and b == d.b.report["runs"][0]["time_budget"]
    assert a is not None and b is not None
    rows = {r[0]: r for r in budget_cells(pair)}
    wait = rows["data wait"]
    assert wait[1] == f"{a['parts_s']['data_wait']:.1f} s ({a['parts_s']['data_wait'] / a['wall_s']:.1%})"
    change = (b["parts_s"]["data_wait"] / b["wall_s"] - a["parts_s"]["data_wait"] / a["wall_s"]) * 100
    assert wait[3] == f"{change:+.1f} pt" and change > 20  # few-workers starves on input
    assert rows["wall time"][1:3] == [f"{a['wall_s']:.1f} s", f"{b['wall_s']:.1f} s"]
    out = to_json(d)
    assert out["runs"][0]["time_budget"] == {"a": a, "b": b}
    text = render(d, "text")
    assert "time budget" in text and "data wait" in text
    assert "| time budget | A | B | change |" in render(d, "markdown")


def test_a_recording_against_itself_has_an_unchanged_budget():
    d = diff(load_side(HEALTHY), load_side(HEALTHY))
    (pair,) = d.pairs
    rows = budget_cells(pair)
    assert rows and all(r[3] in ("+0.0 pt", "+0.0%") for r in rows), rows
    total = sum(pair.budgets[0]["parts_s"].values())
    assert total == pytest.approx(pair.budgets[0]["wall_s"], rel=1e-3)
