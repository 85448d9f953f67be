"""In-process stores built through the same Ingest calls the monitor and recordings use.

``uniform_store``: alike steps and constant host and process figures, for the rules (t from 0).
``timeline_store``: every series a monitor writes, varying over time from ``T0``, for the view and the screen.
"""

from __future__ import annotations

import math
from array import array

from trainmon import protocol as P
from trainmon.protocol import K_CKPT, K_ITER_START, K_MARK, K_WAIT
from trainmon.store.store import Store
from trainmon.view import ReplayFeed

MS = 1_000_000
WORKERS = (101, 102)  # the DataLoader worker pids of a uniform store

T0 = 1000.0  # a timeline store's first tick (monotonic seconds)
WALL = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
NS = 1_000_000_000


# ---------------------------------------------------------------- uniform stores (the rules)


def uniform_store(
    wait_ms: float = 5.0,
    step_ms: float = 50.0,
    steps: int = 200,
    workers: int = 2,
    host: dict | None = None,
    procs: dict | None = None,
    pid: int = 10,
    run_id: int = 1,
    hello: dict | None = None,
    store: Store | None = None,
    t_start_ms: float = 0.0,
    checkpoints: list[tuple[float, float]] | None = None,
    long_every: int = 0,
    long_ms: float = 0.0,
    long_at: tuple[int, ...] = (),
) -> Store:
    """A run of ``steps`` alike steps from ``t_start_ms``: each waits ``wait_ms`` on loader 1, then ends with an
    optimizer step ``step_ms`` after it began (every ``long_every``-th step, and those ``long_at``, ``long_ms``
    longer), plus the given
    checkpoints. Host figures (``host`` over defaults) and per-process ones (``procs``: pid → figures) are
    sampled every second, unchanged: the windows the rules read. ``store`` adds this run to an existing one."""
    store = store or Store()
    store.hello(run_id, t_start_ms / 1e3, {"pid": pid, **(hello or {})})
    store.info(run_id, 0, {"loader": {"id": 1, "batch_size": 32, "num_workers": workers, "persistent_workers": True}})
    if workers:
        store.info(run_id, 0, {"workers": {"loader": 1, "pids": list(WORKERS[:workers])}})
    recs: list[int] = []
    t = t_start_ms
    for i in range(steps):
        recs += [P.K_WAIT | 1 << 8, int(t * MS), int((t + wait_ms) * MS), 0]
        d = step_ms + (long_ms if (long_every and i % long_every == long_every - 1) or i in long_at else 0)
        t += d
        recs += [P.K_OPT, int(t * MS), int(t * MS), 0]
    for c0, c1 in checkpoints or []:
        recs += [P.K_CKPT, int(c0 * MS), int(c1 * MS), 0]
    store.events(run_id, t / 1e3, array("q", recs))
    end = t / 1e3
    host = {
        "cpu.busy": 40.0,
        "cpu.iowait": 0.0,
        "cpu.cores": 8.0,
        "mem.used_pct": 30.0,
        "swap.used_mb": 0.0,
        **(host or {}),
    }
    for k in range(int(end) + 1):
        values = dict(host)
        for proc, figures in (procs or {}).items():
            for key, value in figures.items():
                values[f"proc.{proc}.{key}"] = value
        store.sample(float(k), values)
    return store


def worker_figs(cpu: float, d: float = 0.0, runq: float = 0.0, read: float = 0.0, rchar: float = 0.0) -> dict:
    """The same figures for both ``WORKERS``, as ``uniform_store(procs=...)`` takes them."""
    return {
        pid: {
            "cpu_pct": cpu,
            "state_D": d,
            "state_R": cpu / 100,
            "runq_wait_ms_s": runq,
            "read_mb_s": read,
            "rchar_mb_s": rchar,
        }
        for pid in WORKERS
    }


# ---------------------------------------------------------------- timeline stores (the view, the screen)


def _ns(t: float) -> int:
    return round(t * NS)


