"""Batch sources that are not DataLoaders: where the agent's stack samples put the time outside the model, and the
diagnosis of such runs (rules/batch_source.py)."""

from __future__ import annotations

import threading
import time
from array import array

import pytest

from testsupport.sampling import sample_both_sides
from trainmon import protocol as P
from trainmon.agent._frames import FrameSampler
from trainmon.diagnose import evaluate
from trainmon.diagnose.rules.batch_source import kind_of
from trainmon.store.store import Store

MS = 1_000_000


# ---------------------------------------------------------------- attribution of the agent's stack samples


def _loop_body() -> None: ...


def get_batch() -> None: ...


def _encode() -> None: ...


def _forward() -> None: ...


def test_an_outside_sample_goes_to_the_first_frame_below_the_loop():
    sampler = FrameSampler(lambda msg: None, [0], lambda: False, frozenset({_forward.__code__}))
    loop, batch, encode = _loop_body.__code__, get_batch.__code__, _encode.__code__
    sampler.loop = {loop}  # seen calling the model
    sampler.model_samples = 7
    sampler.chains[(encode, batch, loop)] = 30  # innermost first
    sampler.chains[(batch, loop)] = 10
    sampler.chains[(loop,)] = 4  # the loop's own code
    sampler.samples = 44
    hot = sampler.hot()
    assert [(h["name"], h["samples"], h["loop"]) for h in hot] == [("get_batch", 40, False), ("_loop_body", 4, True)]
    assert hot[0]["leaf"] == "_encode" and hot[0]["file"].endswith("unit/test_batch_source.py")
    sampler.model_samples = 0
    assert sampler.hot() == []  # no sample inside the model yet: the loop is not known


