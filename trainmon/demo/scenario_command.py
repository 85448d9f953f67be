"""What a demo scenario is (``Scenario``) and the command line that runs one (``command``): its training as a module
of trainmon.demo, under torch.distributed.run for several ranks, on CUDA where a GPU is visible. The scenarios
themselves are in trainmon.demo.scenarios."""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    name: str
    expected: str  # the verdict code trainmon should name
    description: str
    args: tuple[str, ...]
    ranks: int = 1  # > 1: launched with torch.distributed.run (gloo)
    timeline: tuple[str, ...] = ()  # expected order of verdict changes, where it matters
    status: int = 0  # the training's exit status (a hung one is ended by its own watchdog)
    module: str = "trainmon.demo.train"  # the training (trainmon.demo.lit: the same, as a Lightning fit)
    thresholds: tuple[tuple[str, float], ...] = ()  # judged with these (a config file's [thresholds]), else defaults


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(scenario: Scenario, extra: list[str] | None = None) -> list[str]:
    """The command line that runs ``scenario`` (torch.distributed.run for multi-rank ones)."""
    args = [*scenario.args, *(extra or [])]
    if _cuda_visible():
        args += ["--device", "cuda"]
    if scenario.ranks > 1:
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            str(scenario.ranks),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(free_port()),
            "-m",
            "trainmon.demo.train",
            *args,
        ]
    return [sys.executable, "-m", scenario.module, *args]


def _cuda_visible() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return False
