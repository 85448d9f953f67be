"""What the callbacks tell the agent: explicit steps, eval spans, checkpoint spans."""

from __future__ import annotations

import time

import trainmon.agent as agent
from trainmon.agent import _hot
from trainmon.protocol import K_CKPT


class Marks:
    def __init__(self, address: str | None, name: str | None) -> None:
        agent.attach(address, name=name)
        self._eval: _hot.Phase | None = None
        self._last_step = 0  # both frameworks count optimizer steps from 0
        self._checkpoint_from: int | None = None

    def step(self, global_step: int) -> None:
        """One mark per optimizer step, whatever the gradient accumulation."""
        if global_step > self._last_step:
            self._last_step = global_step
            agent.step()

    def eval_start(self) -> None:
        if self._eval is None:
            self._eval = agent.phase("eval")
            self._eval.__enter__()

    def eval_end(self) -> None:
        if self._eval is not None:
            self._eval.__exit__(None, None, None)
            self._eval = None

    def checkpoint_may_start(self) -> None:
        self._checkpoint_from = time.perf_counter_ns()

    def checkpoint_done(self) -> None:
        if self._checkpoint_from is not None and agent.attached():
            _hot.span(K_CKPT, 0, self._checkpoint_from, time.perf_counter_ns())
        self._checkpoint_from = None
