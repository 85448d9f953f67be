"""Trainings the monitor found without an agent become runs measured by sampling.

Each discovered training (``trainmon.sources.discovery.discover``) that no agent
reports is given a run of its own, told to
the Ingest as an agent would tell it: a hello (``measured_by: "sampling"``), its DataLoader workers as one loader,
and a ``closed`` when it exits or an agent takes over (``trainmon attach``, or a late ``attach()``). Its main
thread is sampled by py-spy (``pyspy.<pid>.*`` series), which the diagnosis reads as the run's data-wait share.
So the screen, the recording, the report and Prometheus list it like any run, with no steps.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from trainmon.protocol import script_name
from trainmon.sources.base import Source
from trainmon.sources.discovery.discover import AGENT_ENV, Discovery, Training, read_cmdline

log = logging.getLogger("trainmon.unattached")

SAMPLED_RUN_BASE = 1 << 31  # run ids of sampled runs: far above the agents' (recordings store them as uint32)
# Torch mapped this long before a run is made: an agent that attaches right after `import torch` comes first (the
# import goes on for a second or two after libtorch is mapped); longer where trainmon's address is in the environment.
SETTLE_S = 3.0
AGENT_SETTLE_S = 20.0
MAX_SAMPLED = 8  # trainings sampled at once; more are listed, and sampled as others end


class Sink(Protocol):
    def hello(self, run_id: int, t: float, hello: dict[str, Any]) -> None: ...
    def info(self, run_id: int, t: float, info: dict[str, Any]) -> None: ...
    def closed(self, run_id: int, t: float, reason: str) -> None: ...


class Sampler(Protocol):
    def sample(self, now: float | None = None) -> dict[str, float]: ...
    def close(self) -> None: ...


@dataclass
class _Sampled:
    run_id: int
    training: Training
    sampler: Sampler | None
    workers: list[int]
    num_workers: int
    told: bool = False  # the loader was told at least once


def _default_sampler(pid: int) -> Sampler:
    from trainmon.sources.pyspy.py_spy import PySpySampler

    return PySpySampler(pid)


class UnattachedRuns(Source):
    """A Source: discovers trainings each tick, keeps a sampled run for each one no agent reports."""

    name = "discover"
    logger = log

    def __init__(
        self,
        sink: Sink,
        agent_pids: Callable[[], set[int]],
        *,
        discovery: Discovery | None = None,
        make_sampler: Callable[[int], Sampler] = _default_sampler,
        settle_s: float = SETTLE_S,
        agent_settle_s: float = AGENT_SETTLE_S,
    ) -> None:
        super().__init__()
        self.sink = sink
        self.agent_pids = agent_pids
        self.discovery = discovery or Discovery()
        self.make_sampler = make_sampler
        self.settle_s = settle_s
        self.agent_settle_s = agent_settle_s
        self.trainings: dict[int, Training] = {}
        self.runs: dict[int, _Sampled] = {}  # main pid → its sampled run
        self.forced: set[int] = set()  # pids asked for with --pid: sampled even if discovery does not find torch
        # Mains an agent has reported from: never sampled while they live, so a process that lingers after its
        # agent said goodbye (gloo and CUDA teardown take seconds) does not become a sampled run of its own.
        self.had_agent: set[int] = set()
        self._next = SAMPLED_RUN_BASE
        self._host = socket.gethostname()

    def roles(self) -> dict[int, tuple[str, str]]:
        """pid → (role, name) of every discovered training process (mains, ranks, workers)."""
        return self.discovery.roles(self.trainings)

    def sampled_pids(self) -> set[int]:
        return set(self.runs)

    def watch(self, pid: int) -> None:
        """Sample ``pid`` whether or not it maps libtorch (``--pid``)."""
        self.forced.add(pid)

    def sample(self, now: float) -> dict[str, float]:
        self.trainings = self.discovery.scan()
        for pid in self.forced - set(self.trainings):
            if os.path.exists(f"{self.discovery.proc_root}/{pid}"):
                self.trainings[pid] = _forced_training(pid, self.discovery.proc_root)
            else:
                self.forced.discard(pid)
        agents = self.agent_pids()
        self.had_agent = (self.had_agent | agents) & set(self.trainings)
        out: dict[str, float] = {}
        for pid in list(self.runs):
            entry = self.runs[pid]
            if pid not in self.trainings:
                self._end(pid, now, "exit")
            elif pid in agents:
                self._end(pid, now, "attached")
            else:
                self._update_workers(entry, now)
                if entry.sampler is not None:
                    out.update(entry.sampler.sample(now))
        for pid, tr in self.trainings.items():
            if pid in self.runs or pid in self.had_agent or (tr.seen_s < self._settle(tr) and pid not in self.forced):
                continue
            if len([r for r in self.runs.values() if r.sampler is not None]) >= MAX_SAMPLED:
                break
            self._begin(tr, now)
        return out

    def _settle(self, tr: Training) -> float:
        return self.agent_settle_s if tr.expects_agent else self.settle_s

    def close(self) -> None:
        for entry in self.runs.values():
            if entry.sampler is not None:
                entry.sampler.close()

    # ---------------------------------------------------------------- runs

    def _begin(self, tr: Training, now: float) -> None:
        run_id = self._next
        self._next += 1
        sampler: Sampler | None = None
        try:
            sampler = self.make_sampler(tr.pid)
        except Exception:
            log.exception("cannot sample pid %d", tr.pid)
        entry = _Sampled(run_id, tr, sampler, [], 0)
        self.runs[tr.pid] = entry
        self.sink.hello(run_id, now, _hello(tr, self._host))
        self._update_workers(entry, now)
        log.info("sampling %s (pid %d): no agent reports it", tr.name, tr.pid)

    def _update_workers(self, entry: _Sampled, now: float) -> None:
        tr = self.trainings.get(entry.training.pid, entry.training)
        entry.training = tr
        n = len(tr.workers)
        # Between epochs non-persistent workers are gone for a moment: the loader keeps its largest count.
        if not entry.told or n > entry.num_workers:
            entry.told = True
            entry.num_workers = max(entry.num_workers, n)
            self.sink.info(entry.run_id, now, {"loader": {"id": 1, "num_workers": entry.num_workers}})
        if tr.workers and tr.workers != entry.workers:
            entry.workers = list(tr.workers)
            self.sink.info(
                entry.run_id, now, {"workers": {"loader": 1, "pids": list(tr.workers), "t_ns": int(now * 1e9)}}
            )

    def _end(self, pid: int, now: float, reason: str) -> None:
        entry = self.runs.pop(pid)
        if entry.sampler is not None:
            entry.sampler.close()
        self.sink.closed(entry.run_id, now, reason)
        log.info("pid %d is no longer sampled: %s", pid, reason)


def _hello(tr: Training, host: str) -> dict[str, Any]:
    env = tr.env
    rank = _int(env.get("RANK")) if "RANK" in env else _int(env.get("SLURM_PROCID"))
    job = {k: v for k, v in env.items() if not k.endswith("RANK") and k != "SLURM_PROCID" and k not in AGENT_ENV}
    return {
        "pid": tr.pid,
        "host": host,
        "session": f"sampled-{tr.pid}",
        "name": tr.name,
        "argv": tr.cmdline,
        "rank": rank,
        "local_rank": _int(env.get("LOCAL_RANK")),
        "world_size": _int(env.get("WORLD_SIZE")),
        "job": job,
        "job_id": tr.job_id,
        "node": host,
        "global_rank": rank,
        "measured_by": "sampling",
        "mono_ns": time.monotonic_ns(),
        "wall": time.time(),
    }


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _forced_training(pid: int, proc_root: str) -> Training:
    cmdline = read_cmdline(f"{proc_root}/{pid}")
    return Training(
        pid,
        script_name(cmdline, os.path.basename(cmdline[0]))[:200] if cmdline else "?",
        "main",
        cmdline,
        {},
        [],
        None,
        math.inf,
    )
