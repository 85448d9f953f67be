"""torch.compile'd code called with a new shape each time: ``python compile_shapes.py CALLS LIMIT``.

``fn`` is compiled with ``dynamic=False`` and ``torch._dynamo.config.recompile_limit = LIMIT``: each new length
recompiles it until the limit sends it back to eager. ``with_break`` has a graph break (a ``print`` inside it) and is
compiled once. Prints one JSON line: what torch itself recorded (its compilation records) and a checksum of the
results, the same with the agent attached or not."""

import json
import os
import sys
import time

import torch

import trainmon.agent

ATTACHED = trainmon.agent.attach()


def fn(x):
    return (x * 2).sin().sum()


def with_break(x):
    y = x + 1
    print("graph break here", flush=True)
    return (y * 3).sum()


def main() -> None:
    calls, limit = int(sys.argv[1]), int(sys.argv[2])
    torch._dynamo.config.recompile_limit = limit
    compiled = torch.compile(fn, backend="eager", dynamic=False)
    broken = torch.compile(with_break, backend="eager")
    total = 0.0
    for n in range(calls):
        x = torch.arange(8 + n, dtype=torch.float32)
        total += float(compiled(x)) + float(broken(torch.ones(4)))
        trainmon.agent.step()  # one call of each: a step of this "training"
    records = torch._dynamo.utils.get_compilation_metrics()
    if ATTACHED:
        time.sleep(0.3)  # three sender ticks: the agent has read torch's records of the last compilations too
    print(
        json.dumps(
            {
                "attached": ATTACHED,
                "pid": os.getpid(),
                "checksum": round(total, 4),
                "compile_ids": sorted(str(m.compile_id) for m in records),
                "limit_hit": any("recompile limit" in str(m.fail_reason).lower() for m in records),
                "agent": trainmon.agent.stats(),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
