"""A standard-library-only training stand-in: many of these run at once without torch.

    python tiny_agent.py STEPS [STEP_MS] [START_AT] [LOADERS]

Attaches at wall-clock time START_AT (so a crowd can connect at the same instant), then runs STEPS
steps: each step is a simulated DataLoader wait (a real ``wait`` record of a registered loader),
STEP_MS of sleep and ``trainmon.agent.step()``. Prints one JSON line with its pid and counters.
``STEPS`` = 0 with ``TRAINMON_FLOOD_S`` set instead calls ``step()`` in a tight loop for that many
seconds (the worst case for the agent's buffers) and reports RSS over time.
"""

import json
import os
import sys
import time

import trainmon.agent as agent
from trainmon.agent import _hot
from trainmon.protocol import K_WAIT


def rss_kb() -> int:
    with open(f"/proc/{os.getpid()}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def flood(seconds: float) -> dict:
    samples = []
    end = time.monotonic() + seconds
    next_sample = 0.0
    while (now := time.monotonic()) < end:
        for _ in range(1000):
            agent.step()
        if now >= next_sample:
            samples.append(rss_kb())
            next_sample = now + 0.25
    return {"rss_kb": samples}


def steady(steps: int, step_s: float, loaders: int) -> dict:
    # A stand-in for a DataLoader: registered like one, its waits recorded like the real hook's.
    lids = [
        agent._agent.registry.register_loader({"batch_size": 4, "num_workers": 0}) if agent._agent else 0
        for _ in range(loaders)
    ]
    for i in range(steps):
        t0 = _hot._pc()
        time.sleep(step_s / 4)
        _hot.span(K_WAIT, lids[i % len(lids)], t0, _hot._pc())
        time.sleep(step_s * 3 / 4)
        agent.step()
    return {}


def main() -> None:
    steps = int(sys.argv[1])
    step_s = float(sys.argv[2]) / 1e3 if len(sys.argv) > 2 else 0.002
    start_at = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    loaders = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    if start_at:
        time.sleep(max(0.0, start_at - time.time()))
    attached = agent.attach()
    extra = flood(float(os.environ["TRAINMON_FLOOD_S"])) if not steps else steady(steps, step_s, loaders)
    print(
        json.dumps({"pid": os.getpid(), "steps": steps, "attached": attached, "agent": agent.stats(), **extra}),
        flush=True,
    )


if __name__ == "__main__":
    main()
