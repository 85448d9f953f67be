"""A CPU training that looks like a CUDA one to the agent: ``torch.cuda`` is the fake of testsupport/fake_cuda.py.

    python fake_cuda_train.py STEPS WAIT_MS GPU_MS HOST_MS [ACT_MB LEAK_KB]

Installs the fake before attaching, then each step: ``next(loader)`` (the dataset sleeps WAIT_MS, in the
main process), "launches" GPU_MS of kernels on the fake GPU (asynchronous), spends HOST_MS on the host
(sleep) and steps the optimizer. At the next wait the fake GPU still holds GPU_MS − HOST_MS of work, so
max(0, WAIT_MS − (GPU_MS − HOST_MS)) of each wait leaves it idle. Prints one JSON line: the agent's
counters and the loop's own wait, exposed and step time over the steps after the first ten.

With ACT_MB, each step also allocates ACT_MB of "activations" on the fake caching allocator and frees them at its end,
and keeps LEAK_KB more for good (a leak: outputs kept across steps); the JSON line then gives what the training read
of itself with ``torch.cuda.max_memory_allocated()`` at its end.
"""

import json
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

from testsupport.fake_cuda import MS, FakeCuda

FAKE = FakeCuda()
torch.cuda = FAKE  # before attach(): the job "has initialised CUDA"

import trainmon.agent  # noqa: E402  (after the fake, as a real job imports after torch)

ATTACHED = trainmon.agent.attach()


class Slow(Dataset):
    def __init__(self, n: int, wait_s: float) -> None:
        self.n, self.wait_s = n, wait_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.wait_s)
        return torch.zeros(4)


def main() -> None:
    steps, wait_ms, gpu_ms, host_ms = int(sys.argv[1]), *map(float, sys.argv[2:5])
    act, leak = (int(float(a) * k) for a, k in zip(sys.argv[5:7] or ("0", "0"), (1 << 20, 1 << 10), strict=True))
    memory = FAKE.memory
    memory.alloc(64 << 20)  # the model and the optimizer's state
    torch.set_num_threads(1)
    loader = DataLoader(Slow(steps, wait_ms / 1e3), batch_size=None, num_workers=0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    gpu = FAKE.gpu
    wait = exposed = total = 0.0
    it = iter(loader)
    t_prev = time.perf_counter()
    for k in range(steps):
        queued = gpu.queued_ns()
        t0 = time.perf_counter()
        batch = next(it)
        t1 = time.perf_counter()
        gpu.launch(int(gpu_ms * MS))
        memory.alloc(act + leak)
        model(batch).sum().backward()
        time.sleep(host_ms / 1e3)
        opt.step()
        opt.zero_grad()
        memory.free(act)
        t_end = time.perf_counter()
        if k >= 10:
            wait += t1 - t0
            exposed += max(0.0, (t1 - t0) - queued / 1e9)
            total += t_end - t_prev
        t_prev = t_end
    print(
        json.dumps(
            {
                "attached": ATTACHED,
                "agent": trainmon.agent.stats(),
                "wait_fraction": wait / total,
                "exposed_fraction": exposed / total,
                "max_memory_allocated": torch.cuda.max_memory_allocated(),
                "max_memory_reserved": torch.cuda.max_memory_reserved(),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
