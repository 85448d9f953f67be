"""Reading a tracked process's /proc files: kept open between reads, parsed into fields by name.

`HeldFiles` keeps the files of the tracked pids open and re-reads each with one pread; `ProcFiles.read` turns a
pid's ``stat``, ``io`` and per-thread ``schedstat`` into one `Reading` (what is n/a says why in its ``na``); `Stat`
names the fields of a stat line that the process table uses. Standard library only. What the readings mean per
second is `trainmon.sources.host.procs`; the thread-state looks are `trainmon.sources.host.thread_states`.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from trainmon.metrics import PROC_IO_FIELDS

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_READ_MAX = 8192

# Fields of /proc/<pid>/stat by their number in proc(5) (1: pid, 2: comm, 3: state, …).
STATE, UTIME, STIME, NUM_THREADS, STARTTIME, RSS = 3, 14, 15, 20, 22, 24
_FIRST_AFTER_COMM = STATE
GONE_STATES = (b"Z", b"X")  # a zombie, or dead: the process has exited


class Gone(Exception):
    """The process exited (or became a zombie) between listing and reading."""


def held_limit() -> int:
    """How many /proc files a ProcSource keeps open: a quarter of the descriptor limit, 4096 at most."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return 0
    return 4096 if soft == resource.RLIM_INFINITY else max(0, min(4096, soft // 4))


class HeldFiles:
    """/proc files of the tracked pids kept open between reads, each re-read from its start with one pread instead
    of open, read and close; at most ``limit`` of them, the rest read by path.

    Files are grouped per pid ("stat", "io", and per thread). A kept file whose process or thread has gone (the
    kernel answers ESRCH once it is reaped, also when its pid is reused), or that fails in any way, is closed and
    read again by path: what is returned is always what a fresh open would read. One lock covers the reads too, so
    that a file closed by one thread (the tick's) is never read through a reused descriptor by the other (the
    thread-state sampler's)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._fds: dict[int, dict[str, dict[str, int]]] = {}  # pid → group → name → fd
        self._n = 0
        self._pids: AbstractSet[int] | None = None  # the pids whose files may be kept (None: any)
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
            if self._n < self.limit and (self._pids is None or pid in self._pids):
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

    def keep_pids(self, pids: AbstractSet[int]) -> None:
        """From now on only files of ``pids`` are kept; those of other pids are closed. A read of a pid no longer
        tracked (the sampler thread's pass over the set before) keeps nothing: no descriptor outlives tracking."""
        with self._lock:
            self._pids = pids
            for pid in [p for p in self._fds if p not in pids]:
                self._close_pid(pid)

    def forget(self, pid: int) -> None:
        with self._lock:
            self._close_pid(pid)

    def _close_pid(self, pid: int) -> None:
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


def thread_state(stat: bytes) -> bytes:
    """The state letter (field 3) of a stat line: R, S, D, …; comm may hold spaces and ')', so after the last ')'."""
    at = stat.rfind(b")") + 2
    return stat[at : at + 1]


@dataclass(frozen=True, slots=True)
class Stat:
    """The fields of a /proc/<pid>/stat line that the process table reads."""

    state: bytes
    utime: int  # clock ticks
    stime: int
    num_threads: int
    starttime: int  # clock ticks after boot: tells a reused pid from the process it had before
    rss_pages: int

    @classmethod
    def parse(cls, data: bytes) -> Stat | None:
        """None for an empty line; raises IndexError or ValueError on a malformed one."""
        fields = data[data.rfind(b")") + 2 :].split()  # comm may hold spaces and ')': split after the last ')'
        if not fields:
            return None

        def at(number: int) -> bytes:
            return fields[number - _FIRST_AFTER_COMM]

        if at(STATE) in GONE_STATES:  # the rest of a dead process's line is not read
            return cls(at(STATE), 0, 0, 0, 0, 0)
        return cls(at(STATE), int(at(UTIME)), int(at(STIME)), int(at(NUM_THREADS)), int(at(STARTTIME)), int(at(RSS)))


@dataclass
class Reading:
    """One read of a tracked process, each part at the monotonic time it was read (``t``, ``wait_t``). ``io`` and
    ``wait_ns`` are None where n/a, the reason in ``na`` (series field → why)."""

    t: float
    starttime: int
    cpu_ticks: int  # utime + stime
    rss_bytes: int
    threads: int
    io: dict[str, int] | None = None  # /proc/<pid>/io counter (PROC_IO_FIELDS' series field) → bytes
    wait_ns: dict[str, int] | None = None  # tid → run-queue wait so far (schedstat's 2nd field), ns
    wait_t: float = 0.0
    na: dict[str, str] = field(default_factory=dict)


def os_reason(path: str, exc: BaseException) -> str:
    if isinstance(exc, PermissionError):
        return f"permission denied reading {path} (run trainmon as the training job's user, or as root)"
    if isinstance(exc, OSError):
        return f"cannot read {path}: {exc.strerror or exc}"
    return f"cannot parse {path}: {exc}"


class ProcFiles:
    """Reads the /proc files of the pids under ``proc_root`` through ``held``."""

    def __init__(self, proc_root: str, held: HeldFiles) -> None:
        self.proc_root = proc_root
        self.held = held

    def read(self, pid: int) -> Reading:
        """``pid``'s stat, io and run-queue waits; raises Gone once it has exited."""
        base = f"{self.proc_root}/{pid}"
        try:
            data = self.held.read(pid, "stat", "", f"{base}/stat")
        except (FileNotFoundError, ProcessLookupError) as exc:
            raise Gone from exc
        t = time.monotonic()
        stat = Stat.parse(data)
        if stat is None or stat.state in GONE_STATES:
            raise Gone
        cur = Reading(
            t=t,
            starttime=stat.starttime,
            cpu_ticks=stat.utime + stat.stime,
            rss_bytes=stat.rss_pages * PAGE,
            threads=stat.num_threads,
        )
        cur.io = self._read_io(pid, base, cur.na)
        cur.wait_ns, cur.wait_t = self._read_runq_wait(pid, base, cur.na, cur.threads)
        return cur

    def _read_io(self, pid: int, base: str, na: dict[str, str]) -> dict[str, int] | None:
        try:
            data = self.held.read(pid, "io", "", f"{base}/io")
        except (FileNotFoundError, ProcessLookupError) as exc:
            if not os.path.exists(f"{base}/stat"):
                raise Gone from exc
            reason = "/proc/<pid>/io not available (kernel without CONFIG_TASK_IO_ACCOUNTING)"
            na.update(dict.fromkeys(PROC_IO_FIELDS.values(), reason))
            return None
        except OSError as exc:
            reason = os_reason(f"{base}/io", exc)
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
        kept = self.held.reread(pid, "schedstat", threads) if threads else None
        if kept is not None:
            try:
                return {tid: _runq_wait_ns(data) for tid, data in kept.items()}, time.monotonic()
            except (IndexError, ValueError):
                pass  # as listed below, which says why
        task_dir = f"{base}/task"
        try:
            tids = os.listdir(task_dir)
        except (FileNotFoundError, ProcessLookupError) as exc:
            raise Gone from exc
        except OSError as exc:
            na["runq_wait_ms_s"] = os_reason(task_dir, exc)
            return None, 0.0
        waits: dict[str, int] = {}
        missing = 0
        held = self.held
        for tid in tids:
            try:
                waits[tid] = _runq_wait_ns(held.read(pid, "schedstat", tid, f"{task_dir}/{tid}/schedstat"))
            except (FileNotFoundError, ProcessLookupError):
                missing += 1  # the thread exited after the listing, or no schedstat at all
            except (OSError, IndexError, ValueError) as exc:
                na["runq_wait_ms_s"] = os_reason(f"{task_dir}/{tid}/schedstat", exc)
                return None, 0.0
        t = time.monotonic()
        held.retain(pid, "schedstat", waits.keys())
        if not waits and missing:
            na["runq_wait_ms_s"] = "schedstat not available (kernel without CONFIG_SCHED_INFO)"
            return None, 0.0
        return waits, t


def _runq_wait_ns(schedstat: bytes) -> int:
    """Time spent waiting on a run queue, ns: the 2nd of schedstat's fields (on-CPU time, run-queue wait, slices)."""
    return int(schedstat.split()[1])
