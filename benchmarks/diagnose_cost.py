"""Diagnosis cost: the wall time of one live ``evaluate`` of the rule engine per monitor tick at heavy load.

A Store fed directly (no sockets, no sources) with the agent's own record stream for ``--ranks`` ranks of one job,
each stepping ``--rate`` times a second: per step a DataLoader wait (5–10 % of the step) and an optimizer step,
the step time jittered ±20 %. After ``--warm`` seconds of steps (the live window is 20 s, so ~20 000 steps per
run), every tick adds one second of steps to every run, then times ``evaluate(store, t)`` as the monitor thread
calls it (live windows, change detection, every rule, the job's straggler and comm rules). Scenarios:

- ``steady``: waits and optimizer steps only (the heavy-load recording's pattern);
- ``comm``: plus one collective per step (``K_COMM``, ~30 % of the step), as a DDP job reports;
- ``cuda``: plus each wait's exposed GPU idle (``K_EXPOSED``), as the agent measures on CUDA;
- ``switch``: the data wait jumps to ~40 % of the step halfway through the timed ticks (a live change);
- ``idle``: full windows, then ticks in which no run sends anything (the host is still sampled): what a run that sent
  nothing since the last tick costs it (an eval pass, a pause, a hang before it is called one).

Every scenario passes the monitor's ``WindowMemo``, as the monitor does.

    python benchmarks/diagnose_cost.py [--ranks 16] [--rate 1000] [--ticks 20] [--warm 30]
        [--scenario steady,comm,cuda,switch] [--profile] [--json FILE]

Prints the median and p95 CPU ms per tick for each scenario (all ranks together; the thread's CPU time, so other
processes on a busy host hardly move it; the median wall time is in the note), and with ``--profile`` the
functions that cost the most in the timed ticks (cProfile, cumulative).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import sys
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import Row, add_json_arg, emit_rows, median, quantile
from trainmon import protocol as P
from trainmon.diagnose.engine import evaluate
from trainmon.diagnose.live.change import Change
from trainmon.diagnose.live.memo import WindowMemo
from trainmon.diagnose.thresholds import Thresholds
from trainmon.store.store import Store

NS = 1_000_000_000
SCENARIOS = ("steady", "comm", "cuda", "switch", "idle")


HOST = {"cpu.busy": 60.0, "cpu.iowait": 1.0, "cpu.cores": 16.0, "mem.used_pct": 40.0}


class Feed:
    """``ranks`` ranks of one job, each a loop of [wait, optimizer step] records, fed a second at a time."""

    def __init__(self, scenario: str, ranks: int, rate: float, seed: int = 1) -> None:
        self.scenario = scenario
        self.rate = rate
        self.rnd = random.Random(seed)
        self.store = Store()
        self.t = [0.0] * ranks
        self.switch_at = float("inf")
        self.idle_from = float("inf")
        job = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": str(ranks)}
        for r in range(ranks):
            hello = {"pid": 1000 + r, "host": "bench", "rank": r, "job": {**job, "RANK": str(r)}}
            self.store.hello(r + 1, 0.0, hello)
            loader = {"id": 1, "batch_size": 32, "num_workers": 4, "persistent_workers": True}
            self.store.info(r + 1, 0.0, {"loader": loader})

    def until(self, upto: float) -> None:
        if self.scenario == "idle" and upto > self.idle_from:
            self.store.sample(upto, HOST)
            return
        period = 1.0 / self.rate
        rnd = self.rnd
        wait_tag = P.K_WAIT | 1 << 8
        for r in range(len(self.t)):
            recs: list[int] = []
            t = self.t[r]
            while t < upto:
                share = 0.4 if t >= self.switch_at else 0.05
                step = period * (0.8 + rnd.random() * 0.4)
                w = step * (share + rnd.random() * share)
                recs += [wait_tag, int(t * NS), int((t + w) * NS), 0]
                if self.scenario == "cuda":
                    recs += [P.K_EXPOSED | 1 << 8, int(t * NS), int((t + w) * NS), int(w * 0.7 * NS)]
                if self.scenario == "comm":
                    c0 = t + step * 0.6
                    recs += [P.K_COMM, int(c0 * NS), int((c0 + step * 0.3) * NS), 0]
                t += step
                recs += [P.K_OPT, int(t * NS), int(t * NS), 0]
            self.t[r] = t
            self.store.events(r + 1, t, array("q", recs))
        self.store.sample(upto, HOST)


def run(
    scenario: str, ranks: int, rate: float, ticks: int, warm: int, profile: cProfile.Profile | None
) -> tuple[list[float], list[float], str]:
    """CPU and wall seconds per timed tick, and what the last tick found (its headline code, live changes seen)."""
    feed = Feed(scenario, ranks, rate)
    if scenario == "switch":
        feed.switch_at = warm + ticks / 2
    if scenario == "idle":
        feed.idle_from = warm + 1
    for s in range(1, warm + 1):
        feed.until(float(s))
    th = Thresholds()
    cost: list[float] = []
    wall: list[float] = []
    changes: list[Change] = []
    findings = []
    memo = WindowMemo()
    evaluate(feed.store, float(warm), th, changes=[], window_memo=memo)  # the monitor judged the last tick too
    for tick in range(warm + 1, warm + ticks + 1):
        feed.until(float(tick))
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        if profile is not None:
            profile.enable()
        findings = evaluate(feed.store, float(tick), th, changes=changes, window_memo=memo)
        if profile is not None:
            profile.disable()
        cost.append(time.thread_time() - cpu0)
        wall.append(time.perf_counter() - wall0)
    return cost, wall, f"headline {findings[0].code}, {len(changes)} live changes"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--rate", type=float, default=1000.0, help="steps per second per rank")
    ap.add_argument("--ticks", type=int, default=20, help="timed ticks per scenario")
    ap.add_argument("--warm", type=int, default=30, help="seconds of steps before the first timed tick")
    ap.add_argument("--scenario", default=",".join(SCENARIOS), help="comma-separated: " + ", ".join(SCENARIOS))
    ap.add_argument("--profile", action="store_true", help="print the costliest functions (cProfile, cumulative)")
    add_json_arg(ap)
    args = ap.parse_args()
    scenarios = [s for s in args.scenario.split(",") if s]
    if unknown := [s for s in scenarios if s not in SCENARIOS]:
        print(f"diagnose_cost: unknown scenario {unknown[0]!r} (one of {', '.join(SCENARIOS)})", file=sys.stderr)
        return 2
    rows = []
    for scenario in scenarios:
        profile = cProfile.Profile() if args.profile else None
        cost, wall, found = run(scenario, args.ranks, args.rate, args.ticks, args.warm, profile)
        ms = [c * 1e3 for c in cost]
        wall_ms = median(c * 1e3 for c in wall)
        rows.append(
            Row(
                f"evaluate CPU per tick, {scenario} ({args.ranks} ranks × {args.rate:.0f} steps/s)",
                "",
                f"{median(ms):.1f} ms (p95 {quantile(ms, 0.95):.1f} ms)",
                note=f"{args.ticks} ticks after {args.warm} s; {median(ms) / args.ranks * 1e3:.0f} µs per run; wall "
                f"{wall_ms:.1f} ms; {found}",
            )
        )
        if profile is not None:
            out = io.StringIO()
            order = os.environ.get("TM_PROFILE_SORT", "cumulative")  # or tottime: each function's own time
            pstats.Stats(profile, stream=out).sort_stats(order).print_stats(30)
            print(f"== {scenario}: cProfile over {args.ticks} ticks ({order})")
            print(out.getvalue())
    emit_rows(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
