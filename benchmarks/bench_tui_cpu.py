"""CPU use of the live screen at the default 1 s refresh, against the same monitor printing status lines.

    python benchmarks/bench_tui_cpu.py [--seconds 30] [--size 120x40]

Both runs watch the same real demo training (two DataLoader workers). ``trainmon`` runs in a detached tmux
session of the given size (a real terminal: Textual draws and diffs as it would for a user), then again with its
output piped (the status-line mode: the same Monitor, sources and rules, no screen). CPU time is the trainmon
process's utime + stime from /proc over the measured span, after a warm-up; the difference is what the screen
itself costs. The floor: a bare Textual app of the same size in the same tmux (benchmarks/_bare_textual.py: idle; a
process table and two panes changing every second; the whole screen changing every second), with no trainmon code;
the screen's cost is given as a ratio to the table floor. nvtop's published figure for comparison: about 5.7 % of
one core (Syllo/nvtop#139).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import cpu_seconds
from testsupport.paths import ROOT
from testsupport.procs import child_env, wait_for_path

WARMUP_S = 8.0


def start_training(addr: str, seconds: float) -> subprocess.Popen:
    env = child_env(TRAINMON_ADDR=addr)
    cmd = [
        sys.executable,
        "-m",
        "trainmon.demo.train",
        "--workers",
        "2",
        "--cpu-ms",
        "0.3",
        "--persistent",
        "--seconds",
        str(seconds),
        "--steps",
        "100000000",
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(pid: int, seconds: float) -> float:
    """Share of one core used by ``pid`` over ``seconds`` (after the warm-up)."""
    time.sleep(WARMUP_S)
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = cpu_seconds(pid), time.monotonic()
    return (c1 - c0) / (t1 - t0)


def run_screen(seconds: float, cols: int, rows: int) -> float:
    tmp = tempfile.mkdtemp(prefix="tm-bench-")
    addr = os.path.join(tmp, "m.sock")
    session = f"trainmon-bench-{os.getpid()}"
    inner = (
        f"cd {ROOT} && exec env LANG=C.UTF-8 TERM=xterm-256color PYTHONPATH={ROOT} "
        f"{sys.executable} -m trainmon --listen {addr}"
    )
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(cols), "-y", str(rows), inner], check=True)
    try:
        wait_for_path(addr, 20.0)
        pid = tmux_pane_pid(session)
        train = start_training(addr, seconds + WARMUP_S + 5)
        try:
            share = measure(pid, seconds)
            screen = subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
            ).stdout
            if "Training" not in screen and "step" not in screen:
                print("warning: the screen did not show the training pane:\n" + screen, file=sys.stderr)
        finally:
            train.terminate()
            train.wait()
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=False)
        time.sleep(1.0)
        return share
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)


def tmux_pane_pid(session: str) -> int:
    out = subprocess.run(
        ["tmux", "list-panes", "-t", session, "-F", "#{pane_pid}"], check=True, capture_output=True, text=True
    ).stdout
    return int(out.split()[0])


def run_bare(seconds: float, cols: int, rows: int, mode: str) -> float:
    """The bare Textual app of ``mode`` in a tmux session of the same size: the framework's floor."""
    session = f"trainmon-bench-bare-{os.getpid()}"
    app = Path(__file__).with_name("_bare_textual.py")
    inner = f"exec env LANG=C.UTF-8 TERM=xterm-256color {sys.executable} {app} --mode {mode}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(cols), "-y", str(rows), inner], check=True)
    try:
        time.sleep(1.0)
        return measure(tmux_pane_pid(session), seconds)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, stderr=subprocess.DEVNULL)


def run_status_lines(seconds: float) -> float:
    tmp = tempfile.mkdtemp(prefix="tm-bench-")
    addr = os.path.join(tmp, "m.sock")
    mon = subprocess.Popen(
        [sys.executable, "-m", "trainmon", "--listen", addr],
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_for_path(addr, 20.0, mon)
        train = start_training(addr, seconds + WARMUP_S + 5)
        try:
            return measure(mon.pid, seconds)
        finally:
            train.terminate()
            train.wait()
    finally:
        mon.terminate()
        mon.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--size", default="120x40", help="terminal size COLSxROWS")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        print("tmux is needed to give the screen a real terminal", file=sys.stderr)
        return 2
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    screen = run_screen(args.seconds, cols, rows)
    lines = run_status_lines(args.seconds)
    floors = {mode: run_bare(args.seconds, cols, rows, mode) for mode in ("idle", "table", "full")}
    own = screen - lines
    print(f"trainmon live screen {cols}x{rows}, 1 s refresh : {screen:6.1%} of one core")
    print(f"trainmon status lines (no screen)       : {lines:6.1%} of one core")
    print(f"the screen's own share                  : {own:6.1%} of one core  (nvtop: ~5.7%)")
    for mode, share in floors.items():
        print(f"bare Textual app, {mode:5s}                 : {share:6.1%} of one core")
    if floors["table"] > 0:
        print(f"the screen's own share / the table floor : {own / floors['table']:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
