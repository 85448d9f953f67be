"""The time budget on the live screen: the view's shares (trainmon.view.budget) and the training pane's line."""

from __future__ import annotations

import math

import pytest

from testsupport.freeze import freeze_store
from testsupport.stores import replay_at_end, timeline_store, uniform_store
from trainmon.diagnose.thresholds import Thresholds
from trainmon.tui.budget_line import budget_line
from trainmon.tui.lines import line_text
from trainmon.view import Layout, build_frame
from trainmon.view.budget import budget_shares
from trainmon.view.frame_builder import feed_thresholds


def test_the_shares_are_the_budget_parts_largest_first():
    store = uniform_store(wait_ms=5.0, step_ms=50.0, steps=200)
    run = store.runs[1]
    shares = budget_shares(run, run.last_seen, Thresholds())
    names = [name for name, _ in shares]
    assert names[:2] == ["compute", "wait"]
    assert dict(shares)["compute"] == pytest.approx(195 * 0.045 / 10.0, abs=1e-3)
    assert sum(s for _, s in shares) <= 1.0 + 1e-9
    assert budget_shares(run, run.last_seen + 0.5, Thresholds()) is shares  # within REFRESH_S: not taken again


def test_live_the_line_names_the_freeze_while_it_lasts():
    store = freeze_store(before_s=30.0, freeze_s=60.0, after_s=0.0, closed=False)
    run = store.runs[1]
    last = run.steps.end[-1]
    shares = dict(budget_shares(run, last + 45.0, Thresholds()))
    assert shares["frozen"] == pytest.approx(45.0 / (last + 45.0 - run.first_seen), abs=0.02)
    assert "frozen" not in dict(budget_shares(run, last + 10.0, Thresholds()))  # under the hang limit yet


def test_the_frame_carries_each_runs_budget_at_the_instant_shown():
    feed = replay_at_end(timeline_store(90.0, wait_ms=30.0, compute_ms=20.0))
    assert feed_thresholds(feed) is feed.thresholds
    frame = build_frame(feed, Layout(cols=60, sub=2), feed.head(), 60.0, None)
    (run,) = frame.runs
    shares = dict(run.budget)
    assert shares["wait"] == pytest.approx(0.6, abs=0.05) and shares["compute"] == pytest.approx(0.4, abs=0.05)


@pytest.mark.parametrize("width", [12, 26, 36])
def test_the_line_fits_its_column(width):
    feed = replay_at_end(timeline_store(90.0))
    frame = build_frame(feed, Layout(cols=60, sub=2), feed.head(), 60.0, None)
    (run,) = frame.runs
    run.budget = [("compute", 0.52), ("frozen", 0.39), ("wait", 0.07), ("setup", 0.02)]
    text = line_text(budget_line(run, width))
    assert len(text) <= width
    if width >= 26:  # the label gives way where it would keep the second part out (80x24: 26 columns)
        assert text.endswith("compute 52% frozen 39%") or text.startswith("time compute 52% frozen 39%"), text
    assert line_text(budget_line(run, 36)) == "time compute 52% frozen 39% wait 7%"
    run.budget = []
    assert budget_line(run, width) == []  # no step yet: the pane keeps its other line
    assert not math.isnan(frame.axis.t1)


def test_a_dear_budget_is_taken_less_often(monkeypatch):
    """All runs' budgets together take at most CPU_SHARE of a core: a walk that takes 60 ms waits 20 s, not 5."""
    from trainmon.view import budget as view_budget

    store = uniform_store(wait_ms=5.0, step_ms=50.0, steps=200)
    run = store.runs[1]
    walks: list[float] = []
    real = view_budget.time_budget

    def dear(run, instant, th):
        walks.append(instant)
        t = view_budget.time.perf_counter() + 0.06
        while view_budget.time.perf_counter() < t:
            pass
        return real(run, instant, th)

    monkeypatch.setattr(view_budget, "time_budget", dear)
    monkeypatch.setattr(view_budget, "_CACHE", view_budget.weakref.WeakKeyDictionary())
    first = budget_shares(run, run.last_seen, Thresholds())
    assert budget_shares(run, run.last_seen + 10.0, Thresholds()) is first  # 0.06 s / 0.003 = 20 s
    assert len(walks) == 1
    budget_shares(run, run.last_seen + 25.0, Thresholds())
    assert len(walks) == 2
