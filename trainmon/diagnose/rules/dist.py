"""Distributed jobs: one rank slower than the rest (``dist.straggler``), or communication itself (``dist.comm``).

Under synchronous data parallelism every rank's step lasts as long as the slowest rank's: the others wait for
it inside the gradient all-reduce. Step times are therefore alike and say nothing; what differs is where each
rank spends its step. A rank's own work is its step less its data wait and its time blocked in collectives
(``RunWindow.compute_p50_s``); a rank that waits on data while the others wait in collectives is a data
straggler, one whose own work is longer than the others' a compute straggler.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import Any

from trainmon.diagnose.findings import AdviceItem, Finding, code_advice
from trainmon.diagnose.live.window import RunWindow
from trainmon.diagnose.rules.context import RuleContext
from trainmon.diagnose.rules.stage import Stage, rule
from trainmon.diagnose.stats import quantile
from trainmon.numbers import is_nan


def _ms(seconds: float) -> float | None:
    return None if is_nan(seconds) else round(seconds * 1e3, 3)


def _share(value: float) -> float | None:
    return None if is_nan(value) else round(value, 4)


def compute_scores(windows: list[RunWindow]) -> dict[int, tuple[float, float]]:
    """Per window (by id): (its own work per step, its straggler score). The score is the others' median
    own work over this rank's, as nvidia-resiliency-ext scores a section: 1 is on par, below 1 slower."""
    compute = {id(w): w.compute_p50_s() for w in windows}
    out: dict[int, tuple[float, float]] = {}
    for w in windows:
        mine = compute[id(w)]
        others = quantile([compute[id(o)] for o in windows if o is not w and not is_nan(compute[id(o)])], 0.5)
        score = others / mine if mine > 0 and not is_nan(others) else math.nan
        out[id(w)] = (mine, score)
    return out


MAX_ALIGNED = 256  # steps of the reference rank matched across ranks (an even sample of a longer window)


