"""A small real training loop for agent tests; attach() is at module top level on purpose
(spawned DataLoader workers re-run it and must stay inert). Prints its own counts as JSON."""

import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

import trainmon.agent

ATTACHED = trainmon.agent.attach()


class Items(Dataset):
    def __init__(self, n: int, sleep_s: float) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return torch.full((8,), float(i)), i % 2


def main() -> None:
    steps, workers, ctx, sleep_ms = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    torch.set_num_threads(1)
    loader = DataLoader(
        Items(steps * 4, sleep_ms / 1e3),
        batch_size=4,
        num_workers=workers,
        multiprocessing_context=(ctx if workers and ctx != "none" else None),
    )
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    worker_pids = []
    it = iter(loader)
    worker_pids = [w.pid for w in getattr(it, "_workers", [])]
    for x, y in it:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        done += 1
    print(
        json.dumps(
            {
                "steps": done,
                "pid": os.getpid(),
                "attached": ATTACHED,
                "worker_pids": worker_pids,
                "patched": hasattr(DataLoader.__iter__, "__wrapped__"),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
