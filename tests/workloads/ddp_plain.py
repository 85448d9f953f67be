"""A DistributedDataParallel training written the way torchrun tutorials write it (gloo on CPU, a DistributedSampler,
one DataLoader worker per rank). It never imports trainmon.

    torchrun --nproc-per-node 2 ddp_plain.py [--seconds S]

Each rank prints ``meter rank=R step=N data_time_sum=… batch_time_sum=… t=…`` every few steps (``t``: its
``time.monotonic()``), so a test can take each rank's own step count and data-wait share over any span.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Noise(Dataset):
    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x = torch.randn(3, 32, 32)
        for _ in range(4):  # a little preprocessing per sample
            x = torch.nn.functional.avg_pool2d(x.unsqueeze(0), 3, 1, 1).squeeze(0)
        return x, i % 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    model = DistributedDataParallel(
        nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dataset = Noise()
    loader = DataLoader(dataset, batch_size=16, sampler=DistributedSampler(dataset), num_workers=1)
    print(f"start rank={rank} pid={os.getpid()}", flush=True)
    data_time = batch_time = 0.0
    deadline = time.monotonic() + args.seconds
    end = time.time()
    for step, (images, target) in enumerate(loader, 1):
        data_time += time.time() - end
        loss = nn.functional.cross_entropy(model(images), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        batch_time += time.time() - end
        end = time.time()
        if step % 5 == 0:
            print(
                f"meter rank={rank} step={step} data_time_sum={data_time:.6f} batch_time_sum={batch_time:.6f} "
                f"t={time.monotonic():.6f}",
                flush=True,
            )
        if time.monotonic() > deadline:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
