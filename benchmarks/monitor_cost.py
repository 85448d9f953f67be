"""What the monitor costs beside a busy training host: CPU share of one core and RSS, side by side with glances.

Load: 16 real agent processes (benchmarks/_agent_load.py: ``trainmon.agent`` with its sender, 1000 steps/s each
plus a DataLoader-like wait record per step; ranks of one 16-rank job), 8 simulated GPUs (the fake NVML of
testsupport/fake_pynvml.py) and 64 tracked sleeping processes (4 threads each, like DataLoader workers).

Phase 1: ``trainmon record`` at 1 s (benchmarks/_monitor_proc.py, mirroring cmd_record) and, in the same window,
``glances --stdout cpu.total --time 1`` (installed only in benchmarks/.venv-glances).
Phase 2, when ``trainmon.tui`` exists: the live screen at 1 s in a detached tmux session (120×40) against the same
agents (they reconnect by themselves), and glances' own curses screen in another tmux session beside it.
CPU is each process's utime+stime over the window (all its threads); RSS from /proc/PID/statm; "flat" is the
least-squares RSS slope over the window.

    python benchmarks/monitor_cost.py [--seconds 30] [--soak-minutes M] [--agents 16] [--rate 1000]
        [--phases record,tui] [--label TEXT] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (
    BENCH,
    Row,
    Usage,
    add_json_arg,
    emit_rows,
    other_load,
    side_venv,
    spawn_sleepers,
    watch,
)
from testsupport.procs import PY, child_env, force_stop, force_stop_all, wait_for_path

GLANCES = "glances==4.5.8"  # as pinned in constraints/dev.txt
MONITOR = str(BENCH / "_monitor_proc.py")
AGENT = str(BENCH / "_agent_load.py")
RSS_LIMIT_MB = 150.0
FLAT_MB = 5.0  # growth over the window that still counts as flat


@dataclass
class Load:
    """The agents and tracked processes that every phase measures against."""

    address: str
    tmp: str
    agents: list[subprocess.Popen] = field(default_factory=list)
    sleepers: list[subprocess.Popen] = field(default_factory=list)
    track_file: str = ""

    def start(self, n_agents: int, rate: float, n_tracked: int, threads: int) -> None:
        self.sleepers = spawn_sleepers(n_tracked, threads)
        self.track_file = os.path.join(self.tmp, "tracked.pids")
        Path(self.track_file).write_text(" ".join(str(p.pid) for p in self.sleepers))
        job = {"WORLD_SIZE": str(n_agents), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}
        for rank in range(n_agents):
            env = child_env(RANK=str(rank), LOCAL_RANK=str(rank), **job)
            self.agents.append(
                subprocess.Popen(
                    [PY, AGENT, "--address", self.address, "--rate", str(rate)],
                    stdout=subprocess.PIPE,
                    text=True,
                    env=env,
                )
            )
        for a in self.agents:
            assert a.stdout is not None
            a.stdout.readline()

    def stop(self) -> list[dict]:
        force_stop_all(self.agents)
        out = []
        for a in self.agents:
            lines = [ln for ln in (a.stdout.read() if a.stdout else "").splitlines() if ln.startswith("{")]
            out += [json.loads(ln) for ln in lines]
        for p in self.sleepers:
            p.kill()
        force_stop_all(self.sleepers)
        return out


def start_recorder(load: Load, interval: float, gpus: int = 8) -> tuple[subprocess.Popen, str]:
    summary = os.path.join(load.tmp, "record-summary.json")
    proc = subprocess.Popen(
        [
            PY,
            MONITOR,
            "record",
            "--output",
            os.path.join(load.tmp, "cost.tmrec"),
            "--listen",
            load.address,
            "--interval",
            str(interval),
            "--gpus",
            str(gpus),
            "--track",
            load.track_file,
            "--summary",
            summary,
        ],
        env=child_env(),
    )
    wait_for_path(load.address, 60, proc)
    return proc, summary


def start_glances(interval: float) -> subprocess.Popen:
    glances = str(side_venv("glances", [GLANCES]).parent / "glances")
    return subprocess.Popen(
        [glances, "--stdout", "cpu.total", "--time", str(int(interval))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


# ---------------------------------------------------------------- tmux


def tmux(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30)


def tmux_start(name: str, command: list[str], env: dict[str, str], pidfile: str, quiet: bool = False) -> int:
    """A detached 120×40 tmux session running ``command``; returns the command's pid. ``quiet``: its stderr
    goes nowhere (a competitor's start-up warnings would stay on the screen)."""
    keep = ("PYTHONPATH", "PATH", "HOME", "LANG")
    exports = " ".join(f"{k}={_q(v)}" for k, v in env.items() if k in keep or k.startswith("TM_BENCH_"))
    shell = f"echo $$ > {_q(pidfile)}; exec env TERM=xterm-256color {exports} " + " ".join(_q(c) for c in command)
    if quiet:
        shell += " 2>/dev/null"
    res = tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", shell)
    if res.returncode != 0:
        raise RuntimeError(f"tmux new-session failed: {res.stderr.strip()}")
    wait_for_path(pidfile, 30)
    deadline = time.monotonic() + 10
    while not Path(pidfile).read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    return int(Path(pidfile).read_text())


def tmux_stop(name: str) -> None:
    tmux("send-keys", "-t", name, "q", "")
    time.sleep(1.0)
    tmux("kill-session", "-t", name)


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def tmux_screen(name: str) -> str:
    return tmux("capture-pane", "-p", "-t", name).stdout


# ---------------------------------------------------------------- phases


def phase_record(load: Load, args: argparse.Namespace) -> tuple[Usage, Usage, dict]:
    rec, summary_path = start_recorder(load, args.interval)
    glances = start_glances(args.interval)
    try:
        time.sleep(args.warmup)
        usages = [Usage(rec.pid, "trainmon record"), Usage(glances.pid, "glances --stdout")]
        print(f"  measuring trainmon record and glances --stdout for {args.window:.0f} s", flush=True)
        watch(usages, args.window, every=min(10.0, args.window / 10), log_every=60 if args.window > 120 else 0)
        context = other_load([rec.pid, glances.pid, *(a.pid for a in load.agents), *(s.pid for s in load.sleepers)])
    finally:
        force_stop(glances)
        force_stop(rec, timeout=30)
    summary = json.loads(Path(summary_path).read_text()) if os.path.exists(summary_path) else {}
    summary["context"] = context
    return usages[0], usages[1], summary


def tui_available() -> str | None:
    """Why the TUI row is skipped, or None when it can run."""
    if importlib.util.find_spec("trainmon.tui") is None:
        return "trainmon.tui does not exist yet"
    if shutil.which("tmux") is None:
        return "tmux is not installed (apt-get install -y tmux)"
    return None


def phase_tui(load: Load, args: argparse.Namespace) -> tuple[Usage, Usage, str]:
    sessions = [f"tm-bench-tui-{os.getpid()}", f"tm-bench-glances-{os.getpid()}"]
    env = child_env()
    glances = str(side_venv("glances", [GLANCES]).parent / "glances")
    try:
        tui_pid = tmux_start(
            sessions[0],
            [
                PY,
                MONITOR,
                "tui",
                "--listen",
                load.address,
                "--interval",
                str(args.interval),
                "--gpus",
                "8",
                "--track",
                load.track_file,
            ],
            env,
            os.path.join(load.tmp, "tui.pid"),
        )
        gl_pid = tmux_start(
            sessions[1], [glances, "--time", str(int(args.interval))], env, os.path.join(load.tmp, "glances.pid")
        )
        time.sleep(args.warmup)
        screen = tmux_screen(sessions[0])
        usages = [Usage(tui_pid, "trainmon TUI"), Usage(gl_pid, "glances (curses)")]
        print(f"  measuring the trainmon TUI and glances' screen (tmux) for {args.window:.0f} s", flush=True)
        watch(usages, args.window, every=min(10.0, args.window / 10), log_every=60 if args.window > 120 else 0)
    finally:
        for s in sessions:
            tmux_stop(s)
    return usages[0], usages[1], screen


# ---------------------------------------------------------------- rows


def cost_rows(name: str, target_pct: float, u: Usage, anchor: Usage | None, context: str) -> list[Row]:
    cpu = u.cpu_share() * 100
    growth = u.rss[-1] - u.rss[0] if u.rss else float("nan")
    a_cpu = f"{anchor.label} {anchor.cpu_share() * 100:.1f} %" if anchor else ""
    a_rss = f"{anchor.label} {anchor.rss_last():.0f} MB" if anchor else ""
    minutes = (u.t[-1] - u.t[0]) / 60 if u.t else 0
    return [
        Row(
            f"{name}: CPU, share of one core",
            f"≤ {target_pct:g} %",
            f"{cpu:.2f} %",
            anchor=a_cpu,
            met=cpu <= target_pct,
            note=context,
        ),
        Row(
            f"{name}: RSS",
            f"≤ {RSS_LIMIT_MB:.0f} MB",
            f"{u.rss_last():.0f} MB",
            anchor=a_rss,
            met=max(u.rss) <= RSS_LIMIT_MB,
            note=f"max {max(u.rss):.0f} MB over {minutes:.1f} min",
        ),
        Row(
            f"{name}: RSS growth over the window",
            "flat",
            f"{growth:+.1f} MB in {minutes:.1f} min",
            met=abs(growth) <= FLAT_MB,
            note=f"slope {u.rss_growth_per_hour():+.0f} MB/h; first {u.rss[0]:.0f} MB, last {u.rss[-1]:.0f} MB",
        ),
    ]


def measure(args: argparse.Namespace) -> list[Row]:
    tmp = tempfile.mkdtemp(prefix="tm-cost-")
    load = Load(os.path.join(tmp, "m.sock"), tmp)
    rows: list[Row] = []
    print(f"  starting {args.agents} agents × {args.rate:g} steps/s and {args.tracked} tracked processes", flush=True)
    try:
        load.start(args.agents, args.rate, args.tracked, args.threads)
        rec, glances, summary = phase_record(load, args)
        delivered = summary.get("steps", 0)
        context = (
            f"{args.agents} agents × {args.rate:g} steps/s ({delivered} steps ingested in the phase), 8 fake "
            f"GPUs, {summary.get('series', '?')} series, {args.tracked} + {args.agents} tracked pids; "
            f"host: {summary.get('context', '')}"
        )
        rows += cost_rows(f"recorder (trainmon record, 1 s){args.label}", 2.0, rec, glances, context)
        why_not = tui_available()
        if "tui" not in args.phases:
            pass  # a recorder-only run (--phases record): no TUI row at all
        elif why_not is None:
            tui, gl_screen, screen = phase_tui(load, args)
            if not tui.t or len(tui.t) < 2:
                rows.append(
                    Row(
                        "TUI (trainmon, 1 s, tmux)",
                        "≤ 4 %",
                        "failed",
                        met=False,
                        note=f"the TUI did not keep running; its screen: {screen[-300:]!r}",
                    )
                )
            else:
                rows += cost_rows(
                    f"TUI (trainmon in tmux, 1 s){args.label}",
                    4.0,
                    tui,
                    gl_screen,
                    "same load; glances' curses screen in a second tmux session",
                )
        else:
            rows.append(Row("TUI (trainmon in tmux, 1 s): CPU", "≤ 4 %", "not run", note=why_not))
    finally:
        agents = load.stop()
    sent = sum(a.get("agent", {}).get("sent_records", 0) for a in agents)
    dropped = sum(a.get("agent", {}).get("dropped_records", 0) for a in agents)
    for r in rows[:1]:
        r.note += f"; agents sent {sent} records, dropped {dropped}"
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0, help="measurement window per phase")
    ap.add_argument("--soak-minutes", type=float, default=0.0, help="a long window instead (RSS flatness)")
    # Long enough for the monitor's step tables to reach their budget (16 runs × 1000 steps/s: ~40 s), so the
    # window measures the steady state; a --soak-minutes run shows the same over half an hour.
    ap.add_argument("--warmup", type=float, default=45.0)
    ap.add_argument("--phases", default="record,tui", help="which monitors to measure: record, tui or both")
    ap.add_argument("--label", default="", help="appended to each row's figure (for a second load)")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--agents", type=int, default=16)
    ap.add_argument("--rate", type=float, default=1000.0, help="steps per second per agent")
    ap.add_argument("--tracked", type=int, default=64)
    ap.add_argument("--threads", type=int, default=4, help="threads per tracked process")
    add_json_arg(ap)
    args = ap.parse_args()
    args.window = args.soak_minutes * 60 if args.soak_minutes else args.seconds
    args.phases = {p.strip() for p in args.phases.split(",")}
    emit_rows(measure(args), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
