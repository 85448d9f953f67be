"""How long the live verdict takes to follow a change, and where the report puts the change, on real trainings.

    python benchmarks/verdict_lag.py [--scenario switch --scenario late-input] [--runs 1] [--json FILE]

Runs each demo scenario that switches DataLoaders mid-run (``--switch-at``; the demo marks the moment with
``trainmon.agent.mark("switch")``) under a real headless Monitor listening on a Unix socket, ticking once a
second as ``trainmon`` does. Prints, per run: when the switch happened, when the new loader had fed
``min_steps`` steady steps (the new cause can be judged: "settled"), when the banner showed the new cause, the
lag from each, and the report's phase boundary next to the switch.
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
    after = [k for k in range(len(steps)) if steps.start[k] >= switch and not steps.warm[k]]
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", action="append", choices=[n for n, s in SCENARIOS.items() if s.timeline])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    names = args.scenario or [n for n, s in SCENARIOS.items() if s.timeline]
    rows = []
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
