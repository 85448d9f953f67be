"""One training process as the monitor sees it: identity, loaders, and steps derived from events.

Step boundaries, in order of precedence:
1. explicit ``trainmon.agent.step()`` calls;
2. optimizer ``step()`` post-hooks (a step = all work between two optimizer steps; a second
   optimizer stepping with no new train batch in between belongs to the same step);
3. otherwise consecutive ``__next__`` calls of the train loader.
The train loader is the most iterated one; the others are eval/other phases.

It runs past 400 lines because step derivation is one state machine over the run's fields (the step being
built, the train loader, warm-up, late exposed-idle records); split into modules, each part would reach into
the others' state. The step table itself is in ``trainmon.store.steps``.
"""

from __future__ import annotations

import functools
import math
import operator
import sys
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, cast

from trainmon.labels import main_role, run_label
from trainmon.protocol import (
    COMM_OPS,
    K_CKPT,
    K_COMM,
    K_EXPOSED,
    K_GC,
    K_ITER_END,
    K_ITER_START,
    K_MARK,
    K_OPT,
    K_PHASE,
    K_STEP,
    K_WAIT,
)
from trainmon.store.batches import batch_size
from trainmon.store.gcspans import GcSpans
from trainmon.store.restarts import Restarts
from trainmon.store.stacks import clean_stacks
from trainmon.store.steps import Steps

NS = 1e-9
WARMUP_STEPS = 5  # first steps of a run: compilation, cuDNN autotune, worker start
MAX_LOADERS = 256  # per run; events of further loader ids count as loader 0 ("unknown")
MAX_GENERATIONS = 64  # per loader: the sets of workers kept with when they began (see LoaderInfo.workers_between)
MAX_NAMES = 4096
RESTART_WARMUP_STEPS = 2  # after an epoch restarts non-persistent workers
CKPT_MERGE_GAP_S = 0.005
BEAT_S = 0.5  # agent activity is kept at this resolution (see Run.last_activity)
MAX_STACK_DUMPS = 32  # per run: the oldest automatic stack dumps are dropped beyond this
FAST_MIN_STEPS = 8  # a batch with fewer regular steps than this goes record by record
_NAN = float("nan")
_KIND_BYTE = 0 if sys.byteorder == "little" else 7  # where a record's kind (the tag's low byte) lies in memory


@dataclass
class LoaderInfo:
    id: int
    config: dict[str, Any] = field(default_factory=dict)
    worker_pids: list[int] = field(default_factory=list)  # as the agent reported them (its pid namespace)
    proc_pids: list[int] | None = None  # the same workers in the monitor's namespace (0: not mapped); None: same
    batches: int = 0
    wait_s: float = 0.0
    iterators: int = 0
    # Each set of workers in the monitor's namespace with when its iterator began (-inf: not told): what the
    # loader's workers were at any time, since non-persistent workers are new processes every epoch.
    generations: list[tuple[float, list[int]]] = field(default_factory=list)

    def workers_between(self, t0: float, t1: float) -> list[tuple[int, float, float]]:
        """(pid, from, to) of every worker that served this loader within [t0, t1], clipped to the span its
        set served: from its iterator's start to the next one's."""
        out: list[tuple[int, float, float]] = []
        gens = self.generations
        for k, (start, pids) in enumerate(gens):
            end = gens[k + 1][0] if k + 1 < len(gens) else math.inf
            a, b = max(t0, start), min(t1, end)
            if a <= b and end > start:
                out.extend((pid, a, b) for pid in pids if pid)
        return out

    @property
    def batch_size(self) -> int | None:
        """Samples per batch: the loader's own setting, else the mean the agent measured on its batches."""
        return batch_size(self.config)


