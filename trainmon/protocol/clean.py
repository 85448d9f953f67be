"""What the monitor keeps of the JSON messages an agent sends (HELLO, INFO): the known fields, typed and bounded.

Everything an agent says is untrusted input: `clean_hello` and `clean_info` keep the known keys with their expected
types and sizes and drop the rest (see docs/protocol.md); `clean_counts` the cumulative record counts of a HELLO.
The same cleaning applies to a recording read back (``monitor=True``: the fields only the monitor itself may write
are kept, cleaned). Monitor side only: the agent never calls it, though it is importable from `trainmon.protocol`.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

from trainmon.protocol.wire import K_OPT, K_WAIT, ProtocolError, bounded_argv

MAX_LOADER_ID = 4096
MAX_NAMES = 4096
MAX_LIST = 1024
_HELLO_STR = ("host", "session", "name", "torch", "python", "trainmon", "device", "peer", "job_id", "node")
_HELLO_INT = (
    "ppid",
    "rank",
    "global_rank",
    "local_rank",
    "world_size",
    "connection",
    "sent_records",
    "dropped_records",
    "mono_ns",
    "protocol",
)
_LOADER_FIELDS: dict[str, type] = {
    "batch_size": int,
    "num_workers": int,
    "pin_memory": bool,
    "prefetch_factor": int,
    "persistent_workers": bool,
    "drop_last": bool,
    "dataset": str,
    "dataset_len": int,
    "sampler": str,
    "multiprocessing_context": str,
    "start_method": str,  # how its workers start: the loader's context, else the process default
    "attached_late": bool,
    # Read off the batches themselves (agent/_batch.py): how many were read, their samples, and of those holding
    # token ids how many, and their tokens (attention-mask-aware). Sums, halved past 256 batches.
    "measured_batches": int,
    "measured_samples": int,
    "measured_token_batches": int,
    "measured_tokens": int,
    # What the loader is: "dataloader" (torch's, also when absent), "torchdata" (torchdata.nodes.Loader) or
    # "iterable" (any iterable wrapped in trainmon.agent.loader: DALI, FFCV, Ray Data, a generator).
    "kind": str,
}
LOADER_KINDS = ("dataloader", "torchdata", "iterable")
MAX_HOT = 16  # functions an ``outside`` message names
MAX_IDENTITIES = 64  # code objects an ``outside`` message identifies (model, loop)
FRAMEWORKS = ("transformers", "lightning", "accelerate")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: object) -> int:
    return value if _is_int(value) and 0 <= value < 1 << 62 else 0


def clean_counts(counts: object) -> dict[str, Any]:
    """The agent's cumulative record counts (see docs/protocol.md, "Step continuity")."""
    if not isinstance(counts, dict):
        return {"step": 0, "opt": 0, "groups": 0, "last": 0, "wait": {}}
    waits: dict[str, int] = {}
    raw = counts.get("wait")
    if isinstance(raw, dict):
        for key, value in list(raw.items())[:MAX_LIST]:
            if (
                isinstance(key, str)
                and key.isascii()
                and key.isdigit()
                and len(key) < 6
                and int(key) < MAX_LOADER_ID
                and _count(value)
            ):
                waits[str(int(key))] = _count(value)
    last = counts.get("last")
    return {
        "step": _count(counts.get("step")),
        "opt": _count(counts.get("opt")),
        "groups": _count(counts.get("groups")),
        "last": last if last in (K_WAIT, K_OPT) else 0,
        "wait": waits,
    }


PID_NAMESPACES = ("own", "mapped", "unmapped")


def clean_hello(hello: dict[str, Any], *, monitor: bool = False) -> dict[str, Any]:
    """Keep a hello's fields to their expected types and sizes; raises ProtocolError without a pid.

    ``peer_pid`` and ``pid_namespace`` are the monitor's own findings about the connection (see
    docs/protocol.md): an agent-sent one is dropped; ``monitor=True`` (a recording the monitor wrote)
    keeps them, cleaned."""
    pid = hello.get("pid")
    if not _is_int(pid) or not 0 < pid < 1 << 31:
        raise ProtocolError("hello without a valid pid")
    clean: dict[str, Any] = {"pid": pid}
    for key in _HELLO_STR:
        value = hello.get(key)
        clean[key] = str(value)[:200] if value is not None else None
    clean["host"] = clean["host"] or "?"
    clean["session"] = clean["session"] or str(pid)
    for key in _HELLO_INT:
        value = hello.get(key)
        clean[key] = value if _is_int(value) and abs(value) < 1 << 63 else None
    wall = hello.get("wall")
    clean["wall"] = float(wall) if isinstance(wall, float) or (_is_int(wall) and abs(wall) < 1 << 63) else None
    argv = hello.get("argv")
    clean["argv"] = bounded_argv(argv) if isinstance(argv, list) else []
    job = hello.get("job")
    clean["job"] = {str(k)[:64]: str(v)[:200] for k, v in list(job.items())[:32]} if isinstance(job, dict) else {}
    clean["counts"] = clean_counts(hello.get("counts"))
    # An agent injected into a process that was already running (`trainmon attach`): when it started.
    clean["attached_live"] = hello.get("attached_live") is True
    attach_wall = hello.get("attach_wall")
    live_wall = isinstance(attach_wall, (int, float)) and not isinstance(attach_wall, bool)
    clean["attach_wall"] = float(attach_wall) if live_wall and 0 < float(attach_wall) < math.inf else None  # type: ignore[arg-type]
    if monitor:
        # A training the monitor found and samples without an agent (trainmon.sources.discovery.discover).
        clean["measured_by"] = "sampling" if hello.get("measured_by") == "sampling" else "agent"
        peer_pid = hello.get("peer_pid")
        clean["peer_pid"] = peer_pid if _is_int(peer_pid) and 0 < peer_pid < 1 << 31 else None
        ns = hello.get("pid_namespace")
        clean["pid_namespace"] = ns if ns in PID_NAMESPACES else None
    return clean


