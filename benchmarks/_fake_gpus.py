"""The simulated GPUs every monitor under benchmark sees: trainmon (in process) and, through benchmarks/nvml_shim,
nvitop and glances (their ``import pynvml``). Standard library and testsupport/fake_pynvml.py only, so importing it
adds nothing to a competitor's process but the fake itself."""

from __future__ import annotations

import threading
from collections.abc import Callable

from testsupport.fake_pynvml import GIB, FakeNvml


def fake_gpus(n: int, pids: list[int]) -> tuple[FakeNvml, list[tuple[int, int]]]:
    """``n`` busy Hopper-like GPUs (GPM on); each runs two of ``pids`` (a rank and a helper)."""
    fake = FakeNvml(n, gpm=True, util_gpu=87, util_mem=35, mem_used=60 * GIB)
    owners: list[tuple[int, int]] = []
    for i, dev in enumerate(fake.devices):
        own = [pids[(2 * i) % len(pids)], pids[(2 * i + 1) % len(pids)]] if pids else [1000 + i, 2000 + i]
        dev.processes = [(own[0], 20 * GIB), (own[1], GIB)]
        owners.append((i, own[0]))
    return fake, owners


def feeder(fake: FakeNvml, owners: list[tuple[int, int]]) -> Callable[[object], None]:
    """What a real driver has ready by each tick: sub-second utilisation samples and per-process SM samples."""

    def feed(snapshot: object = None) -> None:
        for i, pid in owners:
            fake.push_util_samples(i, [100, 60, 100, 80, 100, 90], period_us=166_000)
            fake.push_process_samples(i, [(pid, 85)])

    return feed


def feed_every(feed: Callable[[object], None], seconds: float) -> threading.Thread:
    """A competitor has no tick to hook: the driver's samples arrive on their own, once a second."""

    def loop() -> None:
        stop = threading.Event()
        while not stop.wait(seconds):
            feed(None)

    thread = threading.Thread(target=loop, name="fake-nvml-feed", daemon=True)
    thread.start()
    return thread
