"""The thread-state sampler: how often each tracked process's threads are found running, sleeping or in D.

Thread states are point-in-time, so a background thread looks at every ``/proc/<pid>/task/*/stat`` several times
per tick (``hz`` times a second, within a budget of thread reads per second) and counts what it saw; the tick
takes the counts (`ThreadStates.take`) and `trainmon.sources.host.procs` turns them into shares. For DataLoader workers
the same looks also tell whether a worker that is not running waits on the network (a socket, a network
filesystem: see ``sockets.py``). While no verdict reads the states the sampler parks, and each tick looks once.
"""

from __future__ import annotations

import os
import threading
import time

from trainmon.sources.base import LogOnce
from trainmon.sources.host.procfs import HeldFiles, thread_state
from trainmon.sources.host.sockets import NET, QUEUE, UNKNOWN, NetWaits

THREAD_READS_PER_S = 200  # the sampler's budget: 10 Hz for up to 20 threads, 1 Hz for 200, slower beyond

# A pid's counters, summed over looks, by index: every thread's observations and those of them in R (running or
# runnable), S (sleeping) and D (uninterruptible, nearly always disk or network-filesystem I/O); the same of the
# main thread alone (MAIN + any of those); then, for a DataLoader worker, the looks at which it waited on the
# network, those at which what it waited on could not be told, and those at which its main thread waited on pipes
# only (its index queue: the worker has handed over what it was asked for and waits to be asked for more).
LOOKS, RUNNING, SLEEPING, DISK = 0, 1, 2, 3
MAIN = 4
NET_WAIT, UNRESOLVED, QUEUE_WAIT = 8, 9, 10
_NCOUNT = 11
STATES = {b"R": RUNNING, b"S": SLEEPING, b"D": DISK}
_BLOCKED = (b"S", b"D")

Counts = list[int]


