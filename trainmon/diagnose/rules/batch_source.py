"""Input starvation where no ``torch.utils.data.DataLoader`` feeds the loop: a ``get_batch`` of its own, measured as
the step's time outside the model (agent/_outside.py), or another batch source whose ``__next__`` the agent times
(``torchdata.nodes.Loader``, ``trainmon.agent.loader``: DALI, FFCV, Ray Data, generators).

``input_bound`` (rules/input.py) hands such runs here; DataLoader runs keep its worker logic. Time outside the model
is put to what the training thread was doing in it, from the agent's own stack samples (``Run.outside``): data
(``get_batch``, tokenizing, reading), logging, metrics and evaluation, checkpoints, or the loop's own Python
(``zero_grad``, gradient clipping, the loop body). Mostly data, or not attributed (too few samples): the main
process loads the data (``input.main_process``); mostly something else: ``host.overhead``, naming it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from trainmon.diagnose.evidence import Evidence
from trainmon.diagnose.findings import AdviceItem, Finding
from trainmon.diagnose.live.host_window import HostWindow
from trainmon.diagnose.live.window import RunWindow
from trainmon.diagnose.thresholds import Thresholds
from trainmon.numbers import is_nan
from trainmon.store.run import Run

MIN_SAMPLES = 10  # outside samples before their split is told
DATA_SHARE = 0.5  # at least this share of the outside samples in data work (or too few samples): input-bound
KINDS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    # (kind, words a function's name starts a word with, path fragments of its file or its innermost frame's); the
    # first kind that matches names it, but a name of both metrics and logging (log_metrics) goes by where its time
    # is spent (its innermost frame)
    ("checkpoint", ("save", "checkpoint", "ckpt"), ("torch/serialization", "distributed/checkpoint")),
    (
        "logging",
        ("log", "print", "write", "flush", "wandb", "tensorboard", "mlflow", "tqdm", "display"),
        ("logging/", "wandb/", "tensorboard", "mlflow/", "tqdm/", "json/"),
    ),
    (
        "metrics",
        ("metric", "accuracy", "score", "estimate", "eval", "valid", "perplexity", "bleu"),
        ("torchmetrics/", "sklearn/metrics", "evaluate/"),
    ),
    (
        "data",
        (
            "batch",
            "data",
            "load",
            "fetch",
            "token",
            "encode",
            "decode",
            "read",
            "sample",
            "collate",
            "next",
            "shard",
            "augment",
            "transform",
            "prefetch",
            "stream",
            "download",
            "shuffle",
            "crop",
            "resize",
        ),
        ("torch/utils/data", "datasets/", "tokenizers/", "tiktoken/", "PIL/", "torchvision/", "webdataset/"),
    ),
    ("loop", ("zero", "clip", "unscale", "update", "step"), ("torch/optim", "clip_grad", "torch/amp")),
)


def kind_of(entry: dict[str, Any]) -> str:
    """What a hot function outside the model does: data, logging, metrics, checkpoint, loop (the loop's own code
    and the optimizer's housekeeping) or other."""
    if entry.get("data"):
        return "data"  # sampled under a batch's wait (a DataLoader, a hand-over): the data wait, whatever its name
    if entry.get("loop"):
        return "loop"
    kinds = _kinds(str(entry.get("name", "")), f"{entry.get('file', '')} {entry.get('leaf_file', '')}")
    if kinds[:2] == ["logging", "metrics"] and entry.get("leaf"):
        # log_metrics: logging where its innermost frame writes, metrics where it computes (a loop over classes)
        return "logging" if "logging" in _kinds(str(entry["leaf"]), str(entry.get("leaf_file", ""))) else "metrics"
    return kinds[0] if kinds else "other"


def _kinds(name: str, paths: str) -> list[str]:
    """The kinds whose words start a word of ``name`` or whose path fragments are in ``paths``, in KINDS' order."""
    words = re.findall(r"[a-z]+", re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower())
    paths = paths.replace("\\", "/")
    return [
        kind
        for kind, prefixes, fragments in KINDS
        if any(w.startswith(prefixes) for w in words) or any(f in paths for f in fragments)
    ]


def measured_as(w: RunWindow) -> str | None:
    """How the window's data wait was measured, where no DataLoader measured it: "outside_model", "torchdata" or
    "iterable"; None for a DataLoader (and for a run whose wait nothing measured)."""
    if w.loader_id is None:
        source = w.run.wait_source
        return source if source in ("outside_model", "handover") else None
    kind = w.loader.get("kind")
    return kind if kind in ("torchdata", "iterable") else None


TIME_WEIGHTED = ("py-spy",)  # sample sources that are not biased by the interpreter lock


def outside_samples(run: Run) -> dict[str, Any] | None:
    """The run's stack samples of its time outside the model: the monitor's py-spy samples (weighted by time) once
    they hold MIN_SAMPLES outside samples, else the agent's in-process ones (biased by the GIL)."""
    timed = run.outside_timed
    if timed and int(timed.get("samples") or 0) >= MIN_SAMPLES and timed.get("hot"):
        return timed
    return run.outside


def samples_source(outside: dict[str, Any] | None) -> str | None:
    """Where ``outside``'s samples come from: "py-spy", "in-process", or None (no samples)."""
    return (outside or {}).get("source") or ("in-process" if outside else None)


def attribution(outside: dict[str, Any] | None) -> tuple[list[dict[str, Any]], dict[str, float], int]:
    """(the hot functions with their kind and share of the outside samples, the share of each kind, samples)."""
    outside = outside or {}
    total = int(outside.get("samples") or 0)
    hot = [h for h in outside.get("hot") or [] if isinstance(h, dict)]
    if total <= 0 or not hot:
        return [], {}, total
    rows: list[dict[str, Any]] = []
    shares: dict[str, float] = {}
    for h in hot:
        share = min(1.0, int(h.get("samples") or 0) / total)
        kind = kind_of(h)
        shares[kind] = shares.get(kind, 0.0) + share
        rows.append(
            {
                "function": h.get("name"),
                "where": f"{h.get('file')}:{h.get('line')}",
                "innermost": h.get("leaf"),
                "kind": kind,
                "share": round(share, 3),
            }
        )
    return rows, {k: round(v, 3) for k, v in sorted(shares.items(), key=lambda kv: -kv[1])}, total


def batch_source(
    w: RunWindow, host: HostWindow, ev: Evidence, th: Thresholds, severity: str, evidence: dict[str, Any], idle: str
) -> Finding | None:
    """The finding for a run no DataLoader feeds (None: a DataLoader's, judged by rules/input.py)."""
    source = measured_as(w)
    if source is None:
        return None
    evidence["measured_as"] = source
    if source == "outside_model":
        return _outside_model(w, host, ev, th, severity, evidence)
    if source == "handover":
        if fed_loader(w, evidence):
            return None  # a DataLoader iterated by a prefetcher's thread makes the batches: judged as a DataLoader
        return _handover(w, host, ev, th, severity, evidence, idle)
    main_cpu = ev.main.cpu_pct
    evidence["sub_cause"] = "cpu" if is_nan(main_cpu) or main_cpu >= th.worker_busy_pct else "latency"
    return _other_loader(w, host, th, severity, evidence, idle, source)


def fed_loader(w: RunWindow, evidence: dict[str, Any]) -> bool:
    """Whether the loop's hand-over is fed by a DataLoader another thread iterates (a BackgroundGenerator around
    it): then its workers (or that thread, with num_workers=0) make the batches, and the evidence says so."""
    fed = w.run.train_loader()
    if fed is None or not fed.fed_by or not isinstance(fed.config.get("num_workers"), int):
        return False
    workers = fed.config["num_workers"]
    evidence["batch_iterator"] = w.run.handover_iterator
    evidence["fed_by"] = fed.fed_by
    evidence["made_in"] = (
        f"{workers} DataLoader worker(s)" if workers else f"the thread {fed.fed_by} of the main process"
    )
    return True


def _workers(f: float, host: HostWindow, th: Thresholds) -> int:
    """Workers to hide loading ``f`` of the step behind compute, within the usable cores."""
    return max(1, min(max(2, math.ceil(f / max(th.advice_min_compute_share, 1 - f))), host.cores))


THREADED_CPU_PCT = (
    110.0  # the main process above this share of a core: its other threads work too (a pool, a prefetcher)
)


def _outside_model(
    w: RunWindow, host: HostWindow, ev: Evidence, th: Thresholds, severity: str, evidence: dict[str, Any]
) -> Finding:
    f = w.wait_fraction
    outside = outside_samples(w.run)
    source = samples_source(outside)
    rows, shares, total = attribution(outside)
    told = total >= MIN_SAMPLES and rows
    top = rows[0] if told else None
    data_rows = [r for r in rows if r["kind"] == "data"]
    evidence |= {
        "outside_model_fraction": round(f, 4),
        "outside_samples": total,
        "samples_source": source,
        "model_samples": (outside or {}).get("model_samples", 0),
        "outside_hot": rows[:5],
        "outside_by_kind": shares,
        "batch_function": data_rows[0]["function"] if data_rows and told else None,
    }
    step = "" if is_nan(w.step_p50_s) else f"; step p50 {w.step_p50_s * 1e3:.0f} ms"
    if top is not None and shares.get("data", 0.0) < DATA_SHARE and top["kind"] != "data":
        if source in TIME_WEIGHTED:
            where = f"mostly in {top['function']} ({top['where']}, {top['kind']}: {top['share']:.0%} of that time)"
            first = AdviceItem(f"make {top['function']} cheaper or run it less often (every N steps, not every step)")
        else:  # the agent's in-process samples under-count pure-Python code: they cannot name the function
            where = "its functions not named (only in-process stack samples, biased by the GIL)"
            first = AdviceItem("press d on the main process to see where its time goes (py-spy)")
        return Finding(
            "host.overhead",
            severity,
            f"{f:.0%} of each step is spent outside the model, {where}, not in preparing batches{step}",
            [],
            evidence,
            [
                first,
                AdviceItem("move logging and metrics off the step: accumulate on the device, read back every N steps"),
            ],
        )
    named = data_rows and told and source in TIME_WEIGHTED  # the in-process samples' shares lean with the GIL
    what = f", {data_rows[0]['share']:.0%} of it in {data_rows[0]['function']}" if named else ""
    fn = f"{data_rows[0]['function']}()" if named else "the batch function"
    n = _workers(f, host, th)
    main_cpu = ev.main.cpu_pct
    if not is_nan(main_cpu) and main_cpu >= THREADED_CPU_PCT:
        evidence["made_in"] = "threads of the main process"
        return Finding(
            "input.main_process",
            severity,
            f"{f:.0%} of each step is spent outside the model{what}, no DataLoader: the main process runs at "
            f"{main_cpu:.0f}% of a core, so other threads of it already work on the batches{step}",
            [],
            evidence,
            _threaded_advice(fn, n, main_cpu, host),
        )
    evidence["made_in"] = "the training thread"
    return Finding(
        "input.main_process",
        severity,
        f"{f:.0%} of each step is spent outside the model{what}: batches are prepared in the main thread, "
        f"no DataLoader{step}",
        [],
        evidence,
        [
            AdviceItem(
                f"move {fn} off the main thread: an IterableDataset iterated by DataLoader(num_workers={n}, "
                "pin_memory=True, persistent_workers=True) prepares batches while the model computes",
                {"num_workers": n},
                "batches prepared in parallel with compute",
            ),
            AdviceItem(
                f"or prefetch in a background thread: a queue.Queue(maxsize=2) filled by a threading.Thread calling "
                f"{fn} (it helps where the work releases the GIL: NumPy or torch ops, reads; pure-Python "
                "tokenizing needs worker processes)"
            ),
            AdviceItem(
                "or take the work out of the step: tokenize or decode the corpus once before training (token ids in "
                "a np.memmap, as nanoGPT's prepare.py writes them) so the batch function only slices"
            ),
        ],
    )


def _threaded_advice(fn: str, n: int, main_cpu: float, host: HostWindow) -> list[AdviceItem]:
    """Advice for batches already made by other threads of the main process (never: prefetch in a thread)."""
    used = main_cpu / 100.0
    return [
        AdviceItem(
            f"the work already runs in threads ({used:.1f} of {host.cores} cores busy): where it holds the GIL "
            f"(Python code, PIL without release), move it to worker processes: an IterableDataset iterated by "
            f"DataLoader(num_workers={n}, persistent_workers=True), or the loader's own processes (DALI's num_threads "
            "run outside the GIL, FFCV num_workers)",
            {"num_workers": n},
            "batches made in parallel with compute, outside the GIL",
        ),
        AdviceItem(
            f"where it releases the GIL (zlib, NumPy, torch ops, reads) and cores are idle, give {fn}'s pool more "
            "threads and keep more batches in flight (a deeper queue, more futures submitted ahead)"
        ),
        AdviceItem("make each batch cheaper: decode smaller, or cache decoded batches"),
    ]


def _handover(
    w: RunWindow, host: HostWindow, ev: Evidence, th: Thresholds, severity: str, evidence: dict[str, Any], idle: str
) -> Finding:
    """The loop waits on a hand-over (a queue, a future, an iterator's ``__next__``) from other threads of the main
    process, no DataLoader among them: the batches are made there, not in the training thread."""
    f = w.wait_fraction
    name = w.run.handover_iterator
    main_cpu = ev.main.cpu_pct
    evidence["batch_iterator"] = name
    evidence["made_in"] = "threads of the main process"
    step = "" if is_nan(w.step_p50_s) else f"; step p50 {w.step_p50_s * 1e3:.0f} ms"
    where = f"{name}.__next__" if name else "a hand-over from another thread (a queue, a future)"
    cpu = f" (the process at {main_cpu:.0f}% of a core)" if not is_nan(main_cpu) else ""
    fn = name.rsplit(".", 1)[-1] if name else "the batch iterator"
    return Finding(
        "input.main_process",
        severity,
        f"{f:.0%} of each step waits on {where}{idle}: its batches are made by other threads of the main "
        f"process{cpu}, and they do not keep up{step}",
        [],
        evidence,
        _threaded_advice(fn, _workers(f, host, th), main_cpu if not is_nan(main_cpu) else 100.0, host),
    )


def _other_loader(
    w: RunWindow, host: HostWindow, th: Thresholds, severity: str, evidence: dict[str, Any], idle: str, source: str
) -> Finding:
    """A torchdata Loader or a wrapped iterable: its ``__next__`` waits are the data wait."""
    f = w.wait_fraction
    workers = w.loader.get("num_workers")
    name = w.loader.get("dataset") or source
    n = _workers(f, host, th)
    step = "" if is_nan(w.step_p50_s) else f"; step p50 {w.step_p50_s * 1e3:.0f} ms"
    evidence["source_workers"] = workers
    if source == "torchdata":
        if workers:
            return Finding(
                "input.too_few_workers",
                severity,
                f"{f:.0%} of each step waits on a torchdata Loader ({name}){idle}: its ParallelMapper's {workers} "
                f"worker(s) do not keep up{step}",
                [],
                evidence,
                [
                    AdviceItem(f"raise the ParallelMapper's num_workers from {workers} to {max(n, workers + 1)}"),
                    AdviceItem("add a Prefetcher(prefetch_factor=2) before the Loader so batches wait ready"),
                ],
            )
        advice = [
            AdviceItem(
                f"map samples with ParallelMapper(num_workers={n}, method='process') (or 'thread' where the work "
                "releases the GIL) and end the pipeline with a Prefetcher(prefetch_factor=2)"
            )
        ]
        what = "a torchdata Loader with no ParallelMapper workers"
    else:
        advice = [
            AdviceItem(
                "if the source has workers of its own, raise them and its prefetch (DALI num_threads and "
                "prefetch_queue_depth, FFCV num_workers, Ray Data iter_torch_batches(prefetch_batches=...))"
            ),
            AdviceItem(
                f"a generator that computes each batch: make it an IterableDataset iterated by DataLoader("
                f"num_workers={n}, pin_memory=True) so batches are prepared while the model computes",
                {"num_workers": n},
                "batches prepared in parallel with compute",
            ),
        ]
        what = f"{name} (trainmon.agent.loader)"
    return Finding(
        "input.main_process",
        severity,
        f"{f:.0%} of each step waits on {what}, in the main process{idle}{step}",
        [],
        evidence,
        advice,
    )
