"""The diagnosis's shortcuts give what the plain computations give, bit for bit, on random step tables.

Each shortcut (running counts of rare rows, C-level maps where every step lasted, ranks without ties, the
strongest material split tried first, the nearest step found without a generator) is checked against the plain
per-step Python it replaces, on tables mixing loaders, warm-up steps, measured and unmeasured exposed waits,
collectives and none, trimmed and edited in place after the counts were taken.
"""

from __future__ import annotations

import itertools
import math
import random
from array import array
from bisect import bisect_left
from fractions import Fraction

import pytest

from trainmon.diagnose.live import change
from trainmon.diagnose.live.change import _Blocks
from trainmon.diagnose.live.long_scan import long_candidates
from trainmon.diagnose.live.slices import MAX_DETAIL
from trainmon.diagnose.live.window import run_window
from trainmon.diagnose.rules.dist import transfer_share
from trainmon.diagnose.stats import quantile
from trainmon.diagnose.thresholds import Thresholds
from trainmon.store.run import Run
from trainmon.store.steps import Steps, _exact_parts

NAN = math.nan


def _table(
    rnd: random.Random,
    n: int,
    *,
    cap: int | None,
    loaders: int,
    warm: float,
    exposed: float,
    comm: float,
    waits: float = 0.5,
) -> Run:
    """A run whose step table holds ``n`` random steps (each property drawn with the given share; waits up to
    ``waits`` of the step)."""
    run = Run(1, {"pid": 1}, 0.0, cap=cap)
    steps = run.steps
    t = 1.0
    lid = 1
    for _ in range(n):
        if rnd.random() < 0.01:
            lid = rnd.randint(1, loaders)
        dur = rnd.choice((0.001, 0.002, 0.0015)) if rnd.random() < 0.3 else rnd.uniform(0.0005, 0.003)
        if rnd.random() < 0.02:
            dur *= 8  # a long step
        w = dur * rnd.random() * waits
        ex = w * rnd.random() if rnd.random() < exposed else NAN
        c = dur * 0.3 * rnd.random() if rnd.random() < comm else 0.0
        steps.add(t, t + dur, w, 32, rnd.random() < warm, ex, lid, w if ex == ex else 0.0, c)
        t += dur
    return run


def _plain_window(steps: Steps, i: int, j: int, current: int) -> dict:
    rows = [k for k in range(i, j) if steps.loader[k] == current and not steps.warm[k]]
    exposed = [steps.exposed[k] for k in rows if steps.exposed[k] == steps.exposed[k]]
    return {
        "steps": len(rows),
        "warm_steps": sum(1 for k in range(i, j) if steps.loader[k] == current and steps.warm[k]),
        "comm_s": math.fsum(steps.comm[k] for k in rows),
        "exposed_s": math.fsum(exposed) if exposed else 0.0,
        "exposed_wait_s": math.fsum(steps.exposed_wait[k] for k in rows) if exposed else 0.0,
        "exposed_steps": len(exposed),
        "rows": rows,
    }


