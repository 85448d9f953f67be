"""A store of a run that freezes inside one step and resumes, built through the Ingest calls a monitor makes."""

from __future__ import annotations

from array import array

from trainmon import protocol as P
from trainmon.store.store import Store

NS = 1_000_000_000


def _ns(t: float) -> int:
    return round(t * NS)


def freeze_store(
    before_s: float = 30.0,
    freeze_s: float = 45.0,
    after_s: float = 30.0,
    *,
    step_s: float = 0.05,
    wait_s: float = 0.002,
    closed: bool = True,
    second: tuple[float, float] | None = None,
) -> Store:
    """A run (hello at 1 s) that steps every ``step_s`` from 2 s (``wait_s`` of each waiting on loader 1), then stops
    for ``freeze_s`` inside one step (after its optimizer step, before its next batch: nothing is sent), then steps
    again for ``after_s``; ``second``: (when, from its first step; how long) it freezes again. Its records arrive
    twice a second, as the agent's sender sends them, and its connection closes half a second after its last step
    (``closed``)."""
    store = Store()
    store.meta(0.0, {"interval": 1.0, "gpus": []})
    store.hello(1, 1.0, {"pid": 77, "name": "train.py"})
    store.info(1, 1.0, {"loader": {"id": 1, "batch_size": 32, "num_workers": 2, "persistent_workers": True}})
    records: list[tuple[float, list[int]]] = []
    t = 2.0
    end = 2.0 + before_s + freeze_s + after_s + (second[1] if second else 0.0)
    pending = sorted([(2.0 + before_s, freeze_s), *([(2.0 + second[0], second[1])] if second else [])])
    while t < end:
        if pending and t >= pending[0][0]:
            t += pending.pop(0)[1]
            if t >= end:
                break
        records.append((t + wait_s, [1 << 8 | P.K_WAIT, _ns(t), _ns(t + wait_s), 0]))
        t += step_s
        records.append((t, [P.K_OPT, _ns(t), _ns(t), 0]))
    _send(store, records, t)
    if closed:
        store.closed(1, t + 0.5, "exit")
    return store


def _send(store: Store, records: list[tuple[float, list[int]]], end: float) -> None:
    """The records in batches every half second of their own time, as the agent's sender would."""
    k = 0
    now = 0.5
    while now <= end + 0.5:
        batch: list[int] = []
        while k < len(records) and records[k][0] <= now:
            batch += records[k][1]
            k += 1
        if batch:
            store.events(1, now, array("q", batch))
        store.sample(now, {"cpu.busy": 20.0, "cpu.cores": 4.0, "mem.used_pct": 30.0})
        now += 0.5
