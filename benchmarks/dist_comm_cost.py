"""Agent cost of the communication timing (trainmon/agent/_dist.py): ns added per collective and per DDP step.

A one-rank gloo process group (a real one: the collective runs through gloo, with nobody to wait for) runs
short blocks of (a) ``dist.all_reduce`` of one float, (b) ``dist.all_reduce(async_op=True)`` then
``work.wait()``, and (c) a DistributedDataParallel step of a small model; the patches are switched on and off
between blocks in ABBA order (``agent_overhead.paired``). The figure is the median paired difference of the
training thread's CPU time per operation; the wall-clock difference is printed beside it.

    python benchmarks/dist_comm_cost.py [--pairs 200] [--steps 200] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist
from torch import nn

from benchmarks._common import Row, add_json_arg, emit_rows
from benchmarks.agent_overhead import paired
from trainmon.agent import _hot
from trainmon.agent._dist import DistHooks

TARGET_NS = 2000.0


class Switch:
    """The patches on and off (a fresh DistHooks each time: an uninstalled one never patches again)."""

    def __init__(self) -> None:
        self.hooks: DistHooks | None = None

    def on(self) -> None:
        self.hooks = DistHooks()
        self.hooks.poll()
        _hot.reset_buffer()

    def off(self) -> None:
        if self.hooks is not None:
            self.hooks.uninstall()
            self.hooks = None
        _hot.reset_buffer()


def timed(run: Callable[[], None]) -> Callable[[int], tuple[float, float]]:
    def block(steps: int) -> tuple[float, float]:
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        for _ in range(steps):
            run()
        return (time.perf_counter_ns() - t0) / steps, (time.thread_time_ns() - c0) / steps

    return block


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=200)
    p.add_argument("--steps", type=int, default=200)
    add_json_arg(p)
    args = p.parse_args()
    torch.set_num_threads(1)
    rdv = os.path.join(tempfile.mkdtemp(prefix="trainmon-bench-"), "rdv")
    dist.init_process_group("gloo", init_method=f"file://{rdv}", rank=0, world_size=1)
    t = torch.ones(1)

    def sync() -> None:
        dist.all_reduce(t)

    def async_wait() -> None:
        dist.all_reduce(t, async_op=True).wait()

    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.randn(4, 16)

    def ddp_step() -> None:
        model(x).sum().backward()
        opt.step()

    switch = Switch()
    rows = []
    for name, run, steps, target in (
        ("dist.all_reduce (sync), one float", sync, args.steps, TARGET_NS),
        ("dist.all_reduce(async_op=True) + wait()", async_wait, args.steps, TARGET_NS),
        # No target: a pre-hook and two autograd callbacks per backward, against DDP's own step overhead.
        ("DDP step (forward, backward, optimizer)", ddp_step, max(1, args.steps // 4), None),
    ):
        r = paired(timed(run), switch.on, switch.off, args.pairs, steps, settle=10)
        rows.append(
            Row(
                f"comm timing: {name}",
                f"≤ {target / 1e3:.0f} µs" if target else "",
                f"{r['thread_cpu_ns'] / 1e3:.2f} µs",
                met=r["thread_cpu_ns"] <= target if target else None,
                note=f"wall-clock median {r['ns'] / 1e3:+.2f} µs (IQR {r['q1'] / 1e3:+.2f}..{r['q3'] / 1e3:+.2f}); "
                f"operation {r['base_ns'] / 1e3:.1f} µs unpatched",
            )
        )
    switch.off()
    dist.destroy_process_group()
    emit_rows(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
