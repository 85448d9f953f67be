"""``trainmon attach`` on busy CPU trainings: how long the training is held, and what its steps cost before and after.

Each target is a real PyTorch training started without trainmon (torch imported, so libtorch and libgomp are
mapped; two intra-op threads; a DataLoader loop with an optimizer step). Inside it a watcher thread reads
time.monotonic() every 0.2 ms and keeps every gap over 1 ms; the training keeps every step's duration. The
benchmark asks the target for them over stdin afterwards, so nothing it measures is printed while it measures.

Figures per attach:
- held (ptrace): the time the target's main thread spent in ptrace stops, polled from /proc every 0.5 ms
  (trainmon.attach.stopwatch): the sum, and the longest single stop;
- longest gap: the longest pause the target's own watcher thread saw during the attach (a ptrace stop, or the
  GIL held by the injected code for longer than the switch interval), beside the longest in as long a window
  just before (the noise floor of this host);
- agent start: from the call to ``attach_process`` until the agent reported that it runs;
- step time: the median step before the attach (3 s) and after it (3 s, from 0.5 s after it returned), beside the
  change between the two 3 s windows before it (no attach between them: this host's noise); in wall time, and in
  the training thread's CPU time (time.thread_time: immune to other processes taking the CPU on a shared host).

    python benchmarks/attach_stop.py [--rounds 5]                 # the stop figures
    python benchmarks/attach_stop.py --mode many [--targets 20]   # attach (then "already") to N trainings in turn
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import Row, add_json_arg, emit_rows, median, other_load
from testsupport.procs import PY, force_stop
from trainmon.attach import ALREADY, ATTACHED, attach_process
from trainmon.attach.stopwatch import StopWatch
from trainmon.attach.target import main_state, read_status

TARGET = r"""
import json, os, sys, threading, time
assert "trainmon" not in sys.modules
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)
data = TensorDataset(torch.randn(8192, 64), torch.randint(0, 10, (8192,)))
loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=0)
model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
steps, gaps = [], []

def watch():
    last = time.monotonic()
    while True:
        time.sleep(0.0002)
        now = time.monotonic()
        if now - last > 0.001:
            gaps.append((now, now - last))
        last = now

def serve():
    for line in sys.stdin:
        cmd, a, b = line.split()
        a, b = float(a), float(b)
        if cmd == "STEPS":
            rows = [s for s in list(steps) if a <= s[0] <= b]
            wall, cpu = sorted(s[1] for s in rows), sorted(s[2] for s in rows)
            mid = len(rows) // 2
            print(json.dumps({"n": len(rows), "median": wall[mid] if rows else None,
                              "cpu": cpu[mid] if rows else None}), flush=True)
        else:
            g = [x for t, x in list(gaps) if a <= t <= b]
            print(json.dumps({"max": max(g, default=0.0)}), flush=True)

threading.Thread(target=watch, daemon=True).start()
threading.Thread(target=serve, daemon=True).start()
print("READY", flush=True)
while True:
    for x, y in loader:
        t0, c0 = time.monotonic(), time.thread_time()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        t1, c1 = time.monotonic(), time.thread_time()
        steps.append((t1, t1 - t0, c1 - c0))
