"""trainmon beside nvitop and glances, under one load, in the same windows: CPU share of one core and RSS.

Loads (real agents of benchmarks/_agent_load.py, sleeping tracked processes as DataLoader workers, fake-NVML GPUs):

- ``everyday``: 2 ranks × 10 steps/s, 4 workers, 1 GPU (one healthy training, as most people watch one)
- ``heavy``: 16 ranks × 1000 steps/s, 64 workers, 8 GPUs

Every monitor sees the same simulated GPUs and processes: trainmon through ``nvml_module``
(benchmarks/_monitor_proc.py), nvitop and glances through ``import pynvml`` resolving to benchmarks/nvml_shim (the
same fake, the same devices, the same tracked pids on them; glances' check for libnvidia-ml is answered by the shim's
sitecustomize). nvitop and glances come from git-ignored side environments (benchmarks/.venv-nvitop, .venv-glances),
at the versions pinned in constraints/dev.txt.

Phase ``screens``: the trainmon TUI, nvitop and glances' curses screen, each in its own detached tmux session of
120×40, all at a 1 s refresh (nvitop's default is 2 s, glances' 2 s), started together and measured together over the
same ``--rounds`` windows after the warm-up: whatever else loads the host loads all three at once, so the per-window
ratio holds where absolute figures drift. Phase ``record``: ``trainmon record`` beside ``glances --stdout`` (nvitop has
no headless mode), likewise. CPU is each process's utime+stime over a window (all its threads); the figure is the
median window, the ratio the median of the per-window ratios; RSS from /proc/PID/statm.

    python benchmarks/side_by_side.py [--load everyday|heavy] [--phases screens,record] [--rounds 3]
        [--window 20] [--warmup S] [--label TEXT] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import BENCH, Row, Usage, add_json_arg, emit_rows, median, other_load, side_venv
from benchmarks.monitor_cost import MONITOR, Load, start_recorder, tmux_screen, tmux_start, tmux_stop
from testsupport.paths import ROOT
from testsupport.procs import PY, child_env, force_stop

SHIM = BENCH / "nvml_shim"


@dataclass(frozen=True)
class Spec:
    agents: int
    rate: float
    workers: int
    gpus: int
    warmup: float
    screen_cpu: float  # target for the TUI, % of one core
    record_cpu: float  # target for trainmon record
    rss_mb: float  # target for the TUI's RSS

    def describe(self) -> str:
        return f"{self.agents} ranks × {self.rate:g} steps/s, {self.workers} workers, {self.gpus} GPU" + (
            "s" if self.gpus > 1 else ""
        )


LOADS = {
    "everyday": Spec(2, 10.0, 4, 1, 15.0, 1.0, 1.0, 60.0),
    # Long enough for the step tables to reach their budget (16 runs × 1000 steps/s: ~40 s).
    "heavy": Spec(16, 1000.0, 64, 8, 45.0, 4.0, 3.0, 150.0),
}


def pinned(name: str) -> str:
    """``name==version`` as constraints/dev.txt pins it (one place for every version the project uses)."""
    for line in (ROOT / "constraints" / "dev.txt").read_text().splitlines():
        if line.lower().startswith(name.lower() + "=="):
            return line.strip()
    raise SystemExit(f"{name} is not pinned in constraints/dev.txt")


def competitor(name: str) -> str:
    """The competitor's console script, from its side environment (installed on first use)."""
    return str(side_venv(name, [pinned(name)]).parent / name)


def shim_env(load: Load, spec: Spec) -> dict[str, str]:
    return child_env(
        PYTHONPATH=os.pathsep.join([str(SHIM), str(ROOT)]), TM_BENCH_GPUS=str(spec.gpus), TM_BENCH_TRACK=load.track_file
    )


