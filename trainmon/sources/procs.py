"""The training process tree (mains, DataLoader workers, ranks): CPU, memory, I/O, thread states, run-queue wait.

Only the pids handed over by `tracked()` are ever read, straight from /proc (standard library only).
Thread states are point-in-time, so a background thread samples `/proc/<pid>/task/*/stat` several times per
interval and `sample()` reports the share of observations in R (running or runnable), S (sleeping) and
D (uninterruptible, nearly always disk or network-filesystem I/O). For DataLoader workers the same looks also
tell whether a worker that is not running waits on the network (a socket, a network filesystem: see
``sockets.py``), which ``rchar`` misses for every client that reads sockets with recv(). Never raises.
"""

from __future__ import annotations

import logging
import math
import os
import resource
import threading
import time
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from trainmon.metrics import PROC, PROC_IO_FIELDS
from trainmon.sources.cgroup import CpuBudget
from trainmon.sources.sockets import NET, UNKNOWN, NetWaits

log = logging.getLogger("trainmon.procs")

ROLES = ("main", "worker", "rank", "child")
MB = 2**20
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_READ_MAX = 8192
_STATES = (b"R", b"S", b"D")
_STATE_INDEX = {state: i for i, state in enumerate(_STATES, start=1)}
# Counters per pid: all threads' observations then the main thread's: [n, R, S, D, main_n, main_R, main_S, main_D],
# then, for workers, the observations in which the worker waited on the network and those whose wait was unresolved.
_NCOUNT = 10
THREAD_READS_PER_S = 200  # the state sampler's budget: 10 Hz for up to 20 threads, 1 Hz for 200, slower beyond


class _Gone(Exception):
    """The process exited (or became a zombie) between listing and reading."""


def _held_limit() -> int:
    """How many /proc files a ProcSource keeps open: a quarter of the descriptor limit, 4096 at most."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return 0
    return 4096 if soft == resource.RLIM_INFINITY else max(0, min(4096, soft // 4))


class _Held:
    """/proc files of the tracked pids kept open between reads, each re-read from its start with one pread instead
    of open, read and close; at most ``limit`` of them, the rest read by path.

    Files are grouped per pid ("stat", "io", and per thread). A kept file whose process or thread has gone (the
    kernel answers ESRCH once it is reaped, also when its pid is reused), or that fails in any way, is closed and
    read again by path: what is returned is always what a fresh open would read. One lock covers the reads too, so
    that a file closed by one thread is never read through a reused descriptor by the other."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._fds: dict[int, dict[str, dict[str, int]]] = {}  # pid → group → name → fd
        self._n = 0
        self._lock = threading.Lock()

    def read(self, pid: int, group: str, name: str, path: str) -> bytes:
        with self._lock:
            files = self._fds.get(pid, {}).get(group)
            fd = files.get(name) if files is not None else None
            if fd is not None and files is not None:
                try:
                    return os.pread(fd, _READ_MAX, 0)
                except OSError:
                    del files[name]
                    self._n -= 1
                    os.close(fd)
            fd = os.open(path, os.O_RDONLY)
            try:
                data = os.read(fd, _READ_MAX)
            except BaseException:
                os.close(fd)
                raise
            if self._n < self.limit:
                self._fds.setdefault(pid, {}).setdefault(group, {})[name] = fd
                self._n += 1
            else:
                os.close(fd)
            return data

    def reread(self, pid: int, group: str, count: int) -> dict[str, bytes] | None:
        """Every kept file of ``group`` re-read, when there are exactly ``count`` of them and all still read; else
        None (a failed one is closed)."""
        with self._lock:
            files = self._fds.get(pid, {}).get(group)
            if not files or len(files) != count:
                return None
            out: dict[str, bytes] = {}
            for name, fd in files.items():
                try:
                    out[name] = os.pread(fd, _READ_MAX, 0)
                except OSError:
                    del files[name]
                    self._n -= 1
                    os.close(fd)
                    return None
            return out

    def retain(self, pid: int, group: str, names: AbstractSet[str]) -> None:
        """Close the files of ``group`` whose name is not in ``names`` (threads that have exited)."""
        with self._lock:
            files = self._fds.get(pid, {}).get(group)
            if files and not files.keys() <= names:
                for name in [n for n in files if n not in names]:
                    os.close(files.pop(name))
                    self._n -= 1

    def forget(self, pid: int) -> None:
        with self._lock:
            for files in self._fds.pop(pid, {}).values():
                for fd in files.values():
                    os.close(fd)
                    self._n -= 1

    def close(self) -> None:
        with self._lock:
            self.limit = 0
            for files in [f for groups in self._fds.values() for f in groups.values()]:
                for fd in files.values():
                    os.close(fd)
            self._fds.clear()
            self._n = 0