def _typed(value: object, kind: type) -> Any:
    """``value`` if it has the expected type (ints: non-negative, < 2**40), else None."""
    if kind is int:
        return value if _is_int(value) and 0 <= value < 1 << 40 else None
    if isinstance(value, kind):
        return value[:200] if isinstance(value, str) else value
    return None


def _loader_id(value: object) -> int | None:
    return value if _is_int(value) and 0 <= value < MAX_LOADER_ID else None


def clean_info(info: dict[str, Any], *, monitor: bool = False) -> dict[str, Any]:
    """The known INFO keys with their expected types; everything else dropped (see docs/protocol.md).

    ``workers.proc_pids`` (the workers' pids in the monitor's pid namespace) and ``outside_timed`` (its py-spy
    samples of the training thread) are the monitor's own: kept, cleaned, only with ``monitor=True`` (a recording
    the monitor wrote)."""
    clean: dict[str, Any] = {}
    loader = info.get("loader")
    if isinstance(loader, dict) and (lid := _loader_id(loader.get("id"))) is not None:
        cfg: dict[str, Any] = {"id": lid}
        for key, kind in _LOADER_FIELDS.items():
            if key in loader:
                cfg[key] = _typed(loader[key], kind)
        if "kind" in cfg and cfg["kind"] not in LOADER_KINDS:
            cfg["kind"] = None
        clean["loader"] = cfg
    workers = info.get("workers")
    if isinstance(workers, dict) and (lid := _loader_id(workers.get("loader"))) is not None:
        pids = workers.get("pids")
        pids = [p for p in pids[:MAX_LIST] if _is_int(p) and 0 < p < 1 << 31] if isinstance(pids, list) else []
        clean["workers"] = {"loader": lid, "pids": pids}
        if _is_int(t_ns := workers.get("t_ns")) and 0 <= t_ns < 1 << 63:
            clean["workers"]["t_ns"] = t_ns  # when their iterator began (CLOCK_MONOTONIC ns)
        proc_pids = workers.get("proc_pids")
        if monitor and isinstance(proc_pids, list) and len(proc_pids) == len(pids):
            clean["workers"]["proc_pids"] = [p if _is_int(p) and 0 <= p < 1 << 31 else 0 for p in proc_pids]
    handover = info.get("handover")
    if isinstance(handover, dict) and isinstance(handover.get("iterator"), str):
        clean["handover"] = {"iterator": handover["iterator"][:200]}
    feed = info.get("feed")
    if isinstance(feed, dict) and (lid := _loader_id(feed.get("loader"))) is not None:
        clean["feed"] = {"loader": lid, "thread": str(feed.get("thread") or "")[:80]}
    name = info.get("name")
    if isinstance(name, dict) and _is_int(ident := name.get("id")) and 0 <= ident < MAX_NAMES:
        clean["name"] = {"id": ident, "name": str(name.get("name"))[:200]}
    if _count(drops := info.get("drops")):
        clean["drops"] = drops
    if isinstance(bye := info.get("bye"), str):
        clean["bye"] = bye[:32]
    device = info.get("cuda_device")
    if isinstance(device, dict) and _is_int(index := device.get("index")) and 0 <= index < 1024:
        clean["cuda_device"] = {
            "index": index,
            "uuid": str(device.get("uuid") or "")[:80],
            "name": str(device.get("name") or "")[:100],
        }
    framework = info.get("framework")
    if isinstance(framework, dict) and framework.get("name") in FRAMEWORKS:
        version = framework.get("version")
        clean["framework"] = {"name": framework["name"], "version": str(version)[:40] if version else None}
    if (outside := clean_outside(info.get("outside"))) is not None:
        clean["outside"] = outside
    if monitor and (timed := clean_outside(info.get("outside_timed"))) is not None:
        clean["outside_timed"] = timed  # the monitor's py-spy samples (sources/pyspy/timed_stacks.py), never the wire's
    if (compiled := clean_compile(info.get("compile"))) is not None:
        clean["compile"] = compiled
    if (breaks := clean_graph_breaks(info.get("graph_breaks"))) is not None:
        clean["graph_breaks"] = breaks
    memory = info.get("cuda_memory")
    if isinstance(memory, dict) and _is_int(index := memory.get("index")) and 0 <= index < 1024:
        clean["cuda_memory"] = {"index": index, "total": _count(memory.get("total"))}
    ident = info.get("dist")
    if isinstance(ident, dict) and _is_int(rank := ident.get("rank")) and 0 <= rank < 1 << 31:
        world, local, job = ident.get("world_size"), ident.get("local_rank"), ident.get("job")
        clean["dist"] = {
            "rank": rank,
            "world_size": world if _is_int(world) and 0 < world < 1 << 31 else None,
            "local_rank": local if _is_int(local) and 0 <= local < 1 << 31 else None,
            "job_id": str(ident.get("job_id"))[:200] if ident.get("job_id") else None,
            "job": {str(k)[:64]: str(v)[:200] for k, v in list(job.items())[:32]} if isinstance(job, dict) else {},
        }
    return clean


