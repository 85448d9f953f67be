"""Framework callbacks with the real libraries on CPU, reporting to a real monitor over a real socket."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from testsupport.procs import child_env, wait_for
from trainmon.monitor import Monitor

LIGHTNING = textwrap.dedent("""
    import torch, lightning as L
    from torch.utils.data import DataLoader, TensorDataset
    from trainmon.integrations.lightning import TrainmonCallback

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__(); self.net = torch.nn.Linear(8, 1)
        def training_step(self, batch, i):
            x, y = batch; return torch.nn.functional.mse_loss(self.net(x), y)
        def validation_step(self, batch, i):
            x, y = batch; self.log("val", torch.nn.functional.mse_loss(self.net(x), y))
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    trainer = L.Trainer(max_steps=40, val_check_interval=10, limit_val_batches=3, accumulate_grad_batches=2,
                        enable_progress_bar=False, logger=False, default_root_dir=%(root)r,
                        callbacks=[TrainmonCallback(name="lit")], enable_model_summary=False)
    trainer.fit(Tiny(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))
    trainer.save_checkpoint(%(root)r + "/final.ckpt")
    print("global_step", trainer.global_step)
""")

HF = textwrap.dedent("""
    import torch
    from transformers import Trainer, TrainingArguments
    from trainmon.integrations.huggingface import TrainmonCallback

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__(); self.net = torch.nn.Linear(8, 1)
        def forward(self, x, labels=None):
            out = self.net(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    class Data(torch.utils.data.Dataset):
        def __len__(self): return 256
        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"x": torch.randn(8, generator=g), "labels": torch.randn(1, generator=g)}

    args = TrainingArguments(output_dir=%(root)r, max_steps=30, per_device_train_batch_size=8,
                             eval_strategy="steps", eval_steps=10, save_steps=15, report_to=[], use_cpu=True,
                             logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=Tiny(), args=args, train_dataset=Data(), eval_dataset=Data(),
                      callbacks=[TrainmonCallback(name="hf")])
    trainer.train()
    print("global_step", trainer.state.global_step)
""")


def _run(script: str, addr: str, tmp_path) -> tuple[Monitor, int]:
    m = Monitor(addr, interval=0.5)
    m.start()
    try:
        res = subprocess.run(
            [sys.executable, "-c", script % {"root": str(tmp_path)}],
            env=child_env(TRAINMON_ADDR=addr),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        steps = int(res.stdout.split("global_step")[-1].split()[0])
        assert wait_for(lambda: any(r.ended for r in m.store.runs.values()), 15)
    finally:
        m.stop()
    return m, steps


def test_lightning_callback_marks_steps_eval_and_checkpoints(addr, tmp_path):
    pytest.importorskip("lightning")
    m, global_step = _run(LIGHTNING, addr, tmp_path)
    (run,) = m.store.runs.values()
    assert run.name == "lit" and run.mode == "explicit"
    assert global_step == 40 and run.steps.total == 40  # optimizer steps, not the 80 accumulated batches
    assert len([p for p in run.phases if p[2] == "eval"]) >= 4  # sanity check + every 10 steps
    assert len(run.checkpoints) >= 1 and all(c1 > c0 for c0, c1 in run.checkpoints)


def test_huggingface_callback_marks_steps_eval_and_checkpoints(addr, tmp_path):
    pytest.importorskip("transformers")
    m, global_step = _run(HF, addr, tmp_path)
    (run,) = m.store.runs.values()
    assert run.name == "hf" and run.mode == "explicit"
    assert global_step == 30 and run.steps.total == 30
    assert len([p for p in run.phases if p[2] == "eval"]) == 3  # eval_steps=10 over 30 steps
    assert len(run.checkpoints) == 2  # save_steps=15: the safetensors saves, timed by the callback
    assert all(c1 > c0 for c0, c1 in run.checkpoints)
