"""Find the PyTorch trainings running on this host without being told: a process is one when its memory maps hold
libtorch. Grouped as a job's main processes (ranks) and their DataLoader workers.

Cost: one listing of /proc per scan. A new pid is examined once (its owner, /proc/PID/stat, its maps); a Python
process that has not imported torch yet is looked at again while it is young (a script imports torch in its
first seconds), then rarely, and its maps are read again only where its virtual size (in /proc/PID/stat) changed
since the last read; any other process never again. A process's verdict is kept for its lifetime (a pid
that leaves the listing is forgotten). Processes of other users are skipped unless the monitor runs as root.
Standard library only; never raises.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

from trainmon.protocol import job_identity, script_name

log = logging.getLogger("trainmon.discover")

TORCH_MARKERS = (b"/libtorch_cpu.so", b"/libtorch_python.so", b"/libtorch.so", b"/libc10.so")
PYTHON_MARKERS = (b"/libpython3", b"/python3", b"/python")
# Launchers start ranks; their own torch import (torch.distributed.run) does not make them a training.
LAUNCHER_ARGS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "accelerate", "deepspeed")
RANK_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "SLURM_PROCID",
)
# Set for a process that will report through an agent (attach() reads it): it is given time to connect.
AGENT_ENV = ("TRAINMON_ADDR",)
YOUNG_S = 30.0  # a Python process is looked at every scan this long after it started
RECHECK_S = 5.0  # then every RECHECK_S, or a tenth of its age, up to RECHECK_MAX_S
RECHECK_MAX_S = 60.0
_MAPS_MAX = 8 << 20


@dataclass
class Proc:
    """One process as discovery knows it."""

    pid: int
    ppid: int
    start_ticks: int
    cmdline: list[str] = field(default_factory=list)
    torch: bool = False
    python: bool = False
    launcher: bool = False
    env: dict[str, str] = field(default_factory=dict)
    checked: float = 0.0  # monotonic time of the last look at its maps
    vsize: int = -1  # its virtual size then: loading torch maps hundreds of MB, so an unchanged size needs no look
    torch_since: float = 0.0  # when torch was first seen mapped

    @property
    def name(self) -> str:
        fallback = os.path.basename(self.cmdline[0]) if self.cmdline else "?"
        return script_name(self.cmdline, fallback)[:200]


@dataclass
class Training:
    """A discovered training's main process (a rank of a job, or a lone process) and its workers."""

    pid: int
    name: str
    role: str  # "main" or "rank"
    cmdline: list[str]
    env: dict[str, str]
    workers: list[int]
    launcher: int | None  # the launcher (torchrun, accelerate) that started it
    seen_s: float  # how long torch has been seen mapped in it

    @property
    def expects_agent(self) -> bool:
        return any(name in self.env for name in AGENT_ENV)

    @property
    def job_id(self) -> str | None:
        """The job's one identity (trainmon/protocol/job.py), its launcher's pid where nothing else names it."""
        return job_identity(self.env, self.launcher)


