"""The demo training as a plain Lightning fit: ``python -m trainmon.demo.lit`` with trainmon.demo.train's options.

A LightningModule, a train and a validation DataLoader over the demo's dataset (the same workers and
per-sample costs), ``Trainer.fit`` with ``TrainmonCallback``: validation runs inside epochs every
``--eval-every`` steps (``--eval-batches`` batches of a validation set as large as an epoch), and workers are
started again by every epoch and every validation run unless ``--persistent``. With ``--zero-code`` the fit runs
with no trainmon in its code, attached through the environment as ``trainmon run -- python -m trainmon.demo.lit``
attaches it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from datetime import timedelta

from trainmon.demo.train import build_dataset, epoch_size, parse, with_worker_setup

ZERO_CODE = "--zero-code"  # run the fit in a child attached through the environment, as `trainmon run` does


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if ZERO_CODE in argv:
        return zero_code([a for a in argv if a != ZERO_CODE])
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


def zero_code(argv: list[str]) -> int:
    """The same fit with no trainmon in its code, attached the way ``trainmon run`` attaches a command: a child
    interpreter whose ``sitecustomize`` (``trainmon.launch.agent_env``) attaches the agent to ``TRAINMON_ADDR``
    at start-up; the agent then gives the Trainer its callback when the Trainer is made."""
    from trainmon.launch import agent_env

    address = os.environ.get("TRAINMON_ADDR")
    if not address:
        print("trainmon.demo.lit: --zero-code needs TRAINMON_ADDR (the monitor's address)", file=sys.stderr)
        return 2
    with agent_env(address) as env:
        return subprocess.call([sys.executable, "-m", "trainmon.demo.lit", "--no-attach", *argv], env=env)


if __name__ == "__main__":
    sys.exit(main())
