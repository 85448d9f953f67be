"""trainmon's callback given to each transformers and Lightning trainer by the agent itself (agent/_frameworks.py,
integrations/_auto.py): once, never beside the user's own, not at all with TRAINMON_NO_AUTOCALLBACK=1, whether the
framework was imported before or after attach(); and the agent never imports a framework itself.

Fresh interpreters (the patches and sys.modules are process-wide), real transformers and Lightning, no training."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from testsupport.procs import child_env

FRAMEWORK_PACKAGES = ("transformers", "lightning", "pytorch_lightning", "accelerate")

HF = textwrap.dedent("""
    import json, os, sys, tempfile, torch
    import trainmon.agent as agent
    from trainmon.agent import _frameworks
    if sys.argv[1] == "before":
        from transformers import Trainer, TrainingArguments
    agent.attach("/nonexistent/trainmon.sock")
    from transformers import Trainer, TrainingArguments
    from trainmon.integrations.huggingface import TrainmonCallback

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__(); self.net = torch.nn.Linear(4, 1)
        def forward(self, x, labels=None):
            return {"loss": self.net(x).pow(2).mean()}

    def ours(trainer):
        return [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, TrainmonCallback)]

    args = TrainingArguments(output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[])
    out = {}
    out["auto"] = len(ours(Trainer(model=Tiny(), args=args)))
    mine = TrainmonCallback()
    passed = ours(Trainer(model=Tiny(), args=args, callbacks=[mine]))
    out["passed"] = [cb is mine for cb in passed]
    late = Trainer(model=Tiny(), args=args)
    late.add_callback(TrainmonCallback())  # the user's own, added after the Trainer was made
    late.callback_handler.on_train_begin(args, late.state, late.control)
    out["late"] = [cb._active for cb in ours(late)]
    out["framework"] = agent._agent.frameworks.current
    agent.detach()
    out["restored"] = not hasattr(Trainer.__init__, "__trainmon_original__")
    out["after_detach"] = len(ours(Trainer(model=Tiny(), args=args)))
    print(json.dumps(out))
""")

LIGHTNING = textwrap.dedent("""
    import json, sys, tempfile
    import trainmon.agent as agent
    if sys.argv[1] == "before":
        import lightning
    agent.attach("/nonexistent/trainmon.sock")
    import lightning as L
    from lightning.pytorch.callbacks import Checkpoint
    from trainmon.integrations.lightning import TrainmonCallback

    def kw():
        return dict(logger=False, enable_progress_bar=False, default_root_dir=tempfile.mkdtemp())

    out = {}
    t = L.Trainer(**kw())
    names = [type(cb).__name__ for cb in t.callbacks]
    out["auto"] = names.count("TrainmonCallback")
    out["before_checkpoint"] = names.index("TrainmonCallback") < min(
        i for i, cb in enumerate(t.callbacks) if isinstance(cb, Checkpoint)
    )
    mine = TrainmonCallback()
    passed = L.Trainer(callbacks=[mine], **kw()).callbacks
    out["passed"] = [cb is mine for cb in passed if isinstance(cb, TrainmonCallback)]
    out["framework"] = agent._agent.frameworks.current
    print(json.dumps(out))
""")


def _run(script: str, order: str, **env: str) -> dict:
    res = subprocess.run(
        [sys.executable, "-c", script, order], env=child_env(**env), capture_output=True, text=True, timeout=180
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("order", ["before", "after"])
def test_each_transformers_trainer_gets_one_callback(order):
    pytest.importorskip("transformers")
    out = _run(HF, order)
    assert out["auto"] == 1
    assert out["passed"] == [True]  # the user's own, and no second one
    assert out["late"] == [False, True]  # the automatic one gives way to one added later
    assert out["framework"] == "transformers"  # not the accelerate the Trainer makes inside
    assert out["restored"] and out["after_detach"] == 0


def test_no_callback_with_the_opt_out_but_the_framework_is_still_told():
    pytest.importorskip("transformers")
    out = _run(HF, "after", TRAINMON_NO_AUTOCALLBACK="1")
    assert out["auto"] == 0 and out["passed"] == [True] and out["framework"] == "transformers"


@pytest.mark.parametrize("order", ["before", "after"])
def test_each_lightning_trainer_gets_one_callback_before_the_checkpoints(order):
    pytest.importorskip("lightning")
    out = _run(LIGHTNING, order)
    assert out["auto"] == 1 and out["before_checkpoint"]
    assert out["passed"] == [True]
    assert out["framework"] == "lightning"


def test_the_agent_imports_no_framework():
    code = (
        "import sys, json, trainmon.agent as a; a.attach('/nonexistent/x.sock'); import torch; "
        "from torch.utils.data import DataLoader; list(DataLoader(list(range(8)), batch_size=4)); "
        "print(json.dumps(sorted(sys.modules)))"
    )
    res = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    mods = json.loads(res.stdout)
    assert not [m for m in mods if m.split(".")[0] in FRAMEWORK_PACKAGES]
    assert "trainmon.integrations" not in mods