"""


class Target:
    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_") and k != "PYTHONPATH"}
        self.proc = subprocess.Popen(
            [PY, "-u", "-c", TARGET], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "READY":
            raise RuntimeError(f"the target did not start: {line!r}")
        self.pid = self.proc.pid

    def ask(self, cmd: str, a: float, b: float) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{cmd} {a} {b}\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        force_stop(self.proc)


def _gdb_left(pid: int) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and os.path.basename(argv[0]) == b"gdb" and f"/proc/{pid}/exe".encode() in argv:
                return True
    return False


def _untouched(pid: int) -> bool:
    st = read_status(pid)
    return st is not None and st.tracer == 0 and main_state(pid) not in ("t", "T") and not _gdb_left(pid)


def one_attach(addr: str, warm_s: float = 8.0, window_s: float = 3.0) -> dict:
    target = Target()
    try:
        time.sleep(warm_s)
        t_a0 = time.monotonic()
        with StopWatch(target.pid) as watch:
            res = attach_process(target.pid, addr)
        t_a1 = time.monotonic()
        time.sleep(0.5 + window_s)
        during = target.ask("GAP", t_a0, t_a1 + 0.05)["max"]
        floor = target.ask("GAP", t_a0 - (t_a1 - t_a0) - 1.0, t_a0)["max"]
        control = target.ask("STEPS", t_a0 - 2 * window_s, t_a0 - window_s)  # two windows with no attach between
        before = target.ask("STEPS", t_a0 - window_s, t_a0)
        after = target.ask("STEPS", t_a1 + 0.5, t_a1 + 0.5 + window_s)
        return {
            "status": res.status,
            "message": res.message,
            "held_s": res.stopped_s,
            "longest_stop_s": watch.longest_s,
            "stops": watch.stops,
            "gap_s": during,
            "floor_gap_s": floor,
            "agent_start_s": t_a1 - t_a0,
            "step_control_s": control["median"],
            "step_before_s": before["median"],
            "step_after_s": after["median"],
            "cpu_control_s": control["cpu"],
            "cpu_before_s": before["cpu"],
            "cpu_after_s": after["cpu"],
            "untouched": _untouched(target.pid),
            "alive": target.alive(),
        }
    finally:
        target.stop()


def many(addr: str, n: int) -> dict:
    out = {
        "attached": 0,
        "already": 0,
        "crashes": 0,
        "hangs": 0,
        "left_stopped_or_traced": 0,
        "changes": [],
        "cpu_changes": [],
        "cpu_noise": [],
    }
    for i in range(n):
        target = Target()
        try:
            time.sleep(5.0)
            t_a0 = time.monotonic()
            first = attach_process(target.pid, addr)
            second = attach_process(target.pid, addr)
            t_a1 = time.monotonic()
            out["attached"] += first.status == ATTACHED
            out["already"] += second.status == ALREADY
            out["hangs"] += t_a1 - t_a0 > 20 or "timed out" in first.message + second.message
            out["left_stopped_or_traced"] += not _untouched(target.pid)
            time.sleep(2.5)
            if not target.alive():
                out["crashes"] += 1
                print(f"target {i}: exited with {target.proc.returncode}", flush=True)
                continue
            c = target.ask("STEPS", t_a0 - 4.0, t_a0 - 2.0)  # two windows with no attach between: the noise
            b = target.ask("STEPS", t_a0 - 2.0, t_a0)
            a = target.ask("STEPS", t_a1 + 0.5, t_a1 + 2.5)
            if c["cpu"] and b["cpu"]:
                out["cpu_noise"].append(b["cpu"] / c["cpu"] - 1.0)
            before, after = b["median"], a["median"]
            if before and after:
                out["changes"].append(after / before - 1.0)
            if b["cpu"] and a["cpu"]:
                out["cpu_changes"].append(a["cpu"] / b["cpu"] - 1.0)
            print(
                f"target {i}: {first.status} then {second.status}; held {first.stopped_s * 1e3:.0f} + "
                f"{second.stopped_s * 1e3:.0f} ms; step {before * 1e3:.2f} → {after * 1e3:.2f} ms",
                flush=True,
            )
        finally:
            target.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("stop", "many"), default="stop")
    ap.add_argument("--rounds", type=int, default=5, help="attaches to fresh trainings (stop mode)")
    ap.add_argument("--targets", type=int, default=20, help="trainings attached in turn (many mode)")
    add_json_arg(ap)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tm-attach-bench-") as tmp:
        addr = os.path.join(tmp, "m.sock")
        from trainmon.monitor import Monitor

        monitor = Monitor(addr, interval=1.0)
        monitor.start()
        try:
            print(f"host load: {other_load()}", flush=True)
            if args.mode == "many":
                rows = _many_rows(many(addr, args.targets), args.targets)
            else:
                rows = _stop_rows([_one(addr, i) for i in range(args.rounds)])
        finally:
            monitor.stop()
    emit_rows(rows, args.json)


def _one(addr: str, i: int) -> dict:
    r = one_attach(addr)
    print(
        f"round {i}: {r['status']}, held {r['held_s'] * 1e3:.1f} ms in {r['stops']} stops (longest "
        f"{r['longest_stop_s'] * 1e3:.1f} ms), target's longest gap {r['gap_s'] * 1e3:.1f} ms (floor "
        f"{r['floor_gap_s'] * 1e3:.1f} ms), agent running after {r['agent_start_s'] * 1e3:.0f} ms, step "
        f"{r['step_before_s'] * 1e3:.3f} → {r['step_after_s'] * 1e3:.3f} ms (3 s earlier "
        f"{r['step_control_s'] * 1e3:.3f} ms); its CPU time {r['cpu_before_s'] * 1e3:.3f} → "
        f"{r['cpu_after_s'] * 1e3:.3f} ms ({r['cpu_control_s'] * 1e3:.3f}), untouched {r['untouched']}",
        flush=True,
    )
    return r


def _stop_rows(rs: list[dict]) -> list[Row]:
    def ms(key: str) -> str:
        xs = [r[key] * 1e3 for r in rs]
        return f"{median(xs):.1f} ms (max {max(xs):.1f})"

    def rel(after: str, before: str) -> str:
        xs = [r[after] / r[before] - 1 for r in rs if r[before] and r[after]]
        return f"{median(xs) * 100:+.1f} % ({min(xs) * 100:+.1f} … {max(xs) * 100:+.1f})" if xs else "n/a"

    ok = all(r["status"] == ATTACHED and r["untouched"] and r["alive"] for r in rs)
    return [
        Row(
            "attach: training held in ptrace stops (sum)",
            "< 500 ms",
            ms("held_s"),
            met=max(r["held_s"] for r in rs) < 0.5,
        ),
        Row("attach: longest single ptrace stop", "", ms("longest_stop_s")),
        Row("attach: longest gap the training saw", "", ms("gap_s"), anchor=f"floor {ms('floor_gap_s')}"),
        Row("attach: until the agent runs", "", ms("agent_start_s")),
        Row(
            "attach: median step time (wall) after vs before",
            "",
            rel("step_after_s", "step_before_s"),
            anchor=f"no attach: {rel('step_before_s', 'step_control_s')}",
            note="" if ok else "a round failed",
        ),
        Row(
            "attach: median step CPU time after vs before",
            "",
            rel("cpu_after_s", "cpu_before_s"),
            anchor=f"no attach: {rel('cpu_before_s', 'cpu_control_s')}",
        ),
    ]


def _many_rows(out: dict, n: int) -> list[Row]:
    ch, cpu, noise = out["changes"], out["cpu_changes"], out["cpu_noise"]
    return [
        Row(
            f"attach to {n} trainings, then again",
            f"{n} attached, {n} already, no crash or hang",
            f"{out['attached']} attached, {out['already']} already, {out['crashes']} crashed, {out['hangs']} hung, "
            f"{out['left_stopped_or_traced']} left stopped/traced",
            met=out["attached"] == n and out["already"] == n and not out["crashes"] and not out["hangs"],
        ),
        Row(
            "median step time after vs before",
            "",
            f"{median(ch) * 100:+.1f} % (range {min(ch) * 100:+.1f} … {max(ch) * 100:+.1f})" if ch else "n/a",
        ),
        Row(
            "median step CPU time after vs before",
            "",
            f"{median(cpu) * 100:+.1f} % (range {min(cpu) * 100:+.1f} … {max(cpu) * 100:+.1f})" if cpu else "n/a",
            anchor=f"no attach: {median(noise) * 100:+.1f} % ({min(noise) * 100:+.1f} … {max(noise) * 100:+.1f})"
            if noise
            else "",
        ),
    ]


if __name__ == "__main__":
    main()
