"""Where the training thread's time outside the model goes, from samples weighted by time rather than by the GIL.

The agent's own stack sampler (agent/_frames.py) reads the training thread's frames from another thread of the same
process: it needs the interpreter lock, so it lands where the training thread lets the lock go (torch calls, the
switch interval's checks) and under-counts pure-Python code by construction (a ``get_batch`` of list slicing, a
confusion matrix in Python loops). py-spy reads the frames from outside the process (``--nonblocking``: the training
is never paused), at moments that do not depend on the lock: each sample stands for the same time.

The monitor asks on its tick (``consider``): an attached run whose training thread spends a material share of its
steps outside the model (``Deriver.outside_share``, a loop with no DataLoader) or in its own code (``own_share``)
gets a burst of py-spy samples on a background thread, at most one run at a time, a burst every ``PAUSE_S`` until
``TARGET_SAMPLES`` are held, then every ``REFRESH_S``. Each sample of the training thread (the agent's ``tid``) is
put to the model (a frame of the model's own functions, which the agent names, or of torch's module call,
autograd, an optimizer), to a data wait (torch.utils.data, the agent's batch wrappers, a queue or future a
``__next__`` blocks in) or to the time outside the model; the latter is attributed as the agent attributes its own
samples: to the first frame below the loop (the frames seen calling the model). The result goes through the
monitor's Ingest as the run's INFO ``{"outside_timed": ...}`` (the shape of ``outside``, with ``"source": "py-spy"``),
so the store, a recording and every view get it. Where ptrace is not allowed or py-spy is missing, nothing is
sampled and the diagnosis says its functions come from the biased in-process samples only.
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from trainmon.sources.pyspy.py_spy import find_pyspy, ptrace_status
from trainmon.sources.pyspy.py_spy import record as pyspy_record
from trainmon.sources.pyspy.py_stacks import StackFrame, ThreadStack
from trainmon.sources.pyspy.spy_process import Recording
from trainmon.store.run import Run
from trainmon.store.store import Store

log = logging.getLogger("trainmon.timed_stacks")

Emit = Callable[[int, float, dict[str, Any]], None]  # (run id, t, INFO message): the monitor's Ingest.info
Record = Callable[..., Recording]

MIN_SHARE = 0.10  # a run is sampled once this share of its steps is outside the model or its own code
BURST_S = 2  # seconds of one py-spy run
RATE_HZ = 100  # its samples per second: ~1 % of a core for py-spy while it runs
PAUSE_S = 15.0  # between a run's bursts while it has fewer than TARGET_SAMPLES
REFRESH_S = 120.0  # between its bursts once it has them
TARGET_SAMPLES = 400  # training-thread samples held
MAX_BURSTS = 8  # the bursts a run's attribution is made of: the latest, so a changed loop shows within minutes
MAX_HOT = 8
LOOP_SHARE = 0.05  # of the model samples that show a frame above the model, for it to be taken as the loop's
# torch's module call, autograd's backward, an optimizer (not torch/autograd/grad_mode.py: any code's no_grad)
MODEL_PATHS = ("torch/nn/modules/module.py", "torch/autograd/__init__.py", "torch/autograd/graph.py", "torch/optim/")
MODEL_FUNCTIONS = (("backward", "torch/_tensor.py"),)  # Tensor.backward; the rest of torch/_tensor.py is any code's
AGENT_PATH = "trainmon/agent/"
DATA_PATHS = (
    "torch/utils/data/",
    "trainmon/agent/_handover.py",
    "trainmon/agent/_torch_hooks.py",
    "trainmon/agent/_iterable.py",
)
BLOCKING = ("queue.py", "concurrent/futures/_base.py", "multiprocessing/queues.py", "threading.py")
ITERATOR_NAMES = ("__next__", "next")

Identity = tuple[str, str]  # (function's own name, full file name)
Spot = tuple[str, str, int]  # a frame of a sample: (function as py-spy names it, full file name, line)
Chains = collections.Counter[tuple[tuple[Spot, ...], bool]]


def _identity(name: str, filename: str) -> Identity:
    return name.rsplit(".", 1)[-1], filename.replace("\\", "/")


def _path(frame: StackFrame) -> str:
    return frame.filename.replace("\\", "/")


def _is_model(frame: StackFrame, model: set[Identity]) -> bool:
    path = _path(frame)
    name = frame.name.rsplit(".", 1)[-1]
    return (
        (name, path) in model
        or any(p in path for p in MODEL_PATHS)
        or any(name == n and path.endswith(p) for n, p in MODEL_FUNCTIONS)
    )


def _is_data(frames: tuple[Spot, ...]) -> bool:
    """A batch wait: torch.utils.data, the agent's batch wrappers, or a queue / future a ``__next__`` blocks in."""
    blocked = False
    for name, filename, _ in frames:  # innermost first
        path = filename.replace("\\", "/")
        if any(p in path for p in DATA_PATHS):
            return True
        if any(path.endswith(p) for p in BLOCKING):
            blocked = True
        elif blocked and name.rsplit(".", 1)[-1] in ITERATOR_NAMES:
            return True
    return False


