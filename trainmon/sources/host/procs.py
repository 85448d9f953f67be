"""The training process tree (mains, DataLoader workers, ranks) as series: CPU, memory, I/O, thread states,
run-queue wait, network waits.

`ProcSource` composes the parts: the /proc reads (`trainmon.sources.host.procfs`: kept descriptors, fields by name),
the thread-state sampler (`trainmon.sources.host.thread_states`), the network-wait classification
(`trainmon.sources.host.sockets`) and the usable cores of the mains (`trainmon.sources.host.cgroup`); here they become
per-second rates and shares. Only the pids handed over by `tracked()` are ever read. Never raises.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Mapping

from trainmon.metrics import PROC
from trainmon.sources.base import Source
from trainmon.sources.host.cgroup import CpuBudget
from trainmon.sources.host.procfs import CLK_TCK, Gone, HeldFiles, ProcFiles, Reading, held_limit
from trainmon.sources.host.sockets import NetWaits
from trainmon.sources.host.thread_states import (
    DISK,
    LOOKS,
    MAIN,
    NET_WAIT,
    QUEUE_WAIT,
    RUNNING,
    SLEEPING,
    THREAD_READS_PER_S,
    UNRESOLVED,
    Counts,
    ThreadStates,
)

log = logging.getLogger("trainmon.procs")

MB = 2**20
_SHARES = (("R", RUNNING), ("S", SLEEPING), ("D", DISK))  # series state_<letter> → counter


class ProcSource(Source):
    name = "procs"
    logger = log
    repeat_log_level = logging.DEBUG

    def __init__(
        self, tracked: Callable[[], Mapping[int, str]], hz_states: float = 10.0, *, proc_root: str = "/proc"
    ) -> None:
        super().__init__()
        self.tracked = tracked
        self.hz_states = hz_states
        self.proc_root = proc_root.rstrip("/") or "/"
        self._roles: dict[int, str] = {}
        self._pids: tuple[int, ...] = ()
        self._workers: frozenset[int] = frozenset()  # the pids whose network waits are classified
        self._net = NetWaits(self.proc_root)
        # Usable cores of the training's main processes, read in the tree that holds proc_root (and its /sys).
        tree, name = os.path.split(self.proc_root)
        self._budget = CpuBudget("" if tree == "/" else tree) if name == "proc" else None
        self._prev: dict[int, Reading] = {}
        self._gone: set[int] = set()  # tracked pids already found gone: logged once each
        # Only on a procfs: a kept descriptor of a plain file (a copied or fake tree) reads on after it is deleted.
        self._held = HeldFiles(held_limit() if os.path.islink(f"{self.proc_root}/self") else 0)
        self._files = ProcFiles(self.proc_root, self._held)
        # THREAD_READS_PER_S is looked up here, not bound at import: tests shrink it on this module.
        self._states = ThreadStates(
            self.proc_root, self._held, self._net, self.log_once, hz_states, reads_per_s=THREAD_READS_PER_S
        )

    # ---- public -------------------------------------------------------------------------------------

    def roles(self) -> dict[int, str]:
        """{pid: role} as of the last sample."""
        return dict(self._roles)

    @property
    def fast(self) -> bool:
        return self._states.fast

    def set_fast(self, fast: bool) -> None:
        """Look at thread states ``hz_states`` times a second (True), or only once per sample() (False: the
        sampler thread parks and costs nothing). The Monitor slows it down while no verdict reads the states."""
        self._states.set_fast(fast)

    def close(self) -> None:
        """Stop the state sampler thread. sample() still works afterwards, observing states once per call."""
        self._states.close()
        self._held.close()  # from here on every file is read by path

    def __enter__(self) -> ProcSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sample(self, now: float | None = None) -> dict[str, float]:
        """Metrics per tracked pid since the previous call. Rates of a pid appear from its second sample on.

        `now` is the caller's timestamp and is not used: rates use the monotonic time of each read.
        """
        out: dict[str, float] = {}
        try:
            pids = self._refresh_tracked()
            self._states.start()
            counts = self._states.take(pids)
            socks = self._net.network_sockets([pid for pid in pids if pid in self._workers])
            mains = [pid for pid in pids if self._roles.get(pid) in ("main", "rank")]
            for pid, figures in (self._budget.sample(mains) if self._budget is not None else {}).items():
                for name, value in figures.items():
                    out[PROC.key(pid, "cpu_" + name)] = value
            for pid in pids:
                metrics = self._sample_or_drop(pid, counts.get(pid), socks.get(pid))
                if metrics is not None:
                    out.update(metrics)
            for pid in list(self._prev):
                if pid not in self._roles:
                    self._forget(pid)
            self._gone.intersection_update(self._roles)
        except Exception as exc:  # last resort: a source must never break the monitor
            self.log_once("unexpected", "procs: unexpected error: %r", exc)
        return out

    # ---- what tests look inside: the sampler's parts ---------------------------------------------------

    @property
    def _thread(self) -> threading.Thread | None:
        return self._states.thread

    @property
    def _lock(self) -> threading.Lock:
        return self._states.lock

    @property
    def _counts(self) -> dict[int, Counts]:
        return self._states.counts

    @property
    def _observe(self) -> Callable[[int], tuple[Counts, int] | None]:
        """The sampler's one look at a pid (the sampler thread's and the tick's); a test wraps it."""
        return self._states.observe

    @_observe.setter
    def _observe(self, observe: Callable[[int], tuple[Counts, int] | None]) -> None:
        self._states.observe = observe  # type: ignore[method-assign,assignment]

    # ---- tracked set ------------------------------------------------------------------------------------

    def _refresh_tracked(self) -> tuple[int, ...]:
        try:
            raw = dict(self.tracked())
        except Exception as exc:
            self.log_once("tracked", "procs: tracked() failed, keeping the last set: %r", exc)
            return self._pids
        roles: dict[int, str] = {}
        for pid, role in raw.items():
            try:
                ipid = int(pid)
            except (TypeError, ValueError):
                continue
            if ipid > 0:
                roles[ipid] = str(role)
        self._roles = roles
        self._workers = frozenset(pid for pid, role in roles.items() if role == "worker")
        self._pids = tuple(sorted(roles))
        self._held.keep_pids(frozenset(roles))
        self._states.track(self._pids, self._workers)
        return self._pids

    # ---- per pid ----------------------------------------------------------------------------------------

    def _sample_or_drop(self, pid: int, counts: Counts | None, socks: int | None) -> dict[str, float] | None:
        """The pid's figures, or None once it is gone (or unreadable), when all that is kept of it is dropped."""
        try:
            return self._sample_pid(pid, counts, socks)
        except Gone:
            pass
        except Exception as exc:
            self.log_once(f"pid-error:{type(exc).__name__}", "procs: reading pid %d failed: %r", pid, exc)
        if pid in self._prev or pid not in self._gone:
            log.debug("procs: pid %d is gone, dropped", pid)
        self._gone.add(pid)
        self._forget(pid)
        return None

    def _sample_pid(self, pid: int, counts: Counts | None, socks: int | None = None) -> dict[str, float]:
        cur = self._files.read(pid)
        prev = self._prev.get(pid)
        if prev is not None and prev.starttime != cur.starttime:
            prev = None  # pid reused by a new process: start over
        p = PROC.id_prefix(pid)
        out: dict[str, float] = {p + "rss_mb": cur.rss_bytes / MB, p + "threads": float(cur.threads)}
        out.update(_state_shares(p, counts))
        if pid in self._workers:
            out.update(self._net_figures(pid, p, counts, socks, cur.na))
        self._note_na(pid, p, cur.na)
        for key in cur.na:
            out[p + key] = math.nan
        if prev is not None:
            out.update(_rates(p, cur, prev))
        self._prev[pid] = cur
        return out

    def _net_figures(
        self, pid: int, prefix: str, counts: Counts | None, socks: int | None, na: dict[str, str]
    ) -> dict[str, float]:
        """A worker's network-wait shares (of the looks at it) and the network sockets it holds."""
        out: dict[str, float] = {}
        if socks is not None:
            self._states.note_sockets(pid, socks)
            out[prefix + "net_sockets"] = float(socks)
        if pid in self._net.syscall_denied:
            self.log_once(
                "net-wchan",
                "procs: %s/<pid>/task/*/syscall not readable: network waits from wait channels only, "
                "poll and epoll waits unresolved",
                self.proc_root,
            )
        if pid in self._net.syscall_denied and pid in self._net.wchan_hidden:
            reason = (
                f"{self.proc_root}/{pid}/task/*/syscall is not readable and wchan reads 0 "
                "(run trainmon as the training job's user, or as root)"
            )
            na["net_wait"] = na["wait_unresolved"] = na["queue_wait"] = reason
        elif counts and counts[MAIN + LOOKS]:
            out[prefix + "net_wait"] = counts[NET_WAIT] / counts[MAIN + LOOKS]
            out[prefix + "wait_unresolved"] = counts[UNRESOLVED] / counts[MAIN + LOOKS]
            out[prefix + "queue_wait"] = counts[QUEUE_WAIT] / counts[MAIN + LOOKS]
        return out

    # ---- bookkeeping ------------------------------------------------------------------------------------

    def _note_na(self, pid: int, prefix: str, na: dict[str, str]) -> None:
        """The pid's n/a series are those of ``na`` now; a reason it newly has is logged (once per reason)."""
        self.clear_na_under(prefix, keep={prefix + key for key in na})
        for reason in sorted(set(na.values())):
            keys = sorted(k for k, r in na.items() if r == reason)
            if self.na_reason(prefix + keys[0]) != reason:  # newly n/a for this pid
                self.log_once(
                    f"na:{reason.replace(str(pid), '<pid>')}", "procs: pid %d: %s n/a: %s", pid, ", ".join(keys), reason
                )
        for key, reason in na.items():
            self.na(prefix + key, reason)

    def _forget(self, pid: int) -> None:
        self._held.forget(pid)
        self._prev.pop(pid, None)
        self._net.forget(pid)
        self.clear_na_under(PROC.id_prefix(pid))
        self._states.forget(pid)


