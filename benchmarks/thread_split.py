"""Where a monitor's CPU goes, thread by thread: the split behind docs/performance.md.

Starts one of side_by_side.py's loads, then ``trainmon`` (the TUI in a detached tmux 120×40, or ``record``) at 1 s,
and after the warm-up reads every thread's utime+stime from /proc/PID/task/*/stat over ``--window`` seconds. Thread
names come from /proc (trainmon names its own threads) or, for Python threads the kernel only knows by the
process name, from ``py-spy dump``. ``--pyspy FILE`` also records a ``py-spy record --threads`` flame graph
(speedscope JSON) over the same window. ``--profile DIR`` runs the monitor's and the agents' threads under cProfile
(whole run, warm-up included; cProfile slows them, so the CPU split is then not the one alone).

    python benchmarks/thread_split.py [--load everyday|heavy] [--what tui|record] [--window 30] [--warmup S]
        [--pyspy FILE] [--rate 200]
        [--profile DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.monitor_cost import MONITOR, Load, start_recorder, tmux_start, tmux_stop
from benchmarks.side_by_side import LOADS
from testsupport.procs import PY, child_env, force_stop

TICKS = os.sysconf("SC_CLK_TCK")


def thread_times(pid: int) -> dict[int, tuple[str, float]]:
    """tid → (kernel name, CPU seconds) of every thread of ``pid``."""
    out: dict[int, tuple[str, float]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / TICKS)
    return out


def python_names(pid: int) -> dict[int, str]:
    """tid → Python thread name, from ``py-spy dump`` (empty when py-spy is missing or not permitted)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    try:
        text = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    names = {}
    for m in re.finditer(r"^Thread (0x[0-9a-fA-F]+|\d+) \([^)]*\): \"([^\"]*)\"", text, re.M):
        raw = m.group(1)
        names[int(raw, 16) if raw.startswith("0x") else int(raw)] = m.group(2)
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--load", choices=sorted(LOADS), default="everyday")
    ap.add_argument("--what", choices=("tui", "record"), default="tui")
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=None)
    ap.add_argument("--pyspy", default="", help="also write a py-spy --threads recording (speedscope) here")
    ap.add_argument("--profile", default="", help="run the monitor's and the agents' threads under cProfile, here")
    ap.add_argument("--rate", type=int, default=200, help="py-spy's samples a second (with --pyspy)")
    args = ap.parse_args()
    spec = LOADS[args.load]
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        os.environ["BENCH_PROFILE_DIR"] = os.path.abspath(args.profile)  # read by _monitor_proc.py
    tmp = tempfile.mkdtemp(prefix="tm-split-")
    load = Load(os.path.join(tmp, "agents.sock"), tmp)
    load.start(spec.agents, spec.rate, spec.workers, 4)
    session = f"tm-split-{os.getpid()}"
    rec = None
    try:
        if args.what == "tui":
            cmd = [PY, MONITOR, "tui", "--listen", load.address, "--interval", "1", "--gpus", str(spec.gpus)]
            pid = tmux_start(session, [*cmd, "--track", load.track_file], child_env(), os.path.join(tmp, "tui.pid"))
        else:
            rec, _ = start_recorder(load, 1.0, gpus=spec.gpus)
            pid = rec.pid
        time.sleep(spec.warmup if args.warmup is None else args.warmup)
        names = python_names(pid)
        spy = None
        if args.pyspy:
            exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
            # --nonblocking: py-spy reads the process without pausing it, so the CPU split stays what it is alone.
            record = ["record", "--pid", str(pid), "--threads", "--nonblocking", "--format", "speedscope"]
            spy = subprocess.Popen(
                [exe, *record, "-o", args.pyspy, "--duration", str(int(args.window)), "--rate", str(args.rate)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        before, t0 = thread_times(pid), time.monotonic()
        time.sleep(args.window)
        after, span = thread_times(pid), time.monotonic() - t0
        if spy is not None:
            spy.wait(timeout=args.window + 60)
    finally:
        if rec is not None:
            force_stop(rec, timeout=30)
        else:
            tmux_stop(session)
        load.stop()
    rows = []
    for tid, (kname, cpu) in after.items():
        used = cpu - before.get(tid, (kname, 0.0))[1]
        rows.append((used / span * 100, names.get(tid) or kname, tid))
    rows.sort(reverse=True)
    print(f"{spec.describe()}: trainmon {args.what}, {span:.0f} s, % of one core per thread")
    for share, name, tid in rows:
        if share >= 0.005:
            print(f"  {name:<28} {tid:>8}  {share:6.2f} %")
    print(f"  {'total':<28} {'':>8}  {sum(r[0] for r in rows):6.2f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
