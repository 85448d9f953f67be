"""Where a training thread spends its time outside the model, sampled from outside the process by py-spy.

The agent's own stack sampler (``trainmon/agent/_frames.py``) reads the training thread's stack from a thread of the
same interpreter, so it needs the GIL: it sees the training thread where that thread lets the GIL go (a torch call,
the switch interval's check points), and pure-Python code, a ``get_batch`` that builds its batch in Python, is under-
counted by construction. py-spy reads the stack from another process (``record --nonblocking --idle``): its samples
land at their own moments whatever the GIL does, so each stands for the same time.

For a run whose agent sends ``INFO {"outside"}`` with samples inside the model (``Run.outside``), ``OutsideTimer``
samples the training thread (the message's ``tid``) with py-spy and applies the agent's rules to each sample, by
function name and file: a sample is inside the model when one of the model's functions (``model_functions``: the
roots' forwards, the optimizers' ``step``/``zero_grad``, ``backward``, clipping, the losses) is on the stack, and its
callers are the loop; an outside sample goes to the first frame below the loop (the agent's ``loop_functions`` and
the callers py-spy saw), from the outermost in, or, when every frame is the loop's, to the loop's own code
(``loop: true``). The agent's wrappers (``trainmon/agent/``) are left out of every stack; a sample under one of its
wrappers of a batch's wait (or a DataLoader's ``__next__``) is marked ``data``. The result has the agent's message's
shape plus ``"source": "py-spy"`` and goes through the monitor's Ingest as the run's ``INFO {"outside_timed"}``
(``Run.outside_timed``), so the store, the recording and the report read the same figures; the diagnosis prefers it
(``diagnose/rules/batch_source.attribution``).

Cost: only while the run's time outside the model is a material share of its steps (MATERIAL over the last
WINDOW_S), one chunk of CHUNK_S seconds at RATE_HZ every PERIOD_S, all runs' chunks one after another on one thread
(never two py-spy at once), the first as soon as the run qualifies; a run that is gone is dropped (its chunk under way
stopped). py-spy's start-up and samples cost tens of milliseconds of CPU a chunk (about 0.2 % of one core over the
period; benchmarks/outside_attribution.py), counted with the monitor's helpers (``self.helpers_cpu_pct``). Failures
fail open: a missing binary, ptrace refused or a process gone stop the sampling of that run (every run, for the
binary) with the reason logged once; the agent's own figures stay.
"""

from __future__ import annotations

import collections
import itertools
import linecache
import logging
import math
import os
import queue
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from trainmon.sources.base import Source
from trainmon.sources.pyspy import NOT_FOUND, _is_fatal, record
from trainmon.sources.stacks import DATA_WAIT_FUNCS, DATALOADER_FILE, Frame, ThreadStack
from trainmon.store.run import Run
from trainmon.store.store import Store

log = logging.getLogger("trainmon.pyspy_outside")

RATE_HZ = 100  # py-spy's samples a second while a chunk runs
CHUNK_S = 3  # seconds a chunk samples (py-spy's --duration takes whole seconds)
PERIOD_S = 30.0  # from one chunk's start to the next one's, per run
RECHECK_S = 5.0  # a run not yet worth sampling is looked at again after this long
WINDOW_S = 20.0  # the steps its share outside the model is taken over
MATERIAL = 0.10  # the share of the steps' time outside the model (data wait and own code) worth attributing
MAX_RUNS = 64  # runs followed at once
MAX_CHAINS = 2048  # distinct outside stacks kept per run; past it the rarest half is dropped
MAX_LOOP = 4096
MAX_HOT = 8
KEY = "outside_timed"  # the INFO key the monitor's figures travel under (Run.outside_timed)

AGENT_DIR = "/trainmon/agent/"
# The agent's wrappers of a batch's wait (agent/_outside.py wait_codes): file → function names.
AGENT_WAITS = {"_hot.py": ("__next__",), "_iterable.py": ("__next__",), "_handover.py": ("wait",)}

