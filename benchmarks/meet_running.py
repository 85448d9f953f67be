"""Trainings that never imported trainmon, met as a user meets them: `trainmon record` started beside three running
pytorch/examples-style trainings (main-process loading, one worker that cannot keep up, healthy), then
`trainmon attach` on each under a second recording.

    python benchmarks/meet_running.py [--seconds 40]

Prints, per training: the script's own data-wait share over the first recording, the sampled estimate and its
error, the verdict family; then, after the attach, the steps the agent counted against the script's own count over
the same span, and the agent's verdict. Not a test: the figures depend on the host (a 2-core VM runs three trainings
and the monitor at once here).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "tests" / "workloads" / "examples_imagenet.py"
CASES = ("main-process", "one-worker", "healthy")
METER = re.compile(r"meter step=(\d+) data_time_sum=([\d.]+) batch_time_sum=([\d.]+) t=([\d.]+)")


def plain_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_") and k != "PYTHONPATH"}


def trainmon(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainmon", *args]


def meters(path: Path, t0: float, t1: float) -> tuple[int, float] | None:
    """Steps and data-wait share of the script's own meter lines within [t0, t1]."""
    rows = [m for line in path.read_text().splitlines() if (m := METER.search(line)) and t0 <= float(m[4]) <= t1]
    if len(rows) < 2:
        return None
    (s0, d0, b0), (s1, d1, b1) = ((int(r[1]), float(r[2]), float(r[3])) for r in (rows[0], rows[-1]))
    return s1 - s0, (d1 - d0) / (b1 - b0) if b1 > b0 else float("nan")


def record(out: str, sock: str, seconds: float, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        trainmon("record", "--output", out, "--listen", sock, "--duration", str(seconds), "-q"), env=env, text=True
    )


def report(path: str, env: dict[str, str]) -> dict:
    out = subprocess.run(trainmon("report", path, "--format", "json"), capture_output=True, text=True, env=env)
    return json.loads(out.stdout)


def own_finding(rep: dict, pid: int) -> dict | None:
    return next((f for f in [rep["verdict"], *rep["findings"]] if f["evidence"].get("run") == f"pid {pid}"), None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tm-meet-"))
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRAINMON_DISCOVER="1")
    trainings = {}
    for case in CASES:
        log = tmp / f"{case}.log"
        with open(log, "w") as sink:
            trainings[case] = (
                subprocess.Popen(
                    [
                        sys.executable,
                        str(EXAMPLES),
                        "--case",
                        case,
                        "--seconds",
                        str(4 * args.seconds + 60),
                        "--print-freq",
                        "1",
                    ],
                    env=plain_env(),
                    stdout=sink,
                    cwd=str(EXAMPLES.parent),
                ),
                log,
            )
    time.sleep(15)  # they are running before trainmon is
    sock = str(tmp / "m.sock")
    t0 = time.monotonic()
    record(str(tmp / "sampled.tmrec"), sock, args.seconds, env).wait()
    t1 = time.monotonic()
    sampled = report(str(tmp / "sampled.tmrec"), env)
    rec = record(str(tmp / "attached.tmrec"), sock, args.seconds + 10, env)
    time.sleep(2)
    attached_at = {}
    for case, (proc, _) in trainings.items():
        res = subprocess.run(
            trainmon("attach", str(proc.pid), "--listen", sock), capture_output=True, text=True, env=env
        )
        attached_at[case] = time.monotonic()
        print(f"{case}: {(res.stdout or res.stderr).strip()}")
    rec.wait()
    t2 = time.monotonic()
    agent = report(str(tmp / "attached.tmrec"), env)
    print(f"\n{'case':14} {'own wait':>8} {'sampled':>8} {'error':>6} {'samples':>7}  sampled verdict")
    for case, (proc, log) in trainings.items():
        own = meters(log, t0 + 2, t1)
        row = next((r for r in sampled["runs"] if r["pid"] == proc.pid), None)
        f = own_finding(sampled, proc.pid)
        est = row["data_wait_fraction"] if row else None
        err = f"{est - own[1]:+.3f}" if own and est is not None else "n/a"
        print(
            f"{case:14} {own[1] if own else float('nan'):8.3f} {est if est is not None else float('nan'):8.3f} "
            f"{err:>6} {row['data_wait_samples'] if row else 0:7d}  {f['code'] if f else None}"
        )
    print(f"\n{'case':14} {'agent steps':>11} {'own steps':>9} {'diff':>6}  agent verdict")
    for case, (proc, log) in trainings.items():
        row = next((r for r in agent["runs"] if r["pid"] == proc.pid and r["measured_by"] == "agent"), None)
        own = meters(log, attached_at[case], t2)
        f = own_finding(agent, proc.pid)
        steps = row["steps"] if row else 0
        diff = f"{(steps - own[0]) / own[0]:+.1%}" if own and own[0] else "n/a"
        print(f"{case:14} {steps:11d} {own[0] if own else 0:9d} {diff:>6}  {f['code'] if f else None}")
    for proc, _ in trainings.values():
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
