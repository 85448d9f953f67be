"""A light training loop that never imports trainmon, for tests that meet a training already running: a real
DataLoader with one worker, a small model, an optimizer, and a sleep standing in for device time.

    python plain_loop.py [--seconds S] [--step-ms MS] [--workers N] [--item-ms MS]

``--item-ms`` is CPU work per sample in the Dataset (with ``--workers 0``: loading in the main process). Prints
``start pid=P`` once the loader is made, then ``meter step=N data_time_sum=… batch_time_sum=… t=T`` every 10 steps
(cumulative, measured as pytorch/examples does; ``t``: its ``time.monotonic()``), so a test can take the steps and
the data-wait share of any span.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Items(Dataset):
    def __init__(self, item_ms: float) -> None:
        self.item_s = item_ms / 1e3

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        end = time.perf_counter() + self.item_s
        x = 0
        while time.perf_counter() < end:  # decoding and augmenting, on the CPU
            x += 1
        return torch.randn(16), i % 4


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--item-ms", type=float, default=0.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Items(args.item_ms), batch_size=8, num_workers=args.workers)
    print(f"start pid={os.getpid()}", flush=True)
    deadline = time.monotonic() + args.seconds
    data_time = batch_time = 0.0
    end = time.time()
    for step, (x, y) in enumerate(loader, 1):
        data_time += time.time() - end
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.step_ms / 1e3)
        batch_time += time.time() - end
        end = time.time()
        if step % 10 == 0:
            print(
                f"meter step={step} data_time_sum={data_time:.6f} batch_time_sum={batch_time:.6f} "
                f"t={time.monotonic():.6f}",
                flush=True,
            )
        if time.monotonic() > deadline:
            break


if __name__ == "__main__":
    main()