def _hot_function(raw: object) -> dict[str, Any] | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        return None
    return {
        "name": raw["name"][:200],
        "file": str(raw.get("file") or "")[:200],
        "line": _count(raw.get("line")),
        "samples": _count(raw.get("samples")),
        "leaf": str(raw.get("leaf") or "")[:200],
        "leaf_file": str(raw.get("leaf_file") or "")[:200],
        "loop": raw.get("loop") is True,
        "data": raw.get("data") is True,
    }


def clean_outside(outside: object) -> dict[str, Any] | None:
    """Where a loop with no loader spends its time outside the model, as the agent's own stack samples of its training
    thread tell (``INFO {"outside": ...}``, see docs/protocol.md); None when it is not such a message."""
    if not isinstance(outside, dict):
        return None
    hot = outside.get("hot")
    functions = [f for f in map(_hot_function, hot[:MAX_HOT]) if f is not None] if isinstance(hot, list) else []
    samples, model = _count(outside.get("samples")), _count(outside.get("model_samples"))
    tid = outside.get("tid")
    return {
        "samples": samples,
        "model_samples": model,
        "hot": functions,
        "tid": tid if _is_int(tid) and 0 < tid < 1 << 63 else None,
        "model_functions": _identities(outside.get("model_functions")),
        "loop_functions": _identities(outside.get("loop_functions")),
    }


def _identities(raw: object) -> list[list[Any]]:
    """[qualified name, file, first line] of code objects (the agent's _frames.identities), at most MAX_IDENTITIES."""
    if not isinstance(raw, list):
        return []
    out: list[list[Any]] = []
    for item in raw[:MAX_IDENTITIES]:
        if isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and isinstance(item[1], str):
            out.append([item[0][:200], item[1][:400], _count(item[2])])
    return out


def _text(value: object, size: int = 200) -> str | None:
    return str(value)[:size] if isinstance(value, str) and value else None


def clean_compile(raw: object) -> dict[str, Any] | None:
    """One torch.compile compilation as the agent read it from torch's own record of it (``INFO {"compile": ...}``,
    see docs/protocol.md); None when it is not such a message."""
    if not isinstance(raw, dict) or not _is_int(frame := raw.get("frame")) or not 0 <= frame < 1 << 31:
        return None
    seconds, t_ns = raw.get("seconds"), raw.get("t_ns")
    limit = raw.get("limit_value")
    return {
        "frame": frame,
        "attempt": _count(raw.get("attempt")),
        "id": _text(raw.get("id"), 40),
        "name": _text(raw.get("name")),
        "file": _text(raw.get("file"), 400),
        "line": _count(raw.get("line")),
        "seconds": float(seconds) if isinstance(seconds, (int, float)) and 0 <= seconds < 1e6 else None,
        "t_ns": t_ns if _is_int(t_ns) and 0 <= t_ns < 1 << 63 else None,
        "reason": _text(raw.get("reason"), 1000),
        "graph_breaks": _count(raw.get("graph_breaks")),
        "fail": _text(raw.get("fail"), 100),
        "limit": raw.get("limit") is True,
        "limit_type": _text(raw.get("limit_type"), 60),
        "limit_value": limit if _is_int(limit) and 0 <= limit < 1 << 31 else None,
        "forward": raw.get("forward") is not False,
    }


def clean_graph_breaks(raw: object) -> dict[str, Any] | None:
    """torch.compile's graph breaks so far (``INFO {"graph_breaks": ...}``): their count and most frequent reasons."""
    if not isinstance(raw, dict):
        return None
    reasons = raw.get("reasons")
    kept = []
    for item in reasons[:MAX_HOT] if isinstance(reasons, list) else []:
        if isinstance(item, dict) and (text := _text(item.get("reason"), 400)) is not None:
            kept.append({"reason": text, "count": _count(item.get("count"))})
    return {"total": _count(raw.get("total")), "reasons": kept}
