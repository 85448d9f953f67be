"""The agent's communication timing (trainmon.agent._dist) in real gloo process groups: two ranks in
subprocesses, real DistributedDataParallel and fully_shard, the records read back from the agent's buffer."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from testsupport.procs import child_env

DELAY_MS = 60  # rank 1 sleeps this long before each backward: rank 0 waits that long in DDP's synchronisation

RANK_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import torch, torch.distributed as dist
    from torch import nn
    from trainmon import protocol as P
    from trainmon.agent import _hot
    from trainmon.agent._dist import DistHooks

    init, rank, out, delay = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]) / 1e3
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    originals = (dist.all_reduce, dist.distributed_c10d.Work.wait, nn.parallel.DistributedDataParallel.forward)
    hooks = DistHooks()
    hooks.poll()
    patched = all(hasattr(f, "__trainmon_original__") for f in
                  (dist.all_reduce, dist.distributed_c10d.all_reduce, dist.distributed_c10d.Work.wait,
                   nn.parallel.DistributedDataParallel.forward))

    class Net(nn.Module):  # a dict output, as many models return
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(64, 256), nn.Linear(256, 4)

        def forward(self, x):
            return {"logits": self.b(torch.relu(self.a(x))), "aux": None}

    model = nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    _hot.swap_buffer()

    def records():
        buf = _hot.swap_buffer()
        return [(P.COMM_OPS[buf[i] >> 8], (buf[i + 2] - buf[i + 1]) / 1e6) for i in range(0, len(buf), 4)
                if buf[i] & 0xFF == P.K_COMM]

    result = {"patched": patched}
    for _ in range(5):
        loss = model(torch.randn(8, 64))["logits"].sum()
        if rank == 1:
            time.sleep(delay)
        loss.backward()
        opt.step()
    result["ddp"] = records()
    with model.no_sync():
        model(torch.randn(8, 64))["logits"].sum().backward()
    result["no_sync"] = records()
    t = torch.ones(4)
    dist.all_reduce(t)
    result["sync"] = records()
    if rank == 1:
        time.sleep(delay)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    result["async"] = records()
    gathered = [None, None]
    dist.all_gather_object(gathered, {"rank": rank})
    result["object"] = records()
    result["gathered"] = gathered
    from torch.distributed.fsdp import fully_shard

    sharded = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    for layer in (sharded[0], sharded[2], sharded):
        fully_shard(layer)
    sharded(torch.randn(8, 64)).sum().backward()
    result["fsdp"] = records()
    hooks.uninstall()
    now = (dist.all_reduce, dist.distributed_c10d.Work.wait, nn.parallel.DistributedDataParallel.forward)
    result["restored"] = all(a is b for a, b in zip(now, originals))
    hooks.poll()  # after uninstall: never patches again
    result["repatched"] = hasattr(dist.all_reduce, "__trainmon_original__")
    dist.all_reduce(t)
    result["after"] = records()
    dist.destroy_process_group()
    json.dump(result, open(out, "w"))
    """
)


def test_two_gloo_ranks_time_ddp_synchronisation_and_collectives(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    init = f"file://{tmp_path / 'rendezvous'}"
    outs = [tmp_path / f"rank{r}.json" for r in (0, 1)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), init, str(r), str(outs[r]), str(DELAY_MS)],
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-3000:]
    r0, r1 = (json.loads(o.read_text()) for o in outs)
    for r in (r0, r1):
        assert r["patched"] and r["restored"] and not r["repatched"]
        assert [op for op, _ in r["ddp"]] == ["ddp_grad_sync"] * 5, r["ddp"]
        assert r["no_sync"] == []  # no synchronisation under no_sync(): nothing timed
        assert [op for op, _ in r["sync"]] == ["all_reduce"]  # its own Work.wait is inside, not counted again
        assert [op for op, _ in r["async"]] == ["all_reduce", "wait"]
        assert [op for op, _ in r["object"]] == ["all_gather"]  # the collectives it makes are inside it
        assert r["gathered"] == [{"rank": 0}, {"rank": 1}]
        assert r["after"] == []
        fsdp = [op for op, _ in r["fsdp"]]  # fully_shard: parameters gathered for forward and backward
        assert fsdp.count("all_gather") >= 2 and fsdp.count("reduce_scatter") >= 1, fsdp
    # Rank 0 is blocked in DDP's synchronisation while rank 1 sleeps; rank 1 is not.
    waits0 = sorted(ms for _, ms in r0["ddp"])
    waits1 = sorted(ms for _, ms in r1["ddp"])
    assert waits0[2] >= 0.7 * DELAY_MS, waits0  # medians: one step held up by a preempted rank does not decide
    assert waits1[2] < 0.5 * DELAY_MS, waits1
    # The asynchronous all-reduce returns at once; rank 0 waits for rank 1 in Work.wait.
    assert r0["async"][0][1] < 0.5 * DELAY_MS and r0["async"][1][1] >= 0.7 * DELAY_MS, r0["async"]


WIRING_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    import torch, torch.distributed as dist
    import trainmon.agent

    assert trainmon.agent.attach(os.path.join(sys.argv[1], "nobody-listens.sock"))
    time.sleep(0.5)
    before = hasattr(dist.all_reduce, "__trainmon_original__")  # no process group yet: nothing patched
    dist.init_process_group("gloo", init_method="file://" + os.path.join(sys.argv[1], "rdv"), rank=0, world_size=1)
    deadline = time.monotonic() + 10
    while not hasattr(dist.all_reduce, "__trainmon_original__") and time.monotonic() < deadline:
        time.sleep(0.05)
    after = hasattr(dist.all_reduce, "__trainmon_original__")
    t = torch.ones(2)
    dist.all_reduce(t)
    trainmon.agent.detach()
    detached = hasattr(dist.all_reduce, "__trainmon_original__")
    dist.destroy_process_group()
    print(json.dumps({"before": before, "after": after, "detached": detached, "value": t.tolist()}))
    """
)


def test_attach_patches_once_the_job_has_a_process_group_and_detach_restores(tmp_path):
    res = subprocess.run(
        [sys.executable, "-c", WIRING_SCRIPT, str(tmp_path)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out == {"before": False, "after": True, "detached": False, "value": [1.0, 1.0]}


def test_importing_the_agent_loads_no_distributed_module():
    code = "import sys, trainmon.agent; print('trainmon.agent._dist' in sys.modules, 'torch' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, check=True)
    assert res.stdout.split() == ["False", "False"]