class Run:
    def __init__(
        self, run_id: int, hello: dict[str, Any], t: float, cap: int | None = 200_000, keep_s: float | None = None
    ) -> None:
        self.id = run_id
        self.hello = hello
        self.cuda_device: dict[str, Any] | None = None  # the CUDA device the training thread uses (index, uuid)
        self.first_seen = t
        self.last_seen = t
        self.connected = True
        self.ended: str | None = None  # why the run ended: "exit", "detach", "lost", ...
        self.connections = 1
        self.dropped_records = 0
        self.loaders: dict[int, LoaderInfo] = {}
        self.names: dict[int, str] = {}
        self.device: str | None = hello.get("device")
        self.framework: dict[str, Any] | None = None  # the trainer that drives the loop: {"name", "version"}
        self.steps = Steps(cap, keep_s)
        self.checkpoints: list[tuple[float, float]] = []
        self.marks: list[tuple[float, str]] = []
        self.phases: list[tuple[float, float, str]] = []
        self.iter_starts: list[tuple[float, int]] = []  # (t, loader id)
        self.restarts = Restarts(cap)  # workers started again by a new iterator, and what each cost
        self.eval_wait_s = 0.0
        self.comm_by_op: dict[str, float] = {}  # seconds blocked in each kind of collective (protocol.COMM_OPS)
        self.records = 0
        self.gc = GcSpans(cap)  # the job's garbage-collection pauses
        self.beats = array("d")  # when the training did anything but collect garbage, every BEAT_S at most
        self.stack_dumps: list[dict[str, Any]] = []  # automatic stack dumps (trainmon.store.stacks), oldest first
        self._events_cap = cap
        # step derivation state
        self.mode = "next"
        self._train: int | None = None
        self._cur_start: float | None = None
        self._cur_wait = 0.0
        self._cur_batches = 0
        self._cur_exposed = float("nan")
        self._cur_exposed_wait = 0.0  # host time of the building step's measured waits (-1: all of its wait)
        self._cur_comm = 0.0  # the building step's time in collectives
        self._last_end: float | None = None
        self._warm_until = WARMUP_STEPS
        self._seen_any_wait = False
        self._last_wait_loader: int | None = None
        self._pending_wait: dict[int, tuple[float, int]] = {}  # other loaders' waits since the last step
        self._train_ended = False  # the train loader's iterator ended since the last step

    # ------------------------------------------------------------ identity

    @property
    def agent_pid(self) -> int:
        """The pid the training reported for itself, in its own pid namespace."""
        return int(self.hello.get("pid") or 0)

    @property
    def pid_namespace(self) -> str:
        """The run's pid namespace: "own" (the monitor's), "mapped" (another, its pids mapped) or "unmapped"
        (another, or a peer the monitor cannot see: its pids are never read).
        Recordings from before the monitor checked have none: their pids were taken as the monitor's."""
        return str(self.hello.get("pid_namespace") or "own")

    @property
    def proc_pid(self) -> int | None:
        """The main process's pid in the monitor's namespace, the one /proc, NVML and py-spy know; None when
        it runs in a pid namespace the monitor could not map (its processes are then never read)."""
        ns = self.pid_namespace
        if ns == "own":
            return self.agent_pid
        peer = self.hello.get("peer_pid")
        return peer if ns == "mapped" and isinstance(peer, int) and peer > 0 else None

    @property
    def pid(self) -> int:
        """The pid views name the run by and its process series are keyed by: the monitor-side pid where
        known, else (unmapped) the agent's own."""
        proc = self.proc_pid
        return proc if proc is not None else self.agent_pid

    @property
    def rank(self) -> int | None:
        return self.hello.get("rank")

    @property
    def measured_by(self) -> str:
        """ "agent" (steps and waits reported by the agent) or "sampling" (a training found running without one,
        its main thread sampled by py-spy: no steps)."""
        return "sampling" if self.hello.get("measured_by") == "sampling" else "agent"

    @property
    def attach_wall(self) -> float | None:
        """Wall-clock time the agent was injected into the running process (``trainmon attach``), else None."""
        wall = self.hello.get("attach_wall")
        return float(wall) if self.hello.get("attached_live") and isinstance(wall, (int, float)) else None

    @property
    def name(self) -> str:
        return str(self.hello.get("name") or "python")

    @property
    def host(self) -> str:
        return str(self.hello.get("host") or "")

    @property
    def label(self) -> str:
        """ "rank N" or "pid N": how every view names this run."""
        return run_label(self.rank, self.pid)

    @property
    def role(self) -> str:
        """The main process's role in the process table ("rank" or "main")."""
        return main_role(self.hello)

    @property
    def node(self) -> str:
        """The node the run trains on, as the agent names it (``TRAINMON_NODE``, else its host name)."""
        return str(self.hello.get("node") or self.host)[:200]

    @property
    def job_id(self) -> str:
        """The job this run is a rank of, one id on every node: the agent's ``job_id``, or for agents from before
        it sent one the same choice made from the launcher's environment it did send; "" for a lone process."""
        ident = self.hello.get("job_id")
        if isinstance(ident, str) and ident:
            return ident[:200]
        env = self.hello.get("job") or {}
        if env.get("TORCHELASTIC_RUN_ID") not in (None, "", "none"):
            return str(env["TORCHELASTIC_RUN_ID"])[:200]
        if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
            return f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}/{env.get('WORLD_SIZE', '?')}"[:200]
        if env.get("SLURM_JOB_ID"):
            return f"slurm-{env['SLURM_JOB_ID']}"[:200]
        return str(env.get("TRAINMON_JOB") or "")[:200]

    @property
    def job_key(self) -> tuple[Any, ...]:
        """Runs sharing a job: same launcher rendezvous, or the same trainmon run."""
        job = self.hello.get("job") or {}
        if job.get("TRAINMON_JOB"):
            return ("trainmon", job["TRAINMON_JOB"])
        if job.get("TORCHELASTIC_RUN_ID") or job.get("MASTER_PORT"):
            return ("dist", job.get("TORCHELASTIC_RUN_ID"), job.get("MASTER_ADDR"), job.get("MASTER_PORT"))
        return ("pid", self.host, self.pid)

    def train_loader(self) -> LoaderInfo | None:
        return self.loaders.get(self._train) if self._train is not None else None

    def worker_pids(self) -> list[int]:
        """The DataLoader workers' pids in the monitor's namespace (those that could be mapped)."""
        out: list[int] = []
        for info in self.loaders.values():
            if info.proc_pids is None:
                out.extend(info.worker_pids if self.pid_namespace == "own" else ())
            else:
                out.extend(p for p in info.proc_pids if p)
        return out

    def agent_worker_pids(self) -> list[int]:
        """The DataLoader workers' pids as the agent reported them (its pid namespace)."""
        return [pid for info in self.loaders.values() for pid in info.worker_pids]

    def unmapped_worker_pids(self) -> list[int]:
        """Workers (agent's pids) with no pid in the monitor's namespace: shown, never read."""
        if self.pid_namespace == "own":
            return []
        out: list[int] = []
        for info in self.loaders.values():
            proc = info.proc_pids or [0] * len(info.worker_pids)
            out.extend(pid for pid, p in zip(info.worker_pids, proc, strict=False) if not p)
        return out

    # ------------------------------------------------------------ ingestion

    def apply_info(self, info: dict[str, Any]) -> None:
        if isinstance(loader := info.get("loader"), dict):
            lid = _as_int(loader.get("id"))
            if lid is not None and self._bounded(lid) == lid:
                cfg = {k: v for k, v in loader.items() if k != "id"}
                self._loader(lid).config = cfg
        if isinstance(workers := info.get("workers"), dict):
            lid = _as_int(workers.get("loader"))
            pids = workers.get("pids")
            if lid is not None and self._bounded(lid) == lid and isinstance(pids, list):
                loader = self._loader(lid)
                loader.worker_pids = [p for p in pids if isinstance(p, int)][:1024]
                proc = workers.get("proc_pids")
                if isinstance(proc, list) and len(proc) == len(pids):
                    loader.proc_pids = [p if isinstance(p, int) else 0 for p in proc][:1024]
                else:
                    loader.proc_pids = None
                self._add_generation(loader, workers.get("t_ns"))
        if isinstance(name := info.get("name"), dict):
            ident = _as_int(name.get("id"))
            if ident is not None and (ident in self.names or len(self.names) < MAX_NAMES):
                self.names[ident] = str(name.get("name"))[:200]
        if isinstance(drops := info.get("drops"), int):
            self.dropped_records = max(self.dropped_records, drops)
        if isinstance(bye := info.get("bye"), str):
            self.ended = bye[:32]
        if isinstance(device := info.get("cuda_device"), dict):
            self.cuda_device = device
        if isinstance(framework := info.get("framework"), dict):
            self.framework = framework
        if isinstance(ident := info.get("dist"), dict):  # the rank and job, once its process group exists
            self.hello = {**self.hello, **ident, "global_rank": ident.get("rank")}
        if (dump := clean_stacks(info.get("stacks"))) is not None:
            self.stack_dumps.append(dump)
            del self.stack_dumps[:-MAX_STACK_DUMPS]

    def _beat(self, t: float) -> None:
        beats = self.beats
        if not beats or t >= beats[-1] + BEAT_S:
            beats.append(t)
            if self._events_cap is not None and len(beats) > self._events_cap:
                del beats[: self._events_cap // 4]

    def last_activity(self, t: float) -> float | None:
        """When the training last did anything (a batch, a step, a save, a mark) at or before ``t``; its garbage
        collections do not count, since another thread's allocations can trigger them while the loop is stuck."""
        k = bisect_right(self.beats, t)
        j = bisect_right(self.steps.end, t)
        known = ([self.beats[k - 1]] if k else []) + ([self.steps.end[j - 1]] if j else [])
        return max(known) if known else None

    def _add_generation(self, loader: LoaderInfo, t_ns: Any) -> None:
        here = loader.proc_pids if loader.proc_pids is not None else loader.worker_pids
        here = here if loader.proc_pids is not None or self.pid_namespace == "own" else []
        start = t_ns * NS if isinstance(t_ns, int) and not isinstance(t_ns, bool) else -math.inf
        gens = loader.generations
        if gens and gens[-1] == (start, here):
            return  # the same message again (re-sent to a new connection)
        gens.append((start, list(here)))
        gens.sort(key=operator.itemgetter(0))
        del gens[:-MAX_GENERATIONS]

    def _bounded(self, lid: int) -> int:
        return lid if lid in self.loaders or len(self.loaders) < MAX_LOADERS else 0

    def _loader(self, lid: int) -> LoaderInfo:
        info = self.loaders.get(lid)
        if info is None:
            info = self.loaders[lid] = LoaderInfo(lid)
        return info

    def apply_events(self, records: array[int]) -> None:
        """Fold a batch of flat int64 records into the step table (see trainmon.protocol).

        Record by record, except for the stretches of a batch where steps repeat one pattern (a train batch then
        the step's boundary; with loader-driven steps, train batches in a row), which are folded in whole columns:
        a wholly regular batch by _fold_regular, regular stretches between irregular records by _fold_prefix and
        _fold_next, which fold only where that is bit-identical to going record by record."""
        self.records += len(records) // 4
        exposed = comm = None
        with memoryview(records) as view, view.cast("B") as raw:
            kinds = raw[_KIND_BYTE :: 4 * 8].tobytes()
        if K_EXPOSED in kinds or K_COMM in kinds or K_GC in kinds:
            records, exposed = _split_exposed(records)
            records, comm = _split_kind(records, K_COMM)
            records, gc = _split_kind(records, K_GC)
            if gc is not None:
                self.gc.add_records(gc)  # first: the waits that follow do not count the collections inside them
            with memoryview(records) as view, view.cast("B") as raw:
                kinds = raw[_KIND_BYTE :: 4 * 8].tobytes()
        n = len(records) // 4
        tags = records[0::4]
        t0s = records[1::4]
        t1s = records[2::4]
        vals = records[3::4]
        lo = 0
        if n >= 2 * FAST_MIN_STEPS and self.mode != "next":
            # Record by record up to the first step boundary, so the regular stretch starts just after one.
            first = next((i for i in range(min(n, 8)) if tags[i] & 0xFF in (K_STEP, K_OPT)), None)
            if first is not None:
                self._apply_each(tags, t0s, t1s, vals, 0, first + 1)
                folded = self._fold_regular(records, tags, first)
                lo = first + 1 + folded
                if not folded:
                    lo = self._fold_stretches(records, tags, t0s, t1s, vals, kinds, lo)
        elif n >= 2 * FAST_MIN_STEPS:
            lo = self._fold_next_stretches(records, tags, t0s, t1s, vals)
        self._apply_each(tags, t0s, t1s, vals, lo, n)
        for lst in (self.checkpoints, self.marks, self.phases, self.iter_starts):
            if self._events_cap is not None and len(lst) > self._events_cap:
                del lst[: len(lst) - self._events_cap]
        if n:
            self.last_seen = max(self.last_seen, t1s[n - 1] * NS)
            self._beat(t1s[n - 1] * NS)
        if exposed is not None:
            self._apply_exposed(exposed)
        if comm is not None:
            self._apply_comm(comm)

    def _apply_comm(self, records: array[int]) -> None:
        """``comm`` records (the thread blocked in a collective, see agent/_dist.py) go to the step whose span
        holds them, or to the step being built; like ``exposed`` records they are applied after the rest of
        their batch, so they never break the regular pattern _fold_regular folds."""
        ops = self.comm_by_op
        for i in range(0, len(records), 4):
            tag, t0n, t1n = records[i : i + 3]
            if t1n <= t0n:
                continue
            t0, t1 = t0n * NS, t1n * NS
            op = tag >> 8
            name = COMM_OPS[op] if 0 <= op < len(COMM_OPS) else COMM_OPS[0]
            ops[name] = ops.get(name, 0.0) + (t1 - t0)
            if not self.steps.add_comm(t0, t1) and self._cur_start is not None and t1 > self._cur_start:
                self._cur_comm += t1 - t0

    def _apply_exposed(self, records: array[int]) -> None:
        """``exposed`` records (CUDA event pairs, see agent/_cuda.py) arrive after their wait, often after
        its step ended: each goes to the step of its loader whose span holds the wait's [t0, t1] (bisect
        on the step table), or to the step being built. Applied after the rest of their batch, so they
        never break the regular pattern _fold_regular folds. The exposed time is clamped to [0, wait];
        one without a span (t1 <= t0, the form documented before version 1 carried spans) goes to the
        step being built and stands for its whole wait."""
        for i in range(0, len(records), 4):
            tag, t0n, t1n, value = records[i : i + 4]
            exposed = max(0, value) * NS
            if t1n <= t0n:
                self._cur_exposed = exposed if self._cur_exposed != self._cur_exposed else self._cur_exposed + exposed
                self._cur_exposed_wait = -1.0
                continue
            t0, t1 = t0n * NS, t1n * NS
            exposed = min(exposed, t1 - t0)
            lid = tag >> 8
            lid = lid if lid in self.loaders else 0
            if self.steps.add_exposed(t0, t1, exposed, lid):
                continue
            if self._cur_start is not None and t1 > self._cur_start and lid == (self._train or 0):
                self._cur_exposed = exposed if self._cur_exposed != self._cur_exposed else self._cur_exposed + exposed
                if self._cur_exposed_wait >= 0:
                    self._cur_exposed_wait += t1 - t0

    def _fold_state(self, exact: bool) -> tuple[int, LoaderInfo] | None:
        """The train loader (id, info) when the state just after a closed step allows a fold, else None.

        ``exact`` (_fold_prefix) also asks for what makes the columns match record-by-record ingestion bit for
        bit, and in explicit mode ignores other loaders' pending waits, which only an optimizer step reads."""
        ready = self._train_ready()
        if (
            ready is None
            or self._cur_batches
            or self._cur_wait
            or (self._pending_wait and not (exact and self.mode == "explicit"))
            or not self._seen_any_wait
            or (exact and (self._cur_comm or self._train_ended))
        ):
            return None
        return ready

    def _train_ready(self) -> tuple[int, LoaderInfo] | None:
        """The train loader (id, info) when what every fold needs holds: a step under way with no exposed idle
        measured in it, the warm-up over, the loader's workers not being started again; else None."""
        lid = self._train
        train = self.loaders.get(lid) if lid is not None else None
        if (
            lid is None
            or train is None
            or self._cur_start is None
            or self._cur_exposed == self._cur_exposed
            or self.steps.total < self._warm_until
            or self.restarts.waiting(lid)
        ):
            return None
        return lid, train

    def _room(self, m: int) -> int:
        """``m`` rows, or fewer where the step table's cap would trim among them."""
        cap = self.steps.cap
        return m if cap is None else min(m, cap - len(self.steps))

    def _pattern(self, tags: array[int], boundary: int, lid: int) -> list[int] | None:
        """The tags of one regular step after record ``boundary``: [train wait, boundary] or, with explicit
        steps, [train wait, optimizer step, step]; None when the mode and the boundary make no such pattern."""
        end_tag = tags[boundary]
        wait_tag = lid << 8 | K_WAIT
        if self.mode == "explicit" and end_tag & 0xFF == K_STEP:
            if boundary + 2 < len(tags) and tags[boundary + 2] & 0xFF == K_OPT:
                return [wait_tag, tags[boundary + 2], end_tag]
            return [wait_tag, end_tag]
        if self.mode == "opt" and end_tag & 0xFF == K_OPT:
            return [wait_tag, end_tag]
        return None

    def _fold_start(
        self, tags: array[int], boundary: int, exact: bool
    ) -> tuple[tuple[int, LoaderInfo], list[int], int, int] | None:
        """(fold state, step pattern, first record, whole patterns left) for a fold after record ``boundary``, or
        None when the state or the records that follow allow none."""
        state = self._fold_state(exact=exact)
        pattern = self._pattern(tags, boundary, state[0]) if state is not None else None
        if state is None or pattern is None:
            return None
        lo = boundary + 1
        return state, pattern, lo, (len(tags) - lo) // len(pattern)

    def _fold_regular(self, records: array[int], tags: array[int], boundary: int) -> int:
        """Fold the steps right after record ``boundary`` (which just closed a step) in whole columns, when the
        rest of the batch repeats one step pattern (see _pattern); returns how many records were folded (0 when
        the state or the batch does not allow it).

        Gives the same steps and loader figures as _apply_each does record by record."""
        start = self._fold_start(tags, boundary, exact=False)
        if start is None:
            return 0
        state, pattern, lo, m = start
        period = len(pattern)
        hi = lo + m * period
        if m < FAST_MIN_STEPS or any(tags[lo + q : hi : period].count(tag) != m for q, tag in enumerate(pattern)):
            return 0
        self._fold_columns(records, lo, m, period, state, exact=False)
        return m * period

    def _fold_prefix(self, records: array[int], tags: array[int], boundary: int) -> int:
        """Like _fold_regular, for the regular steps that follow record ``boundary`` up to the first record
        that breaks the pattern, and only where the columns equal what _apply_each gives bit for bit: no garbage
        collection near the waits, no step table trim among the folded steps. Returns the records folded."""
        start = self._fold_start(tags, boundary, exact=True)
        if start is None:
            return 0
        state, pattern, lo, m = start
        period = len(pattern)
        m = self._room(m)
        if m < FAST_MIN_STEPS:
            return 0
        m = _regular_run(tags, lo, pattern, m)
        if m < FAST_MIN_STEPS:
            return 0
        if self.gc.total:
            w0 = records[4 * lo + 1 : 4 * (lo + m * period) : 4 * period]
            w1 = records[4 * lo + 2 : 4 * (lo + m * period) : 4 * period]
            if self._gc_near(w0, w1):
                return 0
        self._fold_columns(records, lo, m, period, state, exact=True)
        return m * period

    def _gc_near(self, w0: array[int], w1: array[int]) -> bool:
        """Whether waits [w0, w1) (ns) must go record by record: a collection inside one, or a wait ending before
        it began."""
        gc = self.gc
        return any(map(operator.gt, w0, w1)) or bisect_left(gc.end, min(w0) * NS) < bisect_right(gc.start, max(w1) * NS)

    def _fold_columns(
        self, records: array[int], lo: int, m: int, period: int, state: tuple[int, LoaderInfo], exact: bool
    ) -> None:
        """Append the ``m`` regular steps of ``period`` records from record ``lo`` on as columns."""
        lid, train = state
        hi = lo + m * period
        t0s = records[4 * lo + 1 : 4 * hi : 4]
        t1s = records[4 * lo + 2 : 4 * hi : 4]
        mul, sub, ns = operator.mul, operator.sub, repeat(NS)  # t * NS: the float the record-by-record path makes
        end = array("d", map(mul, t0s[period - 1 :: period], ns))
        start = array("d", [cast(float, self._cur_start)])  # not None: _fold_state checked
        start.extend(end[:-1])
        dur = array("d", map(sub, end, start))
        raw_wait = array("d", map(sub, map(mul, t1s[0::period], ns), map(mul, t0s[0::period], ns)))
        if not exact and self.gc.total:
            self._discount_gc(
                array("d", map(mul, t0s[0::period], ns)), array("d", map(mul, t1s[0::period], ns)), raw_wait
            )
        # A wait is longer than its step only when it began before the step did (rare): cap those.
        wait = array("d", map(min, raw_wait, dur)) if any(map(operator.gt, raw_wait, dur)) else raw_wait
        batch = train.batch_size
        self.steps.extend_steady(start, end, dur, wait, batch if isinstance(batch, int) else 0, lid or 0)
        train.batches += m
        # In order, one addition at a time, as record by record (sum() compensates from Python 3.12 on).
        train.wait_s = functools.reduce(operator.add, raw_wait, train.wait_s) if exact else sum(raw_wait, train.wait_s)
        self._last_wait_loader = lid
        self._cur_start = self._last_end = end[-1]

    def _fold_stretches(
        self,
        records: array[int],
        tags: array[int],
        t0s: array[int],
        t1s: array[int],
        vals: array[int],
        kinds: bytes,
        lo: int,
    ) -> int:
        """From record ``lo`` (just after a step boundary) on: regular stretches in columns (_fold_prefix), the
        steps between them record by record. Returns where the rest of the batch starts (record by record)."""
        n = len(tags)
        pos = lo
        while n - pos >= 2 * FAST_MIN_STEPS and self.mode != "next":
            folded = self._fold_prefix(records, tags, pos - 1)
            pos += folded
            # Record by record through the step that broke the pattern; after a refusal, through several, so
            # that an irregular stretch costs one attempt per FAST_MIN_STEPS steps.
            boundary = K_STEP if self.mode == "explicit" else K_OPT
            nxt = pos - 1
            for _ in range(1 if folded else FAST_MIN_STEPS):
                nxt = kinds.find(boundary, nxt + 1)
                if nxt < 0:
                    return pos
            self._apply_each(tags, t0s, t1s, vals, pos, nxt + 1)
            pos = nxt + 1
        return pos

    def _fold_next_stretches(
        self, records: array[int], tags: array[int], t0s: array[int], t1s: array[int], vals: array[int]
    ) -> int:
        """Loader-driven steps (mode "next", each train batch starts a step): record by record through a train
        wait, then the train waits that follow it in a row in columns (_fold_next), and so on. Returns where the
        rest of the batch starts (record by record)."""
        n = len(tags)
        pos = 0
        skip = 1  # after a refusal, several train waits record by record: one attempt per FAST_MIN_STEPS steps
        while n - pos >= 2 * FAST_MIN_STEPS and self.mode == "next" and self._train is not None:
            wait_tag = self._train << 8 | K_WAIT
            nxt = pos - 1
            try:
                for _ in range(skip):
                    nxt = tags.index(wait_tag, nxt + 1)
            except ValueError:
                return pos
            self._apply_each(tags, t0s, t1s, vals, pos, nxt + 1)
            pos = nxt + 1
            folded = 0
            if self.mode == "next" and self._train is not None and self._train << 8 | K_WAIT == wait_tag:
                folded = self._fold_next(records, tags, pos)
            pos += folded
            skip = 1 if folded else FAST_MIN_STEPS
        return pos

    def _fold_next(self, records: array[int], tags: array[int], lo: int) -> int:
        """In mode "next", right after a train wait: fold the train waits in a row from record ``lo`` on in whole
        columns (each closes the step the one before began), where that gives bit for bit what _apply_each gives;
        returns the records folded."""
        ready = self._train_ready()
        if ready is None or self._cur_batches != 1 or self._cur_exposed_wait or self._cur_comm:
            return 0
        lid, train = ready
        m = self._room(len(tags) - lo)
        if m < FAST_MIN_STEPS:
            return 0
        m = _regular_run(tags, lo, [lid << 8 | K_WAIT], m)
        if m < FAST_MIN_STEPS:
            return 0
        w0 = records[4 * lo + 1 : 4 * (lo + m) : 4]
        w1 = records[4 * lo + 2 : 4 * (lo + m) : 4]
        if self.gc.total and self._gc_near(w0, w1):
            return 0
        mul, sub, ns = operator.mul, operator.sub, repeat(NS)
        end = array("d", map(mul, w0, ns))
        start = array("d", [cast(float, self._cur_start)])  # not None: _train_ready checked
        start.extend(end[:-1])
        dur = array("d", map(sub, end, start))
        raw_wait = array("d", map(sub, map(mul, w1, ns), end))
        wait = array("d", [self._cur_wait])  # each step's wait is the batch that began it
        wait.extend(raw_wait[:-1])
        if any(map(operator.gt, wait, dur)):
            wait = array("d", map(min, wait, dur))
        batch = train.batch_size
        self.steps.extend_steady(start, end, dur, wait, batch if isinstance(batch, int) else 0, lid or 0)
        train.batches += m
        train.wait_s = functools.reduce(operator.add, raw_wait, train.wait_s)
        self._last_wait_loader = lid
        self._cur_start = self._last_end = end[-1]
        self._cur_wait = raw_wait[-1]
        return m

    def _apply_each(
        self, tags: array[int], t0s: array[int], t1s: array[int], vals: array[int], lo: int, hi: int
    ) -> None:
        on_wait, on_boundary = self._on_wait, self._on_boundary
        for i in range(lo, hi):
            tag = tags[i]
            kind = tag & 0xFF
            if kind == K_WAIT:
                on_wait(tag >> 8, t0s[i] * NS, t1s[i] * NS)
            elif kind == K_OPT:
                on_boundary(t0s[i] * NS, False)
            elif kind == K_STEP:
                on_boundary(t0s[i] * NS, True)
            else:
                self._apply_other(tag, t0s[i] * NS, t1s[i] * NS, vals[i])

    def _apply_other(self, tag: int, t0: float, t1: float, value: int) -> None:
        kind = tag & 0xFF
        if kind == K_ITER_END:
            self._on_iter_end(tag >> 8, t0, t1)
        elif kind == K_ITER_START:
            self._on_iter_start(tag >> 8, t0, value, t1)
        elif kind == K_CKPT:
            self._add_checkpoint(t0, t1)
        elif kind == K_MARK:
            self.marks.append((t0, self.names.get(tag >> 8, f"mark-{tag >> 8}")))
        elif kind == K_PHASE:
            self.phases.append((t0, t1, self.names.get(tag >> 8, f"phase-{tag >> 8}")))

    def _add_checkpoint(self, t0: float, t1: float) -> None:
        """One checkpoint may be several saves (model, optimizer, RNG) inside a framework's span: merge
        spans that overlap or follow each other within CKPT_MERGE_GAP_S."""
        cps = self.checkpoints
        while cps and cps[-1][1] >= t0 - CKPT_MERGE_GAP_S and cps[-1][0] <= t1 + CKPT_MERGE_GAP_S:
            c0, c1 = cps.pop()
            t0, t1 = min(t0, c0), max(t1, c1)
        cps.append((t0, t1))

    def _discount_gc(self, w0: array[float], w1: array[float], wait: array[float]) -> None:
        """Take the collections that ran inside each wait [w0, w1] out of it: the DataLoader's own allocations set
        them off, and the loop was paused for the collector, not starved of data."""
        start, end, _ = self.gc.between(w0[0], w1[-1])
        for s, e in zip(start, end, strict=True):
            k = bisect_right(w0, s) - 1
            if k >= 0 and e <= w1[k]:
                wait[k] = max(0.0, wait[k] - (e - s))

    def _on_wait(self, lid: int, t0: float, t1: float) -> None:
        if self.gc.total:
            t1 = max(t0, t1 - self.gc.overlap_all(t0, t1))  # a collection inside __next__ is not data
        info = self.loaders.get(lid)
        if info is None:
            lid = self._bounded(lid)
            info = self._loader(lid)
        if self.restarts.pending:
            self.restarts.first_wait(lid, t0, t1, info.batches, info.wait_s)
        info.batches += 1
        info.wait_s += t1 - t0
        self._seen_any_wait = True
        self._last_wait_loader = lid
        if lid != self._train:
            train = self.loaders.get(self._train) if self._train is not None else None
            # Without optimizer steps the most iterated loader is the train loader; with them, the
            # loader whose batch precedes each optimizer step is (see _on_boundary).
            if train is None or (self.mode == "next" and info.batches > train.batches):
                self._train = lid
        if lid != self._train:
            self.eval_wait_s += t1 - t0
            wait, batches = self._pending_wait.get(lid, (0.0, 0))
            self._pending_wait[lid] = (wait + t1 - t0, batches + 1)
            if self._cur_start is None and self.mode != "next":
                self._cur_start = t0
            return
        if self.mode == "next":
            if self._cur_start is not None:
                self._close(self._cur_start, t0)
            self._cur_start = t0
            self._cur_wait = t1 - t0
            self._cur_batches = 1
        else:
            if self._cur_start is None:
                self._cur_start = t0
            self._cur_wait += t1 - t0
            self._cur_batches += 1

    def _on_boundary(self, t: float, explicit: bool) -> None:
        if explicit:
            if self.mode != "explicit" and self.steps.total:
                # Explicit marks are authoritative: steps inferred before the first one are replaced.
                self.steps.clear()
                self._warm_until = WARMUP_STEPS
            self.mode = "explicit"
        elif self.mode == "explicit":
            return
        else:
            if self.mode == "next" and self.steps.total:
                # Gradient accumulation: next() pairs looked like steps until the first optimizer step.
                self.steps.clear()
                self._warm_until = WARMUP_STEPS
            self.mode = "opt"
            last = self._last_wait_loader
            if last is not None and last != self._train:
                # The loader feeding the optimizer changed (a new train loader; eval loaders never
                # precede an optimizer step): its waits since the last step were this step's.
                self._train = last
                self._cur_wait, self._cur_batches = self._pending_wait.get(last, (0.0, 0))
                self.eval_wait_s -= self._cur_wait
                self._cur_start = self._cur_start if self._cur_start is not None else self._last_end
            self._pending_wait.clear()
            if self._seen_any_wait and self._cur_batches == 0 and not self._train_ended:
                # Another optimizer of the same iteration; unless the iterator ended since the last step: a loader
                # that fetches one batch ahead (accelerate's DataLoaderShard) hands out its last one after that.
                return
        self._train_ended = False
        start = self._cur_start if self._cur_start is not None else self._last_end
        if start is None:
            start = t
        self._close(start, t)
        self._cur_start = t

    def _on_iter_end(self, lid: int, t: float, t1: float) -> None:
        self._train_ended = self._train_ended or lid == self._train
        self.restarts.iter_end(self._bounded(lid), t, t1)
        if lid == self._train and self.mode == "next" and self._cur_start is not None:
            self._close(self._cur_start, t)
            self._cur_start = None

    def _on_iter_start(self, lid: int, t: float, workers: int, t1: float) -> None:
        lid = self._bounded(lid)
        workers = max(0, min(workers, 1024))  # as many as a workers message may list
        info = self._loader(lid)
        info.iterators += 1
        self.iter_starts.append((t, lid))
        persistent = bool(info.config.get("persistent_workers"))
        self.restarts.iter_start(lid, t, t1, workers, workers > 0 and not persistent and info.iterators > 1)
        if workers > 0 and not (persistent and info.iterators > 1):
            # Workers (re)starting: the next steps wait on their start-up, not on steady-state loading; each
            # worker's first batch does (they take batches in turn).
            self._warm_until = max(self._warm_until, self.steps.total + max(RESTART_WARMUP_STEPS, workers))
        if self.mode == "next" and lid == self._train:
            self._cur_start = None  # a new epoch: the gap before it is not a step

    def _close(self, start: float, end: float) -> None:
        train = self.loaders.get(self._train) if self._train is not None else None
        batch = train.batch_size if train is not None else None
        samples = self._cur_batches * batch if isinstance(batch, int) else 0
        warm = self.steps.total < self._warm_until
        wait = min(self._cur_wait, end - start)
        covered = self._cur_exposed_wait if self._cur_exposed_wait >= 0 else wait
        self.steps.add(start, end, wait, samples, warm, self._cur_exposed, self._train or 0, covered, self._cur_comm)
        self._last_end = end
        self._cur_wait = 0.0
        self._cur_batches = 0
        self._cur_exposed = _NAN
        self._cur_exposed_wait = 0.0
        self._cur_comm = 0.0


def _split_exposed(records: array[int]) -> tuple[array[int], array[int] | None]:
    return _split_kind(records, K_EXPOSED)


def _split_kind(records: array[int], kind: int) -> tuple[array[int], array[int] | None]:
    """(the batch without its records of ``kind``, those records or None): C-level finds and slices,
    one per such record, never a Python step per record."""
    with memoryview(records) as view, view.cast("B") as raw:
        kinds = raw[_KIND_BYTE :: 4 * 8].tobytes()
    pos = kinds.find(kind)
    if pos < 0:
        return records, None
    rest: array[int] = array("q")
    taken: array[int] = array("q")
    start = 0
    while pos >= 0:
        rest += records[4 * start : 4 * pos]
        taken += records[4 * pos : 4 * pos + 4]
        start = pos + 1
        pos = kinds.find(kind, start)
    rest += records[4 * start :]
    return rest, taken


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _regular_run(tags: array[int], lo: int, pattern: list[int], m: int) -> int:
    """How many of the ``m`` repeats of ``pattern`` from tag ``lo`` on come in a row: the longest regular run, found
    with a few C-level slice comparisons."""
    period = len(pattern)
    expected = array("q", pattern) * m
    if tags[lo : lo + m * period] == expected:
        return m
    good, bad = 0, m
    while bad - good > 1:
        mid = (good + bad) // 2
        if tags[lo : lo + mid * period] == expected[: mid * period]:
            good = mid
        else:
            bad = mid
    return good
