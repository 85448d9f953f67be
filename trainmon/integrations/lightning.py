"""Lightning callback: ``Trainer(callbacks=[TrainmonCallback()])``."""

from __future__ import annotations

from typing import Any

import trainmon.agent as agent
from trainmon.integrations._marks import Marks

try:
    from lightning.pytorch.callbacks import Callback, Checkpoint
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback, Checkpoint  # type: ignore[assignment]  # same classes


class TrainmonCallback(Callback):
    """Marks each optimizer step, each validation run and each checkpoint save."""

    def __init__(self, address: str | None = None, *, name: str | None = None) -> None:
        super().__init__()
        self._marks = Marks(address, name)
        self._auto = False  # added by trainmon.integrations._auto: gives way to one the user passed
        self._active = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._active:
            self._marks.step(trainer.global_step)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if self._active:
            self._marks.eval_start()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._marks.eval_end()

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        agent._framework_seen("lightning", type(trainer).__module__.split(".")[0])
        if self._auto and any(cb is not self and isinstance(cb, TrainmonCallback) for cb in trainer.callbacks):
            self._active = False
            return
        # Time the whole save (serialisation and the file write) at Lightning's checkpoint I/O layer.
        try:
            io = trainer.strategy.checkpoint_io
        except Exception:
            return
        save = getattr(io, "save_checkpoint", None)
        if save is None or getattr(save, "__trainmon__", False):
            return
        marks = self._marks

        def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
            marks.checkpoint_may_start()
            try:
                return save(*args, **kwargs)
            finally:
                marks.checkpoint_done()

        save_checkpoint.__trainmon__ = True  # type: ignore[attr-defined]
        io.save_checkpoint = save_checkpoint

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._marks.eval_end()


def add_to(trainer: Any) -> bool:
    """Give ``trainer`` a TrainmonCallback unless it has one; True when one was added."""
    callbacks = getattr(trainer, "callbacks", None)
    if not isinstance(callbacks, list) or any(isinstance(cb, TrainmonCallback) for cb in callbacks):
        return False
    if type(trainer).__module__.split(".")[0] != Callback.__module__.split(".")[0]:
        return False  # a pytorch_lightning Trainer, and these are the lightning package's callbacks (or the reverse)
    cb = TrainmonCallback()
    cb._auto = True
    # Before the checkpoint callbacks, where Lightning puts the user's own.
    at = next((i for i, c in enumerate(callbacks) if isinstance(c, Checkpoint)), len(callbacks))
    callbacks.insert(at, cb)
    return True