def transfer_share(windows: list[RunWindow]) -> float:
    """The share of a typical step that communication itself costs: for each step, the least share blocked in
    collectives among the ranks, then the median over the steps.

    In a synchronous collective the rank that arrives last hardly waits: its time in it is the transfer, the
    others' is that plus waiting for it (how HTA splits synchronising from transfer time). Ranks are released
    together, so one step of each rank ends at nearly the same time: steps are matched by their ends (within half
    a step). A rank that is late at random (preempted on a shared host) then counts as transfer for nobody."""
    rows = [w.comm_rows() for w in windows]
    ref = min(range(len(rows)), key=lambda r: len(rows[r][0]))
    end0, dur0, comm0 = rows[ref]
    stride = max(1, -(-len(end0) // MAX_ALIGNED))
    others = [row for r, row in enumerate(rows) if r != ref]
    shares = []
    for k in range(0, len(end0), stride):
        if dur0[k] <= 0:
            continue
        e = end0[k]
        least = comm0[k] / dur0[k]
        for end, dur, comm in others:
            # The step of this rank ending nearest e (the earlier of two as near).
            j = bisect_left(end, e)
            if j == len(end):
                if not j:
                    break
                j -= 1
            elif j and not abs(end[j] - e) < abs(end[j - 1] - e):
                j -= 1
            if abs(end[j] - e) > 0.5 * dur0[k] or dur[j] <= 0:
                break
            if (share := comm[j] / dur[j]) < least:
                least = share
        else:
            shares.append(least)
    return quantile(shares, 0.5)


def _per_rank(windows: list[RunWindow], scores: dict[int, tuple[float, float]]) -> dict[str, dict[str, Any]]:
    return {
        w.run.label: {
            "data_wait_fraction": _share(w.wait_fraction),
            "step_time_ms_p50": _ms(w.step_p50_s),
            "compute_ms_p50": _ms(scores[id(w)][0]),
            "data_wait_ms": _ms(w.wait_s / w.steps),
            "comm_ms": _ms(w.comm_s / w.steps) if not is_nan(w.comm_fraction) else None,
            "comm_fraction": _share(w.comm_fraction),
            "comm_share_p50": _share(w.comm_share_p50()),
            "score": _share(scores[id(w)][1]),
        }
        for w in windows
    }


INPUT_SUB_CAUSES = ("input.main_process", "input.io", "input.workers_cpu", "input.too_few_workers")


@rule(Stage.PER_JOB, "dist.straggler")
def straggler(ctx: RuleContext) -> Finding | None:
    """Ranks of one job: the rank whose data wait is out of line (a data straggler), else the rank whose own
    work per step scores under ``straggler_score`` (a compute straggler), else, for ranks that do not
    synchronise, the rank whose step time is out of line. Its own input finding, if any, is its sub-cause."""
    windows, th = ctx.job, ctx.th
    if len(windows) < 2:
        return None
    ranked = [w for w in windows if w.steps >= th.min_steps]
    if len(ranked) < 2:
        return None
    scores = compute_scores(ranked)
    waits = {id(w): (w.wait_s / w.steps) for w in ranked}
    steps = {id(w): w.step_p50_s for w in ranked}
    slow = max(ranked, key=lambda w: waits[id(w)])
    others = [w for w in ranked if w is not slow]
    other_wait = quantile([waits[id(w)] for w in others], 0.5)
    step = quantile(list(steps.values()), 0.5)
    gap = (waits[id(slow)] - other_wait) / step if step > 0 else 0.0
    kind = "data"
    if gap < th.straggler_wait_gap:
        scored = [w for w in ranked if not is_nan(scores[id(w)][1])]
        slow_c = min(scored, key=lambda w: scores[id(w)][1]) if scored else None
        if slow_c is not None and scores[id(slow_c)][1] < th.straggler_score:
            slow, kind = slow_c, "compute"
            gap = 1 / max(1e-9, scores[id(slow)][1]) - 1
        else:
            slow = max(ranked, key=lambda w: steps[id(w)])
            ratio = steps[id(slow)] / max(1e-9, quantile([steps[id(w)] for w in ranked if w is not slow], 0.5))
            if ratio < th.straggler_step_ratio:
                return None
            kind, gap = "step", ratio - 1
        others = [w for w in ranked if w is not slow]
    own = ctx.run_findings.get(slow.run.id, []) if kind != "compute" else []  # its own work is the cause
    sub = next((f for f in own if f.code in INPUT_SUB_CAUSES), None)
    sub_code = sub.code if sub is not None and sub.code.startswith("input.") else None
    who = slow.run.label
    peers = ", ".join(w.run.label for w in others)
    if kind == "data":
        verb = "waits" if len(others) == 1 else "wait"
        summary = (
            f"{who} is the straggler: it waits {slow.wait_fraction:.0%} of each step on data while "
            f"{peers} {verb} {quantile([w.wait_fraction for w in others], 0.5):.0%} and idle in collectives"
        )
        if sub_code:
            summary += f" ({sub_code})"
    elif kind == "compute":
        mine, score = scores[id(slow)]
        theirs = quantile([scores[id(w)][0] for w in others], 0.5)
        comm = quantile([w.comm_fraction for w in others if not is_nan(w.comm_fraction)], 0.5)
        summary = (
            f"{who} is a compute straggler: its own work takes {mine * 1e3:.1f} ms a step against "
            f"{theirs * 1e3:.1f} ms on {peers} (score {score:.2f} < {th.straggler_score:.2f})"
        )
        if not is_nan(comm):
            verb = "waits" if len(others) == 1 else "wait"
            summary += f", and {peers} {verb} {comm:.0%} of each step in collectives for it"
    else:
        summary = f"{who} is the straggler: its steps take {gap + 1:.2f}× those of {peers}"
    advice = _straggler_advice(who, kind, sub)
    evidence: dict[str, Any] = {
        "rank": slow.run.rank,
        "run": who,
        "kind": kind,
        "gap": round(gap, 4),
        "sub_cause": sub_code,
        "ranks": _per_rank(ranked, scores),
    }
    if kind == "compute":
        evidence["score"] = round(scores[id(slow)][1], 4)
        evidence["score_threshold"] = th.straggler_score
    return Finding("dist.straggler", "critical" if gap >= 0.2 else "warning", summary, [], evidence, advice)


def _straggler_advice(who: str, kind: str, sub: Finding | None) -> list[AdviceItem]:
    """Fix the slow rank first; then its own input cause's advice, or what to check for a compute straggler."""
    advice = [AdviceItem(f"fix {who} first: every other rank waits for it at each synchronisation")]
    if sub is not None and sub.code.startswith("input."):
        advice += sub.advice_items
    elif kind == "compute":
        advice += [
            AdviceItem(text)
            for text in (
                f"check {who}'s accelerator: clocks and throttling (power, temperature), ECC errors, other processes "
                "sharing it; on a CPU job, its cores' load and frequency",
                f"check {who}'s share of the work: uneven batch or sequence lengths (bucket by length, pad evenly), "
                "extra work on that rank only (logging, evaluation, checkpointing done by one rank in the step)",
                f"if {who}'s hardware is slower, move the job off it (exclude the node) or give it a smaller share",
            )
        ]
    else:
        advice.append(
            AdviceItem(f"compare {who}'s host (CPU, disk, GPU clocks) with the others'; rebalance its data shard")
        )
    return advice


@rule(Stage.PER_JOB, "dist.comm")
def comm_bound(ctx: RuleContext) -> Finding | None:
    """Ranks of one job whose steps are blocked in collectives for a material share, no straggler explaining it.

    The share judged is ``transfer_share``: at each step the least among the ranks (the last to arrive hardly
    waits), then the median over the steps, so neither a slower rank nor a few steps held up by a preempted
    peer count as the cost of communicating.
    """
    windows, th = ctx.job, ctx.th
    if any(f.code == "dist.straggler" for f in ctx.found):
        return None
    ranked = [w for w in windows if w.steps >= th.min_steps and not is_nan(w.comm_fraction)]
    if not ranked:
        return None
    share = transfer_share(ranked)
    if is_nan(share) or share < th.comm_share:
        return None
    least = min(ranked, key=lambda w: w.comm_s / w.steps)
    ops: dict[str, float] = {}
    for w in ranked:
        for op, seconds in w.run.comm_by_op.items():
            ops[op] = ops.get(op, 0.0) + seconds
    total = sum(ops.values())
    by_op = {op: round(s / total, 4) for op, s in sorted(ops.items(), key=lambda kv: -kv[1])} if total > 0 else {}
    top = next(iter(by_op), None)
    labels = ", ".join(w.run.label for w in ranked)
    comm_ms = least.comm_s / least.steps * 1e3
    if len(ranked) > 1:
        summary = (
            f"communication itself takes {share:.0%} of a typical step on every rank ({labels}): at each step even "
            f"the last rank to arrive is blocked that long in collectives ({comm_ms:.1f} ms a step on average)"
        )
    else:
        summary = (
            f"{share:.0%} of a typical step is spent blocked in collectives on {labels}, the only rank seen "
            f"({comm_ms:.1f} ms a step on average)"
        )
    if top is not None:
        summary += f"; mostly {top} ({by_op[top]:.0%} of it)"
    advice = [
        "let DDP overlap the all-reduce with backward: keep its bucketing, tune bucket_cap_mb (default 25: "
        "smaller buckets start communicating earlier in backward, larger ones make fewer calls), "
        "gradient_as_bucket_view=True, static_graph=True when the graph does not change",
        "synchronise less often: accumulate gradients over N micro-batches inside model.no_sync() and "
        "all-reduce once every N, or raise the batch per rank",
        "send fewer bytes: a compression hook, model.register_comm_hook(None, default_hooks.bf16_compress_hook)",
        "check placement: ranks of one job on one node or on fast links (NVLink, InfiniBand), and that "
        "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME name the fast interface",
    ]
    if top is not None and top not in ("ddp_grad_sync", "wait"):
        advice.insert(
            0,
            f"fewer syncs: most of the time is in {top} calls of the job's own; gradients reduced by hand are "
            "better left to DDP (bucketed, overlapped with backward), and metrics, flags or barriers can run "
            "every N steps instead of every step",
        )
    world = least.run.hello.get("world_size")
    return Finding(
        "dist.comm",
        "critical" if share >= th.comm_critical_share else "warning",
        summary,
        [],
        {
            "comm_share": round(share, 4),
            "comm_ms": round(comm_ms, 3),
            "by_op": by_op,
            "ranks_seen": len(ranked),
            "world_size": world if isinstance(world, int) else None,
            "ranks": _per_rank(ranked, compute_scores(ranked)),
            "threshold": th.comm_share,
        },
        advice_items=code_advice(*advice),
    )
