"""Stack dumps the monitor takes by itself when a critical verdict fires, kept as evidence.

When a critical finding names a run, py-spy dumps that run's main process and as many DataLoader workers as the
verdict's registry entry says (``dump_workers``: one, or up to eight for a hang, passed in by the Monitor), at
most once per run and verdict code every ``cooldown_s``. The result goes
through the monitor's Ingest as the run's INFO ``{"stacks": ...}`` (format: ``trainmon.store.stacks``), so the
store, the recording and every view get the same evidence.

Cost, measured by benchmarks/bench_stack_dumps.py: py-spy reads the target's memory from outside, about 10 to
60 ms of wall time and as much CPU per process (more for big interpreters), on a background thread: a tick
never waits for it. It runs ``--nonblocking``: the training is never paused. A stack read while a thread moves
may be torn, which a hung or stopped process (the case that matters most) never does; without
``--nonblocking`` py-spy would stop every thread of the job for the read, once per process.
A run whose pids could not be mapped into the monitor's pid namespace is never dumped: its entries say
"n/a (other pid namespace)".
"""

from __future__ import annotations

import logging
import queue
import resource
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from trainmon.sources.pyspy.py_spy import dump as pyspy_dump
from trainmon.sources.pyspy.py_stacks import StackDump
from trainmon.store.run import Run
from trainmon.store.store import Store

log = logging.getLogger("trainmon.autodump")

COOLDOWN_S = 300.0  # one dump per run and code in this long
OTHER_NAMESPACE = "n/a (other pid namespace)"

Emit = Callable[[int, float, dict[str, Any]], None]  # (run id, t, INFO message): the monitor's Ingest.info
Target = tuple[str, int, bool]  # (role, pid, mapped): an unmapped pid is the agent's own, never dumped


class FindingLike(Protocol):
    """What is read of a diagnosis Finding (the diagnosis is a sibling layer, not imported)."""

    @property
    def code(self) -> str: ...

    @property
    def severity(self) -> str: ...

    @property
    def evidence(self) -> Mapping[str, Any]: ...


def targets(run: Run, workers: int) -> list[Target]:
    """The processes to dump: the main process, then up to ``workers`` of its workers (the verdict's
    ``dump_workers`` in the diagnosis's registry: every worker for a hang, one otherwise)."""
    main = run.proc_pid
    out: list[Target] = [("main", main, True) if main is not None else ("main", run.agent_pid, False)]
    limit = max(0, workers)
    mapped = run.worker_pids()[:limit]
    out += [("worker", pid, True) for pid in mapped]
    out += [("worker", pid, False) for pid in run.unmapped_worker_pids()[: limit - len(mapped)]]
    return out


def _run_named(store: Store, finding: FindingLike) -> Run | None:
    label = finding.evidence.get("run")
    runs = [r for r in store.runs.values() if r.label == label]
    live = [r for r in runs if r.connected]
    found = live or runs
    return found[-1] if found else None


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class AutoDumper:
    """Decides on the monitor's tick (``consider``), dumps on its own thread, emits through ``emit``."""

    def __init__(
        self,
        emit: Emit,
        dump: Callable[[int], StackDump] = pyspy_dump,
        cooldown_s: float = COOLDOWN_S,
        clock: Callable[[], float] = time.monotonic,
        workers_for: Callable[[str], int] = lambda code: 1,
    ) -> None:
        self.emit = emit
        self.workers_for = workers_for  # how many workers to dump with the main process, by verdict code
        self.dump = dump
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.rounds = 0  # dumps rounds finished
        self._last: dict[tuple[int, str], float] = {}
        self._queue: queue.Queue[tuple[int, str, list[Target]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending = 0  # rounds queued and not finished
        self._idle = threading.Condition()

    def consider(self, store: Store, t: float, findings: Iterable[FindingLike]) -> int:
        """Queue a round of dumps for each critical finding not dumped for its run in ``cooldown_s``; how many."""
        queued = 0
        with store.lock:
            for f in findings:
                if f.severity != "critical":
                    continue
                run = _run_named(store, f)
                if run is None:
                    continue
                key = (run.id, f.code)
                last = self._last.get(key)
                if last is not None and t - last < self.cooldown_s:
                    continue
                self._last[key] = t
                with self._idle:
                    self._pending += 1
                self._queue.put((run.id, f.code, targets(run, self.workers_for(f.code))))
                queued += 1
        if queued:
            self._ensure_thread()
        return queued

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="trainmon-autodump", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            try:
                self.take(*job)
            except Exception:
                log.exception("automatic stack dump failed")
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def take(self, run_id: int, reason: str, procs: list[Target]) -> dict[str, Any]:
        """Dump ``procs`` now and emit the result as the run's evidence; returns it."""
        t0 = self.clock()
        entries: list[dict[str, Any]] = []
        for role, pid, mapped in procs:
            if not mapped:
                entries.append({"pid": pid, "role": role, "error": OTHER_NAMESPACE, "threads": []})
                continue
            cpu0 = _children_cpu_s()
            entry = self.dump(pid).to_dict(role)
            # Children's CPU, counted when they are reaped: py-spy's own, unless another child ended meanwhile.
            entry["cpu_ms"] = round((_children_cpu_s() - cpu0) * 1e3, 1)
            entries.append(entry)
        evidence = {"reason": reason, "t": t0, "processes": entries}
        self.emit(run_id, self.clock(), {"stacks": evidence})
        self.rounds += 1
        return evidence

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Until every queued round is done; False if that takes longer than ``timeout``."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        """The worker thread ends after the rounds already queued."""
        self._queue.put(None)
