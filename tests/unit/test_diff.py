"""trainmon.compare: the bootstrap and the diff of the committed recordings, in process."""

from __future__ import annotations

import functools
import random

import pytest

from testsupport.paths import RECORDINGS
from trainmon.compare import bootstrap as bs
from trainmon.compare.diff import DiffError, diff, load_side, slowdown_gate, split_source
from trainmon.compare.diff_render import render, to_json

HEALTHY = str(RECORDINGS / "healthy.tmrec")
FEW = str(RECORDINGS / "few-workers.tmrec")


@functools.cache
def _healthy():
    return load_side(HEALTHY)


def _windows(rng: random.Random, shift: float, n: int = 30) -> list[list[float]]:
    return [[rng.gauss(100.0 + shift, 10.0) for _ in range(20)] for _ in range(n)]


def test_a_shift_is_beyond_noise_and_the_same_distribution_is_not():
    rng = random.Random(7)
    a, same, slower = _windows(rng, 0), _windows(rng, 0), _windows(rng, 8)
    p50 = bs.quantile_of(0.5)
    moved = bs.compare(a, slower, p50, relative=True)
    assert moved.beyond_noise and moved.low is not None and 0 < moved.low < 0.08 < moved.high
    still = bs.compare(a, same, p50, relative=True)
    assert still.beyond_noise is False and still.low < 0 < still.high
    assert bs.compare(a, slower, p50, relative=True) == moved  # seeded: the same answer every time
    assert bs.compare(a[:1], slower[:1], p50, relative=True).beyond_noise is None  # one window: no interval


def test_thinning_keeps_the_windows_and_bounds_the_pool():
    windows = [[float(i)] * 500 for i in range(40)]
    thinned = bs.thin(windows, cap=4000)
    assert len(thinned) == 40 and sum(map(len, thinned)) <= 4000 + 40


def test_a_recording_against_itself_changes_nothing():
    healthy = _healthy()
    d = diff(healthy, load_side(HEALTHY))
    (pair,) = d.pairs
    keys = [f.figure.key for f in pair.figures]
    assert keys[:3] == ["step_time_p50_ms", "step_time_p95_ms", "data_wait_fraction"] and "samples_per_s" in keys
    for fd in pair.figures + d.system:
        assert fd.change.change == 0 and fd.change.beyond_noise is False, fd
    assert slowdown_gate(d, 0.0) is None


def test_the_side_figures_are_the_reports_figures():
    healthy = _healthy()
    d = diff(healthy, load_side(FEW))
    (pair,) = d.pairs
    got = {f.figure.key: f.change for f in pair.figures}
    ra, rb = healthy.report["runs"][0], d.b.report["runs"][0]
    assert got["step_time_p50_ms"].a == pytest.approx(ra["step_time_ms"]["p50"], abs=1e-3)
    assert got["step_time_p95_ms"].b == pytest.approx(rb["step_time_ms"]["p95"], abs=1e-3)
    assert got["data_wait_fraction"].a == pytest.approx(ra["data_wait_fraction"], abs=1e-4)
    assert got["samples_per_s"].b == pytest.approx(rb["samples_per_s"], abs=0.01)
    wait = got["data_wait_fraction"]
    assert rb["data_wait_fraction"] > ra["data_wait_fraction"] + 0.2  # few-workers starves on input
    assert wait.beyond_noise and wait.low > 0
    out = to_json(d)
    assert out["a"]["verdict"]["code"] == healthy.report["verdict"]["code"]
    assert out["b"]["timeline"] == d.b.report["timeline"]
    assert out["runs"][0]["figures"]["data_wait_fraction"]["beyond_noise"] is True
    text = render(d, "text")
    assert "data wait" in text and "worse" in text and d.b.report["verdict"]["code"] in text
    assert "| figure | A | B | change | interval | noise |" in render(d, "markdown")


def test_sources_and_selectors(tmp_path):
    healthy = _healthy()
    assert split_source("x.tmrec#rank:2") == ("x.tmrec", "rank:2")
    odd = tmp_path / "a#b.tmrec"
    odd.write_bytes(b"")
    assert split_source(str(odd)) == (str(odd), None)  # an existing path is taken whole
    pid = healthy.report["runs"][0]["pid"]
    assert load_side(f"{HEALTHY}#pid:{pid}").runs[0][0]["pid"] == pid
    assert load_side(f"{HEALTHY}#1").runs[0][0]["pid"] == pid
    with pytest.raises(DiffError, match="no run 'rank:3'"):
        load_side(f"{HEALTHY}#rank:3")
    with pytest.raises(DiffError, match="a run is rank:N, pid:N or N"):
        load_side(f"{HEALTHY}#first")
    with pytest.raises(DiffError, match=r"nothing\.tmrec"):
        load_side(str(tmp_path / "nothing.tmrec"))