Identity = tuple[str, str, int]  # (qualified name, full file name, first line)
FrameKey = tuple[str, str]  # (name as py-spy gives it, full file name)
Emit = Callable[[int, float, dict[str, Any]], None]  # (run id, t, INFO message): the monitor's Ingest.info


# ---------------------------------------------------------------- matching frames to the agent's code objects


def _tail(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _same_file(a: str, b: str) -> bool:
    """One file named two ways: equal, or one a path suffix of the other (a script started by a relative path)."""
    a, b = a.replace("\\", "/"), b.replace("\\", "/")
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def _same_name(a: str, b: str) -> bool:
    """py-spy gives the qualified name (``GPT.forward``) on Python 3.11+, the bare name on older ones, as the agent's
    ``co_qualname`` or ``co_name`` does: equal, or one the other's last part."""
    return a == b or a.endswith("." + b) or b.endswith("." + a)


def identities(raw: object) -> list[Identity]:
    """The [qualified name, file, first line] lists of an ``outside`` message (``model_functions``, ``loop_functions``)."""
    out: list[Identity] = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, (list, tuple)) and len(item) == 3 and isinstance(item[0], str) and isinstance(item[1], str):
            out.append((item[0], item[1], int(item[2]) if isinstance(item[2], int) else 0))
    return out


class Functions:
    """A set of functions known by identity; ``holds(frame)`` says whether a py-spy frame is one of them."""

    def __init__(self, items: Iterable[Identity] = ()) -> None:
        self.by_tail: dict[str, list[Identity]] = {}
        self._memo: dict[tuple[str, str, int], bool] = {}
        for item in items:
            self.by_tail.setdefault(_tail(item[0]), []).append(item)

    def __bool__(self) -> bool:
        return bool(self.by_tail)

    def first_line(self, name: str, filename: str) -> int | None:
        for qual, path, first in self.by_tail.get(_tail(name), ()):
            if _same_name(name, qual) and _same_file(filename, path) and first > 0:
                return first
        return None

    def holds(self, frame: Frame) -> bool:
        key = (frame.name, frame.filename, frame.line)
        known = self._memo.get(key)
        if known is None:
            known = any(
                _same_name(frame.name, qual)
                and _same_file(frame.filename, path)
                and (frame.line <= 0 or first <= 0 or frame.line >= first)  # a frame's line is at or after its start
                for qual, path, first in self.by_tail.get(_tail(frame.name), ())
            )
            if len(self._memo) < 65536:
                self._memo[key] = known
        return known


def _is_agent(frame: Frame) -> bool:
    return AGENT_DIR in frame.filename.replace("\\", "/")


def _is_wait(frame: Frame) -> bool:
    """One of the agent's wrappers of a batch's wait, or a DataLoader's own ``__next__``."""
    path = frame.filename.replace("\\", "/")
    name = _tail(frame.name)
    if AGENT_DIR in path:
        return name in AGENT_WAITS.get(path.rsplit("/", 1)[-1], ())
    return path.endswith(DATALOADER_FILE) and name in DATA_WAIT_FUNCS


def _two_parts(filename: str) -> str:
    parts = filename.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


_DEF = re.compile(r"\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_][A-Za-z0-9_]*)")


def first_line(name: str, filename: str, seen: int) -> int:
    """A function's first line, as the agent gives it (``co_firstlineno``), where py-spy only gives the lines it was
    sampled at: the nearest ``def NAME`` at or above the lowest line seen, read from the file (the monitor's host is
    the training's); that lowest line where the file cannot be read or has no such line."""
    tail = _tail(name)
    if tail == "<module>":
        return 1
    if tail.startswith("<") or seen <= 0:
        return seen
    for line in range(seen, max(0, seen - 2000), -1):
        text = linecache.getline(filename, line)
        if not text:
            return seen  # not readable here (another mount namespace, a file since removed)
        if (m := _DEF.match(text)) is not None and m[1] == tail:
            return line
    return seen


# ---------------------------------------------------------------- the agent's rules on py-spy's samples