def timeline_store(
    duration: float = 90.0,
    *,
    wait_ms: float = 30.0,
    compute_ms: float = 20.0,
    switch_at: float | None = None,
    gpus: int = 1,
    ranks: int = 1,
    checkpoint_every: int = 0,
    throttle: int = 0,
) -> Store:
    """A run from ``T0`` whose loop waits ``wait_ms`` on data and computes ``compute_ms`` per step (until
    ``switch_at`` s, after which data is ready at once), with every series a monitor writes (host, cores, disks,
    GPUs, processes) sampled every second and varying over time: what the screen draws. Deterministic."""
    store = Store()
    meta = {
        "interval": 1.0,
        "wall": WALL,
        "monotonic": T0,
        "gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(gpus)],
        "gpu_error": None if gpus else "no NVIDIA driver: NVML Shared Library Not Found",
    }
    store.meta(T0, meta)
    steps_by_rank = {}
    for r in range(ranks):
        rid, pid = r + 1, 4242 + r
        hello = {
            "pid": pid,
            "name": "train.py",
            "rank": r if ranks > 1 else None,
            "world_size": ranks if ranks > 1 else None,
        }
        store.hello(rid, T0 + 1, hello)
        store.info(
            rid,
            T0 + 1,
            {
                "loader": {
                    "id": 1,
                    "batch_size": 32,
                    "num_workers": 2,
                    "pin_memory": False,
                    "prefetch_factor": 2,
                    "persistent_workers": True,
                }
            },
        )
        store.info(rid, T0 + 1, {"workers": {"loader": 1, "pids": [5000 + 10 * r, 5001 + 10 * r]}})
        store.info(rid, T0 + 1, {"name": {"id": 3, "name": "lr-drop"}})
        recs: list[tuple[float, list[int]]] = [(T0 + 2, [(1 << 8) | K_ITER_START, _ns(T0 + 2), _ns(T0 + 2), 2])]
        t, k = T0 + 2.0, 0
        slow = 1.0 + 0.2 * r
        while t < T0 + duration - 0.5:
            late = switch_at is not None and t >= T0 + switch_at
            w = (0.5 if late else wait_ms * slow) / 1e3
            recs.append((t + w, [(1 << 8) | K_WAIT, _ns(t), _ns(t + w), 0]))
            t += w + compute_ms / 1e3
            k += 1
            if checkpoint_every and k % checkpoint_every == 0:
                recs.append((t + 0.4, [K_CKPT, _ns(t), _ns(t + 0.4), 0]))
                t += 0.4
            if k == 450:
                recs.append((t, [(3 << 8) | K_MARK, _ns(t), _ns(t), 0]))
        steps_by_rank[rid] = recs
    for s in range(int(duration) + 1):
        now = T0 + s
        for rid, recs in steps_by_rank.items():
            batch = array("q")
            while recs and recs[0][0] <= now:
                batch.extend(recs.pop(0)[1])
            if batch:
                store.events(rid, now, batch)
        store.sample(now, _sample_values(s, now, gpus, ranks, switch_at, throttle))
    return store


def _sample_values(
    s: int, now: float, gpus: int, ranks: int, switch_at: float | None, throttle: int
) -> dict[str, float]:
    late = switch_at is not None and now >= T0 + switch_at
    wave = math.sin(s / 7.0)
    v: dict[str, float] = {
        "cpu.cores": 4.0,
        "cpu.busy": 62 + 20 * wave,
        "cpu.iowait": 4 + 3 * (s % 3),
        "cpu.user": 55 + 18 * wave,
        "cpu.system": 7.0,
        "cpu.steal": 0.0,
        "mem.used_pct": 41.0,
        "mem.used_mb": 26_000.0,
        "mem.total_mb": 64_000.0,
        "swap.used_mb": 0.0,
        "swap.total_mb": 2048.0,
        "load.1": 3.25,
        "load.5": 3.0,
    }
    for c in range(4):
        v[f"cpu.core.{c}.busy"] = [97.0, 95.0, 40.0, 12.0][c]
        v[f"cpu.core.{c}.iowait"] = 1.0
    for d, scale in (("nvme0n1", 1.0), ("sda", 0.05)):
        p = f"disk.{d}."
        v.update(
            {
                p + "read_mb_s": scale * (180 + 60 * wave),
                p + "write_mb_s": scale * 12.0,
                p + "util_pct": scale * 70.0,
                p + "r_await_ms": 0.4,
                p + "w_await_ms": 1.2,
                p + "r_s": 900 * scale,
                p + "w_s": 40 * scale,
                p + "aqu_sz": 0.5,
            }
        )
    for g in range(gpus):
        p = f"gpu.{g}."
        util = 97.0 if late else 38 + 10 * wave
        v.update(
            {
                p + "util": util,
                p + "util_min": 90.0 if late else 0.0,
                p + "util_max": 100.0,
                p + "mem_util": 30.0,
                p + "mem_used_mb": 41_000.0,
                p + "mem_total_mb": 81_559.0,
                p + "power_w": 412.0,
                p + "power_limit_w": 700.0,
                p + "temp_c": 61.0,
                p + "sm_clock_mhz": 1980.0,
                p + "mem_clock_mhz": 2619.0,
                p + "sm_clock_max_mhz": 1980.0,
                p + "throttle": float(throttle),
                p + "pcie_rx_mb_s": 2900.0,
                p + "pcie_tx_mb_s": 80.0,
            }
        )
    for r in range(ranks):
        for pid, cpu, states in (
            (4242 + r, 35.0, (0.2, 0.8, 0.0)),
            (5000 + 10 * r, 99.0, (1.0, 0.0, 0.0)),
            (5001 + 10 * r, 97.0, (0.9, 0.05, 0.05)),
        ):
            p = f"proc.{pid}."
            v.update(
                {
                    p + "cpu_pct": cpu,
                    p + "rss_mb": 2100.0 if pid < 5000 else 900.0,
                    p + "read_mb_s": 0.0 if pid < 5000 else 88.0,
                    p + "state_main_R": states[0],
                    p + "state_main_S": states[1],
                    p + "state_main_D": states[2],
                }
            )
            if pid < 5000 and gpus:
                v[p + "gpu_mem_mb"] = 40_960.0
    return v