def _stat_fields(data: bytes) -> list[bytes]:
    """Fields of a stat line from field 3 (state) on; comm may hold spaces and ')' so split after the last ')'."""
    return data[data.rfind(b")") + 2 :].split()


@dataclass
class _Prev:
    t: float
    starttime: int
    cpu_ticks: int
    io: dict[str, int] | None
    wait_ns: dict[str, int] | None = None
    wait_t: float = 0.0


@dataclass
class _Reading:
    t: float
    starttime: int
    cpu_ticks: int
    rss_bytes: int
    threads: int
    io: dict[str, int] | None = None
    wait_ns: dict[str, int] | None = None
    wait_t: float = 0.0
    na: dict[str, str] = field(default_factory=dict)


class ProcSource:
    name = "procs"

    def __init__(
        self, tracked: Callable[[], Mapping[int, str]], hz_states: float = 10.0, *, proc_root: str = "/proc"
    ) -> None:
        self.tracked = tracked
        self.hz_states = hz_states
        self.proc_root = proc_root.rstrip("/") or "/"
        self.na_reasons: dict[str, str] = {}
        self._roles: dict[int, str] = {}
        self._pids: tuple[int, ...] = ()  # read by the sampler thread; replaced, never mutated
        self._workers: frozenset[int] = frozenset()  # likewise: the pids whose network waits are classified
        self._socks: dict[int, int] = {}  # worker → network sockets it held at the last sample
        self._net = NetWaits(self.proc_root)
        # Usable cores of the training's main processes, read in the tree that holds proc_root (and its /sys).
        tree, name = os.path.split(self.proc_root)
        self._budget = CpuBudget("" if tree == "/" else tree) if name == "proc" else None
        self._prev: dict[int, _Prev] = {}
        self._counts: dict[int, list[int]] = {}
        # pid → (when, counts) of the sampler's latest look: a tick between two passes of a slow sampler repeats it.
        self._last_look: dict[int, tuple[float, list[int]]] = {}
        self._pass_s = 0.0  # how long the sampler's passes are apart (its read budget stretches them)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._fast = threading.Event()  # set: the sampler looks hz_states times a second; clear: once per sample()
        self._fast.set()
        self._thread: threading.Thread | None = None
        self._logged: set[str] = set()
        self._gone: set[int] = set()  # tracked pids already found gone: logged once each
        # Only on a procfs: a kept descriptor of a plain file (a copied or fake tree) reads on after it is deleted.
        self._held = _Held(_held_limit() if os.path.islink(f"{self.proc_root}/self") else 0)

    # ---- public -------------------------------------------------------------------------------------

    def roles(self) -> dict[int, str]:
        """{pid: role} as of the last sample."""
        return dict(self._roles)

    @property
    def fast(self) -> bool:
        return self._fast.is_set()

    def set_fast(self, fast: bool) -> None:
        """Look at thread states ``hz_states`` times a second (True), or only once per sample() (False: the
        sampler thread parks and costs nothing). The Monitor slows it down while no verdict reads the states."""
        if fast == self._fast.is_set() or self._stop.is_set():
            return
        if fast:
            self._fast.set()
        else:
            self._fast.clear()

    def close(self) -> None:
        """Stop the state sampler thread. sample() still works afterwards, observing states once per call."""
        self._stop.set()
        self._fast.set()  # a parked sampler wakes to see the stop
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
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
            self._ensure_sampler()
            counts = self._take_counts(pids)
            socks = self._net.network_sockets([pid for pid in pids if pid in self._workers])
            mains = [pid for pid in pids if self._roles.get(pid) in ("main", "rank")]
            for pid, figures in (self._budget.sample(mains) if self._budget is not None else {}).items():
                for name, value in figures.items():
                    out[PROC.key(pid, "cpu_" + name)] = value
            for pid in pids:
                try:
                    metrics = self._sample_pid(pid, counts.get(pid), socks.get(pid))
                except _Gone:
                    metrics = None
                except Exception as exc:
                    self._log_once(f"pid-error:{type(exc).__name__}", "procs: reading pid %d failed: %r", pid, exc)
                    metrics = None
                if metrics is None:
                    if pid in self._prev or pid not in self._gone:
                        log.debug("procs: pid %d is gone, dropped", pid)
                    self._gone.add(pid)
                    self._forget(pid)
                    continue
                out.update(metrics)
            for pid in list(self._prev):
                if pid not in self._roles:
                    self._forget(pid)
            self._gone.intersection_update(self._roles)
        except Exception as exc:  # last resort: a source must never break the monitor
            self._log_once("unexpected", "procs: unexpected error: %r", exc)
        return out

    # ---- tracked set and the state sampler ------------------------------------------------------------

    def _refresh_tracked(self) -> tuple[int, ...]:
        try:
            raw = dict(self.tracked())
        except Exception as exc:
            self._log_once("tracked", "procs: tracked() failed, keeping the last set: %r", exc)
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
        return self._pids

    def _ensure_sampler(self) -> None:
        if self._thread is not None or self._stop.is_set() or not self.hz_states or self.hz_states <= 0:
            return
        self._thread = threading.Thread(target=self._sampler_loop, name="trainmon-procs-states", daemon=True)
        self._thread.start()

    def _sampler_loop(self) -> None:
        base = 1.0 / self.hz_states
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
            if not self._fast.is_set():  # parked until looks matter again; sample() looks once per call meanwhile
                self._fast.wait()
                if self._stop.is_set():
                    return
                next_t = time.monotonic()
                continue
            try:
                threads = 0
                self._net.begin_pass()
                for pid in self._pids:
                    obs = self._observe(pid)
                    if obs is not None:
                        counts, reads = obs
                        self._add_counts(pid, counts)
                        threads += reads
                # A budget of thread reads per second: a big tree is looked at less often, not at a higher cost.
                period = self._pass_s = max(base, threads / THREAD_READS_PER_S)
            except Exception as exc:
                self._log_once("sampler", "procs: state sampler error: %r", exc)

    def _observe(self, pid: int) -> tuple[list[int], int] | None:
        """One look at every thread's state of pid: counts as in _NCOUNT, and the thread reads it took.
        None when the process is gone."""
        task_dir = f"{self.proc_root}/{pid}/task"
        try:
            tids = os.listdir(task_dir)
        except OSError:
            return None
        counts = [0] * _NCOUNT
        main = str(pid)
        blocked: list[str] = []
        held = self._held
        for tid in tids:
            try:
                data = held.read(pid, "task-stat", tid, f"{task_dir}/{tid}/stat")
            except OSError:
                continue  # the thread exited after the listing
            at = data.rfind(b")") + 2
            state = data[at : at + 1]
            idx = _STATE_INDEX.get(state, 0)
            counts[0] += 1
            if idx:
                counts[idx] += 1
            if state in (b"S", b"D"):
                blocked.append(tid)
            if tid == main:
                counts[4] += 1
                if idx:
                    counts[4 + idx] += 1
        held.retain(pid, "task-stat", set(tids))
        reads = counts[0]
        # What a waiting worker waits on: only the run's DataLoader workers, only while their main thread is not
        # running, only their blocked threads (main first), stopping at the first network wait; each look counts
        # against THREAD_READS_PER_S like a state read, so a large tree is looked at less often, not at more cost.
        if pid in self._workers and counts[4] and not counts[5]:
            if main in blocked:
                blocked.remove(main)
                blocked.insert(0, main)
            unresolved = False
            holds_network = self._socks.get(pid, 0) > 0
            for tid in blocked:
                reads += 1
                kind = self._net.classify(pid, tid, holds_network)
                if kind == NET:
                    counts[8] += 1
                    break
                unresolved = unresolved or kind == UNKNOWN
            else:
                counts[9] += int(unresolved)
        return counts, reads

    def _add_counts(self, pid: int, obs: list[int]) -> None:
        with self._lock:
            acc = self._counts.get(pid)
            if acc is None:
                self._counts[pid] = obs
            else:
                for i, v in enumerate(obs):
                    acc[i] += v

    def _take_counts(self, pids: tuple[int, ...]) -> dict[int, list[int]]:
        with self._lock:
            counts, self._counts = self._counts, {}
        now = time.monotonic()
        # Between two passes of a sampler slowed by its budget (a big tree), its latest look stands for the tick:
        # looking here as well would double the reads the budget is there to bound.
        fresh_s = 2 * self._pass_s + 1.0 if self._fast.is_set() and self._thread is not None else -1.0
        looking = []
        for pid in pids:
            got = counts.get(pid)
            if got and got[0]:
                self._last_look[pid] = (now, got)
            elif (last := self._last_look.get(pid)) is not None and now - last[0] <= fresh_s:
                counts[pid] = list(last[1])
            else:
                looking.append(pid)  # first call, no sampler or a parked one, or a pid just added: look once now
        if looking:
            self._net.begin_pass()
        for pid in looking:
            obs = self._observe(pid)
            if obs is not None:
                counts[pid] = obs[0]
        return counts

    # ---- per pid reads ----------------------------------------------------------------------------------

    def _sample_pid(self, pid: int, counts: list[int] | None, socks: int | None = None) -> dict[str, float] | None:
        cur = self._read_pid(pid)
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
        self._prev[pid] = _Prev(
            t=cur.t, starttime=cur.starttime, cpu_ticks=cur.cpu_ticks, io=cur.io, wait_ns=cur.wait_ns, wait_t=cur.wait_t
        )
        return out

    def _net_figures(
        self, pid: int, prefix: str, counts: list[int] | None, socks: int | None, na: dict[str, str]
    ) -> dict[str, float]:
        """A worker's network-wait shares (of the looks at it) and the network sockets it holds."""
        out: dict[str, float] = {}
        if socks is not None:
            self._socks[pid] = socks
            out[prefix + "net_sockets"] = float(socks)
        if pid in self._net.syscall_denied:
            self._log_once(
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
            na["net_wait"] = na["wait_unresolved"] = reason
        elif counts and counts[4]:
            out[prefix + "net_wait"] = counts[8] / counts[4]
            out[prefix + "wait_unresolved"] = counts[9] / counts[4]
        return out

    def _read_pid(self, pid: int) -> _Reading:
        base = f"{self.proc_root}/{pid}"
        try:
            data = self._held.read(pid, "stat", "", f"{base}/stat")
        except (FileNotFoundError, ProcessLookupError) as exc:
            raise _Gone from exc
        t = time.monotonic()
        f = _stat_fields(data)
        if not f or f[0] in (b"Z", b"X"):
            raise _Gone
        cur = _Reading(
            t=t,
            starttime=int(f[19]),
            cpu_ticks=int(f[11]) + int(f[12]),
            rss_bytes=int(f[21]) * _PAGE,
            threads=int(f[17]),
        )
        cur.io = self._read_io(pid, base, cur.na)
        cur.wait_ns, cur.wait_t = self._read_runq_wait(pid, base, cur.na, cur.threads)
        return cur

    def _read_io(self, pid: int, base: str, na: dict[str, str]) -> dict[str, int] | None:
        try:
            data = self._held.read(pid, "io", "", f"{base}/io")
        except (FileNotFoundError, ProcessLookupError) as exc:
            if not os.path.exists(f"{base}/stat"):
                raise _Gone from exc
            reason = "/proc/<pid>/io not available (kernel without CONFIG_TASK_IO_ACCOUNTING)"
            na.update(dict.fromkeys(PROC_IO_FIELDS.values(), reason))
            return None
        except OSError as exc:
            reason = _os_reason(f"{base}/io", exc)
            na.update(dict.fromkeys(PROC_IO_FIELDS.values(), reason))
            return None
        io: dict[str, int] = {}
        for row in data.splitlines():
            key, _, value = row.partition(b":")
            name = PROC_IO_FIELDS.get(key.strip())
            if name is not None:
                io[name] = int(value)
        return io

    def _read_runq_wait(
        self, pid: int, base: str, na: dict[str, str], threads: int = 0
    ) -> tuple[dict[str, int] | None, float]:
        """Per-thread run-queue wait in ns (/proc/<pid>/task/<tid>/schedstat, 2nd field).

        The threads are those of the task directory; while the process has as many threads (``threads``, from its
        stat) as there are kept schedstat files of the threads listed last time, and each of them still reads (a
        thread that has exited reads ESRCH), they are those threads, and the listing is not made again."""
        kept = self._held.reread(pid, "schedstat", threads) if threads else None
        if kept is not None:
            try:
                return {tid: int(data.split()[1]) for tid, data in kept.items()}, time.monotonic()
            except (IndexError, ValueError):
                pass  # as listed below, which says why
        task_dir = f"{base}/task"
        try:
            tids = os.listdir(task_dir)
        except (FileNotFoundError, ProcessLookupError) as exc:
            raise _Gone from exc
        except OSError as exc:
            na["runq_wait_ms_s"] = _os_reason(task_dir, exc)
            return None, 0.0
        waits: dict[str, int] = {}
        missing = 0
        held = self._held
        for tid in tids:
            try:
                waits[tid] = int(held.read(pid, "schedstat", tid, f"{task_dir}/{tid}/schedstat").split()[1])
            except (FileNotFoundError, ProcessLookupError):
                missing += 1  # the thread exited after the listing, or no schedstat at all
            except (OSError, IndexError, ValueError) as exc:
                na["runq_wait_ms_s"] = _os_reason(f"{task_dir}/{tid}/schedstat", exc)
                return None, 0.0
        t = time.monotonic()
        held.retain(pid, "schedstat", waits.keys())
        if not waits and missing:
            na["runq_wait_ms_s"] = "schedstat not available (kernel without CONFIG_SCHED_INFO)"
            return None, 0.0
        return waits, t

    # ---- bookkeeping ------------------------------------------------------------------------------------

    def _note_na(self, pid: int, prefix: str, na: dict[str, str]) -> None:
        for key in [k for k in self.na_reasons if k.startswith(prefix)]:
            if key[len(prefix) :] not in na:
                del self.na_reasons[key]
        for reason in sorted(set(na.values())):
            keys = sorted(k for k, r in na.items() if r == reason)
            if self.na_reasons.get(prefix + keys[0]) != reason:  # newly n/a for this pid
                self._log_once(
                    f"na:{reason.replace(str(pid), '<pid>')}", "procs: pid %d: %s n/a: %s", pid, ", ".join(keys), reason
                )
        for key, reason in na.items():
            self.na_reasons[prefix + key] = reason

    def _forget(self, pid: int) -> None:
        self._held.forget(pid)
        self._prev.pop(pid, None)
        self._socks.pop(pid, None)
        self._net.forget(pid)
        prefix = PROC.id_prefix(pid)
        for key in [k for k in self.na_reasons if k.startswith(prefix)]:
            del self.na_reasons[key]
        with self._lock:
            self._counts.pop(pid, None)
        self._last_look.pop(pid, None)

    def _log_once(self, key: str, msg: str, *args: object) -> None:
        if key in self._logged:
            log.debug(msg, *args)
            return
        self._logged.add(key)
        log.warning(msg, *args)


def _os_reason(path: str, exc: BaseException) -> str:
    if isinstance(exc, PermissionError):
        return f"permission denied reading {path} (run trainmon as the training job's user, or as root)"
    if isinstance(exc, OSError):
        return f"cannot read {path}: {exc.strerror or exc}"
    return f"cannot parse {path}: {exc}"


def _state_shares(prefix: str, counts: list[int] | None) -> dict[str, float]:
    if not counts or not counts[0]:
        return {}
    out: dict[str, float] = {}
    n, main_n = counts[0], counts[4]
    for i, s in enumerate(("R", "S", "D"), start=1):
        out[f"{prefix}state_{s}"] = counts[i] / n
        if main_n:
            out[f"{prefix}state_main_{s}"] = counts[4 + i] / main_n
    return out


def _rates(prefix: str, cur: _Reading, prev: _Prev) -> dict[str, float]:
    out: dict[str, float] = {}
    dt = cur.t - prev.t
    if dt <= 0:
        return out
    out[prefix + "cpu_pct"] = max(0, cur.cpu_ticks - prev.cpu_ticks) / _CLK_TCK / dt * 100.0
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
