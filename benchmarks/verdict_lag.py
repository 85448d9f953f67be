"""How long the live verdict takes to follow a change, and where the report puts the change, on real trainings.

    python benchmarks/verdict_lag.py [--scenario switch --scenario late-input] [--runs 1] [--synthetic 20] [--json FILE]

Runs each demo scenario that switches DataLoaders mid-run (``--switch-at``; the demo marks the moment with
``trainmon.agent.mark("switch")``) under a real headless Monitor listening on a Unix socket, ticking once a
second as ``trainmon`` does. Prints, per run: when the switch happened, when ``min_steps`` steady steps had
ended after it (the new cause can be judged: "settled"), when the banner showed the new cause, the lag from
each, and the report's phase boundary next to the switch. ``--synthetic N`` first feeds N noisy synthetic runs
that go from starving to compute-bound in the same DataLoader (testsupport.phase_stores) through the Monitor's
Ingest a second at a time, and prints how long after the change the banner followed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import Row, write_rows
from testsupport.phase_stores import T0, Noise, Regime, feed
from testsupport.procs import child_env
from trainmon.demo.scenarios import SCENARIOS, command
from trainmon.monitor import Monitor, Snapshot
from trainmon.report import build_report


def one_run(name: str) -> dict[str, float | str]:
    scenario = SCENARIOS[name]
    address = os.path.join(tempfile.mkdtemp(prefix="trainmon-lag-"), "m.sock")
    monitor = Monitor(address, interval=1.0)
    shown: list[tuple[float, str]] = []

    def listen(snap: Snapshot) -> None:
        if snap.verdict is not None and (not shown or shown[-1][1] != snap.verdict.code):
            shown.append((snap.t, snap.verdict.code))

    monitor.listeners.append(listen)
    monitor.start()
    try:
        res = subprocess.run(command(scenario), env=child_env(TRAINMON_ADDR=address), capture_output=True, timeout=300)
        if res.returncode != 0:
            raise SystemExit(res.stderr.decode()[-2000:])
        time.sleep(1.5)  # the last frames and a tick
    finally:
        monitor.stop()
    store = monitor.store
    run = next(r for r in store.runs.values() if r.steps.total)
    switch = next(t for t, mark in run.marks if mark == "switch")
    steps = run.steps
    after = [k for k in range(len(steps)) if steps.end[k] > switch and not steps.warm[k]]  # as the live window counts
    need = monitor.thresholds.min_steps
    settled = steps.end[after[need - 1]] if len(after) >= need else float("nan")
    new = scenario.timeline[-1]
    shown_at = next((t for t, code in shown if t >= switch and code == new), float("nan"))
    report = build_report(store, monitor.thresholds)
    first = store.first_t or 0.0
    boundary = next((e["t"] for e in report["timeline"] if e["code"] == new), float("nan"))
    return {
        "scenario": name,
        "switch_s": switch - first,
        "settled_s": settled - first,
        "shown_s": shown_at - first,
        "lag_from_switch_s": shown_at - switch,
        "lag_from_settled_s": shown_at - settled,
        "report_boundary_s": boundary,
        "boundary_error_s": boundary - (switch - first),
        "banner": " → ".join(f"{code} @{t - first:.0f}s" for t, code in shown),
        "report": " → ".join(f"{e['code']} @{e['t']:.0f}s" for e in report["timeline"]),
    }


def synthetic_lags(runs: int) -> list[float]:
    """Seconds from the change to the banner, over ``runs`` seeded runs: 60 s starving, then 30 s fed."""
    starving, fed = Regime(60, 30, 40, workers_cpu=95), Regime(30, 0.5, 40, workers_cpu=10)
    lags = []
    for seed in range(runs):
        monitor = Monitor(listen=False, sources=[])
        monitor.autodump = None  # the synthetic run borrows a pid: never dump it
        shown: list[tuple[float, str]] = []

        def tick(now: float, monitor: Monitor = monitor, shown: list[tuple[float, str]] = shown) -> None:
            verdict = monitor.tick(now).verdict
            if verdict is not None and (not shown or shown[-1][1] != verdict.code):
                shown.append((now, verdict.code))

        noise = Noise(jitter=0.5, long_every=0.02, figures=10.0)
        for _ in feed(monitor.ingest, [starving, fed], seed=seed, noise=noise, each_second=tick):
            pass
        lags.append(next(t for t, code in shown if code == "ok.compute_bound") - (T0 + starving.seconds))
    return lags


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", action="append", choices=[n for n, s in SCENARIOS.items() if s.timeline])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--synthetic", type=int, default=20, help="synthetic runs through the Monitor (0: none)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    names = args.scenario or [n for n, s in SCENARIOS.items() if s.timeline]
    rows = []
    if args.synthetic:
        lags = sorted(synthetic_lags(args.synthetic))
        spread = f"{lags[0]:.0f}–{lags[-1]:.0f} s"
        print(f"synthetic   {len(lags)} runs: banner {spread} after the change, median {lags[len(lags) // 2]:.0f} s")
        rows.append(
            Row(
                "live verdict lag after a same-loader change (synthetic)",
                "≤ 5 s",
                f"{spread} over {len(lags)} runs",
                met=lags[-1] <= 5.0,
            )
        )
    for name in names:
        for _ in range(args.runs):
            r = one_run(name)
            print(
                f"{r['scenario']:<11} switch {r['switch_s']:5.1f} s  settled +{r['settled_s'] - r['switch_s']:.1f} s  "
                f"banner +{r['lag_from_switch_s']:.1f} s (+{r['lag_from_settled_s']:.1f} s after settling)  "
                f"report boundary {r['boundary_error_s']:+.1f} s"
            )
            print(f"    banner: {r['banner']}\n    report: {r['report']}")
            rows.append(
                Row(
                    f"live verdict lag after a change ({name})",
                    "≤ 5 s after settling",
                    f"{r['lag_from_switch_s']:.1f} s after the switch, {r['lag_from_settled_s']:.1f} s after settling",
                    met=float(r["lag_from_settled_s"]) <= 5.0,
                )
            )
            rows.append(
                Row(
                    f"report phase boundary vs the switch ({name})",
                    "±3 s",
                    f"{float(r['boundary_error_s']):+.1f} s",
                    met=abs(float(r["boundary_error_s"])) <= 3.0,
                )
            )
    write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
