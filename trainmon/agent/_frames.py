"""What a loop with no loader does outside the model: stack samples of its training thread, taken by the agent itself.

While the model is timed (``_outside.py``), a daemon thread reads the training thread's stack about 20 times a
second at exponentially distributed moments (so it cannot alias with a periodic loop), with
``sys._current_frames()``: no ptrace, no py-spy, a few microseconds each. Each sample is either inside the model (one
of the agent's wrappers is on the stack during a burst; between bursts, one of the model's own code objects: the
roots' forwards, the optimizers' methods, ``backward``) or outside it. The frames that call the model (the loop:
``<module>``, ``main``, ``train_step``) are learnt from the samples inside it; an outside sample is put to the first
frame below those, from the outermost in (``get_batch``, ``log_metrics``, ``estimate_loss``), or, when every frame is
one of them, to the loop's own code. Every 2 s the agent sends the functions that hold most outside samples as
``INFO {"outside": ...}`` (see docs/protocol.md); the monitor says from them what the time is spent in.

Reading another thread's frames needs the GIL: a sample lands when the training thread lets it go (at once in a
call that releases it, within the 5 ms switch interval in pure Python). Samples are attributed, not timed: the time
itself is the ``K_OUTSIDE`` records'.
"""

from __future__ import annotations

import collections
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType
from typing import Any

RATE_HZ = 20.0
SEND_S = 2.0
MAX_DEPTH = 48
MAX_CHAINS = 2048  # distinct outside stacks kept; past it the rarest half is dropped
MAX_LOOP = 4096
MAX_HOT = 8
MAX_IDENTITIES = 64


def _where(code: CodeType) -> tuple[str, str, int]:
    """(function, file as its last two path parts, first line)."""
    name = getattr(code, "co_qualname", code.co_name)
    parts = code.co_filename.replace("\\", "/").split("/")
    return name, os.path.join(*parts[-2:]) if parts else "", code.co_firstlineno


class FrameSampler:
    """Samples the stack of the thread whose id ``tid[0]`` holds; ``inside()`` says whether it is in the model."""

    def __init__(
        self,
        emit: Callable[[dict[str, Any]], None],
        tid: list[int],
        inside: Callable[[], bool | None],
        own: frozenset[Any],
        rate_hz: float = RATE_HZ,
        native: list[int] | None = None,
        model: frozenset[Any] = frozenset(),
        data: frozenset[Any] = frozenset(),
    ) -> None:
        self.emit = emit
        self.tid = tid
        self.inside = inside
        self.own = own
        self.rate_hz = rate_hz
        self.native = native or [0]  # the training thread's native id (py-spy names threads by it)
        self.model = model  # the model's own code objects (not the agent's wrappers): sent so a sampler outside the
        # process can tell the model from the rest by name (nothing in the monitor reads them yet)
        self.data = data  # the agent's wrappers of a batch's wait: a sample under one is the loop waiting for data
        self.samples = 0  # outside the model
        self.model_samples = 0
        self.chains: collections.Counter[tuple[CodeType, ...]] = collections.Counter()
        self.loop: set[CodeType] = set()  # frames seen calling the model
        self.sent = (0, 0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="trainmon-frames", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        next_send = time.monotonic() + SEND_S
        try:
            while not self._stop.wait(random.expovariate(self.rate_hz)):
                self.sample_once()
                if time.monotonic() >= next_send:
                    next_send = time.monotonic() + SEND_S
                    self.send()
            self.send()
        except Exception:
            pass  # never a traceback in the training's output

    def sample_once(self) -> None:
        frame = sys._current_frames().get(self.tid[0]) if self.tid[0] else None
        inside = self.inside()
        chain: list[CodeType] = []  # innermost first
        while frame is not None and len(chain) < MAX_DEPTH:
            chain.append(frame.f_code)
            frame = frame.f_back
        del frame
        if not chain:
            return
        own = self.own
        if inside is None:  # no wrapper counts it now: the model's own code on the stack tells
            inside = any(code in own for code in chain)
        if inside:
            self.model_samples += 1
            wrappers = [k for k, code in enumerate(chain) if code in own]
            if wrappers and len(self.loop) < MAX_LOOP:
                self.loop.update(chain[wrappers[-1] + 1 :])  # every caller of the outermost model call
            return
        self.samples += 1
        self.chains[tuple(code for code in chain if code not in own)] += 1
        if len(self.chains) > MAX_CHAINS:
            keep = self.chains.most_common(MAX_CHAINS // 2)
            self.chains = collections.Counter(dict(keep))

    def hot(self) -> list[dict[str, Any]]:
        """The functions holding most outside samples (none before a sample inside the model tells the loop)."""
        if not self.model_samples:
            return []
        loop = self.loop
        data = self.data
        counts: collections.Counter[tuple[CodeType, bool, bool]] = collections.Counter()
        leaves: dict[tuple[CodeType, bool, bool], collections.Counter[CodeType]] = {}
        for chain, n in self.chains.items():
            if not chain:
                continue
            waiting = bool(data) and any(code in data for code in chain)
            callee = next((code for code in reversed(chain) if code not in loop), None)
            key = (chain[0], True, waiting) if callee is None else (callee, False, waiting)
            counts[key] += n
            leaves.setdefault(key, collections.Counter())[chain[0]] += n
        out = []
        for (code, in_loop, waiting), n in counts.most_common(MAX_HOT):
            name, path, line = _where(code)
            leaf_name, leaf_path, _ = _where(leaves[(code, in_loop, waiting)].most_common(1)[0][0])
            out.append(
                {
                    "name": name,
                    "file": path,
                    "line": line,
                    "samples": n,
                    "leaf": leaf_name,
                    "leaf_file": leaf_path,
                    "loop": in_loop,
                    "data": waiting,
                }
            )
        return out

    def send(self) -> None:
        now = (self.samples, self.model_samples)
        if now == self.sent:
            return
        self.sent = now
        self.emit(
            {
                "outside": {
                    "samples": self.samples,
                    "model_samples": self.model_samples,
                    "hot": self.hot(),
                    "tid": self.native[0] or None,
                    "model_functions": identities(self.model),
                    "loop_functions": identities(self.loop),
                }
            }
        )


def identities(codes: frozenset[Any] | set[Any]) -> list[list[Any]]:
    """Code objects as [qualified name, full file name, first line], at most MAX_IDENTITIES of them."""
    out = []
    for code in list(codes)[:MAX_IDENTITIES]:
        if isinstance(code, CodeType):
            out.append([getattr(code, "co_qualname", code.co_name), code.co_filename, code.co_firstlineno])
    return out