class ThreadStates:
    """Looks at the thread states of the pids given to `track`, in a thread of its own (started by `start`)."""

    def __init__(
        self,
        proc_root: str,
        held: HeldFiles,
        net: NetWaits,
        log_once: LogOnce,
        hz: float = 10.0,
        reads_per_s: float = THREAD_READS_PER_S,
    ) -> None:
        self.proc_root = proc_root
        self.held = held
        self.net = net
        self.log_once = log_once
        self.hz = hz
        self.reads_per_s = reads_per_s
        self.pids: tuple[int, ...] = ()  # read by the sampler thread; replaced, never mutated
        self.workers: frozenset[int] = frozenset()  # likewise: the pids whose network waits are classified
        self.socks: dict[int, int] = {}  # worker → network sockets it held at the last tick
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()  # guards `counts`
        self.counts: dict[int, Counts] = {}  # pid → what the sampler saw since the last `take`
        # pid → (when, counts) of the sampler's latest look: a tick between two passes of a slow sampler repeats it.
        self._last_look: dict[int, tuple[float, Counts]] = {}
        self._pass_s = 0.0  # how long the sampler's passes are apart (its read budget stretches them)
        self._stop = threading.Event()
        self._fast = threading.Event()  # set: the sampler looks hz times a second; clear: once per tick
        self._fast.set()

    # ---- control ------------------------------------------------------------------------------------

    def track(self, pids: tuple[int, ...], workers: frozenset[int]) -> None:
        self.pids = pids
        self.workers = workers

    def start(self) -> None:
        """Start the sampler thread, unless it runs, was stopped, or ``hz`` is 0."""
        if self.thread is not None or self._stop.is_set() or not self.hz or self.hz <= 0:
            return
        self.thread = threading.Thread(target=self._loop, name="trainmon-procs-states", daemon=True)
        self.thread.start()

    @property
    def fast(self) -> bool:
        return self._fast.is_set()

    def set_fast(self, fast: bool) -> None:
        """Look ``hz`` times a second (True), or only once per tick (False: the thread parks and costs nothing)."""
        if fast == self._fast.is_set() or self._stop.is_set():
            return
        if fast:
            self._fast.set()
        else:
            self._fast.clear()

    def close(self) -> None:
        """Stop the sampler thread; `take` looks once per call from then on."""
        self._stop.set()
        self._fast.set()  # a parked sampler wakes to see the stop
        thread, self.thread = self.thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)

    def note_sockets(self, worker: int, sockets: int) -> None:
        """How many network sockets ``worker`` holds now: its looks at a wait try the network first if any."""
        self.socks[worker] = sockets

    def forget(self, pid: int) -> None:
        self.socks.pop(pid, None)
        with self.lock:
            self.counts.pop(pid, None)
        self._last_look.pop(pid, None)

    # ---- counts -------------------------------------------------------------------------------------

    def take(self, pids: tuple[int, ...]) -> dict[int, Counts]:
        """The counts of ``pids`` since the last call; a pid the sampler has not looked at is looked at now."""
        with self.lock:
            counts, self.counts = self.counts, {}
        now = time.monotonic()
        # Between two passes of a sampler slowed by its budget (a big tree), its latest look stands for the tick:
        # looking here as well would double the reads the budget is there to bound.
        fresh_s = 2 * self._pass_s + 1.0 if self._fast.is_set() and self.thread is not None else -1.0
        looking = []
        for pid in pids:
            got = counts.get(pid)
            if got and got[LOOKS]:
                self._last_look[pid] = (now, got)
            elif (last := self._last_look.get(pid)) is not None and now - last[0] <= fresh_s:
                counts[pid] = list(last[1])
            else:
                looking.append(pid)  # first call, no sampler or a parked one, or a pid just added: look once now
        if looking:
            self.net.begin_pass()
        for pid in looking:
            obs = self.observe(pid)
            if obs is not None:
                counts[pid] = obs[0]
        return counts

    def _add(self, pid: int, obs: Counts) -> None:
        with self.lock:
            acc = self.counts.get(pid)
            if acc is None:
                self.counts[pid] = obs
            else:
                for i, v in enumerate(obs):
                    acc[i] += v

    # ---- looks --------------------------------------------------------------------------------------

    def _loop(self) -> None:
        base = 1.0 / self.hz
        period = base
        next_t = time.monotonic()
        while True:
            next_t += period
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind (suspended, overloaded): skip missed ticks, don't burst
                next_t = time.monotonic()
                delay = 0.0
            if self._stop.wait(delay):
                return
            if not self._fast.is_set():  # parked until looks matter again; each tick looks once meanwhile
                self._fast.wait()
                if self._stop.is_set():
                    return
                next_t = time.monotonic()
                continue
            try:
                period = self._pass_s = max(base, self._pass() / self.reads_per_s)
            except Exception as exc:
                self.log_once("sampler", "procs: state sampler error: %r", exc)

    def _pass(self) -> int:
        """One look at every tracked pid; the thread reads it took (a budget of reads per second stretches the
        passes of a big tree: it is looked at less often, not at a higher cost)."""
        reads = 0
        self.net.begin_pass()
        for pid in self.pids:
            obs = self.observe(pid)
            if obs is not None:
                counts, n = obs
                self._add(pid, counts)
                reads += n
        return reads

    def observe(self, pid: int) -> tuple[Counts, int] | None:
        """One look at every thread's state of pid: its counts, and the thread reads it took. None when the
        process is gone."""
        task_dir = f"{self.proc_root}/{pid}/task"
        try:
            tids = os.listdir(task_dir)
        except OSError:
            return None
        counts = [0] * _NCOUNT
        main = str(pid)
        blocked: list[str] = []
        held = self.held
        for tid in tids:
            try:
                state = thread_state(held.read(pid, "task-stat", tid, f"{task_dir}/{tid}/stat"))
            except OSError:
                continue  # the thread exited after the listing
            idx = STATES.get(state, 0)
            counts[LOOKS] += 1
            if idx:
                counts[idx] += 1
            if state in _BLOCKED:
                blocked.append(tid)
            if tid == main:
                counts[MAIN + LOOKS] += 1
                if idx:
                    counts[MAIN + idx] += 1
        held.retain(pid, "task-stat", set(tids))
        reads = counts[LOOKS]
        if pid in self.workers and counts[MAIN + LOOKS] and not counts[MAIN + RUNNING]:
            reads += self._look_at_waits(pid, main, blocked, counts)
        return counts, reads

    def _look_at_waits(self, pid: int, main: str, blocked: list[str], counts: Counts) -> int:
        """What a waiting worker waits on, into ``counts``; the reads it took. Only the run's DataLoader workers,
        only while their main thread is not running, only their blocked threads (main first), stopping at the
        first network wait; each look counts against the read budget like a state read, so a large tree is looked
        at less often, not at more cost."""
        if main in blocked:
            blocked.remove(main)
            blocked.insert(0, main)
        reads = 0
        unresolved = False
        holds_network = self.socks.get(pid, 0) > 0
        for tid in blocked:
            reads += 1
            kind = self.net.classify(pid, tid, holds_network)
            if kind == NET:
                counts[NET_WAIT] += 1
                break
            if kind == QUEUE and tid == main:
                counts[QUEUE_WAIT] += 1  # ahead of the loop: its other threads' waits are not what holds it
                break
            unresolved = unresolved or kind == UNKNOWN
        else:
            counts[UNRESOLVED] += int(unresolved)
        return reads