def replay_at_end(store: Store) -> ReplayFeed:
    """A replay of ``store`` with its clock moved to the end."""
    feed = ReplayFeed(store)
    feed.clock.seek(feed.clock.end)
    return feed


# ---------------------------------------------------------------- a hung run (stall.hang)

HUNG_PID = 4242
HUNG_WORKER = 5000


def hung_dump(t: float, reason: str = "stall.hang") -> dict:
    """The stacks the monitor records for a run deadlocked on two locks (see trainmon.demo.stalls.MetricsLog)."""
    return {
        "reason": reason,
        "t": t,
        "processes": [
            {
                "pid": HUNG_PID,
                "role": "main",
                "error": None,
                "elapsed_ms": 31.5,
                "cpu_ms": 20.0,
                "threads": [
                    {
                        "tid": HUNG_PID,
                        "name": "MainThread",
                        "main": True,
                        "idle": True,
                        "gil": False,
                        "frames": [["MetricsLog.log", "trainmon/demo/stalls.py", 37], ["main", "train.py", 330]],
                    },
                    {
                        "tid": HUNG_PID + 7,
                        "name": "metrics-rotate",
                        "main": False,
                        "idle": True,
                        "gil": False,
                        "frames": [["MetricsLog._rotate_later", "trainmon/demo/stalls.py", 50]],
                    },
                ],
            },
            {"pid": HUNG_WORKER, "role": "worker", "error": "process 5000 has exited", "elapsed_ms": 2.0},
        ],
    }


def hung_store(
    steps_s: float = 20.0,
    silent_s: float = 45.0,
    *,
    step_ms: float = 50.0,
    pause: tuple[float, float] | None = None,
    dump_after_s: float | None = 31.0,
    during_silence: str | None = None,
    hello: dict | None = None,
) -> Store:
    """A run from ``T0`` + 1 whose loop steps every ``step_ms`` (1 ms of it waiting on loader 1) for ``steps_s``
    seconds, but for a ``pause`` (start, length in seconds from its first step), then does nothing more for
    ``silent_s`` while its connection stays open; every second sampled (the main process idle), as a monitor
    ticks. ``dump_after_s``: the stacks the monitor dumps that long after the last step (``hung_dump``).
    ``during_silence``: what the agent still reports, twice a second, while no step comes: "gc" (young
    collections another thread's allocations set off) or "eval" (batches of a second loader)."""
    store = Store()
    store.meta(T0, {"interval": 1.0, "wall": WALL, "monotonic": T0, "gpus": []})
    store.hello(1, T0 + 1, {"pid": HUNG_PID, "name": "train.py", **(hello or {})})
    store.info(1, T0 + 1, {"loader": {"id": 1, "batch_size": 32, "num_workers": 1, "persistent_workers": True}})
    store.info(1, T0 + 1, {"workers": {"loader": 1, "pids": [HUNG_WORKER]}})
    batches: dict[int, list[int]] = {}
    t, first = T0 + 2.0, T0 + 2.0
    while t < first + steps_s:
        if pause is not None and first + pause[0] <= t < first + pause[0] + pause[1]:
            t = first + pause[0] + pause[1]
        w, d = 0.001, step_ms / 1e3
        batches.setdefault(math.ceil(t + d), []).extend(
            [(1 << 8) | K_WAIT, _ns(t), _ns(t + w), 0, P.K_OPT, _ns(t + d), _ns(t + d), 0]
        )
        t += d
    last = t
    u = last + 0.5
    while during_silence and u < last + silent_s:
        kind, ident = (P.K_GC, 0) if during_silence == "gc" else (K_WAIT, 2)
        batches.setdefault(math.ceil(u + 0.01), []).extend([kind | ident << 8, _ns(u), _ns(u + 0.01), 0])
        u += 0.5
    end = last + silent_s
    for s in range(int(end - T0) + 2):
        now = T0 + s
        batch = batches.pop(int(now), None)
        if batch:
            store.events(1, now, array("q", batch))
        store.sample(now, {"cpu.busy": 5.0, "cpu.cores": 4.0, "mem.used_pct": 30.0, f"proc.{HUNG_PID}.cpu_pct": 0.5})
        if dump_after_s is not None and last + dump_after_s <= now < last + dump_after_s + 1:
            store.info(1, now + 0.2, {"stacks": hung_dump(now + 0.1)})
    return store
