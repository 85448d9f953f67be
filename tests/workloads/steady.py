"""A steady training loop for the fault matrix: times every step from inside the loop.

    python steady.py STEPS STEP_MS

Each step loads a batch through a real DataLoader (num_workers=0, so the agent's wrapped
``__next__`` is on the timed path), runs a small model and an optimizer step, and sleeps STEP_MS to
stand in for device time (off the CPU, like a real GPU step). Prints ``READY`` when the loop starts,
then one JSON line: step times, RSS before/after, the agent's counters. ``TRAINMON_DISABLE=1`` gives
the baseline.
"""

import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

import trainmon.agent

ATTACHED = trainmon.agent.attach()


class Items(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.full((32,), float(i % 7)), i % 4


def rss_kb() -> int:
    with open(f"/proc/{os.getpid()}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main() -> None:
    steps, step_s = int(sys.argv[1]), float(sys.argv[2]) / 1e3
    torch.set_num_threads(1)
    loader = DataLoader(Items(steps * 8), batch_size=8, num_workers=0)
    model = torch.nn.Linear(32, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times: list[float] = []
    rss0 = rss_kb()
    print("READY", flush=True)
    start = last = time.perf_counter()
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        time.sleep(step_s)
        now = time.perf_counter()
        times.append(now - last)
        last = now
    wall = time.perf_counter() - start
    print(
        json.dumps(
            {
                "pid": os.getpid(),
                "steps": len(times),
                "times": times,
                "wall": wall,
                "rss0_kb": rss0,
                "rss1_kb": rss_kb(),
                "attached": ATTACHED,
                "agent": trainmon.agent.stats(),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