@dataclass
class Attribution:
    """py-spy's samples of one training thread, put to the model or to what holds the time outside it, with the
    agent's rules (agent/_frames.py), cumulated over every chunk."""

    model: Functions
    agent_loop: Functions = field(default_factory=Functions)
    samples: int = 0  # outside the model
    model_samples: int = 0
    read_errors: int = 0
    chunks: int = 0
    chains: collections.Counter[tuple[tuple[FrameKey, ...], bool]] = field(default_factory=collections.Counter)
    loop: set[FrameKey] = field(default_factory=set)  # frames py-spy saw calling the model
    lines: dict[FrameKey, int] = field(default_factory=dict)  # the lowest line sampled in each function

    def add(self, frames: list[Frame], n: int = 1) -> None:
        """One stack (innermost frame first) sampled ``n`` times."""
        waiting = any(_is_wait(f) for f in frames)
        frames = [f for f in frames if not _is_agent(f)]
        if not frames or n <= 0:
            return
        model = self.model
        inside = [k for k, f in enumerate(frames) if model.holds(f)]
        if inside:
            self.model_samples += n
            if len(self.loop) < MAX_LOOP:
                self.loop.update((f.name, f.filename) for f in frames[inside[-1] + 1 :])
            return
        self.samples += n
        chain = tuple((f.name, f.filename) for f in frames)
        self.chains[(chain, waiting)] += n
        for f, key in zip(frames, chain, strict=True):
            if f.line > 0 and (key not in self.lines or f.line < self.lines[key]):
                self.lines[key] = f.line
        if len(self.chains) > MAX_CHAINS:
            self.chains = collections.Counter(dict(self.chains.most_common(MAX_CHAINS // 2)))

    def add_thread(self, stacks: Iterable[tuple[ThreadStack, int]], tid: int | None) -> int:
        """The samples of the thread ``tid`` (native id; None: the main thread) among a recording's stacks; how many."""
        taken = 0
        for thread, n in stacks:
            if (thread.os_thread_id == tid if tid is not None else thread.is_main) and thread.frames:
                self.add(thread.frames, n)
                taken += n
        return taken

    def _in_loop(self, key: FrameKey) -> bool:
        if key in self.loop:
            return True
        return bool(self.agent_loop) and self.agent_loop.holds(Frame(key[0], key[1], 0, ""))

    def _line(self, key: FrameKey) -> int:
        known = self.agent_loop.first_line(*key) if self.agent_loop else None
        return known if known is not None else first_line(key[0], key[1], self.lines.get(key, 0))

    def hot(self) -> list[dict[str, Any]]:
        """The functions holding most outside samples (none before a sample inside the model tells the loop), each as
        the agent's ``hot`` entries are."""
        if not self.model_samples:
            return []
        counts: collections.Counter[tuple[FrameKey, bool, bool]] = collections.Counter()
        leaves: dict[tuple[FrameKey, bool, bool], collections.Counter[FrameKey]] = {}
        in_loop: dict[FrameKey, bool] = {}
        for (chain, waiting), n in self.chains.items():
            callee = None
            for key in reversed(chain):
                if key not in in_loop:
                    in_loop[key] = self._in_loop(key)
                if not in_loop[key]:
                    callee = key
                    break
            entry = (chain[0], True, waiting) if callee is None else (callee, False, waiting)
            counts[entry] += n
            leaves.setdefault(entry, collections.Counter())[chain[0]] += n
        out = []
        for entry, n in counts.most_common(MAX_HOT):
            (name, filename), is_loop, waiting = entry
            leaf_name, leaf_file = leaves[entry].most_common(1)[0][0]
            out.append(
                {
                    "name": name,
                    "file": _two_parts(filename),
                    "line": self._line((name, filename)),
                    "samples": n,
                    "leaf": leaf_name,
                    "leaf_file": _two_parts(leaf_file),
                    "loop": is_loop,
                    "data": waiting,
                }
            )
        return out

    def message(self, tid: int | None) -> dict[str, Any]:
        """The figures in the shape of the agent's ``outside`` message, with ``"source": "py-spy"``."""
        loop = [[name, path, self._line((name, path))] for name, path in sorted(self.loop)[:64]]
        return {
            "samples": self.samples,
            "model_samples": self.model_samples,
            "hot": self.hot(),
            "tid": tid,
            "model_functions": [],
            "loop_functions": loop,
            "source": "py-spy",
        }


# ---------------------------------------------------------------- which runs, when


def outside_share(run: Run, t0: float, t1: float) -> float:
    """The share of the time of the run's steady steps ending in [t0, t1] spent outside the model: the data wait (a
    no-loader loop's wait is its time outside the model) and the loop's own code. NaN without steps."""
    steps = run.steps
    i, j = steps.index_range(t0, t1)
    steady = [not w for w in steps.warm[i:j]]  # warm-up steps were not measured
    total = math.fsum(itertools.compress(steps.dur[i:j], steady))
    if total <= 0:
        return math.nan
    own = [x for x in itertools.compress(steps.own[i:j], steady) if x == x]
    return (math.fsum(itertools.compress(steps.wait[i:j], steady)) + math.fsum(own)) / total


@dataclass
class _Target:
    """What one chunk samples: the run's process and thread and the agent's names of the model and the loop."""

    run_id: int
    pid: int
    tid: int | None
    model: list[Identity]
    loop: list[Identity]


def target(run: Run) -> _Target | None:
    """The run's training thread if the agent's ``outside`` message lets py-spy's samples be told apart (it names the
    model and has seen samples inside it); None otherwise."""
    outside = run.outside
    if not isinstance(outside, dict) or not outside.get("model_samples"):
        return None
    if not run.connected or run.measured_by != "agent" or (pid := run.proc_pid) is None:
        return None
    model = identities(outside.get("model_functions"))
    if not model:
        return None
    tid = outside.get("tid")
    tid = tid if isinstance(tid, int) and tid > 0 else None
    if run.pid_namespace != "own":  # the agent's thread ids are its namespace's: only its main thread is known here
        if tid is not None and tid != run.agent_pid:
            return None
        tid = None
    return _Target(run.id, pid, tid, model, identities(outside.get("loop_functions")))


@dataclass
class _Followed:
    pid: int
    attribution: Attribution | None = None
    due: float = 0.0  # when it may be sampled next (monotonic)
    busy: bool = False  # a chunk queued or under way
    stop: threading.Event = field(default_factory=threading.Event)
    failed: str | None = None  # why it is not sampled any more


class OutsideTimer(Source):
    """A Source (it writes no series): each tick, picks the runs whose time outside the model is worth attributing and
    hands their chunks to one worker thread, which runs py-spy and sends the figures through ``emit``."""

    name = "outside_pyspy"
    logger = log

    def __init__(
        self,
        store: Store,
        emit: Emit,
        *,
        rate_hz: int = RATE_HZ,
        chunk_s: int = CHUNK_S,
        period_s: float = PERIOD_S,
        material: float = MATERIAL,
        window_s: float = WINDOW_S,
        recheck_s: float = RECHECK_S,
        timeout: float = 5.0,
    ) -> None:
        super().__init__()
        self.store = store
        self.emit = emit
        self.rate_hz = max(1, int(rate_hz))
        self.chunk_s = max(1, int(chunk_s))
        self.period_s = period_s
        self.material = material
        self.window_s = window_s
        self.recheck_s = recheck_s
        self.timeout = timeout
        self.followed: dict[int, _Followed] = {}  # run id → its state
        self.disabled: str | None = None  # why no run is sampled (py-spy missing)
        self.chunks = 0  # py-spy runs
        self.cpu_s = 0.0  # their CPU time
        self._lock = threading.Lock()
        self._jobs: queue.Queue[_Target | None] = queue.Queue()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._tmpdir: str | None = None

    # ---------------------------------------------------------------- the monitor's tick

    def sample(self, now: float) -> dict[str, float]:
        if self.disabled is not None or self._closed.is_set():
            return {}
        due: list[_Target] = []
        with self.store.lock, self._lock:
            live: set[int] = set()
            for run in self.store.runs.values():
                if not run.connected or run.measured_by != "agent":
                    continue
                live.add(run.id)
                state = self.followed.get(run.id)
                if state is not None and (state.busy or state.failed is not None or now < state.due):
                    continue
                found = target(run)
                if found is None:
                    continue
                if state is None:
                    if len(self.followed) >= MAX_RUNS:
                        continue
                    state = self.followed[run.id] = _Followed(found.pid)
                share = outside_share(run, now - self.window_s, now)
                if math.isnan(share) or share < self.material:
                    state.due = now + self.recheck_s
                    continue
                state.busy = True
                due.append(found)
            for run_id in [r for r in self.followed if r not in live]:  # gone: its chunk under way stops
                self.followed.pop(run_id).stop.set()
        for job in due:
            self._start()
            self._jobs.put(job)
        return {}

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="trainmon-pyspy-outside", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            for state in self.followed.values():
                state.stop.set()
        self._jobs.put(None)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.chunk_s + self.timeout + 6.0)

    # ---------------------------------------------------------------- the worker

    def _work(self) -> None:
        try:
            while not self._closed.is_set():
                job = self._jobs.get()
                if job is None:
                    return
                try:
                    self.chunk(job)
                except Exception:  # never let the worker die with a traceback
                    log.debug("py-spy outside the model: chunk of pid %s failed", job.pid, exc_info=True)
                    self._done(job, None)
        finally:
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                self._tmpdir = None

    def chunk(self, job: _Target) -> None:
        """Sample ``job``'s thread for one chunk and send the run's figures so far."""
        with self._lock:
            state = self.followed.get(job.run_id)
        if state is None or state.stop.is_set():
            return
        if self._tmpdir is None:
            self._tmpdir = tempfile.mkdtemp(prefix="trainmon-pyspy-outside-")
        output = os.path.join(self._tmpdir, f"{job.run_id}.txt")
        t0 = time.monotonic()
        result = record(job.pid, self.chunk_s, self.rate_hz, output, stop=state.stop, timeout=self.timeout)
        with self._lock:
            self.chunks += 1
            self.cpu_s += result.cpu_s
        if result.error is not None:
            self._failed(job, state, result.error)
            self._done(job, state, t0)
            return
        acc = state.attribution
        if acc is None:
            acc = state.attribution = Attribution(Functions(job.model))
        acc.model = Functions(job.model)  # the agent's latest names (a model rebuilt, another optimizer)
        acc.agent_loop = Functions(job.loop)
        taken = acc.add_thread(result.stacks, job.tid)
        acc.read_errors += result.read_errors
        acc.chunks += 1
        log.debug(
            "py-spy outside the model, pid %s: %d samples (%d errors) in %.1f s, %.3f s CPU",
            job.pid,
            taken,
            result.read_errors,
            result.elapsed_s,
            result.cpu_s,
        )
        if taken and not state.stop.is_set():
            self.emit(job.run_id, time.monotonic(), {KEY: acc.message(job.tid)})
        self._done(job, state, t0)

    def _failed(self, job: _Target, state: _Followed, error: str) -> None:
        if state.stop.is_set():
            return  # stopped on purpose: the run is gone
        if _is_fatal(error):
            state.failed = error
            if error == NOT_FOUND:
                self.disabled = error
            self.log_once(
                ("fatal", job.pid, error),
                "py-spy cannot time pid %s outside the model (the agent's own samples are kept): %s",
                job.pid,
                error,
            )
        else:
            self.log_once(
                ("error", job.pid), "py-spy outside the model, pid %s: %s (tried again later)", job.pid, error
            )

    def _done(self, job: _Target, state: _Followed | None, t0: float | None = None) -> None:
        with self._lock:
            state = state or self.followed.get(job.run_id)
            if state is not None:
                state.busy = False
                state.due = (t0 if t0 is not None else time.monotonic()) + self.period_s
