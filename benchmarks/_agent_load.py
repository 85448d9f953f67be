"""A synthetic training process for the monitor benchmarks: the real agent, no torch, a steady step rate.

    python benchmarks/_agent_load.py --address ADDR [--rate 1000] [--batch 32] [--wait-us 200]

``trainmon.agent.attach()`` with its real sender thread (batches every 0.1 s, non-blocking writes), a loader
registered through the agent's registry as the DataLoader hook would, and a paced loop: at each step's due time,
one DataLoader-like wait record (``_hot.span``, the record the ``__next__`` wrapper writes, its interval ending
just before the step) and one ``trainmon.agent.step()`` call. Behind schedule (a busy host), it catches up in a
burst, so the average rate holds. RANK/WORLD_SIZE come from the environment like any rank's. On SIGTERM it
detaches (the agent's own exit flush) and prints one JSON line: pid, steps emitted, the agent's counters.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trainmon.agent as agent
from trainmon.agent import _hot
from trainmon.protocol import K_WAIT

_stop = False


def _on_term(signum: int, frame: object) -> None:
    global _stop
    _stop = True


def register_loader(batch: int) -> int:
    registry = agent._agent.registry  # type: ignore[union-attr]
    return registry.register_loader(
        {
            "batch_size": batch,
            "num_workers": 0,
            "pin_memory": False,
            "prefetch_factor": None,
            "persistent_workers": False,
            "drop_last": False,
            "dataset": "Synthetic",
            "dataset_len": 1 << 30,
            "sampler": "SequentialSampler",
            "multiprocessing_context": None,
        }
    )


def run(rate: float, lid: int, wait_ns: int) -> int:
    pc = time.perf_counter_ns
    period = int(1e9 / rate)
    next_due = pc() + period
    steps = 0
    while not _stop:
        now = pc()
        if now < next_due:
            time.sleep((next_due - now) / 1e9)
            continue
        if now - next_due > 1_000_000_000:  # stopped for a while (SIGSTOP): no burst of a second's steps
            next_due = now
        _hot.span(K_WAIT, lid, now - wait_ns, now - 1000)
        agent.step()
        steps += 1
        next_due += period
    return steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("--rate", type=float, default=1000.0, help="steps per second")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--wait-us", type=float, default=200.0, help="length of each DataLoader-like wait")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    if not agent.attach(args.address, name=f"load-{os.environ.get('RANK', os.getpid())}"):
        sys.exit("attach() failed")
    lid = register_loader(args.batch)
    print("ready", flush=True)
    steps = run(args.rate, lid, int(args.wait_us * 1000))
    stats = agent.stats()  # before the exit flush
    agent.detach()
    print(json.dumps({"pid": os.getpid(), "steps": steps, "agent": stats}), flush=True)


if __name__ == "__main__":
    main()
