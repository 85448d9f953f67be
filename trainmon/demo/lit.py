"""The demo training as a plain Lightning fit: ``python -m trainmon.demo.lit`` with trainmon.demo.train's options.

A LightningModule, a train and a validation DataLoader over the demo's dataset (the same workers and
per-sample costs), ``Trainer.fit`` with ``TrainmonCallback``: validation runs inside epochs every
``--eval-every`` steps (``--eval-batches`` batches of a validation set as large as an epoch), and workers are
started again by every epoch and every validation run unless ``--persistent``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from datetime import timedelta

from trainmon.demo.train import build_dataset, epoch_size, parse, with_worker_setup


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import lightning as L
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                nn.Linear(args.features, args.width),
                nn.ReLU(),
                nn.Linear(args.width, args.width),
                nn.ReLU(),
                nn.Linear(args.width, 10),
            )
            self.loss = nn.CrossEntropyLoss()

        def training_step(self, batch, batch_idx: int):
            x, y = batch
            return self.loss(self.net(x), y)

        def validation_step(self, batch, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", self.loss(self.net(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    def loader(size: int, shuffle: bool) -> DataLoader:
        dataset = with_worker_setup(build_dataset(args, size), args.worker_setup_ms, args.workers)
        return DataLoader(
            dataset,
            batch_size=args.batch_size,
            shuffle=shuffle,
            num_workers=args.workers,
            persistent_workers=args.persistent and args.workers > 0,
            pin_memory=args.pin_memory,
            multiprocessing_context=args.mp_context if args.workers > 0 else None,
        )

    callbacks: list[L.Callback] = []
    if not args.no_attach:
        from trainmon.integrations.lightning import TrainmonCallback

        callbacks.append(TrainmonCallback(name=os.environ.get("TRAINMON_DEMO_NAME") or "demo-lightning"))
    eval_batches = args.eval_batches if args.eval_every else 0
    trainer = L.Trainer(
        accelerator="gpu" if args.device.startswith("cuda") else "cpu",
        devices=1,
        max_epochs=args.epochs or -1,
        max_steps=-1 if args.seconds or args.epochs else args.steps,
        max_time=timedelta(seconds=args.seconds) if args.seconds else None,
        val_check_interval=args.eval_every or None,
        check_val_every_n_epoch=None if args.eval_every else 1,
        limit_val_batches=eval_batches,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        default_root_dir=tempfile.gettempdir(),
        callbacks=callbacks,
    )
    # A validation set as large as an epoch, of which each validation run reads --eval-batches batches.
    val = loader(max(eval_batches * args.batch_size, epoch_size(args)), shuffle=False)
    trainer.fit(Model(), loader(epoch_size(args), shuffle=True), val if eval_batches else None)
    print("global_step", trainer.global_step, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
