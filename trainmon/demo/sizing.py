"""The demo's model sized to the host it runs on: ``--step-ms`` picks the hidden width whose training step takes
about that long here, timed once at start-up, so a host whose matrix products are 2-3x slower trains a narrower
model at the same step time and its scenario keeps the balance it was written for (data against model, a pause
against the steps)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

MIN_WIDTH, MAX_WIDTH, QUANTUM = 64, 8192, 64
PROBE_WIDTHS = (512, 1536)


def sized_width(step_ms: float, features: int, batch: int, device: Any) -> tuple[int, float]:
    """The width whose step (forward, backward and SGD of the demo's MLP on ``batch`` samples) takes about
    ``step_ms`` on ``device`` now, and the step it measured at that width in ms.

    A step costs a + b·(width² + (features + 10)·width) for the three layers' products; two probe widths give a
    and b, and one probe at the width they predict corrects the estimate."""
    lo, hi = PROBE_WIDTHS
    t_lo, t_hi = step_time(lo, features, batch, device), step_time(hi, features, batch, device)
    size_lo, size_hi = _size(lo, features), _size(hi, features)
    b = max((t_hi - t_lo) / (size_hi - size_lo), 1e-12)
    a = max(t_lo - b * size_lo, 0.0)
    target = step_ms / 1e3
    width = _width_for(max(target - a, b * _size(MIN_WIDTH, features)) / b, features)
    measured = step_time(width, features, batch, device)
    if measured > a:  # one correction: the products' share scales with the size
        width = _width_for(_size(width, features) * (target - a) / (measured - a), features)
        measured = step_time(width, features, batch, device)
    return width, measured * 1e3


def step_time(width: int, features: int, batch: int, device: Any, steps: int = 5) -> float:
    """The median time of a training step of the demo's MLP at ``width``, in seconds (after two warm-up steps)."""
    import torch
    from torch import nn

    model = nn.Sequential(
        nn.Linear(features, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, features, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def train_step() -> None:
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return median_s(train_step, steps, device)


def median_s(fn: Callable[[], Any], runs: int, device: Any = None, warm: int = 2) -> float:
    """The median time of ``fn()`` over ``runs`` calls after ``warm`` untimed ones, in seconds; on a CUDA
    ``device`` each call is timed to its kernels' end."""
    import torch

    cuda = device is not None and getattr(device, "type", "") == "cuda"
    times = []
    for i in range(warm + runs):
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        if i >= warm:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _size(width: int, features: int) -> float:
    return float(width * width + (features + 10) * width)


def _width_for(size: float, features: int) -> int:
    k = features + 10
    width = (-k + math.sqrt(k * k + 4 * size)) / 2
    return int(min(MAX_WIDTH, max(MIN_WIDTH, round(width / QUANTUM) * QUANTUM)))
