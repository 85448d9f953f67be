"""Lightning callback: ``Trainer(callbacks=[TrainmonCallback()])``."""

from __future__ import annotations

from typing import Any

from trainmon.integrations._marks import Marks

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback  # type: ignore[assignment]  # same class, other package


class TrainmonCallback(Callback):
    """Marks each optimizer step, each validation run and each checkpoint save."""

    def __init__(self, address: str | None = None, *, name: str | None = None) -> None:
        super().__init__()
        self._marks = Marks(address, name)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._marks.step(trainer.global_step)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._marks.eval_start()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._marks.eval_end()

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
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
