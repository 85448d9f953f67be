"""Hugging Face ``transformers.Trainer`` callback: ``Trainer(..., callbacks=[TrainmonCallback()])``."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from trainmon.integrations._marks import Marks


class TrainmonCallback(TrainerCallback):
    """Marks each optimizer step, each evaluation and each checkpoint save (safetensors included)."""

    def __init__(self, address: str | None = None, *, name: str | None = None) -> None:
        self._marks = Marks(address, name)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._marks.step(state.global_step)
        if getattr(control, "should_save", False):
            self._marks.checkpoint_may_start()

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._marks.eval_start()  # the first evaluation batch opens the span

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._marks.eval_end()
        if getattr(control, "should_save", False):
            self._marks.checkpoint_may_start()  # the save follows the evaluation

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._marks.checkpoint_done()