def _state_shares(prefix: str, counts: Counts | None) -> dict[str, float]:
    if not counts or not counts[LOOKS]:
        return {}
    out: dict[str, float] = {}
    n, main_n = counts[LOOKS], counts[MAIN + LOOKS]
    for letter, i in _SHARES:
        out[f"{prefix}state_{letter}"] = counts[i] / n
        if main_n:
            out[f"{prefix}state_main_{letter}"] = counts[MAIN + i] / main_n
    return out


def _rates(prefix: str, cur: Reading, prev: Reading) -> dict[str, float]:
    out: dict[str, float] = {}
    dt = cur.t - prev.t
    if dt <= 0:
        return out
    out[prefix + "cpu_pct"] = max(0, cur.cpu_ticks - prev.cpu_ticks) / CLK_TCK / dt * 100.0
    if cur.io is not None and prev.io is not None:
        for name, value in cur.io.items():
            old = prev.io.get(name)
            if old is not None:
                out[prefix + name] = max(0, value - old) / MB / dt
    if cur.wait_ns is not None and prev.wait_ns is not None and cur.wait_t > prev.wait_t:
        # Threads born during the interval count from zero; threads that died take their wait with them.
        waited = sum(max(0, ns - prev.wait_ns.get(tid, 0)) for tid, ns in cur.wait_ns.items())
        out[prefix + "runq_wait_ms_s"] = waited / 1e6 / (cur.wait_t - prev.wait_t)
    return out