def _short(filename: str) -> str:
    parts = filename.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


class Attribution:
    """The samples of one run's training thread, burst by burst: model, data wait, and the outside chains."""

    def __init__(self, model: Iterable[Identity] = (), loop: Iterable[Identity] = ()) -> None:
        self.model: set[Identity] = set(model)
        self.given: set[Identity] = set(loop)  # the agent's: the frames its own samples saw calling the model
        self.callers: collections.Counter[Identity] = collections.Counter()  # learnt here, where it sent none
        # (model samples, (outside chain, whether a batch wait) → samples) per burst
        self.bursts: collections.deque[tuple[int, Chains]] = collections.deque(maxlen=MAX_BURSTS)

    def add(self, stacks: list[tuple[ThreadStack, int]], tid: int | None) -> int:
        """One burst's stacks: those of the training thread (``tid``, else the main thread); how many were."""
        model = 0
        chains: Chains = collections.Counter()
        taken = 0
        for thread, n in stacks:
            if not thread.frames or not (thread.os_thread_id == tid if tid else thread.is_main):
                continue
            taken += n
            frames = thread.frames
            inside = [k for k, f in enumerate(frames) if _is_model(f, self.model)]
            if inside:
                model += n
                self.callers.update({_identity(f.name, f.filename): n for f in frames[inside[-1] + 1 :]})
            else:  # the agent's own frames (its wrappers, its bookkeeping) are the training's call, not a cost
                spots = tuple((f.name, f.filename, f.line) for f in frames)
                waiting = _is_data(spots)
                kept = tuple(spot for spot in spots if AGENT_PATH not in spot[1].replace("\\", "/"))
                chains[(kept or spots[:1], waiting)] += n
        if taken:
            self.bursts.append((model, chains))
        return taken

    @property
    def loop(self) -> set[Identity]:
        """The frames that call the model: the agent's (read from the frames themselves, never torn), else those seen
        above the model in at least LOOP_SHARE of the model samples (a ``--nonblocking`` read may tear a stack)."""
        if self.given:
            return self.given
        model = sum(m for m, _ in self.bursts)
        least = max(2, LOOP_SHARE * model)
        return {ident for ident, n in self.callers.items() if n >= least}

    @property
    def samples(self) -> int:
        return sum(m + sum(c.values()) for m, c in self.bursts)

    def message(self, tid: int | None) -> dict[str, Any]:
        """The attribution in the shape of the agent's ``outside`` INFO (protocol.clean_outside), source py-spy."""
        model = sum(m for m, _ in self.bursts)
        loop = self.loop
        counts: collections.Counter[tuple[str, str, bool, bool]] = collections.Counter()
        lines: dict[tuple[str, str, bool, bool], int] = {}
        leaves: dict[tuple[str, str, bool, bool], collections.Counter[tuple[str, str]]] = {}
        outside = 0
        for _, chains in self.bursts:
            for (frames, waiting), n in chains.items():
                outside += n
                callee = next((f for f in reversed(frames) if _identity(f[0], f[1]) not in loop), None)
                name, filename, line = frames[0] if callee is None else callee
                key = (name, filename, callee is None, waiting)
                counts[key] += n
                lines.setdefault(key, line)
                leaves.setdefault(key, collections.Counter())[frames[0][:2]] += n
        hot = []
        if model:  # the loop is known only once a sample inside the model showed who calls it
            for key, n in counts.most_common(MAX_HOT):
                name, filename, in_loop, waiting = key
                leaf, leaf_file = leaves[key].most_common(1)[0][0]
                hot.append(
                    {
                        "name": name,
                        "file": _short(filename),
                        "line": lines[key],
                        "samples": n,
                        "leaf": leaf,
                        "leaf_file": _short(leaf_file),
                        "loop": in_loop,
                        "data": waiting,
                    }
                )
        return {"samples": outside, "model_samples": model, "hot": hot, "tid": tid, "source": "py-spy"}


