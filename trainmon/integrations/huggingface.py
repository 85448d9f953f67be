"""Hugging Face ``transformers.Trainer`` callback: ``Trainer(..., callbacks=[TrainmonCallback()])``.

Under ``trainmon run`` (or with ``trainmon.agent.attach()`` called before the Trainer is made) every Trainer gets
one without asking (``trainmon.integrations._auto``); one passed by the user takes its place.
"""

from __future__ import annotations

import weakref
from typing import Any

from transformers import TrainerCallback

import trainmon.agent as agent
from trainmon.integrations._marks import Marks


class TrainmonCallback(TrainerCallback):
    """Marks each optimizer step, each evaluation and each checkpoint save (safetensors included)."""

    def __init__(self, address: str | None = None, *, name: str | None = None) -> None:
        self._marks = Marks(address, name)
        self._active = True
        self._auto_handler: Any = None  # added automatically: a weak reference to its trainer's callback handler

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        agent._framework_seen("transformers", "transformers")
        handler = self._auto_handler() if self._auto_handler is not None else None
        if handler is not None and any(
            cb is not self and isinstance(cb, TrainmonCallback) for cb in getattr(handler, "callbacks", ())
        ):
            self._active = False  # the user's own callback marks this trainer's steps

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._active:
            return
        self._marks.step(state.global_step)
        if getattr(control, "should_save", False):
            self._marks.checkpoint_may_start()

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._active:
            self._marks.eval_start()  # the first evaluation batch opens the span

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._active:
            return
        self._marks.eval_end()
        if getattr(control, "should_save", False):
            self._marks.checkpoint_may_start()  # the save follows the evaluation

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._active:
            self._marks.checkpoint_done()


def add_to(trainer: Any) -> bool:
    """Give ``trainer`` a TrainmonCallback unless it has one; True when one was added."""
    handler = getattr(trainer, "callback_handler", None)
    if handler is None or any(isinstance(cb, TrainmonCallback) for cb in handler.callbacks):
        return False
    cb = TrainmonCallback()
    cb._auto_handler = weakref.ref(handler)
    trainer.add_callback(cb)
    return True