class Discovery:
    """Scans /proc for PyTorch processes. ``scan()`` returns the trainings found, keyed by main pid."""

    def __init__(self, proc_root: str = "/proc", *, exclude: set[int] | None = None) -> None:
        self.proc_root = proc_root.rstrip("/") or "/"
        self.uid = os.getuid()
        self.exclude = set(exclude if exclude is not None else _self_and_ancestors(self.proc_root))
        self.procs: dict[int, Proc] = {}
        self._not_python: set[int] = set()  # examined once: never a training
        self.scan_s = 0.0  # the last scan's cost, for the monitor's accounting
        self.examined = 0  # pids examined in all (a process is examined once, a young Python one a few times)
        self.maps_read = 0  # of those, the looks that read the process's maps (its size had changed)

    def scan(self, now: float | None = None) -> dict[int, Training]:
        t0 = time.perf_counter()
        now = time.monotonic() if now is None else now
        try:
            pids = self._listing()
        except OSError as exc:
            log.debug("discover: cannot list %s: %r", self.proc_root, exc)
            return {}
        live = set(pids)
        for gone in [pid for pid in self.procs if pid not in live]:
            del self.procs[gone]
        self._not_python &= live
        for pid in pids:
            if pid in self._not_python or pid in self.exclude:
                continue
            proc = self.procs.get(pid)
            if proc is not None and (proc.torch or not self._due(proc, now)):
                continue
            self._examine(pid, proc, now)
        found = self._group(now)
        self.scan_s = time.perf_counter() - t0
        return found

    def roles(self, trainings: dict[int, Training]) -> dict[int, tuple[str, str]]:
        """pid → (role, name): the process table names a training from the moment it is found, before any run."""
        out: dict[int, tuple[str, str]] = {}
        for tr in trainings.values():
            out[tr.pid] = (tr.role, tr.name)
            for k, w in enumerate(tr.workers):
                out[w] = ("worker", f"worker {k} · {tr.name}")
        return out

    # ---------------------------------------------------------------- internals

    def _listing(self) -> list[int]:
        return [int(name) for name in os.listdir(self.proc_root) if name.isdigit()]

    def _due(self, proc: Proc, now: float) -> bool:
        """A Python process without torch yet: every scan while young, then less and less often (a script imports
        torch in its first seconds; a long-lived Python process that has not is unlikely to start)."""
        age = now - _boot_relative(proc.start_ticks)
        return age < YOUNG_S or now - proc.checked >= min(RECHECK_MAX_S, max(RECHECK_S, age / 10))

    def _examine(self, pid: int, proc: Proc | None, now: float) -> None:
        self.examined += 1
        base = f"{self.proc_root}/{pid}"
        try:
            if proc is None and self.uid != 0 and os.stat(base).st_uid != self.uid:
                self._not_python.add(pid)  # another user's: never read
                return
            stat = _read(f"{base}/stat", 4096)
            rest = stat[stat.rindex(b")") + 2 :].split()
            vsize = int(rest[20])
            if proc is None:
                proc = Proc(pid, int(rest[1]), int(rest[19]))
            elif vsize == proc.vsize:
                proc.checked = now  # a Python process that mapped nothing since the last look has not loaded torch
                return
            maps = _read(f"{base}/maps", _MAPS_MAX)
        except (OSError, ValueError, IndexError):
            self._not_python.add(pid)  # gone, a kernel thread, or unreadable
            self.procs.pop(pid, None)
            return
        self.maps_read += 1
        proc.checked = now
        proc.vsize = vsize
        proc.python = proc.python or any(m in maps for m in PYTHON_MARKERS)
        if not proc.python:
            self._not_python.add(pid)
            self.procs.pop(pid, None)
            return
        self.procs[pid] = proc
        if not any(m in maps for m in TORCH_MARKERS):
            return
        proc.torch = True
        proc.torch_since = now
        proc.cmdline = read_cmdline(base)
        proc.launcher = _is_launcher(proc.cmdline)
        proc.env = _startup_env(base)

    def _group(self, now: float) -> dict[int, Training]:
        torch = {pid: p for pid, p in self.procs.items() if p.torch}
        children: dict[int, list[int]] = {}
        for pid, p in torch.items():
            children.setdefault(p.ppid, []).append(pid)
        out: dict[int, Training] = {}
        for pid, p in torch.items():
            if p.launcher:
                continue
            parent = torch.get(p.ppid)
            # A torch child of a training is a DataLoader worker, unless it starts torch processes of its own
            # (a rank spawned by torch.multiprocessing.spawn) or its parent is a launcher.
            if parent is not None and not parent.launcher and not children.get(pid):
                continue
            workers = sorted(c for c in children.get(pid, []) if not children.get(c) and not torch[c].launcher)
            launcher = p.ppid if parent is not None and parent.launcher else None
            if parent is not None and not parent.launcher:
                launcher = p.ppid  # spawned by a training process: the parent's job
            ranked = "RANK" in p.env or "LOCAL_RANK" in p.env or launcher is not None
            out[pid] = Training(
                pid, p.name, "rank" if ranked else "main", p.cmdline, p.env, workers, launcher, now - p.torch_since
            )
        return out


def _read(path: str, limit: int) -> bytes:
    with open(path, "rb", buffering=0) as f:
        chunks = []
        size = 0
        while size < limit:
            chunk = f.read(min(1 << 20, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)


def read_cmdline(base: str) -> list[str]:
    try:
        raw = _read(f"{base}/cmdline", 16384)
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a][:64]


def _startup_env(base: str) -> dict[str, str]:
    """The launcher's rank variables (DataLoader workers inherit them) and trainmon's address from the process's
    start-up environment."""
    try:
        raw = _read(f"{base}/environ", 1 << 20)
    except OSError:
        return {}
    out: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        name = key.decode("ascii", "replace")
        if sep and (name in RANK_ENV or name in AGENT_ENV):
            out[name] = value.decode("utf-8", "replace")[:200]
    return out


def _is_launcher(cmdline: list[str]) -> bool:
    if not cmdline:
        return False
    head = [os.path.basename(cmdline[0]), *cmdline[1:3]]
    return any(os.path.basename(arg) in LAUNCHER_ARGS or arg in LAUNCHER_ARGS for arg in head)


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _boot_relative(start_ticks: int) -> float:
    """A process's start time on CLOCK_MONOTONIC (both count from boot on Linux, less suspended time)."""
    return start_ticks / _CLK_TCK


def _self_and_ancestors(proc_root: str) -> set[int]:
    """The monitor and the processes that started it: a training that launches its own monitor, or a test
    harness, is not a training to sample."""
    out = {os.getpid()}
    pid = os.getppid()
    for _ in range(64):
        if pid <= 1 or pid in out:
            break
        out.add(pid)
        try:
            stat = _read(f"{proc_root}/{pid}/stat", 4096)
            pid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out
