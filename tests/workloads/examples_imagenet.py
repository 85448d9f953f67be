"""An ImageNet-style training loop written the way pytorch/examples' imagenet/main.py is: ``AverageMeter``s for
batch_time and data_time, ``end = time.time()`` at the end of each iteration, a synthetic FakeData-like dataset whose
``__getitem__`` "decodes" and augments an image on the CPU. It never imports trainmon.

    python examples_imagenet.py --case main-process|one-worker|saturated|healthy [--seconds S] [--print-freq N]

Every ``--print-freq`` iterations it prints its own cumulative figures in one parseable line::

    meter step=120 data_time_sum=1.234567 batch_time_sum=9.876543 t=12345.678901

(``t`` is ``time.monotonic()`` when the line was printed), so a test can take the script's data-wait fraction,
data_time over batch_time, over exactly the span between two lines.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

# case: (num_workers, decode size in pixels per side, augmentation passes, batch size)
CASES: dict[str, tuple[int, int, int, int]] = {
    "main-process": (0, 128, 2, 32),  # loading in the main process: a modest share of each step
    "one-worker": (1, 224, 40, 8),  # one worker that cannot keep up with the model
    "saturated": (3, 320, 40, 4),  # three workers on a 2-core host: the CPU is the limit
    "healthy": (2, 32, 1, 32),  # cheap data, two workers: next(loader) returns at once
}
CROP = 32


class AverageMeter:
    """Computes and stores the average and current value (as in pytorch/examples)."""

    def __init__(self, name: str, fmt: str = ":f") -> None:
        self.name = name
        self.fmt = fmt
        self.reset()

    def reset(self) -> None:
        self.val = 0.0
        self.avg = 0.0
        self.sum = 0.0
        self.count = 0

    def update(self, val: float, n: int = 1) -> None:
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


class SyntheticImageNet(Dataset):
    """FakeData with a decode: each item is a random ``size``x``size`` RGB image, blurred ``passes`` times (the
    stand-in for JPEG decoding), randomly cropped and flipped, then normalised."""

    def __init__(self, length: int, size: int, passes: int, num_classes: int = 100) -> None:
        self.length = length
        self.size = size
        self.passes = passes
        self.num_classes = num_classes
        self.mean = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
        self.std = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)

    def __len__(self) -> int:
        return self.length

    def decode(self, rng: np.random.Generator) -> np.ndarray:
        img = rng.integers(0, 256, size=(3, self.size, self.size), dtype=np.uint8).astype(np.float32)
        for _ in range(self.passes):
            img[:, 1:-1, 1:-1] = (
                img[:, :-2, 1:-1] + img[:, 2:, 1:-1] + img[:, 1:-1, :-2] + img[:, 1:-1, 2:] + img[:, 1:-1, 1:-1]
            ) / 5.0
        return img

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(index)
        img = self.decode(rng)
        top, left = rng.integers(0, self.size - CROP + 1, size=2) if self.size > CROP else (0, 0)
        img = img[:, top : top + CROP, left : left + CROP]
        if self.size < CROP:
            img = np.pad(img, ((0, 0), (0, CROP - self.size), (0, CROP - self.size)))
        if rng.random() < 0.5:
            img = img[:, :, ::-1]
        img = (img / 255.0 - self.mean) / self.std
        return torch.from_numpy(np.ascontiguousarray(img)), int(index % self.num_classes)


def make_model(num_classes: int = 100) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(inplace=True),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, num_classes),
    )


def train(
    train_loader: DataLoader,
    model: nn.Module,
    criterion: nn.Module,
    optimizer: torch.optim.Optimizer,
    args: argparse.Namespace,
) -> None:
    batch_time = AverageMeter("Time", ":6.3f")
    data_time = AverageMeter("Data", ":6.3f")
    losses = AverageMeter("Loss", ":.4e")

    model.train()
    deadline = time.monotonic() + args.seconds
    end = time.time()
    for i, (images, target) in enumerate(train_loader):
        # measure data loading time
        data_time.update(time.time() - end)

        output = model(images)
        loss = criterion(output, target)
        losses.update(loss.item(), images.size(0))

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        # measure elapsed time
        batch_time.update(time.time() - end)
        end = time.time()

        if (i + 1) % args.print_freq == 0:
            print(
                f"meter step={i + 1} data_time_sum={data_time.sum:.6f} batch_time_sum={batch_time.sum:.6f} "
                f"t={time.monotonic():.6f} loss={losses.avg:.4f}",
                flush=True,
            )
            if time.monotonic() > deadline:
                break


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(CASES), required=True)
    parser.add_argument("--seconds", type=float, default=60.0, help="stop after about this long")
    parser.add_argument("--print-freq", type=int, default=5)
    args = parser.parse_args()

    workers, size, passes, batch_size = CASES[args.case]
    torch.manual_seed(0)
    dataset = SyntheticImageNet(10_000_000, size, passes)
    train_loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=workers)
    model = make_model()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    print(f"start case={args.case} num_workers={workers} threads={torch.get_num_threads()}", flush=True)
    train(train_loader, model, criterion, optimizer, args)


if __name__ == "__main__":
    main()