def test_samples_of_a_real_thread_name_its_batch_function():
    inside = [False]

    def spin(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    def model() -> None:
        inside[0] = True
        spin(0.004)
        inside[0] = False

    def fetch_batch() -> None:
        spin(0.004)

    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            model()
            fetch_batch()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    sampler = FrameSampler(lambda msg: None, [thread.ident or 0], lambda: inside[0], frozenset({model.__code__}))
    try:
        sample_both_sides(sampler)
    finally:
        stop.set()
        thread.join()
    hot = sampler.hot()
    assert sampler.samples >= 30 and sampler.model_samples >= 30
    assert "fetch_batch" in hot[0]["name"] and not hot[0]["loop"], hot


def test_the_sampler_sends_what_it_found():
    sent: list[dict] = []
    sampler = FrameSampler(sent.append, [threading.get_ident()], lambda: False, frozenset())
    sampler.sample_once()  # this thread, outside any model
    sampler.send()
    sampler.send()  # nothing new: not sent again
    assert len(sent) == 1 and sent[0]["outside"]["samples"] == 1 and sent[0]["outside"]["hot"] == []
    assert P.clean_outside(sent[0]["outside"]) == sent[0]["outside"]


@pytest.mark.parametrize(
    ("entry", "kind"),
    [
        ({"name": "get_batch", "file": "nanogpt/train.py"}, "data"),
        ({"name": "Batches.get_batch", "file": "demo/gpt.py"}, "data"),
        ({"name": "ByteBPE.encode", "file": "demo/gpt_parts.py"}, "data"),
        ({"name": "log_metrics", "file": "x/train.py"}, "logging"),
        ({"name": "estimate_loss", "file": "nanogpt/train.py"}, "metrics"),
        ({"name": "helper", "file": "x/y.py", "leaf_file": "wandb/sdk.py"}, "logging"),
        ({"name": "_no_grad_wrapper", "file": "utils/clip_grad.py", "leaf_file": "nn/utils/clip_grad.py"}, "loop"),
        ({"name": "Optimizer.zero_grad", "file": "optim/optimizer.py"}, "loop"),
        ({"name": "<module>", "file": "x/train.py", "loop": True}, "loop"),
        ({"name": "frobnicate", "file": "x/y.py"}, "other"),
    ],
)
def test_what_a_hot_function_does(entry: dict, kind: str):
    assert kind_of(entry) == kind


# ---------------------------------------------------------------- the diagnosis


def _run(store: Store, outside_ms: float, hot: list[dict] | None = None, steps: int = 200, timed: bool = True) -> Store:
    """A loop no loader feeds: 50 ms steps told ``outside_ms`` outside the model, host figures every second; ``hot``
    the functions of its samples outside the model: the monitor's py-spy samples (``timed``) or the agent's."""
    store.hello(1, 0.0, {"pid": 10})
    recs: list[int] = []
    t = 0
    for _ in range(steps):
        end = t + 50 * MS
        recs += [P.K_OUTSIDE, t, end - MS, int(outside_ms * MS), P.K_OPT, end, end, 0]
        t = end
    store.events(1, t / 1e9, array("q", recs))
    if hot is not None:
        key = "outside_timed" if timed else "outside"
        msg = {key: {"samples": 100, "model_samples": 120, "hot": hot}}
        store.info(1, t / 1e9, P.clean_info(msg, monitor=True))
    for k in range(int(t / 1e9) + 1):
        store.sample(float(k), {"cpu.busy": 40.0, "cpu.iowait": 0.0, "cpu.cores": 8.0, "proc.10.cpu_pct": 99.0})
    return store


GET_BATCH = {"name": "get_batch", "file": "nanogpt/train.py", "line": 116, "samples": 90, "leaf": "encode"}
LOOP = {"name": "<module>", "file": "nanogpt/train.py", "line": 1, "samples": 10, "loop": True}


def test_a_slow_get_batch_is_input_bound_and_named():
    f = evaluate(_run(Store(cap=None), 20.0, [GET_BATCH, LOOP]), 10.0)[0]
    assert f.code == "input.main_process" and f.severity == "critical"
    ev = f.evidence
    assert ev["measured_as"] == "outside_model" and ev["batch_function"] == "get_batch"
    assert ev["data_wait_fraction"] == pytest.approx(0.4) and ev["num_workers"] is None
    assert ev["outside_by_kind"] == {"data": 0.9, "loop": 0.1}
    assert "get_batch" in f.summary and "no DataLoader" in f.summary
    assert "get_batch() off the main thread" in f.advice[0] and f.advice_items[0].settings == {"num_workers": 2}


def test_time_outside_the_model_not_attributed_is_still_input_bound():
    f = evaluate(_run(Store(cap=None), 20.0), 10.0)[0]
    assert f.code == "input.main_process" and f.evidence["batch_function"] is None
    assert "the batch function off the main thread" in f.advice[0]


def test_logging_outside_the_model_is_host_overhead_not_input():
    log = {"name": "log_metrics", "file": "x/train.py", "line": 40, "samples": 80, "leaf": "write"}
    f = evaluate(_run(Store(cap=None), 20.0, [log, {**GET_BATCH, "samples": 20}]), 10.0)[0]
    assert f.code == "host.overhead" and "log_metrics" in f.summary and "logging" in f.summary
    assert f.evidence["samples_source"] == "py-spy"


def test_samples_biased_by_the_gil_name_no_function():
    log = {"name": "log_metrics", "file": "x/train.py", "line": 40, "samples": 80, "leaf": "write"}
    f = evaluate(_run(Store(cap=None), 20.0, [log, {**GET_BATCH, "samples": 20}], timed=False), 10.0)[0]
    assert f.code == "host.overhead" and "log_metrics" not in f.summary and "biased by the GIL" in f.summary
    assert f.evidence["samples_source"] == "in-process" and f.evidence["outside_hot"][0]["function"] == "log_metrics"
    g = evaluate(_run(Store(cap=None), 20.0, [GET_BATCH, LOOP], timed=False), 10.0)[0]
    assert g.code == "input.main_process" and "get_batch" not in g.summary + g.advice[0]


def test_time_weighted_samples_are_taken_over_the_agents_own():
    store = _run(Store(cap=None), 20.0, [GET_BATCH, LOOP], timed=False)
    log = {"name": "log_metrics", "file": "x/train.py", "line": 40, "samples": 80, "leaf": "write"}
    msg = {"outside_timed": {"samples": 100, "model_samples": 120, "hot": [log]}}
    store.info(1, 10.0, P.clean_info(msg, monitor=True))
    f = evaluate(store, 10.0)[0]
    assert f.code == "host.overhead" and "log_metrics" in f.summary


def test_a_cheap_get_batch_stays_compute_bound_with_its_wait_told():
    f = evaluate(_run(Store(cap=None), 1.0, [GET_BATCH]), 10.0)[0]
    assert f.code == "ok.compute_bound"
    assert f.evidence["data_wait_fraction"] == pytest.approx(0.02)


def _loader_run(config: dict, wait_ms: float = 20.0) -> Store:
    store = Store(cap=None)
    store.hello(1, 0.0, {"pid": 10})
    store.info(1, 0.0, P.clean_info({"loader": {"id": 1, **config}}))
    recs: list[int] = []
    t = 0
    for _ in range(200):
        recs += [P.K_WAIT | 1 << 8, t, t + int(wait_ms * MS), 0]
        t += 50 * MS
        recs += [P.K_OPT, t, t, 0]
    store.events(1, t / 1e9, array("q", recs))
    for k in range(11):
        store.sample(float(k), {"cpu.busy": 40.0, "cpu.iowait": 0.0, "cpu.cores": 8.0, "proc.10.cpu_pct": 99.0})
    return store


def test_a_wrapped_iterable_is_judged_as_a_loader_in_the_main_process():
    f = evaluate(_loader_run({"kind": "iterable", "dataset": "bpe-stream"}), 10.0)[0]
    assert f.code == "input.main_process" and f.evidence["measured_as"] == "iterable"
    assert "bpe-stream" in f.summary and "DALI" in f.advice[0]


def test_torchdata_loaders_by_their_workers():
    f = evaluate(_loader_run({"kind": "torchdata", "dataset": "Batcher", "num_workers": 0}), 10.0)[0]
    assert f.code == "input.main_process" and "ParallelMapper" in f.advice[0]
    f = evaluate(_loader_run({"kind": "torchdata", "dataset": "Batcher", "num_workers": 2}), 10.0)[0]
    assert f.code == "input.too_few_workers" and "from 2 to" in f.advice[0]


def test_dataloaders_are_left_to_the_worker_rules():
    f = evaluate(_loader_run({"kind": "dataloader", "num_workers": 0, "batch_size": 32}), 10.0)[0]
    assert f.code == "input.main_process" and "measured_as" not in f.evidence
    assert "DataLoader(num_workers=" in f.advice[0]


def test_a_loop_timed_outside_the_model_before_its_hand_over_was_wrapped_is_a_hand_over_loop():
    """The first burst's steps can end before the hand-over wrappers are in (a prefetcher's queue): their wait is
    outside the model; every later step's is the hand-over, and the run is measured by that."""
    store = Store(cap=None)
    store.hello(1, 0.0, {"pid": 10})
    recs: list[int] = []
    t = 0
    for k in range(200):
        end = t + 50 * MS
        if k < 5:
            recs += [P.K_OUTSIDE, t, end - MS, 20 * MS]
        else:
            handed = [P.K_HANDOVER, t, t + 20 * MS, P.HANDOVER_KINDS.index("iterator")]
            recs += [*handed, P.K_OUTSIDE, t, end - MS, 21 * MS]
        recs += [P.K_OPT, end, end, 0]
        t = end
    store.events(1, t / 1e9, array("q", recs))
    (run,) = store.runs.values()
    assert run.deriver.outside_steps == 5 and run.deriver.handover_steps == 195
    assert run.wait_source == "handover"
    assert run.steps.own[-1] == pytest.approx(0.001, abs=1e-4)  # outside the model, not waiting: 1 ms of own code
