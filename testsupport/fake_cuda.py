"""A fake ``torch.cuda`` boundary for the exposed-GPU-idle path and the caching allocator's figures (there is no GPU
where the tests run).

The fake GPU is one device with one stream: a clock (ns, the host's ``perf_counter_ns`` unless a test
drives a ``ManualClock``) and the instant its queue runs dry. ``launch(work_ns)`` enqueues work the way an
asynchronous kernel launch does; an event recorded on the stream completes when everything queued before
it has run. So a test can say "the queue held 30 ms of work and the wait lasted 50 ms" and expect
``A.elapsed_time(B)`` to be 20 ms.

The agent looks torch up as ``sys.modules["torch"].cuda`` (``trainmon.agent._cuda.cuda_module``): install
the fake with ``install(monkeypatch, fake)`` in a test, or ``torch.cuda = fake`` in a child process before
``trainmon.agent.attach()``. Attributes the fake does not model come from the real ``torch.cuda`` (on a
CPU-only machine: not available).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

MS = 1_000_000


class ManualClock:
    """A clock a test advances by hand (ns)."""

    def __init__(self, start: int = 1_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


class FakeGpu:
    """One device, one stream: its clock and when the work queued so far will have run."""

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.clock = clock
        self.free_at = 0  # the instant the queue runs dry
        self.busy_ns = 0  # work launched in all

    def launch(self, work_ns: int) -> None:
        """Enqueue ``work_ns`` of kernels (asynchronous: returns at once)."""
        self.free_at = max(self.clock(), self.free_at) + work_ns
        self.busy_ns += work_ns

    def queued_ns(self) -> int:
        return max(0, self.free_at - self.clock())


class FakeAllocator:
    """The caching allocator's counters, as ``torch.cuda.memory_stats`` gives them: bytes allocated now and at their
    peak, and the bytes reserved from the device (grown in ``BLOCK`` steps, never given back, as the cache keeps
    them). ``alloc``/``free`` stand for tensors made and dropped by the training."""

    BLOCK = 2 * 1024 * 1024

    def __init__(self) -> None:
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0

    def alloc(self, nbytes: int) -> None:
        self.allocated += nbytes
        while self.reserved < self.allocated:
            self.reserved += self.BLOCK
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def free(self, nbytes: int) -> None:
        self.allocated = max(0, self.allocated - nbytes)

    def reset_peaks(self) -> None:
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved


class FakeEvent:
    def __init__(self, cuda: FakeCuda, enable_timing: bool = False, **_: Any) -> None:
        self.cuda = cuda
        self.timing = enable_timing
        self.at: int | None = None  # when the event completes on the fake GPU

    def record(self, stream: Any = None) -> None:
        self.cuda.calls["record"] += 1
        if self.cuda.fail_record:
            raise RuntimeError("CUDA error: an illegal memory access was encountered (fake)")
        gpu = self.cuda.gpu
        self.at = max(gpu.clock(), gpu.free_at)  # completes once the work queued before it has run

    def query(self) -> bool:
        self.cuda.calls["query"] += 1
        return self.at is not None and self.cuda.gpu.clock() >= self.at

    def elapsed_time(self, end: FakeEvent) -> float:
        self.cuda.calls["elapsed_time"] += 1
        if not (self.timing and end.timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'")
        if self.at is None or end.at is None or not (self.query() and end.query()):
            raise RuntimeError("CUDA error: device not ready")  # what the real call says before completion
        return (end.at - self.at) / 1e6

    def synchronize(self) -> None:
        raise AssertionError("the agent must never block on an event")

    def wait(self, stream: Any = None) -> None:
        raise AssertionError("the agent must never make a stream wait")


class FakeCuda:
    """Stands for ``torch.cuda``: initialised (by the job) or not, capturing a graph or not."""

    def __init__(self, gpu: FakeGpu | None = None, initialized: bool = True) -> None:
        self.gpu = gpu or FakeGpu()
        self.initialized = initialized
        self.capturing = False
        self.fail_record = False
        self.calls = {"record": 0, "query": 0, "elapsed_time": 0, "events": 0}
        self.memory_reads = 0  # memory_stats_as_nested_dict calls
        self.memory = FakeAllocator()
        self.total_memory = 80 * 1024**3
        torch = sys.modules.get("torch")
        real = getattr(torch, "cuda", None) if torch is not None else None
        self._real = real if not isinstance(real, FakeCuda) else real._real

    def Event(self, enable_timing: bool = False, **kwargs: Any) -> FakeEvent:
        self.calls["events"] += 1
        return FakeEvent(self, enable_timing=enable_timing, **kwargs)

    def is_initialized(self) -> bool:
        return self.initialized

    def is_current_stream_capturing(self) -> bool:
        return self.capturing

    device = 0  # the training thread's current device
    uuid = "6b1f0c2e-8d55-7a5b-0e4c-1d2a3b4c5d6e"  # torch's form: NVML's "GPU-…" without the prefix

    def current_device(self) -> int:
        return self.device

    def get_device_properties(self, device: int) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(name="Fake H100", uuid=self.uuid, total_memory=self.total_memory)

    def device_count(self) -> int:
        return 1

    # The caching allocator's figures (torch.cuda.memory): host-side counters, no CUDA call.

    def memory_stats_as_nested_dict(self, device: Any = None) -> dict[str, Any]:
        self.memory_reads += 1
        if not self.initialized:
            return {}
        m = self.memory
        return {
            "allocated_bytes": {"all": {"current": m.allocated, "peak": m.peak_allocated}},
            "reserved_bytes": {"all": {"current": m.reserved, "peak": m.peak_reserved}},
        }

    def max_memory_allocated(self, device: Any = None) -> int:
        return self.memory.peak_allocated

    def max_memory_reserved(self, device: Any = None) -> int:
        return self.memory.peak_reserved

    def memory_allocated(self, device: Any = None) -> int:
        return self.memory.allocated

    def memory_reserved(self, device: Any = None) -> int:
        return self.memory.reserved

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self.memory.reset_peaks()

    def synchronize(self, device: Any = None) -> None:
        raise AssertionError("the agent must never synchronise")

    def init(self) -> None:
        raise AssertionError("the agent must never initialise CUDA")

    def __getattr__(self, name: str) -> Any:
        if self._real is None:
            raise AttributeError(name)
        return getattr(self._real, name)


def install(monkeypatch: Any, fake: FakeCuda) -> FakeCuda:
    """Make ``torch.cuda`` the fake for one test (the real torch must be imported)."""
    import torch

    monkeypatch.setattr(torch, "cuda", fake)
    return fake
