"""Exposed GPU idle: how much of a DataLoader wait left the GPU with nothing to do (CUDA only).

Around a measured wait the training thread records CUDA event A (timing enabled) on the current
stream when the wait starts and event B when it ends. The host enqueued nothing in between, so B
completes right after whatever was queued before A: ``A.elapsed_time(B)`` is the time the GPU sat
idle because of the wait (about 0 when queued kernels covered the wait, about the wait when the
queue was empty). It is sent as a ``K_EXPOSED`` record carrying the wait's t0/t1, so the monitor
adds it to the step whose span holds the wait however late it arrives.

Rules, since this runs inside someone else's job:
- Only once the job itself has initialised CUDA (``TorchHooks.poll_cuda``, from the sender thread,
  swaps the wrapped ``__next__`` for the measuring one): the CPU-only hot path is unchanged.
- Never initialise CUDA, never synchronise, never block: a pair is resolved later, in the training
  thread at a following wait, with ``B.query()`` (non-blocking) and only then ``elapsed_time``.
  Not in the sender thread: CUDA calls from a second thread contend on the context lock.
- Skipped while the current stream is capturing a CUDA graph (an event record would be captured).
- Fail open: any exception on this path disables it for the process (logged once with
  TRAINMON_DEBUG) and the plain wait timing goes on unchanged.
- A bounded pool of reused event pairs (``POOL_PAIRS``); with all of them pending the wait is not
  measured and the skip is counted.

Cost per measured wait (expected, unmeasured here — there is no GPU on the machine this was written
on): two ``cudaEventRecord`` calls (~1-3 µs each on a real GPU, host side, nothing synchronises),
one capture check, and at a later wait one ``cudaEventQuery`` per resolved pair plus
``elapsed_time``; about 2-3 µs of Python around them. ``TRAINMON_EXPOSED_EVERY=N`` measures every
Nth wait (1, the default: every wait; 0: never); the monitor estimates the exposed share from the
measured waits only.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import Callable
from typing import Any

from trainmon.agent import _hot
from trainmon.agent._sender import debug
from trainmon.protocol import K_EXPOSED

EVERY_ENV = "TRAINMON_EXPOSED_EVERY"
POOL_PAIRS = 64  # event pairs at most; a GPU queue more than 64 measured waits behind skips waits
RESOLVE_PER_WAIT = 4  # pending pairs looked at (oldest first) per wait: cheap query() calls


def cuda_module() -> Any:
    """``torch.cuda`` if torch is imported (never imports it); tests replace ``torch.cuda`` with a fake."""
    torch = sys.modules.get("torch")
    return getattr(torch, "cuda", None) if torch is not None else None


def every_from_env() -> int:
    """Measure every Nth wait: ``TRAINMON_EXPOSED_EVERY`` (default 1; 0 or less: off)."""
    raw = os.environ.get(EVERY_ENV, "").strip()
    if not raw:
        return 1
    try:
        return max(0, int(raw))
    except ValueError:
        return 1


class ExposedProbe:
    """Event pairs around waits, resolved later without blocking. Used from the training thread only."""

    __slots__ = (
        "_countdown",
        "_free",
        "_made",
        "_on_device",
        "_on_fail",
        "_pending",
        "capturing",
        "cuda",
        "enabled",
        "every",
        "failure",
        "measured",
        "pool",
        "skipped",
    )

    def __init__(
        self,
        cuda: Any,
        every: int = 1,
        on_fail: Callable[[], None] | None = None,
        pool: int = POOL_PAIRS,
        on_device: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.cuda = cuda
        self._on_device = on_device  # told once which device the training thread uses
        self.every = max(1, every)
        self.pool = pool
        self.enabled = True
        self.measured = 0  # pairs resolved and sent
        self.skipped = 0  # waits not measured because every pair was pending
        self.capturing = 0  # waits not measured because a CUDA graph was being captured
        self.failure = ""
        self._on_fail = on_fail
        self._countdown = 1  # the first wait after CUDA came up is measured
        self._free: list[tuple[Any, Any]] = []
        self._pending: deque[tuple[Any, Any, int, int, int]] = deque()  # (A, B, tag, t0, t1), oldest first
        self._made = 0

    def begin(self) -> tuple[Any, Any] | None:
        """At the start of a wait: resolve finished pairs, then record A if this wait is measured."""
        if not self.enabled:
            return None
        if self._on_device is not None:
            self._report_device()
        try:
            if self._pending:
                self._resolve()
            self._countdown -= 1
            if self._countdown > 0:
                return None
            self._countdown = self.every
            if self.cuda.is_current_stream_capturing():
                self.capturing += 1
                return None
            if self._free:
                pair = self._free.pop()
            elif self._made < self.pool:
                event = self.cuda.Event
                pair = (event(enable_timing=True), event(enable_timing=True))
                self._made += 1
            else:
                self.skipped += 1
                return None
            pair[0].record()
            return pair
        except Exception as exc:
            self._fail(exc)
            return None

    def _report_device(self) -> None:
        """Once, from the training thread (the current device is per thread): its index and UUID, which the
        monitor matches to NVML's devices where pids cannot be matched (containers)."""
        on_device, self._on_device = self._on_device, None
        try:
            index = int(self.cuda.current_device())
            props = self.cuda.get_device_properties(index)
            ident = {"index": index, "uuid": str(getattr(props, "uuid", "") or ""), "name": str(props.name)}
            if on_device is not None:
                on_device(ident)
        except Exception as exc:
            debug(f"CUDA device identity n/a: {exc!r}")

    def end(self, pair: tuple[Any, Any], tag: int, t0: int, t1: int) -> None:
        """At the end of a measured wait: record B; the pair is resolved at a later wait."""
        try:
            pair[1].record()
            self._pending.append((pair[0], pair[1], tag, t0, t1))
        except Exception as exc:
            self._fail(exc)

    def drop(self, pair: tuple[Any, Any]) -> None:
        """The wait raised (end of epoch, a worker error): its pair goes back to the pool unused."""
        self._free.append(pair)

    def _resolve(self) -> None:
        pending = self._pending
        for _ in range(RESOLVE_PER_WAIT):
            a, b, tag, t0, t1 = pending[0]
            if not b.query():  # non-blocking; the GPU finishes pairs in order, so stop at the first one pending
                return
            ns = int(a.elapsed_time(b) * 1e6)
            pending.popleft()
            self._free.append((a, b))
            self.measured += 1
            _hot._buf.extend((K_EXPOSED | (tag & ~0xFF), t0, t1, max(0, ns)))
            if not pending:
                return

    def _fail(self, exc: BaseException) -> None:
        if not self.enabled:
            return
        self.enabled = False
        self.failure = repr(exc)
        self._pending.clear()
        self._free.clear()
        debug(f"exposed GPU idle off for this process (CUDA call failed: {exc!r}); wait timing goes on")
        if self._on_fail is not None:
            try:
                self._on_fail()
            except Exception:
                pass

    def stats(self) -> dict[str, int]:
        return {
            "exposed_measured": self.measured,
            "exposed_skipped": self.skipped,
            "exposed_capturing": self.capturing,
            "exposed_pending": len(self._pending),
        }
