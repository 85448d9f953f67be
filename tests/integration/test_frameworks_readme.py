"""The framework snippets of docs/frameworks.md (``<!-- snippet: NAME -->`` before a code block) run as written, each
inside a small training of its framework that defines what the snippet uses (``model``, ``args``, ``ds``), reporting to
a real monitor: the steps are the optimizer steps and the framework is the snippet's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

from testsupport.paths import ROOT
from testsupport.procs import child_env, wait_for
from trainmon.monitor import Monitor

SNIPPET = re.compile(r"<!-- snippet: (\w+) -->\n```python\n(.*?)```", re.S)

BEFORE = {
    "transformers": """
        import json, tempfile, torch, transformers

        class Tiny(torch.nn.Module):
            def __init__(self):
                super().__init__(); self.net = torch.nn.Linear(4, 1)
            def forward(self, x, labels=None):
                return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}

        class Data(torch.utils.data.Dataset):
            def __len__(self): return 64
            def __getitem__(self, i): return {"x": torch.randn(4), "labels": torch.randn(1)}

        model, ds = Tiny(), Data()
        args = transformers.TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=20, use_cpu=True,
                                              per_device_train_batch_size=4, gradient_accumulation_steps=2,
                                              report_to=[], save_strategy="no", disable_tqdm=True)
    """,
    "lightning": """
        import json, lightning, torch
        from torch.utils.data import DataLoader, TensorDataset

        class Tiny(lightning.LightningModule):
            def __init__(self):
                super().__init__(); self.net = torch.nn.Linear(4, 1)
            def training_step(self, batch, i):
                x, y = batch; return torch.nn.functional.mse_loss(self.net(x), y)
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.01)
            def train_dataloader(self):
                return DataLoader(TensorDataset(torch.randn(256, 4), torch.randn(256, 1)), batch_size=4)

        model = Tiny()
    """,
    "accelerate": """
        import json, accelerate, torch
        from torch.utils.data import DataLoader, TensorDataset
    """,
}
AFTER = {
    "transformers": """
        trainer.train()
        print(json.dumps({"steps": trainer.state.global_step}))
    """,
    "lightning": """
        trainer.fit(model)
        print(json.dumps({"steps": trainer.global_step}))
    """,
    "accelerate": """
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = DataLoader(TensorDataset(torch.randn(160, 4), torch.randn(160, 1)), batch_size=4)
        model, opt, loader = accelerator.prepare(model, opt, loader)
        for x, y in loader:
            opt.zero_grad(); accelerator.backward(torch.nn.functional.mse_loss(model(x), y)); opt.step()
        print(json.dumps({"steps": len(loader)}))
    """,
}
MODE = {"transformers": "explicit", "lightning": "explicit", "accelerate": "opt"}


def _snippets() -> dict[str, str]:
    return dict(SNIPPET.findall((ROOT / "docs" / "frameworks.md").read_text()))


def test_the_readme_has_one_snippet_per_framework():
    assert sorted(_snippets()) == sorted(BEFORE)


@pytest.mark.parametrize("framework", sorted(BEFORE))
def test_a_readme_snippet_runs_as_written(framework, addr, tmp_path):
    pytest.importorskip(framework)
    script = textwrap.dedent(BEFORE[framework]) + _snippets()[framework] + textwrap.dedent(AFTER[framework])
    m = Monitor(addr, interval=0.5)
    m.start()
    try:
        res = subprocess.run(
            [sys.executable, "-c", script],
            env=child_env(TRAINMON_ADDR=addr),
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        steps = json.loads(res.stdout.strip().splitlines()[-1])["steps"]
        assert wait_for(lambda: any(r.ended for r in m.store.runs.values()), 15)
    finally:
        m.stop()
    (run,) = m.store.runs.values()
    assert run.framework is not None and run.framework["name"] == framework
    assert run.mode == MODE[framework] and run.steps.total == steps > 0
