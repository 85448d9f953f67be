"""Training-side faults: loader shapes, a training killed with SIGKILL, Ctrl-C in training.

DataLoader workers under fork, spawn and forkserver are covered by
tests/integration/test_agent.py::test_dataloader_workers_stay_inert_and_are_reported.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from testsupport.paths import STEADY
from testsupport.procs import start_python, wait_for
from testsupport.reliability import Lines, note
from trainmon.monitor import Monitor


def _only_run(monitor: Monitor):
    assert wait_for(lambda: len(monitor.store.runs) == 1 and next(iter(monitor.store.runs.values())).ended, 15)
    assert len(monitor.store.runs) == 1, "a DataLoader worker opened its own connection"
    return next(iter(monitor.store.runs.values()))


LOADERS = """
import json, os, torch
from torch.utils.data import DataLoader, TensorDataset
made_before = DataLoader(list(range(40)), batch_size=4)           # made before attach(), iterated after
iter_before = iter(DataLoader(list(range(24)), batch_size=4))     # an iterator made before attach()
import trainmon.agent as a
assert a.attach()
data = TensorDataset(torch.randn(48, 8), torch.randint(0, 2, (48,)))
train = DataLoader(data, batch_size=4, num_workers=2, persistent_workers=True, multiprocessing_context="fork")
evaluate = DataLoader(list(range(16)), batch_size=4)
model = torch.nn.Linear(8, 2); opt = torch.optim.SGD(model.parameters(), lr=0.1)
steps, pids = 0, []
for epoch in range(3):
    it = iter(train)
    pids.append(sorted(w.pid for w in it._workers))
    for x, y in it:
        opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step(); steps += 1
    for _ in evaluate:
        pass
for _ in iter_before:
    pass
for _ in made_before:
    pass
print(json.dumps({"steps": steps, "pids": pids}))
"""


def test_persistent_workers_several_loaders_made_before_and_after_attach(monitor, addr):
    proc = start_python("-c", LOADERS, env={"TRAINMON_ADDR": addr})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result = json.loads(out)
    run = _only_run(monitor)
    assert result["pids"][0] == result["pids"][1] == result["pids"][2]  # persistent: the same two workers
    assert run.steps.total == result["steps"] == 36 and run.mode == "opt"
    train = run.train_loader()
    assert train.config["persistent_workers"] is True and train.config["num_workers"] == 2
    assert sorted(run.worker_pids()) == result["pids"][0]
    assert train.batches == 36 and train.iterators == 3
    by_batches = sorted((info.batches, info.config.get("attached_late", False)) for info in run.loaders.values())
    # eval 3 x 4 batches, the late iterator 6, the loader made before attach() 10, train 36
    assert by_batches == [(6, True), (10, False), (12, False), (36, False)]
    assert run.eval_wait_s > 0


def test_training_killed_with_sigkill_leaves_its_last_state_marked_lost(monitor, addr):
    proc = start_python(STEADY, "100000", "5", env={"TRAINMON_ADDR": addr})
    Lines(proc).wait_for("READY")
    assert wait_for(lambda: any(r.steps.total > 50 for r in monitor.store.runs.values()), 20)
    proc.kill()
    proc.wait(timeout=10)
    run = _only_run(monitor)
    assert run.ended == "lost" and not run.connected
    steps_at_death = run.steps.total
    time.sleep(1.0)  # a few monitor ticks over a dead process: sources, rules, snapshots
    snap = monitor.tick()
    (status,) = [s for s in snap.runs if s.pid == proc.pid]
    assert status.ended == "lost" and status.steps == steps_at_death > 50
    assert monitor._thread.is_alive() and monitor.agents._thread.is_alive()
    proc.stdout.close()
    proc.stderr.close()


INTERRUPTED = """
import json, sys, time, torch
from torch.utils.data import DataLoader
import trainmon.agent as a
a.attach()
model = torch.nn.Linear(4, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)
# Persistent workers: torch itself swallows a KeyboardInterrupt that lands in worker teardown (iterator __del__).
loader = DataLoader(torch.randn(64, 4), batch_size=4, num_workers=int(sys.argv[1]),
                    persistent_workers=int(sys.argv[1]) > 0)
steps = 0
print("READY", flush=True)
try:
    while True:
        for x in loader:
            opt.zero_grad(); model(x).sum().backward(); opt.step(); steps += 1
            time.sleep(0.002)
except KeyboardInterrupt:
    if sys.argv[2] == "raise":
        raise
print(json.dumps({"steps": steps}), flush=True)
"""


@pytest.mark.parametrize("workers, then", [(2, "catch"), (0, "raise")])
def test_ctrl_c_in_training_exits_promptly_and_quietly(monitor, addr, workers, then):
    # Ctrl-C in a terminal signals the whole foreground process group: the main process and its workers.
    # SIGINT back to its default first: a shell runs background jobs with SIGINT ignored, and Python
    # then never turns it into KeyboardInterrupt.
    proc = start_python(
        "-c",
        INTERRUPTED,
        str(workers),
        then,
        env={"TRAINMON_ADDR": addr},
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        lines = Lines(proc)
        lines.wait_for("READY")
        assert wait_for(lambda: any(r.steps.total > 20 for r in monitor.store.runs.values()), 20)
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=15)
    finally:
        if proc.poll() is None:  # never leave a training behind, whatever failed
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    exit_s = time.monotonic() - sent
    err = proc.stderr.read()
    note("ctrl_c", workers=workers, then=then, exit_s=round(exit_s, 3), returncode=proc.returncode)
    assert exit_s < 5.0  # no thread of trainmon's holds the exit up (the final flush is bounded at 1 s)
    if then == "catch":
        assert proc.returncode == 0 and err == ""
    else:
        assert proc.returncode != 0
        # Python's own traceback for the uncaught KeyboardInterrupt (it may pass through the agent's
        # wrapper of DataLoader.__next__), and nothing else: no message, no thread, no atexit noise.
        assert err.startswith("Traceback") and err.rstrip().endswith("KeyboardInterrupt")
        assert err.count("Traceback") == 1 and "Exception ignored" not in err and "Thread" not in err
        assert not [line for line in err.splitlines() if line.startswith("trainmon")]
    run = _only_run(monitor)
    assert run.ended == "exit" and run.steps.total > 20
