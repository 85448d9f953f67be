"""SVG snapshots of the whole screen, compared as text with the files under tests/tui/snapshots/.

An in-house fixture rather than pytest-textual-snapshot (which pins an old pytest): the app runs under
``run_test()``, ``export_screenshot()`` gives the SVG, Rich's per-render id is normalised away, and the text is
compared. Textual is pinned exactly (constraints/dev.txt) because its releases change snapshots.

After an intended change of the screen: ``TRAINMON_UPDATE_SNAPSHOTS=1 pytest tests/tui/test_snapshots.py``,
then look at the new SVGs (any browser shows them) before committing them.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from testsupport.stores import replay_at_end, timeline_store
from testsupport.tui import aio, make_app, settle
from trainmon.tui.theme import Glyphs, detect

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("TRAINMON_UPDATE_SNAPSHOTS") == "1"


def normalise(svg: str) -> str:
    return re.sub(r"terminal-\d+-", "terminal-", svg)


def check_snapshot(name: str, svg: str, tmp_path: Path) -> None:
    expected_path = SNAPSHOTS / f"{name}.svg"
    actual = normalise(svg)
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        expected_path.write_text(actual)
        return
    if not expected_path.exists():
        pytest.fail(f"no snapshot {expected_path}: run with TRAINMON_UPDATE_SNAPSHOTS=1 to create it")
    if actual != expected_path.read_text():
        got = tmp_path / f"{name}.actual.svg"
        got.write_text(actual)
        pytest.fail(
            f"screen differs from {expected_path}; this run's screen: {got} "
            "(if the change is intended: TRAINMON_UPDATE_SNAPSHOTS=1)"
        )


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


async def _shot(app, size: tuple[int, int], keys: tuple[str, ...] = ()) -> str:
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app)
        for key in keys:
            await pilot.press(key)
            await settle(pilot, app)
        if app.screen is not app.screen_stack[0]:
            await app.workers.wait_for_complete()
        await pilot.pause()
        return app.export_screenshot()


@aio
async def test_snapshot_input_starved_120x40(tmp_path):
    app = make_app(store=timeline_store(120.0, wait_ms=45.0, compute_ms=15.0, checkpoint_every=400))
    check_snapshot("starved_120x40", await _shot(app, (120, 40)), tmp_path)


@aio
async def test_snapshot_compact_80x24(tmp_path):
    app = make_app(store=timeline_store(120.0, wait_ms=45.0, compute_ms=15.0))
    check_snapshot("compact_80x24", await _shot(app, (80, 24)), tmp_path)


@aio
async def test_snapshot_cursor_before_the_cause_changed(tmp_path):
    app = make_app(store=timeline_store(120.0, switch_at=60.0, gpus=2))
    keys = ("left", *("shift+left",) * 9)
    check_snapshot("cursor_120x40", await _shot(app, (120, 40), keys), tmp_path)


@aio
async def test_snapshot_ascii_without_colour_80x24(tmp_path, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TRAINMON_GLYPHS", "ascii")
    glyphs = detect()
    assert glyphs == Glyphs("ascii", False)
    app = make_app(replay_at_end(timeline_store(120.0, gpus=0, ranks=2)), glyphs=glyphs)
    check_snapshot("ascii_nocolor_80x24", await _shot(app, (80, 24)), tmp_path)


@aio
async def test_snapshot_stack_dump_modal(tmp_path):
    app = make_app(store=timeline_store(60.0))
    check_snapshot("stack_modal_100x30", await _shot(app, (100, 30), ("d",)), tmp_path)
