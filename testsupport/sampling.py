"""Driving the agent's in-process stack sampler (trainmon/agent/_frames.py) by hand in tests."""

from __future__ import annotations

import time
from typing import Any


def sample_both_sides(sampler: Any, least: int = 30, tries: int = 400, pause_s: float = 0.002) -> None:
    """Samples until ``least`` fell inside the model and ``least`` outside it, or ``tries`` were taken."""
    for _ in range(tries):
        sampler.sample_once()
        if sampler.samples >= least and sampler.model_samples >= least:
            return
        time.sleep(pause_s)