def _stride(m: int) -> int:
    need = -(-m // MAX_DETAIL)
    primes = [p for p in range(2, 2000) if all(p % d for d in range(2, int(p**0.5) + 1))]
    return 1 if need <= 1 else next(p for p in primes if p >= need)


CASES = [
    dict(loaders=1, warm=0.0, exposed=0.0, comm=0.0),  # the common case: every shortcut taken
    dict(loaders=1, warm=0.05, exposed=0.0, comm=0.0),
    dict(loaders=3, warm=0.02, exposed=0.0, comm=0.0),
    dict(loaders=1, warm=0.0, exposed=1.0, comm=0.0),
    dict(loaders=2, warm=0.01, exposed=0.2, comm=0.3),
    dict(loaders=1, warm=0.0, exposed=0.0, comm=1.0),
    dict(loaders=1, warm=0.0, exposed=0.001, comm=0.001),  # a rare measurement among thousands of rows
    dict(loaders=1, warm=0.0, exposed=0.0, comm=1.0, waits=2.0),  # most steps' own work clamped at 0
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("cap", [None, 3000])
def test_row_counts_and_window_figures_match_the_plain_per_step_computation(case: int, cap: int | None) -> None:
    rnd = random.Random(case * 7 + (cap or 0))
    run = _table(rnd, 5000, cap=cap, **CASES[case])
    steps = run.steps
    for trial in range(40):
        if trial % 10 == 9:  # rows edited in place after the counts were taken, then more rows
            k = rnd.randrange(len(steps))
            steps.add_exposed(steps.start[k], steps.end[k], 0.0001, steps.loader[k])
            k = rnd.randrange(len(steps))
            steps.add_comm(steps.start[k], steps.end[k])
            for _ in range(rnd.randint(1, 900)):
                e = steps.end[-1]
                steps.add(e, e + 0.001, 0.0001, 32, rnd.random() < 0.1, NAN, rnd.randint(1, 2), 0.0, 0.0)
        i = rnd.randrange(len(steps))
        j = rnd.randrange(i, len(steps) + 1)
        counts = steps.row_counts(i, j)
        assert counts == (
            sum(1 for k in range(i, j) if steps.warm[k]),
            sum(1 for k in range(i + 1, j) if steps.loader[k] != steps.loader[k - 1]),
            sum(1 for k in range(i, j) if steps.exposed[k] == steps.exposed[k]),
            sum(1 for k in range(i, j) if steps.comm[k] != 0.0),
            sum(1 for k in range(i, j) if not 1e-9 <= steps.dur[k] < math.inf),
        )
        if j == i:
            continue
        t0, t1 = steps.end[i], steps.end[j - 1]
        w = run_window(run, t0, t1, min_steps=0, memo=False)
        plain = _plain_window(steps, i, j, steps.loader[j - 1])
        for name in ("steps", "warm_steps", "comm_s", "exposed_s", "exposed_wait_s", "exposed_steps"):
            assert getattr(w, name) == plain[name], name
        rows = plain["rows"]
        if not rows:
            continue
        if w.warm_steps == 0 and len(rows) == j - i:  # steps without a gap: block sums from the running sums
            size = rnd.randint(1, 50)
            first = len(rows) % size
            edges = ([0] if first else []) + list(range(first, len(rows), size))
            stops = [*edges[1:], len(rows)]
            cum_dur, cum_wait, _ = steps.prefix_sums()
            assert w.block_sums(first, size, len(rows)) == (
                [cum_dur[i + z] - cum_dur[i + a] for a, z in zip(edges, stops, strict=True)],
                [cum_wait[i + z] - cum_wait[i + a] for a, z in zip(edges, stops, strict=True)],
            )
        sample = rows[:: _stride(len(rows))]
        own = [max(0.0, steps.dur[k] - steps.wait[k] - steps.comm[k]) for k in sample]
        assert w.compute_p50_s() == quantile(own, 0.5)
        run.comm_by_op["ddp_grad_sync"] = 1.0
        shares = [steps.comm[k] / steps.dur[k] if steps.dur[k] > 0 else 0.0 for k in sample]
        assert w.comm_share_p50() == quantile(shares, 0.5)
        limit = quantile([steps.dur[k] for k in rows], 0.5) * 2.5
        assert w.long_durations(limit) == [steps.dur[k] for k in rows if steps.dur[k] > limit]


def test_row_counts_of_every_range_edge_against_the_counting_blocks() -> None:
    rnd = random.Random(21)
    run = _table(rnd, 3000, cap=1200, loaders=3, warm=0.05, exposed=0.1, comm=0.1)
    steps = run.steps
    for k in range(0, len(steps), 97):
        steps.add(steps.end[-1], steps.end[-1] + (0.0 if k % 2 else 0.001), 0.0, 1, False, NAN, rnd.randint(1, 3))
    for _ in range(300):  # switches right at blocks' first rows
        steps.add(steps.end[-1], steps.end[-1] + 0.001, 0.0, 1, False, NAN, 1 + steps.total // 64 % 2)
    rows = range(len(steps))
    offset = steps.total - len(steps)
    edges = sorted(
        {*range(0, len(steps), 37), *(b - offset + d for b in range(0, steps.total, 64) for d in (-1, 0, 1))}
    )
    edges = [e for e in edges if 0 <= e <= len(steps)]
    for edit in range(3):
        for i in edges:
            for j in edges[::3]:
                assert steps.row_counts(i, j) == (
                    sum(1 for k in rows[i:j] if steps.warm[k]),
                    sum(1 for k in rows[i + 1 : j] if steps.loader[k] != steps.loader[k - 1]),
                    sum(1 for k in rows[i:j] if steps.exposed[k] == steps.exposed[k]),
                    sum(1 for k in rows[i:j] if steps.comm[k] != 0.0),
                    sum(1 for k in rows[i:j] if not 1e-9 <= steps.dur[k] < math.inf),
                ), (edit, i, j)
        k = rnd.randrange(len(steps))
        steps.add_comm(steps.start[k], steps.end[k])  # a row of a block counted already


def test_a_figure_read_again_after_a_step_was_edited_is_read_from_the_edited_rows() -> None:
    run = _table(random.Random(3), 400, cap=None, loaders=1, warm=0.0, exposed=0.0, comm=0.0)
    w = run_window(run, 0.0, math.inf, min_steps=0, memo=False)
    before = w.compute_p50_s()
    for k in range(len(run.steps)):
        run.steps.add_comm(run.steps.start[k], run.steps.start[k] + run.steps.dur[k] * 0.9)
    assert w.compute_p50_s() < before  # not the figure of the table before its steps were edited


@pytest.mark.parametrize("odd", ["", "nan", "inf"])
def test_block_sums_give_fsum_of_the_rows_exactly(odd: str) -> None:
    rnd = random.Random(len(odd))
    steps = Steps(20_000)
    for k in range(30_000):
        # Magnitudes 1e-40..1e3 and cancelling signs: a block's exact sum needs several floats.
        c = rnd.choice((0.0, rnd.uniform(0, 1e-3), 10 ** rnd.uniform(-40, 3), -(10 ** rnd.uniform(-40, 3))))
        ex = NAN if rnd.random() < 0.3 else 10 ** rnd.uniform(-9, -2)
        steps.add(k, k + 1.0, 0.5, 1, False, ex, 1, 0.5 if ex == ex else 0.0, c)
    if odd:
        steps.comm[rnd.randrange(len(steps))] = NAN if odd == "nan" else math.inf
    for trial in range(300):
        if trial % 50 == 49:  # edited in place once its block was summed
            k = rnd.randrange(len(steps))
            steps.add_comm(steps.start[k] + 0.1, steps.start[k] + 0.3)
            steps.add_exposed(steps.start[k] + 0.1, steps.start[k] + 0.2, 1e-5, 1)
        i = rnd.randrange(len(steps))
        j = rnd.randrange(i, len(steps) + 1)
        for column in ("comm", "exposed_wait"):
            got, want = steps.fsum(column, i, j), math.fsum(getattr(steps, column)[i:j])
            assert got == want or (math.isnan(got) and math.isnan(want)), column
        assert steps.fsum("exposed", i, j, measured=True) == math.fsum(x for x in steps.exposed[i:j] if x == x)
    if not odd:
        assert steps.fsum("comm", 0, len(steps)) != sum(steps.comm)  # plain addition would not have done


def test_a_blocks_parts_sum_exactly_to_its_rows() -> None:
    rnd = random.Random(8)
    several = 0
    for _ in range(200):
        values = [rnd.choice((1, -1)) * 10 ** rnd.uniform(-40, 3) for _ in range(rnd.randint(0, 1024))]
        parts = _exact_parts(values)
        assert parts is not None
        assert sum(map(Fraction, parts), Fraction(0)) == sum(map(Fraction, values), Fraction(0))
        several += len(parts) > 2
    assert several  # sums that one rounding error term does not hold were among them
    assert _exact_parts([1.0, math.inf]) is None and _exact_parts([math.nan]) is None


def test_negative_zero_and_nan_rows_are_counted_as_a_plain_scan_counts_them() -> None:
    steps = Steps(None)
    for k in range(50):
        steps.add(k, k + 1.0, 0.0, 1, False, NAN, 1, 0.0, -0.0 if k % 3 else 0.0)
    assert steps.row_counts(0, 50)[3] == 0  # -0.0 is no time in collectives
    steps.add_comm(10.2, 10.4)
    steps.add_exposed(20.0, 20.5, 0.1, 1)
    steps.add(50.0, 50.0, 0.0, 1, False, NAN, 1)  # lasted no time
    steps.add(50.0, NAN, 0.0, 1, False, NAN, 1)
    assert steps.row_counts(0, 50) == (0, 0, 1, 1, 0)
    assert steps.row_counts(11, 52) == (0, 0, 1, 0, 2)


def test_steps_that_did_not_last_are_counted_wherever_they_are_in_a_batch() -> None:
    steps = Steps(None)
    for k in range(50):
        end = {20: NAN, 30: math.inf, 40: float(k)}.get(k, k + 1.0)
        steps.add(k, end, 0.0, 1, False, NAN, 1)
    assert steps.row_counts(0, 50).brief == 3
    assert steps.row_counts(21, 40).brief == 1
    for odd in (NAN, math.inf):  # alone among steps that lasted: min() of the batch does not show it
        steps = Steps(None)
        for k in range(50):
            steps.add(k, odd if k == 20 else k + 1.0, 0.0, 1, False, NAN, 1)
        assert steps.row_counts(0, 50).brief == 1


def test_long_steps_behind_a_nan_duration_are_still_found() -> None:
    steps = Steps(None)
    steps.add(0.0, 1.0, 0.0, 1, False, NAN)
    long_candidates(steps, 10.0)
    steps.add(1.0, NAN, 0.0, 1, False, NAN)  # max() of [nan, 50.0] is nan
    steps.add(2.0, 52.0, 0.0, 1, False, NAN)
    assert [g for g, _ in long_candidates(steps, 10.0)] == [2]


# ---------------------------------------------------------------- change detection


def _plain_ranks(values: list[float]) -> tuple[list[float], float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties = 0.0
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        ties += (j - i + 1) ** 3 - (j - i + 1)
        i = j + 1
    n = len(values)
    return ranks, (1 - ties / (n**3 - n)) if n > 1 else 1.0


def _plain_best_split(b: _Blocks, lo: int, th: Thresholds):
    """Every candidate in (what, k) order, each strong one tested for materiality when it beats the best so far."""
    n = len(b.dur) - lo
    if n < 4:
        return None
    shares = [w / d if d > 0 else 0.0 for w, d in zip(b.wait[lo:], b.dur[lo:], strict=True)]
    times = [d / s for d, s in zip(b.dur[lo:], b.steps[lo:], strict=True)]
    steps_after = [0] * (n + 1)
    for k in range(n - 1, -1, -1):
        steps_after[k] = steps_after[k + 1] + b.steps[lo + k]
    total = steps_after[0]
    m = th.change_min_steps
    candidates = [
        k
        for k in range(2, n - 1)
        if steps_after[k] >= m and total - steps_after[k] >= m and b.end[-1] - b.start[lo + k] >= th.change_min_s
    ]
    best = None
    for what, values in (("data_wait", shares), ("step_time", times)):
        ranks, tie = _plain_ranks(values)
        var_unit = (n + 1) / 12 * tie
        if var_unit <= 0:
            continue
        after = [0.0] * (n + 1)
        for k in range(n - 1, -1, -1):
            after[k] = after[k + 1] + ranks[k]
        for k in candidates:
            n2 = n - k
            z = (after[k] - n2 * (n + 1) / 2) / math.sqrt(k * n2 * var_unit)
            strong = abs(z) >= th.change_z and (best is None or abs(z) > best[0])
            if strong and change._material(b, lo, k, what, th) is not None:
                best = (abs(z), k, what)
    if best is None:
        return None
    _, k, what = best
    before, after_value = change._material(b, lo, k, what, th)
    return lo + k, change.Change(b.start[lo + k], what, before, after_value)


def _plain_refine(b: _Blocks, seg: int, split: int, what: str, dur, wait, reach: int) -> int:
    a = b.first[seg]
    if what == "data_wait":
        values = [w / d if d > 0 else 0.0 for w, d in zip(wait[a:], dur[a:], strict=True)]
    else:
        values = [math.log(max(d, 1e-9)) for d in dur[a:]]
    sums = [0.0, *itertools.accumulate(values)]
    n, total = len(values), sums[-1]
    size = b.steps[split]
    centre = b.first[split] - a
    best, at = -1.0, centre
    for j in range(max(1, centre - max(size, reach)), min(n - 1, centre + max(size, reach)) + 1):
        gap = abs(sums[j] / j - (total - sums[j]) / (n - j)) * math.sqrt(j * (n - j))
        if gap > best:
            best, at = gap, j
    return a + at


def _random_blocks(rnd: random.Random, n: int, ties: bool) -> _Blocks:
    """Blocks of steps whose wait share and step time shift at a few random points (or not at all)."""
    shifts = sorted(rnd.sample(range(5, n - 5), min(n - 10, rnd.randint(0, 3))))
    first, start, end, steps, dur, wait = [], [], [], [], [], []
    t, level, speed = 0.0, rnd.uniform(0.0, 0.2), rnd.uniform(0.5, 2.0)
    for k in range(n):
        if k in shifts:
            level, speed = rnd.uniform(0.0, 0.6), speed * rnd.choice((0.5, 1.0, 2.5))
        s = rnd.choice((1, 4, 4, 4)) if ties else rnd.randint(3, 6)
        d = round(s * 0.01 * speed * rnd.uniform(0.9, 1.1), 3 if ties else 12)
        first.append(sum(steps))
        start.append(t)
        t += d
        end.append(t)
        steps.append(s)
        dur.append(d)
        wait.append(round(d * level * rnd.uniform(0.8, 1.2), 3 if ties else 12))
    return _Blocks(first, start, end, steps, dur, wait)


@pytest.mark.parametrize("ties", [False, True])
def test_ranks_splits_and_refined_steps_match_the_plain_loops(ties: bool) -> None:
    rnd = random.Random(11 if ties else 12)
    th = Thresholds(change_min_s=0.05, change_z=3.0)
    found = 0
    for _ in range(150):
        b = _random_blocks(rnd, rnd.randint(12, 240), ties)
        assert change._ranks(b.dur) == _plain_ranks(b.dur)
        lo = rnd.randint(0, 3)
        split = change._best_split(b, lo, th)
        assert split == _plain_best_split(b, lo, th)
        if split is None:
            continue
        found += 1
        # Per-step columns behind the blocks: zero-length and nan steps take the general path.
        dur = [d / s for d, s in zip(b.dur, b.steps, strict=True) for _ in range(s)]
        wait = [w / s for w, s in zip(b.wait, b.steps, strict=True) for _ in range(s)]
        if rnd.random() < 0.3:
            dur[rnd.randrange(len(dur))] = rnd.choice((0.0, NAN, 1e-12))
        lasted = all(1e-9 <= d < math.inf for d in dur)
        for what in ("data_wait", "step_time"):
            args = (b, lo, split[0], what, array("d", dur), array("d", wait), 5)
            assert change._refine(*args, lasted) == _plain_refine(*args)
    assert found >= 20  # the splits compared include many found ones, not only "no change"


@pytest.mark.parametrize("warm", [0.0, 0.01])
def test_a_change_found_off_the_table_rows_is_the_one_found_in_the_windows_columns(
    warm: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(int(warm * 100))
    th = Thresholds()
    found = 0
    for trial in range(12):
        run = Run(1, {"pid": 1}, 0.0, cap=None)
        t = 0.0
        n = rnd.randint(3000, 8000)
        shift = rnd.uniform(0.3, 0.7) * n if trial % 4 else n  # every 4th without a change
        for k in range(n):
            late = k > shift
            dur = rnd.uniform(0.0008, 0.0012) * (2.0 if late and trial % 2 else 1.0)
            w = dur * (0.5 if late and not trial % 2 else 0.05) * rnd.random()
            run.steps.add(t, t + dur, w, 32, rnd.random() < warm, NAN, 1)
            t += dur
        w = run_window(run, 0.0, t, min_steps=0, memo=False)
        rows, columns = w.plain_rows(), w.columns()
        if rows is not None:
            assert change._blocks(w, len(columns[2]), None, rows) == change._blocks(w, len(columns[2]), columns, None)
        fast = change.latest_change(w, th)
        with monkeypatch.context() as patch:
            patch.setattr(type(w), "plain_rows", lambda self: None)
            assert change.latest_change(w, th) == fast
        found += fast is not None
    assert found >= 6


# ---------------------------------------------------------------- distributed


def _plain_transfer_share(rows) -> float:
    ref = min(range(len(rows)), key=lambda r: len(rows[r][0]))
    end0, dur0, comm0 = rows[ref]
    stride = max(1, -(-len(end0) // 256))
    shares = []
    for k in range(0, len(end0), stride):
        if dur0[k] <= 0:
            continue
        least = comm0[k] / dur0[k]
        for r, (end, dur, comm) in enumerate(rows):
            if r == ref:
                continue
            j = bisect_left(end, end0[k])
            near = min((i for i in (j - 1, j) if 0 <= i < len(end)), key=lambda i: abs(end[i] - end0[k]), default=None)
            if near is None or abs(end[near] - end0[k]) > 0.5 * dur0[k] or dur[near] <= 0:
                break
            least = min(least, comm[near] / dur[near])
        else:
            shares.append(least)
    return quantile(shares, 0.5)


class _Rows:
    def __init__(self, rows: tuple[array, array, array]) -> None:
        self.rows = rows

    def comm_rows(self) -> tuple[array, array, array]:
        return self.rows


def test_transfer_share_matches_the_plain_nearest_step_search() -> None:
    rnd = random.Random(5)
    for _ in range(60):
        ranks = []
        # Ends on a grid of quarters, the reference rank's (the shortest) between two: nearest steps tie often.
        steps = rnd.randint(0, 600)
        for r in range(rnd.randint(2, 5)):
            ends = [k * 0.25 + (0.125 if r == 0 else 0.0) for k in range(steps + 1 - (r == 0)) if rnd.random() < 0.98]
            ends = sorted(e + rnd.choice((0.0, 0.0, 0.0, 0.25, 0.75)) for e in ends)
            dur = [rnd.choice((1.0, 1.0, 1.0, 0.0)) for _ in ends]
            comm = [d * rnd.random() for d in dur]
            ranks.append(tuple(array("d", c) for c in (ends, dur, comm)))
        expected = _plain_transfer_share(ranks)
        got = transfer_share([_Rows(r) for r in ranks])  # type: ignore[list-item]
        assert got == expected or (math.isnan(got) and math.isnan(expected))