class Windows:
    """CPU share per window and RSS of several processes measured over the same windows."""

    def __init__(self, procs: dict[str, int]) -> None:
        self.procs = procs
        self.cpu: dict[str, list[float]] = {k: [] for k in procs}
        self.rss: dict[str, Usage] = {k: Usage(pid, k) for k, pid in procs.items()}

    def run(self, rounds: int, window: float) -> None:
        for r in range(rounds):
            starts = {k: Usage(pid, k) for k, pid in self.procs.items()}
            for u in starts.values():
                u.sample()
            deadline = time.monotonic() + window
            while (left := deadline - time.monotonic()) > 0:
                time.sleep(min(5.0, left))
                for u in self.rss.values():
                    u.sample()
            for k, u in starts.items():
                u.sample()
                self.cpu[k].append(u.cpu_share() * 100)
            print(f"  window {r + 1}/{rounds}: " + " · ".join(f"{k} {v[-1]:.2f} %" for k, v in self.cpu.items()))

    def share(self, k: str) -> float:
        return median(x for x in self.cpu[k] if x == x)

    def ratio(self, k: str, other: str) -> float:
        return median(a / b for a, b in zip(self.cpu[k], self.cpu[other], strict=True) if b > 0 and a == a)

    def rss_mb(self, k: str) -> float:
        return self.rss[k].rss_last()


def phase_screens(load: Load, spec: Spec, args: argparse.Namespace) -> tuple[Windows, str]:
    tag = os.getpid()
    sessions = {"trainmon": f"tm-sbs-tui-{tag}", "nvitop": f"tm-sbs-nvitop-{tag}", "glances": f"tm-sbs-glances-{tag}"}
    nvitop, glances = competitor("nvitop"), competitor("glances")
    env = shim_env(load, spec)
    pids: dict[str, int] = {}
    try:
        tui = [PY, MONITOR, "tui", "--listen", load.address, "--interval", "1", "--gpus", str(spec.gpus)]
        pids["trainmon"] = tmux_start(
            sessions["trainmon"], [*tui, "--track", load.track_file], child_env(), os.path.join(load.tmp, "tui.pid")
        )
        pids["nvitop"] = tmux_start(
            sessions["nvitop"], [nvitop, "--interval", "1"], env, os.path.join(load.tmp, "nv.pid"), quiet=True
        )
        pids["glances"] = tmux_start(
            sessions["glances"], [glances, "--time", "1"], env, os.path.join(load.tmp, "gl.pid"), quiet=True
        )
        time.sleep(spec.warmup if args.warmup is None else args.warmup)
        screen = tmux_screen(sessions["trainmon"])
        print(f"  measuring trainmon's TUI, nvitop and glances (tmux 120×40, 1 s) over {args.rounds} windows")
        w = Windows(pids)
        w.run(args.rounds, args.window)
        for name in ("nvitop", "glances"):
            shown = tmux_screen(sessions[name])
            if len(shown.strip()) < 200:
                print(f"  warning: {name}'s screen is nearly empty:\n{shown}", file=sys.stderr)
    finally:
        for s in sessions.values():
            tmux_stop(s)
    return w, screen


