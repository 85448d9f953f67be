"""The agent started while the training is in the middle of ``import torch`` (what ``trainmon attach`` does when it
lands there: torch is in sys.modules, still initialising, and no import of it is to come) still patches torch once
the import is done, and the run gets its steps. A real training and a real monitor."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from testsupport.procs import child_env

SCRIPT = textwrap.dedent(
    """
    import sys, threading, time

    def attach_mid_import():
        while "torch" not in sys.modules:
            time.sleep(0.0005)
        import trainmon.agent
        mid = getattr(sys.modules["torch"].__spec__, "_initializing", False)
        trainmon.agent.attach(sys.argv[1])
        print("attached mid-import" if mid else "attached after the import", flush=True)

    t = threading.Thread(target=attach_mid_import)
    t.start()
    import torch
    from torch.utils.data import DataLoader
    t.join()
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, x in enumerate(DataLoader(torch.randn(640, 4), batch_size=8)):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        time.sleep(0.01)
    time.sleep(1.5)  # the sender's last batch
    print("steps", step + 1, flush=True)
    """
)


def test_an_agent_started_during_import_torch_patches_torch_once_it_is_imported(monitor, addr):
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT, addr], env=child_env(), capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert "attached mid-import" in res.stdout, res.stdout  # the case this test is about did happen
    steps = int(res.stdout.split("steps")[-1])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(r.steps.total >= steps for r in monitor.store.runs.values()):
        time.sleep(0.1)
    (run,) = monitor.store.runs.values()
    assert run.steps.total == steps and run.mode == "opt", (run.steps.total, steps, run.mode)
