"""A real DataLoader worker that is ahead of its loop waits on its index queue (a pipe: torch's _worker_loop blocks
in ``index_queue.get(timeout=...)``); one slow per sample sleeps. The procs source tells the two apart, so a healthy
loader's idle worker is never called latency-bound."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from trainmon.sources.host.procs import ProcSource

LOOP = """
    import sys, time, torch
    from torch.utils.data import DataLoader, Dataset

    class Samples(Dataset):
        def __len__(self):
            return 1_000_000

        def __getitem__(self, i):
            if sys.argv[1] == "slow":
                time.sleep(0.03)  # a remote read's latency, per sample: 120 ms a batch, the loop asks every 50
            return torch.zeros(16)

    it = iter(DataLoader(Samples(), batch_size=4, num_workers=1))
    next(it)
    print(it._workers[0].pid, flush=True)
    while True:
        next(it)
        time.sleep(0.05)  # the model: the loop takes a batch every 50 ms
"""


@pytest.mark.parametrize(("kind", "ahead"), [("fast", True), ("slow", False)])
def test_a_worker_ahead_of_its_loop_is_seen_waiting_on_its_index_queue(kind: str, ahead: bool) -> None:
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(LOOP), kind], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        worker = int(proc.stdout.readline())
        with ProcSource(lambda: {proc.pid: "main", worker: "worker"}, hz_states=20) as src:
            src.sample()
            time.sleep(2.5)
            out = src.sample()
    finally:
        proc.kill()
        proc.wait(timeout=10)
    queue, blocked = out[f"proc.{worker}.queue_wait"], 1 - out[f"proc.{worker}.state_main_R"]
    if ahead:
        assert queue >= 0.8, out  # nearly always asleep on its index queue: ahead
    else:
        assert blocked >= 0.5 and queue <= 0.2, out  # asleep as much, in time.sleep: latency
