"""Agent cost inside training: attach() time and ns added per training step.

A real DataLoader loop (num_workers=0, trivial items, an optimizer step per batch) is timed in
interleaved blocks with and without the agent attached (detach() removes every patch), and the
median per-step difference is reported, for three monitor states: connected (a real
`trainmon record` subprocess), absent, and frozen with SIGSTOP.

    python benchmarks/agent_overhead.py [--steps 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader

import trainmon.agent as agent


class Trivial(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> int:
        return i


def loop_ns_per_step(steps: int) -> float:
    # A fake optimizer-free step: the hook fires through the real Optimizer.step machinery.
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.0)
    loader = DataLoader(Trivial(), batch_size=None, num_workers=0)
    it = iter(loader)
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        next(it)
        opt.step()
    return (time.perf_counter_ns() - t0) / steps


def attach_time_us(address: str, n: int = 50) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        agent.attach(address)
        times.append(time.perf_counter_ns() - t0)
        agent.detach()
    return statistics.median(times) / 1e3


def overhead(address: str, steps: int, rounds: int) -> tuple[float, float]:
    diffs, bases = [], []
    loop_ns_per_step(2000)  # warm caches
    for _ in range(rounds):
        base = loop_ns_per_step(steps)
        agent.attach(address)
        with_agent = loop_ns_per_step(steps)
        agent.detach()
        base2 = loop_ns_per_step(steps)
        b = (base + base2) / 2
        diffs.append(with_agent - b)
        bases.append(b)
    return statistics.median(diffs), statistics.median(bases)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="tm-bench-")
    address = os.path.join(tmp, "m.sock")
    rows = []
    rows.append(("attach() with no monitor", "< 1000 µs", f"{attach_time_us(address):.0f} µs"))
    d, base = overhead(address, args.steps, args.rounds)
    rows.append(("per step, monitor absent", "≤ 1.0 µs", f"{d / 1e3:.2f} µs (loop {base / 1e3:.1f} µs/step)"))
    rec = subprocess.Popen([sys.executable, "-m", "trainmon", "record", "-o", os.path.join(tmp, "b.tmrec"),
                            "--listen", address, "-q"], stderr=subprocess.DEVNULL)
    try:
        while not os.path.exists(address):
            time.sleep(0.05)
        d, base = overhead(address, args.steps, args.rounds)
        rows.append(("per step, monitor connected", "≤ 1.0 µs", f"{d / 1e3:.2f} µs (loop {base / 1e3:.1f} µs/step)"))
        rec.send_signal(signal.SIGSTOP)
        d, base = overhead(address, args.steps, args.rounds)
        rows.append(("per step, monitor frozen", "≤ 1.0 µs", f"{d / 1e3:.2f} µs (loop {base / 1e3:.1f} µs/step)"))
        rec.send_signal(signal.SIGCONT)
    finally:
        rec.terminate()
        rec.wait()
    width = max(len(r[0]) for r in rows)
    print(f"{'figure'.ljust(width)}  {'target':10}  measured")
    for name, target, measured in rows:
        print(f"{name.ljust(width)}  {target:10}  {measured}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
