"""One training loop, instrumented by nothing, by trainmon, or by TraceML (run by vs_traceml.py).

    python benchmarks/_loop.py none|trainmon|traceml [--steps N --blocks B --pairs P] [--address A] [--traceml-port P]

The loop: a real DataLoader (num_workers=0, trivial items: one small tensor each), a one-layer model,
zero_grad, forward, backward and an optimizer step: what TraceML's ``trace_step`` is meant to wrap, as light as
torch allows, so that a microsecond stands out of the host's noise. Prints one JSON line with the ns per step of each
block (wall clock and this thread's CPU time), then a paired in-process measurement: many short blocks in ABBA
order with the instrumentation switched on and off between them (trainmon: the agent's patches installed and
removed; TraceML, which cannot be removed: armed with ``trace_step`` versus disarmed with a null context, its
documented pass-through, so its wrappers' own pass-through cost stays in both). Short paired blocks resolve a
sub-microsecond difference on a shared, busy host; separate processes differ by more than that.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch.utils.data import DataLoader, Dataset

WIDTH = 4
SETTLE = 20  # untimed steps after each switch (see agent_overhead.paired)


class Items(Dataset):
    """Trivial items: a preallocated tensor per index."""

    def __init__(self) -> None:
        self.x = torch.randn(1024, WIDTH)

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.x[i & 1023]


class Loop:
    def __init__(self, step_ctx: Callable[[torch.nn.Module], contextlib.AbstractContextManager]) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(WIDTH, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-4)
        self.loader = DataLoader(Items(), batch_size=None, num_workers=0)
        self.step_ctx = step_ctx
        self.it = iter(self.loader)

    def block(self, steps: int) -> tuple[float, float]:
        it, model, opt, ctx = self.it, self.model, self.opt, self.step_ctx
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        for _ in range(steps):
            x = next(it)
            with ctx(model):
                opt.zero_grad(set_to_none=True)
                loss = model(x).square().mean()
                loss.backward()
                opt.step()
        return (time.perf_counter_ns() - t0) / steps, (time.thread_time_ns() - c0) / steps


def no_ctx(model: torch.nn.Module) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


def run_plain(loop: Loop, steps: int, blocks: int) -> dict:
    loop.block(steps)  # warm-up
    got = [loop.block(steps) for _ in range(blocks)]
    return {"wall_ns": [g[0] for g in got], "cpu_ns": [g[1] for g in got]}


def run_trainmon(address: str, steps: int, blocks: int, pairs: int, pair_steps: int) -> dict:
    import trainmon.agent as agent
    from benchmarks.agent_overhead import paired

    agent.attach(address)
    loop = Loop(no_ctx)  # the iterator is made with the agent attached, as in a real job
    try:
        hooks = agent._agent.hooks  # type: ignore[union-attr]
        out = run_plain(loop, steps, blocks)
        hooks.uninstall()
        tid = agent._agent.sender._thread.native_id  # type: ignore[union-attr]
        out["paired"] = paired(loop.block, hooks.install, hooks.uninstall, pairs, pair_steps, tid, SETTLE)
        hooks.install()
        out["stats"] = agent.stats()
    finally:
        agent.detach()
    return out


def run_traceml(port: int, logs_dir: str, steps: int, blocks: int, pairs: int, pair_steps: int) -> dict:
    import traceml_ai as traceml
    from traceml_ai.runtime.arming import _set_tracing_armed

    from benchmarks.agent_overhead import paired

    cfg = traceml.init(
        mode="auto", aggregator_port=port, logs_dir=logs_dir, on_missing_aggregator="raise", connect_timeout_sec=60.0
    )
    loop = Loop(traceml.trace_step)  # the DataLoader iterator is made after init(), so TraceML wraps it
    out = run_plain(loop, steps, blocks)

    def on() -> None:
        _set_tracing_armed(True)
        loop.step_ctx = traceml.trace_step

    def off() -> None:
        _set_tracing_armed(False)
        loop.step_ctx = no_ctx

    out["paired"] = paired(loop.block, on, off, pairs, pair_steps, settle=SETTLE)
    on()
    out["traceml"] = {"mode": cfg.mode, "disabled": cfg.disabled, "version": traceml.__version__}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["none", "trainmon", "traceml"])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--blocks", type=int, default=20)
    ap.add_argument("--pairs", type=int, default=3000, help="ABBA pairs for the in-process measurement")
    ap.add_argument("--pair-steps", type=int, default=10, help="steps per paired block")
    ap.add_argument("--address", default=None)
    ap.add_argument("--traceml-port", type=int, default=0)
    ap.add_argument("--logs-dir", default=".")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.mode == "none":
        out = run_plain(Loop(no_ctx), args.steps, args.blocks)
    elif args.mode == "trainmon":
        out = run_trainmon(args.address, args.steps, args.blocks, args.pairs, args.pair_steps)
    else:
        out = run_traceml(args.traceml_port, args.logs_dir, args.steps, args.blocks, args.pairs, args.pair_steps)
    out["mode"] = args.mode
    out["median_wall_ns"] = statistics.median(out["wall_ns"])
    out["median_cpu_ns"] = statistics.median(out["cpu_ns"])
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
