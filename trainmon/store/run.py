"""One training process as the monitor sees it: its identity, its loaders, what its info messages tell, and each
batch of records it sends, handed on to its step state machine (``trainmon.store.derive``: steps from records, one
at a time), its regular stretches folded in whole columns where ``trainmon.store.stretches`` schedules it.

The step table itself is in ``trainmon.store.steps``.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import Any

from trainmon.labels import main_role, run_label
from trainmon.protocol import K_COMM, K_COMPILE, K_COST, K_EXPOSED, K_GC, K_MEMORY, job_identity
from trainmon.protocol.clean import clean_outside
from trainmon.store import watched
from trainmon.store.agent_cost import AgentCost
from trainmon.store.compiles import Compiles
from trainmon.store.cuda_memory import CudaMemory
from trainmon.store.derive import WARMUP_STEPS, StepDeriver
from trainmon.store.gcspans import GcSpans
from trainmon.store.loaders import MAX_LOADERS, LoaderInfo, bounded, loader_of
from trainmon.store.restarts import Restarts
from trainmon.store.stacks import clean_stacks
from trainmon.store.steps import Steps
from trainmon.store.stretches import Stretches
from trainmon.store.watched import kinds_of as _kinds
from trainmon.store.watched import split_kind as _split_kind

NS = 1e-9
MAX_NAMES = 4096
BEAT_S = 0.5  # agent activity is kept at this resolution (see Run.last_activity)
MAX_STACK_DUMPS = 32  # per run: the oldest automatic stack dumps are dropped beyond this

__all__ = ["MAX_LOADERS", "WARMUP_STEPS", "LoaderInfo", "Run"]  # the first three are kept here for older imports


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
        # steps, loaders, gc and restarts are shared with the deriver: changed in place, never rebound.
        self.steps = Steps(cap, keep_s)
        self.checkpoints: list[tuple[float, float]] = []
        self.marks: list[tuple[float, str]] = []
        self.phases: list[tuple[float, float, str]] = []
        self.iter_starts: list[tuple[float, int]] = []  # (t, loader id)
        self.restarts = Restarts(cap)  # workers started again by a new iterator, and what each cost
        self.eval_wait_s = 0.0
        self.comm_by_op: dict[str, float] = {}  # seconds blocked in each kind of collective (protocol.COMM_OPS)
        self.records = 0
        self.revision = 0  # bumped by whatever the run sends that a judgement of it may read (not its cost records)
        self.gc = GcSpans(cap)  # the job's garbage-collection pauses
        self.beats = array("d")  # when the training did anything but collect garbage, every BEAT_S at most
        self.stack_dumps: list[dict[str, Any]] = []  # automatic stack dumps (trainmon.store.stacks), oldest first
        # A loop no loader drives: where its time outside the model goes, from the agent's stack samples
        # (INFO "outside", see protocol.clean_outside): {"samples", "model_samples", "hot": [...]}.
        self.outside: dict[str, Any] | None = None
        # The same, from the monitor's py-spy samples of the training thread (sources/pyspy/timed_stacks.py):
        # weighted by time, not by the interpreter lock (INFO "outside_timed", with "source": "py-spy").
        self.outside_timed: dict[str, Any] | None = None
        # The iterator whose __next__ hands the loop batches another thread made (INFO "handover"), where one does.
        self.handover_iterator: str | None = None
        self.compiles = Compiles(cap)  # torch.compile's compilations: spans, functions, failed guards
        self.cuda_memory = CudaMemory(cap)  # the CUDA allocator's peaks, read by the agent each tick
        self.agent_cost = AgentCost(cap)  # what the agent itself costs the training
        self._events_cap = cap
        self.deriver = StepDeriver(self)  # the step state machine (mode, train loader, the step being built)
        self.stretches = Stretches(self.deriver)  # where a batch is folded in columns, where record by record

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
        return job_identity(self.hello.get("job") or {}) or ""

    @property
    def job_key(self) -> tuple[Any, ...]:
        """What groups runs as ranks of one job (the straggler and communication rules): their ``job_id``, the
        one identity reports, Prometheus labels and the cluster view use too; a lone process is a job of its own."""
        ident = self.job_id
        return ("job", ident) if ident else ("pid", self.host, self.pid)

    def train_loader(self) -> LoaderInfo | None:
        return self.deriver.train_loader()

    @property
    def wait_source(self) -> str | None:
        """What measures the run's data wait: a loader's ``__next__`` ("dataloader", "torchdata", "iterable"), the
        training thread's wait for a batch another thread makes ("handover": a prefetcher's queue, a pool's future), the
        latest steps' time outside the model where no loader fed them ("outside_model"), or None (nothing does: a
        loop with no loader whose model the agent does not time; its data wait is unknown, not 0)."""
        d = self.deriver
        if d.outside_steps and d.last_measured != "handover" and len(self.steps) and self.steps.loader[-1] == 0:
            return "outside_model"
        train = self.train_loader()
        if self.deriver.handover_steps and (train is None or not train.batches):
            return "handover"
        if train is not None and train.batches:
            kind = train.config.get("kind")
            return kind if isinstance(kind, str) and kind else "dataloader"
        return "outside_model" if self.deriver.outside_steps else None

    @property
    def wait_measured(self) -> bool:
        return self.wait_source is not None

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

    # ------------------------------------------------------------ step derivation, as other modules see it

    @property
    def mode(self) -> str:
        """What marks this run's steps: "explicit" (``trainmon.agent.step()``), "opt" (optimizer steps) or "next"
        (train batches); a store that meets a run mid-way sets it from the agent's counts."""
        return self.deriver.mode

    @mode.setter
    def mode(self, mode: str) -> None:
        self.deriver.mode = mode

    @property
    def _train(self) -> int | None:
        """The train loader's id (the deriver's; see ``train_loader``)."""
        return self.deriver.train

    def resume_mid_step(self, last: int) -> None:
        """A store met this run mid-way, the agent's last record of kind ``last``: see StepDeriver.resume_mid_step."""
        self.deriver.resume_mid_step(last)

    def seed_train_loader(self, lid: int, batches: int) -> None:
        """A store met this run mid-way, ``batches`` batches of loader ``lid`` in: see
        StepDeriver.seed_train_loader."""
        self.deriver.seed_train_loader(lid, batches)

    # ------------------------------------------------------------ ingestion

    def apply_info(self, info: dict[str, Any]) -> None:
        self.revision += 1
        if isinstance(loader := info.get("loader"), dict):
            lid = _as_int(loader.get("id"))
            if lid is not None and bounded(self.loaders, lid) == lid:
                cfg = {k: v for k, v in loader.items() if k != "id"}
                loader_of(self.loaders, lid).config = cfg
        if isinstance(workers := info.get("workers"), dict):
            lid = _as_int(workers.get("loader"))
            pids = workers.get("pids")
            if lid is not None and bounded(self.loaders, lid) == lid and isinstance(pids, list):
                loader = loader_of(self.loaders, lid)
                loader.worker_pids = [p for p in pids if isinstance(p, int)][:1024]
                proc = workers.get("proc_pids")
                if isinstance(proc, list) and len(proc) == len(pids):
                    loader.proc_pids = [p if isinstance(p, int) else 0 for p in proc][:1024]
                else:
                    loader.proc_pids = None
                loader.add_generation(workers.get("t_ns"), self.pid_namespace == "own")
        if isinstance(handover := info.get("handover"), dict):
            self.handover_iterator = str(handover.get("iterator") or "")[:200] or None
        if isinstance(feed := info.get("feed"), dict):
            lid = _as_int(feed.get("loader"))
            if lid is not None and bounded(self.loaders, lid) == lid:
                loader_of(self.loaders, lid).fed_by = str(feed.get("thread") or "another thread")[:80]
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
        if isinstance(outside := info.get("outside"), dict):
            self.outside = outside
        if (timed := clean_outside(info.get("outside_timed"))) is not None:
            self.outside_timed = timed | {"source": "py-spy"}
        watched.apply_info(self, info)  # torch.compile's compilations, the CUDA device's memory
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

    def apply_events(self, records: array[int]) -> None:
        """Fold a batch of flat int64 records into the step table (see trainmon.protocol).

        The step records go to the deriver through its schedule of folds (``trainmon.store.stretches``): record by
        record, except for the stretches where steps repeat one pattern, folded in whole columns."""
        d = self.deriver
        self.records += len(records) // 4
        exposed = comm = None
        kinds = _kinds(records)
        if kinds.count(K_COST) != len(kinds):
            self.revision += 1  # the agent's own cost alone changes no judgement of the run
        if K_COMPILE in kinds or K_MEMORY in kinds or K_COST in kinds:
            records = watched.take_records(self, records)
            kinds = _kinds(records)
        if K_EXPOSED in kinds or K_COMM in kinds or K_GC in kinds:
            records, exposed = _split_kind(records, K_EXPOSED)
            records, comm = _split_kind(records, K_COMM)
            records, gc = _split_kind(records, K_GC)
            if gc is not None:
                self.gc.add_records(gc)  # first: the waits that follow do not count the collections inside them
            kinds = _kinds(records)
        self.stretches.apply(records, kinds)
        for lst in (self.checkpoints, self.marks, self.phases, self.iter_starts):
            if self._events_cap is not None and len(lst) > self._events_cap:
                del lst[: len(lst) - self._events_cap]
        n = len(records) // 4
        if n:
            last_t1 = records[4 * n - 2] * NS
            self.last_seen = max(self.last_seen, last_t1)
            self._beat(last_t1)
        if exposed is not None:
            d.apply_exposed(exposed)
        if comm is not None:
            d.apply_comm(comm)


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
