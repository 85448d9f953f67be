"""Soak: a real ``trainmon record`` under a steady crowd of agents, its RSS, descriptors and threads
read from /proc over time. Agents come and go (each lives ``--lifetime`` seconds, then a new one
takes its slot), the way jobs come and go under a monitor left running.

    python benchmarks/soak.py --seconds 1800          # make soak: 30 minutes
    python benchmarks/soak.py --seconds 20 --json     # what tests/reliability/test_soak.py runs

Flat means: after warm-up, RSS stays within ``--rss-slack-mb`` of its warm-up level (and its trend
over the second half is under 2 MiB per 10 minutes on long runs), descriptors never exceed the
idle count plus one per live agent, and the thread count never changes. Exit status 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import slope_per_hour
from testsupport.paths import TINY
from testsupport.procs import child_env, proc_status, trainmon_cmd  # the same /proc reading as the soak test's


class Crowd:
    """``n`` agent slots; a finished agent is replaced by a new one until ``stop_at``."""

    def __init__(self, addr: str, n: int, lifetime_s: float, step_ms: float) -> None:
        self.addr, self.lifetime_s, self.step_ms = addr, lifetime_s, step_ms
        self.slots: list[subprocess.Popen | None] = [None] * n
        self.started = self.failed = 0

    def _spawn(self, stagger_s: float) -> subprocess.Popen:
        steps = max(1, int((self.lifetime_s + stagger_s) / (self.step_ms / 1e3)))
        self.started += 1
        return subprocess.Popen(
            [sys.executable, TINY, str(steps), str(self.step_ms), "0", "2"],
            env=child_env(TRAINMON_ADDR=self.addr),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def tend(self, replace: bool) -> None:
        for i, proc in enumerate(self.slots):
            if proc is not None and proc.poll() is not None:
                err = proc.stderr.read() if proc.stderr else b""
                if proc.returncode != 0 or err:
                    self.failed += 1
                    print(f"agent {proc.pid} exited {proc.returncode}: {err.decode()[-500:]}", file=sys.stderr)
                if proc.stderr:
                    proc.stderr.close()
                self.slots[i] = proc = None
            if proc is None and replace:
                # Staggered first lifetimes, so the slots do not all turn over at once.
                first = self.started < len(self.slots)
                self.slots[i] = self._spawn(i * self.lifetime_s / len(self.slots) if first else 0.0)

    def live(self) -> int:
        return sum(p is not None and p.poll() is None for p in self.slots)

    def stop(self) -> None:
        """End the live agents the way a job is cancelled (SIGTERM): their connections drop without a bye."""
        for i, proc in enumerate(self.slots):
            if proc is not None:
                if proc.poll() is None:
                    proc.terminate()
                proc.wait(timeout=30)
                if proc.stderr:
                    proc.stderr.close()
                self.slots[i] = None


def soak(
    seconds: float,
    agents: int,
    lifetime_s: float,
    step_ms: float,
    interval_s: float,
    warmup_s: float,
    rss_slack_mb: float,
    quiet: bool,
) -> dict:
    tmp = tempfile.mkdtemp(prefix="tm-soak-", dir="/tmp")
    os.chmod(tmp, 0o700)
    addr, output = os.path.join(tmp, "m.sock"), os.path.join(tmp, "soak.tmrec")
    recorder = subprocess.Popen(
        trainmon_cmd("record", "--output", output, "--listen", addr, "-q"),
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    samples: list[dict] = []
    crowd = Crowd(addr, agents, lifetime_s, step_ms)
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(addr):
            if recorder.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"trainmon record did not start: {recorder.stderr.read().decode()}")
            time.sleep(0.05)
        time.sleep(1.0)
        idle = proc_status(recorder.pid)
        start = time.monotonic()
        next_sample = start
        while (now := time.monotonic()) < start + seconds:
            crowd.tend(replace=True)
            if now >= next_sample:
                row = {"t": round(now - start, 1), "live_agents": crowd.live(), **proc_status(recorder.pid)}
                samples.append(row)
                if not quiet:
                    print(
                        f"{row['t']:8.1f} s  rss {row['rss_kb'] / 1024:7.1f} MiB  fds {row['fds']:4d}  "
                        f"threads {row['threads']:3d}  agents {row['live_agents']:2d}  started {crowd.started}",
                        flush=True,
                    )
                next_sample += interval_s
            time.sleep(0.1)
        crowd.stop()
        time.sleep(2.0)
        final = proc_status(recorder.pid)
        alive = recorder.poll() is None
    finally:
        crowd.stop()
        if recorder.poll() is None:
            recorder.terminate()
        recorder.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    return judge(idle, samples, final, alive, crowd, seconds, warmup_s, rss_slack_mb)


def _slope_mb_per_10min(rows: list[dict]) -> float:
    if len(rows) < 3:
        return 0.0
    return slope_per_hour([r["t"] for r in rows], [r["rss_kb"] / 1024 for r in rows]) / 6


def judge(
    idle: dict,
    samples: list[dict],
    final: dict,
    alive: bool,
    crowd: Crowd,
    seconds: float,
    warmup_s: float,
    rss_slack_mb: float,
) -> dict:
    steady = [r for r in samples if r["t"] >= warmup_s]
    base_rss = steady[0]["rss_kb"] / 1024 if steady else idle["rss_kb"] / 1024
    growth = max(r["rss_kb"] for r in steady) / 1024 - base_rss if steady else 0.0
    second_half = [r for r in samples if r["t"] >= seconds / 2]
    slope = _slope_mb_per_10min(second_half)
    problems = []
    if not alive:
        problems.append("the monitor died")
    if crowd.failed:
        problems.append(f"{crowd.failed} agents failed")
    if growth > rss_slack_mb:
        problems.append(f"RSS grew {growth:.1f} MiB after warm-up (slack {rss_slack_mb} MiB)")
    if seconds >= 600 and slope > 2.0:
        problems.append(f"RSS still rising {slope:.2f} MiB per 10 min in the second half")
    # Besides its connections, the monitor keeps the tracked processes' /proc files open (bounded, closed when a
    # process is forgotten): what is compared with the connections is the rest.
    if any(r["fds"] - r["proc_files"] > idle["fds"] - idle["proc_files"] + r["live_agents"] + 2 for r in samples):
        problems.append("more descriptors than connections")
    if final["fds"] > idle["fds"] + 1:
        problems.append(f"descriptors leaked: {idle['fds']} idle, {final['fds']} at the end")
    if any(r["threads"] != idle["threads"] for r in samples) or final["threads"] != idle["threads"]:
        problems.append("the thread count changed")
    return {
        "seconds": seconds,
        "agents_started": crowd.started,
        "idle": idle,
        "final": final,
        "rss_warm_mb": round(base_rss, 1),
        "rss_growth_after_warmup_mb": round(growth, 2),
        "rss_slope_mb_per_10min": round(slope, 2),
        "fds_range": [min(r["fds"] for r in samples), max(r["fds"] for r in samples)] if samples else None,
        "threads_range": [min(r["threads"] for r in samples), max(r["threads"] for r in samples)] if samples else None,
        "samples": samples,
        "flat": not problems,
        "problems": problems,
    }


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still end the agents and the monitor
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1800.0)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument(
        "--lifetime", type=float, default=None, help="seconds each agent lives (default: seconds/4, at most 60)"
    )
    ap.add_argument("--step-ms", type=float, default=5.0, help="each agent's step time (default 5 ms: 200 steps/s)")
    ap.add_argument("--interval", type=float, default=None, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=None, help="seconds before RSS must be flat")
    ap.add_argument("--rss-slack-mb", type=float, default=None)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args()
    lifetime = args.lifetime or min(60.0, args.seconds / 4)
    interval = args.interval or (2.0 if args.seconds <= 120 else 10.0)
    # A live store keeps the 32 newest ended runs (trainmon.store.store.MAX_ENDED_RUNS): RSS levels off
    # once that many have ended, about 5 minutes into a long soak.
    warmup = args.warmup if args.warmup is not None else min(420.0, args.seconds / 3)
    # Short runs still fill their step rings while measured: the slack covers that growth.
    slack = args.rss_slack_mb or (16.0 if args.seconds <= 120 else 12.0)
    result = soak(args.seconds, args.agents, lifetime, args.step_ms, interval, warmup, slack, args.json)
    if args.json:
        print(json.dumps(result))
    else:
        print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))
    return 0 if result["flat"] else 1


if __name__ == "__main__":
    sys.exit(main())