def _share(part: list[float]) -> float:
    return part[0] / part[1] if part[1] > 0 else 0.0


def wanted(run: Run) -> bool:
    """Whether ``run``'s time outside the model is worth timed samples: an attached, connected run in this pid
    namespace whose steps spend at least MIN_SHARE outside the model (no DataLoader) or in its own code."""
    if not run.connected or run.measured_by != "agent" or run.proc_pid is None:
        return False
    d = run.deriver
    return max(_share(d.outside_share), _share(d.own_share)) >= MIN_SHARE


class TimedAttribution:
    """Decides on the monitor's tick (``consider``), samples on its own thread, emits through ``emit``."""

    def __init__(
        self,
        emit: Emit,
        record: Record = pyspy_record,
        clock: Callable[[], float] = time.monotonic,
        available: Callable[[], bool] | None = None,
    ) -> None:
        self.emit = emit
        self.record = record
        self.clock = clock
        self.available = available if available is not None else _pyspy_usable
        self.runs: dict[int, Attribution] = {}
        self.next_at: dict[int, float] = {}
        self.bursts = 0
        self.error: str | None = None
        self._usable: bool | None = None
        self._busy = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tmpdir: str | None = None

    def consider(self, store: Store, t: float) -> int | None:
        """Start a burst for the run that waits longest for one, if none is under way; the run's id or None."""
        if self._stop.is_set() or self._busy.locked():
            return None
        with store.lock:
            due = [r for r in store.runs.values() if t >= self.next_at.get(r.id, 0.0) and wanted(r)]
            if not due:
                return None
            run = min(due, key=lambda r: self.next_at.get(r.id, 0.0))
            outside = run.outside or {}
            job = (run.id, run.proc_pid, outside.get("tid"), outside.get("model_functions") or [])
            job_loop = outside.get("loop_functions") or []
        if self._usable is None:
            self._usable = self.available()
        if not self._usable:
            return None
        run_id, pid, tid, model = job
        assert pid is not None
        attribution = self.runs.setdefault(run_id, Attribution())
        # A decorator's inner function (torch's _disable_dynamo.<locals>.inner) wraps any code, not just the model's
        attribution.model.update(_identity(str(n), str(file)) for n, file, _ in model if "<locals>" not in str(n))
        attribution.given.update(_identity(str(name), str(file)) for name, file, _ in job_loop)
        pause = REFRESH_S if attribution.samples >= TARGET_SAMPLES else PAUSE_S
        self.next_at[run_id] = t + pause
        self._busy.acquire()
        self._thread = threading.Thread(
            target=self._burst,
            args=(run_id, pid, tid if isinstance(tid, int) else None),
            daemon=True,
            name="trainmon-timed-stacks",
        )
        self._thread.start()
        return run_id

    def _burst(self, run_id: int, pid: int, tid: int | None) -> None:
        try:
            if self._tmpdir is None:
                self._tmpdir = tempfile.mkdtemp(prefix="trainmon-timed-")
            result = self.record(pid, BURST_S, RATE_HZ, os.path.join(self._tmpdir, "stacks.txt"), stop=self._stop)
            self.bursts += 1
            if result.error is not None:
                self.error = result.error
                return
            attribution = self.runs[run_id]
            if attribution.add(result.stacks, tid or pid):
                self.emit(run_id, self.clock(), {"outside_timed": attribution.message(tid or pid)})
        except Exception:
            log.exception("timed stack samples failed")
        finally:
            self._busy.release()

    def wait_idle(self, timeout: float = 30.0) -> bool:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self._busy.locked()

    def close(self) -> None:
        self._stop.set()
        self.wait_idle(BURST_S + 6.0)
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None


def _pyspy_usable() -> bool:
    return find_pyspy() is not None and ptrace_status()[0]
