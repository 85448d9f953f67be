"""Batch sources that are not DataLoaders, end to end: nanoGPT-style trainings (trainmon.demo.gpt) under a real
``trainmon record --json``, held against what each training measures of its own batch time. The gpt-get-batch,
gpt-pretokenized and gpt-loader scenarios are held so in tests/integration/test_scenarios.py; here, a torchdata
loader and a loop whose wait nothing measures.

The live verdict is the tick stream's headline (what the screen's banner shows); the report is ``trainmon report``
of the recording."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testsupport.procs import (
    attach_cli,
    child_env,
    force_stop,
    report_json,
    start_recorder,
    stop,
    trainmon_cmd,
    wait_for,
)
from trainmon.demo.scenarios import SCENARIOS, command

TOLERANCE = 0.07  # the report's data wait against the script's own batch share


def _record(addr: str, tmp_path: Path, cmd: list[str], name: str) -> tuple[dict, list[dict], str]:
    """(the report, the live ticks, the training's stdout) of ``cmd`` run under a recorder."""
    rec = str(tmp_path / f"{name}.tmrec")
    ticks_path = tmp_path / f"{name}.ticks"
    with open(ticks_path, "w") as ticks_out:  # a file, not a pipe: nothing reads the ticks while it runs
        recorder = subprocess.Popen(
            trainmon_cmd("record", "--output", rec, "--listen", addr, "--json", "--interval", "0.5"),
            env=child_env(),
            stdout=ticks_out,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        assert wait_for(lambda: os.path.exists(addr) or recorder.poll() is not None, 20), "recorder did not start"
        res = subprocess.run(cmd, env=child_env(TRAINMON_ADDR=addr), capture_output=True, text=True, timeout=240)
        assert res.returncode == 0, res.stderr[-3000:]
        time.sleep(1.0)  # the agent's last records are read before the recorder stops
    finally:
        stop(recorder)
    ticks = [json.loads(line) for line in ticks_path.read_text().splitlines() if line.startswith("{")]
    return report_json(rec), ticks, res.stdout


def _scenario(name: str, addr: str, tmp_path: Path, *extra: str) -> tuple[dict, dict, list[dict], str]:
    own = tmp_path / f"{name}.self.json"
    cmd = command(SCENARIOS[name], ["--self-report", str(own), *extra])
    report, ticks, stdout = _record(addr, tmp_path, cmd, name)
    return report, json.loads(own.read_text()), ticks, stdout


def test_a_torchdata_loader_is_timed_as_a_loader(addr, tmp_path):
    pytest.importorskip("torchdata.nodes")
    report, own, _, _ = _scenario("gpt-loader", addr, tmp_path, "--source", "torchdata", "--seconds", "10")
    verdict = report["verdict"]
    assert verdict["code"] == "input.main_process", f"{verdict['code']}: {verdict['summary']} | self {own}"
    (run,) = report["runs"]
    assert run["data_wait_measured_as"] == "torchdata" and verdict["evidence"]["source_workers"] == 0, run
    assert abs(run["data_wait_fraction"] - own["batch_fraction"]) <= TOLERANCE, (run["data_wait_fraction"], own)


LOOP = """
import time, trainmon.agent
trainmon.agent.attach()
import torch
w = torch.zeros(64, 64)
end = time.monotonic() + 6
while time.monotonic() < end:
    x = torch.randn(64, 64) @ w  # a step with no loader and no optimizer: nothing measures its data wait
    time.sleep(0.02)
    trainmon.agent.step()
"""


def test_a_wait_nothing_measures_is_null_and_na(addr, tmp_path):
    report, ticks, _ = _record(addr, tmp_path, [sys.executable, "-c", LOOP], "unmeasured")
    (run,) = report["runs"]
    assert run["steps"] > 50 and run["data_wait_fraction"] is None and run["data_wait_measured_as"] is None, run
    assert ticks and all(r["data_wait_fraction"] is None for t in ticks for r in t["runs"] if r["steps"])
    text = subprocess.run(
        trainmon_cmd("report", str(tmp_path / "unmeasured.tmrec")),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    row = next(line for line in text.splitlines() if line.startswith("pid ") and "python -c" in line)
    assert " n/a " in row and "0.0%" not in row, row


FAST = """
import json, sys, time, trainmon.agent
trainmon.agent.attach()
import torch
torch.set_num_threads(1)
class Net(torch.nn.Module):  # returns its loss, as nanoGPT's GPT does
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32))

    def forward(self, x):
        return self.body(x).square().mean()

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
corpus = [(i * 2654435761) % 50257 for i in range(1 << 14)]

def get_batch(step):  # tokens looked up and scaled in Python, as a small hand-written pipeline does
    base = (step * 613) % (len(corpus) - 64)
    return torch.tensor([[corpus[base + i + j] % 97 / 97 for j in range(32)] for i in range(6)])

batch_s, step, t0 = 0.0, 0, time.perf_counter()
end = time.monotonic() + 9
while time.monotonic() < end:
    b0 = time.perf_counter()
    x = get_batch(step)
    batch_s += time.perf_counter() - b0
    model(x).backward()
    opt.step()
    opt.zero_grad()
    step += 1
wall = time.perf_counter() - t0
json.dump({"batch_fraction": batch_s / wall, "steps": step, "step_us": wall / step * 1e6}, open(sys.argv[1], "w"))
"""


def test_a_fast_loop_is_timed_in_bursts_and_its_wait_holds_against_its_own(addr, tmp_path):
    """Steps of a few hundred microseconds: the agent times the model in bursts (agent/_outside.py) and the steps
    between them take the measured steps' share; the report's wait holds against the script's own."""
    own_path = tmp_path / "fast.self.json"
    report, ticks, _ = _record(addr, tmp_path, [sys.executable, "-c", FAST, str(own_path)], "fast")
    own = json.loads(own_path.read_text())
    (run,) = report["runs"]
    assert own["step_us"] < 2000, own  # fast enough that measuring every step would cost more than the budget
    counted = run["outside_model_steps"]
    assert run["data_wait_measured_as"] == "outside_model" and counted is not None, run
    assert counted["measured"] >= 100 and counted["estimated"] > 3 * counted["measured"], (counted, own)
    assert abs(run["data_wait_fraction"] - own["batch_fraction"]) <= TOLERANCE, (run["data_wait_fraction"], own)
    live = [r["data_wait_fraction"] for t in ticks[-4:] for r in t["runs"] if r["steps"]]
    assert live and all(w is not None and abs(w - own["batch_fraction"]) <= 0.15 for w in live), (live, own)


PLAIN_FAST = FAST.replace(
    "import json, sys, time, trainmon.agent\ntrainmon.agent.attach()\n", "import json, sys, time\n"
).replace("end = time.monotonic() + 9", "end = time.monotonic() + 16\nprint('READY', flush=True)")


def test_a_fast_loop_attached_late_names_get_batch_by_time(addr, tmp_path):
    """A fast nanoGPT-style loop (a pure-Python get_batch of about half its step) started without trainmon and given
    the agent with ``trainmon attach``: the data wait holds against the script's own, and get_batch is named from
    py-spy's time-weighted samples (the agent's in-process sampler needs the GIL and under-counts pure Python)."""
    assert "trainmon" not in PLAIN_FAST
    own_path = tmp_path / "late.self.json"
    rec = str(tmp_path / "late.tmrec")
    recorder = start_recorder(addr, rec, "--interval", "0.5")
    training = subprocess.Popen(
        [sys.executable, "-c", PLAIN_FAST, str(own_path)], env=child_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert training.stdout is not None and training.stdout.readline().strip() == "READY"
        res = attach_cli(training.pid, addr)
        assert res.returncode == 0, res.stdout + res.stderr
        assert training.wait(timeout=60) == 0
        time.sleep(1.0)
    finally:
        force_stop(training)
        stop(recorder)
    own = json.loads(own_path.read_text())
    report = report_json(rec)
    verdict, (run,) = report["verdict"], report["runs"]
    detail = f"{verdict['code']}: {verdict['summary']} | {run.get('outside_samples')} | self {own}"
    print(f"figures late-attached: trainmon wait {run['data_wait_fraction']:.3f}, {verdict['code']} | script {own}")
    assert verdict["code"] == "input.main_process", detail
    ev = verdict["evidence"]
    assert ev["measured_as"] == "outside_model" and ev["batch_function"].endswith("get_batch"), detail
    assert ev.get("samples_source") == "py-spy", detail
    assert abs(run["data_wait_fraction"] - own["batch_fraction"]) <= TOLERANCE, (run["data_wait_fraction"], own)