def phase_record(load: Load, spec: Spec, args: argparse.Namespace) -> Windows:
    rec, _summary = start_recorder(load, 1.0, gpus=spec.gpus)
    glances = competitor("glances")
    gl = subprocess.Popen(
        [glances, "--stdout", "cpu.total,gpu", "--time", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=shim_env(load, spec),
    )
    try:
        time.sleep(spec.warmup if args.warmup is None else args.warmup)
        print(f"  measuring trainmon record and glances --stdout over {args.rounds} windows")
        w = Windows({"trainmon record": rec.pid, "glances --stdout": gl.pid})
        w.run(args.rounds, args.window)
    finally:
        force_stop(gl)
        force_stop(rec, timeout=30)
    return w


def screen_rows(w: Windows, spec: Spec, name: str, screen: str) -> list[Row]:
    tm, nv, gl = w.share("trainmon"), w.share("nvitop"), w.share("glances")
    r_nv, r_gl = w.ratio("trainmon", "nvitop"), w.ratio("trainmon", "glances")
    behind = [who for who, r in (("nvitop", r_nv), ("glances", r_gl)) if r >= 1]
    rss = w.rss["trainmon"]
    growth = rss.rss[-1] - rss.rss[0] if rss.rss else float("nan")
    minutes = (rss.t[-1] - rss.t[0]) / 60 if rss.t else 0
    shows = "the screen showed the verdict" if "OK" in screen or "WARNING" in screen or "CRITICAL" in screen else ""
    return [
        Row(
            f"TUI, {name}: CPU, share of one core",
            f"≤ {spec.screen_cpu:g} %, below " + ("nvitop" if name == "everyday" else "glances"),
            f"{tm:.2f} %",
            anchor=f"nvitop {nv:.2f} % ({r_nv:.2f}×) · glances {gl:.2f} % ({r_gl:.2f}×)",
            met=tm <= spec.screen_cpu and (r_nv < 1 if name == "everyday" else r_gl < 1),
            note=f"{spec.describe()}; all three in tmux 120×40 at 1 s, measured in the same "
            f"{len(w.cpu['trainmon'])} windows; per window trainmon {_list(w.cpu['trainmon'])}, nvitop "
            f"{_list(w.cpu['nvitop'])}, glances {_list(w.cpu['glances'])}"
            + (f"; BEHIND {', '.join(behind)}" if behind else "")
            + (f"; {shows}" if shows else ""),
        ),
        Row(
            f"TUI, {name}: RSS",
            f"≤ {spec.rss_mb:g} MB",
            f"{w.rss_mb('trainmon'):.0f} MB",
            anchor=f"nvitop {w.rss_mb('nvitop'):.0f} MB · glances {w.rss_mb('glances'):.0f} MB",
            met=max(rss.rss, default=float("inf")) <= spec.rss_mb,
            note=f"{growth:+.1f} MB over the {minutes:.1f} min measured (slope {rss.rss_growth_per_hour():+.0f} MB/h)"
            + _rss_by_minutes(rss),
        ),
    ]


def _rss_by_minutes(u: Usage, every_min: float = 5.0) -> str:
    """For a long window: the RSS every ``every_min`` minutes, so a reader sees whether it levels off."""
    if not u.t or u.t[-1] - u.t[0] < 2 * every_min * 60:
        return ""
    marks, next_t = [], u.t[0]
    for t, mb in zip(u.t, u.rss, strict=True):
        if t >= next_t:
            marks.append(f"{(t - u.t[0]) / 60:.0f} min {mb:.0f}")
            next_t += every_min * 60
    return f"; RSS (MB) at {', '.join(marks)}, end {u.rss[-1]:.0f}"


def record_rows(w: Windows, spec: Spec, name: str) -> list[Row]:
    tm, gl = w.share("trainmon record"), w.share("glances --stdout")
    ratio = w.ratio("trainmon record", "glances --stdout")
    return [
        Row(
            f"trainmon record, {name}: CPU, share of one core",
            f"≤ {spec.record_cpu:g} %",
            f"{tm:.2f} %",
            anchor=f"glances --stdout {gl:.2f} % ({ratio:.2f}×)",
            met=tm <= spec.record_cpu,
            note=f"{spec.describe()}; per window trainmon {_list(w.cpu['trainmon record'])}, glances "
            f"{_list(w.cpu['glances --stdout'])}; RSS {w.rss_mb('trainmon record'):.0f} MB, glances "
            f"{w.rss_mb('glances --stdout'):.0f} MB",
        )
    ]


def _list(xs: list[float]) -> str:
    return "/".join(f"{x:.2f}" for x in xs)


def measure(args: argparse.Namespace) -> list[Row]:
    spec = LOADS[args.load]
    tmp = tempfile.mkdtemp(prefix="tm-sbs-")
    load = Load(os.path.join(tmp, "m.sock"), tmp)
    rows: list[Row] = []
    print(f"  load: {spec.describe()}", flush=True)
    try:
        load.start(spec.agents, spec.rate, spec.workers, 4)
        if "screens" in args.phases:
            w, screen = phase_screens(load, spec, args)
            rows += screen_rows(w, spec, args.load, screen)
        if "record" in args.phases:
            rows += record_rows(phase_record(load, spec, args), spec, args.load)
    finally:
        load.stop()
    host = other_load()
    for r in rows[:1]:
        r.note += f"; host after: {host}"
    for r in rows:
        r.figure = r.figure.replace(f"{args.load}:", f"{args.load}{args.label}:", 1)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--load", choices=sorted(LOADS), default="everyday")
    ap.add_argument("--phases", default="screens,record")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=20.0, help="seconds per measured window")
    ap.add_argument("--warmup", type=float, default=None, help="seconds before the first window (default per load)")
    ap.add_argument("--label", default="", help="appended to the load's name in each figure (a soak: ', 30 min')")
    add_json_arg(ap)
    args = ap.parse_args()
    args.phases = {p.strip() for p in args.phases.split(",")}
    emit_rows(measure(args), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
