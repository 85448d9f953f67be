"""Loops that no loader drives: the agent times the model (agent/_outside.py), the store makes a step's time outside
it that step's data wait, and reports say null, not 0, where nothing measured the wait."""

from __future__ import annotations

import copy
import io
import pickle
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch

from testsupport.sampling import sample_both_sides
from trainmon import protocol as P
from trainmon.agent import _hot, _model_search, _outside
from trainmon.agent._outside import OutsideProbe
from trainmon.report.runs import run_summary
from trainmon.store.store import Store

MS = 1_000_000


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, pause: float = 0.0) -> torch.Tensor:
        if pause:
            time.sleep(pause)
        return self.body(x)


@contextmanager
def _probe() -> Iterator[tuple[OutsideProbe, list[dict]]]:
    sent: list[dict] = []
    probe = OutsideProbe(sent.append)
    _hot.reset_buffer()
    try:
        yield probe, sent
    finally:
        probe.uninstall()
        _hot.reset_buffer()


def _outside_records() -> list[tuple[int, int, int, int]]:
    flat = _hot.swap_buffer()
    recs = [tuple(flat[i : i + 4]) for i in range(0, len(flat), 4)]
    return [r for r in recs if r[0] & 0xFF == P.K_OUTSIDE]  # type: ignore[misc]


def test_a_steps_time_outside_the_model_is_its_span_less_forward_and_backward():
    net = _Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    with _probe() as (probe, _):
        assert probe.enable()
        x = torch.ones(4, 8)
        for _ in range(4):
            time.sleep(0.02)  # the batch, outside the model
            net(x, pause=0.03).sum().backward()  # 30 ms inside it
            opt.step()
            opt.zero_grad()
        records = _outside_records()
    assert len(records) == 3  # the first step has no previous end to start from
    for _tag, t0, t1, outside in records:
        assert outside >= 20 * MS  # the sleep before the forward, at least
        assert outside <= (t1 - t0) - 30 * MS  # never the forward's own time
        assert t1 > t0


def test_the_model_is_the_root_module_its_optimizer_trains_and_wrappers_undo():
    inner = _Net()
    wrapper = torch.nn.Sequential(inner)  # a wrapper holding the model (as DDP or torch.compile's module do)
    opt = torch.optim.SGD(wrapper.parameters(), lr=0.01)
    unrelated = torch.nn.Identity()  # no parameters: never timed
    with _probe() as (probe, _):
        assert probe.enable()
        assert isinstance(wrapper.__dict__.get("forward"), type(wrapper.forward))
        assert "forward" not in inner.__dict__ and "forward" not in unrelated.__dict__
        assert opt.step.__func__ is _outside.step and opt.zero_grad.__func__ is _outside.zero_grad
        for timed in (torch.autograd.backward, torch.nn.utils.clip_grad_norm_):  # the optimizer's work is inside
            assert getattr(timed, "__trainmon_original__", None) is not None
    assert "forward" not in wrapper.__dict__ and "step" not in opt.__dict__ and "zero_grad" not in opt.__dict__
    for timed in (torch.autograd.backward, torch.nn.utils.clip_grad_norm_):
        assert getattr(timed, "__trainmon_original__", None) is None


def test_a_compiled_model_is_timed_around_its_compiled_forward():
    net = _Net()
    compiled = torch.compile(net, backend="eager")
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.ones(4, 8)
    with _probe() as (probe, _):
        assert probe.enable()
        assert "forward" not in net.__dict__  # what dynamo traces holds no wrapper
        assert compiled.__dict__[_outside.PREV_FORWARD] is not None  # torch.compile's own forward, called by ours
        for _ in range(3):
            compiled(x).sum().backward()
            opt.step()
            opt.zero_grad()
        assert len(_outside_records()) == 2
        assert torch.equal(compiled(x), net.body(x))
    assert _outside.PREV_FORWARD not in compiled.__dict__ and callable(compiled.__dict__["forward"])


def test_a_ddp_wrapper_is_the_module_timed(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdzv'}", rank=0, world_size=1)
    try:
        net = _Net()
        ddp = torch.nn.parallel.DistributedDataParallel(net)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        with _probe() as (probe, _):
            assert probe.enable()
            assert "forward" in ddp.__dict__ and "forward" not in net.__dict__
            for _ in range(3):
                ddp(torch.ones(4, 8)).sum().backward()
                opt.step()
                opt.zero_grad()
            assert len(_outside_records()) == 2
    finally:
        dist.destroy_process_group()


@pytest.mark.filterwarnings("error")  # no scheduler warning about an overridden optimizer.step
def test_a_timed_model_copies_pickles_and_keeps_an_lr_schedulers_step():
    net = _Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    scheduler_step = opt.__dict__["step"]
    with _probe() as (probe, _):
        assert probe.enable()
        copied = copy.deepcopy(net)
        assert copied.forward.__self__ is copied  # rebound: the copy computes with its own weights
        x = torch.ones(2, 8)
        assert torch.equal(copied(x), net(x))
        buf = io.BytesIO()
        torch.save(net, buf)
        loaded = torch.load(io.BytesIO(buf.getvalue()), weights_only=False)
        assert torch.equal(loaded(x), net(x))
        assert pickle.loads(pickle.dumps(net)).body.weight.shape == (8, 8)
        net(x).sum().backward()
        opt.step()
        sched.step()
        assert opt._opt_called  # type: ignore[attr-defined]  # the scheduler's own step wrapper still ran
        late = torch.optim.lr_scheduler.StepLR(opt, 1)  # made after the model was timed
        opt.step()
        late.step()
    assert opt.__dict__["step"] is scheduler_step


def test_a_region_dynamo_traces_holds_no_timing_code():
    net = _Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    with _probe() as (probe, _):
        assert probe.enable()

        @torch.compile(backend="eager", fullgraph=True)  # a graph break would raise
        def step(x: torch.Tensor) -> torch.Tensor:
            return net(x).relu()

        assert step(torch.ones(2, 8)).shape == (2, 8)
        assert opt.step.__func__ is _outside.step


def _counts(opt: int, groups: int = 0, waits: int = 0) -> SimpleNamespace:
    return SimpleNamespace(opt=opt, groups=groups, wait={1: waits} if waits else {})


def test_the_probe_times_every_loop_and_waits_on_hand_overs_only_where_no_loader_feeds_the_thread():
    import queue

    net = _Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    plain_get = queue.Queue.get
    with _probe() as (probe, _):
        probe.observe(_counts(opt=4, groups=4, waits=4))  # a DataLoader loop, fewer steps than ENABLE_AFTER
        assert not probe.on and "forward" not in net.__dict__
        probe.observe(_counts(opt=4, groups=4, waits=4))  # 8 steps each after a batch: the model is timed too
        assert probe.on and probe.fed and "forward" in net.__dict__ and "step" in opt.__dict__
        assert queue.Queue.get is plain_get  # the loop waits in the DataLoader: no hand-over to time
        probe.observe(_counts(opt=3))  # steps with no batch on the training thread (a prefetcher's queue)
        assert probe.on and not probe.fed and queue.Queue.get is not plain_get
        probe.observe(_counts(opt=4, groups=2, waits=2))  # a GAN's two optimizers per batch: a loader drives it
        assert probe.on and probe.fed and queue.Queue.get is plain_get
    assert queue.Queue.get is plain_get and "forward" not in net.__dict__


def _steps(net: _Net, opt: torch.optim.Optimizer, n: int, outside_s: float = 0.001) -> None:
    x = torch.ones(4, 8)
    for _ in range(n):
        time.sleep(outside_s)  # the batch, outside the model
        net(x).sum().backward()
        opt.step()
        opt.zero_grad()


def test_the_model_is_timed_in_bursts_whose_cost_stays_within_the_budget():
    net = _Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    n = _outside.BURST_STEPS
    with _probe() as (probe, _):
        assert probe.enable() and probe.price_ns is not None and probe.measuring
        probe.price_ns = (5_000.0, 0.0)  # calibrated at 5 µs: priced at 20 µs until bursts tell it
        _steps(net, opt, n + 1)  # the first burst's first step has no end before it
        assert len(_outside_records()) == n
        probe.observe(_counts(opt=n + 1))  # the sender prices it: over the budget, it ends after n more steps
        assert probe.measuring and _outside._burst_left[0] == n
        burst_start = probe._burst[0]
        _steps(net, opt, n + 2)  # the training thread ends it after n
        assert len(_outside_records()) == n and not probe.measuring
        assert "forward" not in net.__dict__ and "step" not in opt.__dict__
        assert getattr(torch.autograd.backward, "__trainmon_original__", None) is None
        assert len(probe._burst_costs) == 1 and probe._burst_costs[0] > 0  # its CPU per step, read by the thread
        probe.observe(_counts(opt=n + 3))  # the sender: the pause that keeps the bursts within the budget
        # steps of 1.2 ms or more: a budget of 0.1 % of that, 1.2 µs or more, buys 6 % of the time or more at 20 µs a
        # measured step (a slower host's longer steps buy more); never less than BUDGET_NS's share, never all of it
        assert probe.step_price_ns == 4 * 5_000.0
        assert probe.on and not probe.measuring
        assert _outside.BUDGET_NS / probe.step_price_ns <= probe.duty < 0.5
        pause = probe.pause_until - probe.burst_end
        assert pause == pytest.approx((probe.burst_end - burst_start) * (1 / probe.duty - 1), rel=0.01)
        _steps(net, opt, 3)
        probe.observe(_counts(opt=3))
        assert not probe.measuring and _outside_records() == []  # paused: nothing timed, nothing sent
        probe.pause_until = 0.0  # its time is up
        probe.observe(_counts(opt=1))
        assert probe.measuring and net.forward.__func__ is _outside.forward and probe.bursts == 2
        _steps(net, opt, 3)
        assert len(_outside_records()) == 2  # again the burst's first step unmeasured


def test_a_model_timed_then_dropped_is_looked_for_again_at_once():
    """A model built only to time a step (the demo's --step-ms sizing, a batch-size search) is found and wrapped, then
    dropped for the one that trains: once CHECK_AFTER steps measured nothing, the probe looks again within
    RETRY_FIRST_S (not RETRY_S later, after most of a short run) and times the model that trains."""
    import gc

    trial = _Net()
    trial_opt = torch.optim.SGD(trial.parameters(), lr=0.01)
    with _probe() as (probe, _):
        enabled = probe.enable()
        patched = "forward" in vars(trial)  # not inside an assert: pytest's rewrite would keep the trial alive
        del trial, trial_opt
        assert enabled and patched
        gc.collect()
        net = _Net()
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        _steps(net, opt, _outside.CHECK_AFTER)
        probe.observe(_counts(opt=_outside.CHECK_AFTER))
        assert not probe.on and probe.retry_at <= time.monotonic() + _outside.RETRY_FIRST_S  # nothing measured
        probe.retry_at = 0.0  # its second past
        _hot.reset_buffer()
        probe.observe(_counts(opt=_outside.ENABLE_AFTER))
        assert probe.on and probe.tries == 2 and "forward" in net.__dict__
        _steps(net, opt, 3)
        assert len(_outside_records()) == 2  # the burst's first step has no end before it


def test_a_measured_steps_price_is_what_bursts_cost_the_training_thread_over_the_ticks_between(monkeypatch):
    cpu = [1_000_000]
    monkeypatch.setattr(_outside, "_thread_cpu_ns", lambda native: cpu[0])
    probe = OutsideProbe(lambda msg: None)
    probe.price_ns = (2_000.0, 1_000.0)  # calibrated: 3 µs a step of one forward
    assert probe._price_per_step(1.0) == 4 * 3_000.0  # nothing measured on the thread yet
    probe._account(0)  # the first tick: a baseline to start from
    for _ in range(5):  # ticks with no burst: 200 µs of CPU a step
        cpu[0] += 100 * 200_000
        probe._account(100)
    _outside._wrapped[0] += 17  # a burst in this tick: not baseline
    cpu[0] += 100 * 210_000
    probe._account(100)
    assert probe._baseline[0] / probe._baseline[1] == pytest.approx(200_000)
    probe._burst_costs = [260_000.0, 255_000.0]
    assert probe._price_per_step(1.0) == 4 * 3_000.0  # two bursts: not yet
    probe._burst_costs.append(262_000.0)
    assert probe._price_per_step(1.0) == pytest.approx(60_000)  # their median against the baseline
    probe._burst_costs = [200_500.0] * 3  # less than the wrappers cost on their own: the calibration is the floor
    assert probe._price_per_step(2.0) == 4_000.0
    # Steps whose own CPU drifts by milliseconds (a metrics window filling): that difference is not the wrappers'.
    probe._burst_costs = [3_200_000.0, 3_500_000.0, 3_900_000.0]
    assert probe._price_per_step(1.0) == _outside.MAX_COLD * 3_000.0


def test_slow_steps_are_all_measured():
    net = _Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    with _probe() as (probe, _):
        assert probe.enable()
        probe.price_ns = (2_000.0, 1_000.0)  # 12 µs a measured step (4 × 3 µs calibrated): under 0.1 % of 20 ms
        for _ in range(3):
            _steps(net, opt, _outside.BURST_STEPS, outside_s=0.02)
            probe.observe(_counts(opt=_outside.BURST_STEPS))
            assert probe.measuring and probe.duty == 1.0
        assert len(_outside_records()) == 3 * _outside.BURST_STEPS - 1


def test_between_bursts_the_stack_samples_tell_the_model_by_its_code():
    net = _Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    stop = threading.Event()
    x = torch.ones(4, 8)

    def get_batch() -> torch.Tensor:
        time.sleep(0.004)
        return x

    def train() -> None:
        while not stop.is_set():
            net(get_batch(), pause=0.004).sum().backward()
            opt.step()
            opt.zero_grad()

    with _probe() as (probe, _):
        assert probe.enable()
        sampler = probe.sampler
        assert sampler is not None
        sampler.stop()
        thread = threading.Thread(target=train, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 20
            while not _outside._tid[0] and time.monotonic() < deadline:  # the burst's first step names the thread
                time.sleep(0.001)
            assert _outside._tid[0] == thread.ident
            with probe.lock:
                probe._unpatch()  # a pause: no wrapper on the stack
                probe.measuring = _outside._patched[0] = False
            assert _outside.inside_model() is None
            sample_both_sides(sampler)
        finally:
            stop.set()
            thread.join()
    assert sampler.samples >= 30 and sampler.model_samples >= 30
    hot = sampler.hot()
    assert hot and hot[0]["name"].endswith("get_batch"), hot


def _loaderless(store: Store, steps: int, outside_from: int, outside_ms: float = 20.0) -> None:
    """Steps of 50 ms with no loader; from step ``outside_from`` on, each told ``outside_ms`` outside the model."""
    store.hello(1, 0.0, {"pid": 10})
    recs: list[int] = []
    t = 0
    for k in range(steps):
        end = t + 50 * MS
        if k >= outside_from:
            recs += [P.K_OUTSIDE, t, end - MS, int(outside_ms * MS)]
        recs += [P.K_OPT, end, end, 0]
        t = end
    store.events(1, t / 1e9, array("q", recs))


def test_a_steps_wait_is_its_time_outside_the_model_and_earlier_steps_are_warm_up():
    store = Store(cap=None)
    _loaderless(store, 60, outside_from=10)
    run = store.runs[1]
    assert run.wait_source == "outside_model" and run.deriver.outside_steps == 50
    steps = run.steps
    assert all(steps.warm[k] for k in range(10))  # not measured: warm-up, never a wait of 0
    assert [round(steps.wait[k] * 1e3, 6) for k in range(10, 60)] == [20.0] * 50
    summary = run_summary(run)
    assert summary["data_wait_fraction"] == pytest.approx(0.4)
    assert summary["data_wait_measured_as"] == "outside_model"


def test_steps_between_bursts_get_the_measured_steps_share_outside_the_model():
    store = Store(cap=None)
    store.hello(1, 0.0, {"pid": 10})
    recs: list[int] = []
    t = 0
    durations = [50] * 40 + [500] + [50] * 5  # ms; steps 10-19 measured (a burst), then a pause
    ends = []
    for k, ms in enumerate(durations):
        end = t + ms * MS
        if 10 <= k < 20:
            recs += [P.K_OUTSIDE, t, end - MS, 20 * MS]
        recs += [P.K_OPT, end, end, 0]
        ends.append(end)
        t = end
    gap = t + 40 * 1000 * MS  # 40 s later, still no burst: nothing tells these steps' wait
    for k in range(3):
        recs += [P.K_OPT, gap + k * 50 * MS, gap + k * 50 * MS, 0]
    store.events(1, gap / 1e9 + 1, array("q", recs))
    run = store.runs[1]
    steps = run.steps
    # 20 steps estimated before the long one, 5 after it; the first step after the gap is not (40 s past the burst)
    assert run.deriver.outside_steps == 10 and run.deriver.outside_estimated == 26
    assert [round(steps.wait[k] * 1e3, 3) for k in range(10, 20)] == [20.0] * 10  # measured
    estimated = [steps.wait[k] * 1e3 for k in [*range(20, 40), *range(41, 46)]]
    assert all(w == pytest.approx(20.0, rel=0.05) for w in estimated)  # 40 % of 50 ms
    assert steps.wait[40] * 1e3 == pytest.approx(0.4 * 4 * 50, rel=0.05)  # a 500 ms step: at most 4 typical spans
    assert steps.wait[len(steps) - 1] == 0.0  # long past the last burst
    assert run.wait_source == "outside_model"


def test_a_report_says_what_share_of_the_steps_was_timed():
    from trainmon.report.cells import run_cells

    store = Store(cap=None)
    store.hello(1, 0.0, {"pid": 10})
    recs: list[int] = []
    for k in range(100):  # steps 10-29 timed (a burst), the rest given their share
        t, end = k * 50 * MS, (k + 1) * 50 * MS
        if 10 <= k < 30:
            recs += [P.K_OUTSIDE, t, end - MS, 20 * MS]
        recs += [P.K_OPT, end, end, 0]
    store.events(1, 5.0, array("q", recs))
    summary = run_summary(store.runs[1])
    assert summary["outside_model_steps"] == {"measured": 20, "estimated": 70}
    assert summary["data_wait_fraction"] == pytest.approx(0.4, abs=0.01)
    assert run_cells(summary)[3] == "40.0% (outside model, 22.2% of steps timed)"


def test_nothing_measured_is_null_not_zero():
    store = Store(cap=None)
    _loaderless(store, 40, outside_from=40)  # optimizer steps only: the model was never timed
    run = store.runs[1]
    summary = run_summary(run)
    assert run.wait_source is None and summary["steps"] == 40
    assert summary["data_wait_fraction"] is None and summary["data_wait_measured_as"] is None


def test_outside_messages_are_cleaned():
    raw = {
        "outside": {
            "samples": 12,
            "model_samples": -3,
            "hot": [{"name": "get_batch", "line": 7}, 5, {"x": 1}],
            "tid": 4242,
            "model_functions": [["GPT.forward", "/src/model.py", 120], ["bad"], [1, 2, 3]],
            "loop_functions": "nope",
        }
    }
    assert P.clean_info(raw) == {
        "outside": {
            "samples": 12,
            "model_samples": 0,
            "hot": [
                {
                    "name": "get_batch",
                    "file": "",
                    "line": 7,
                    "samples": 0,
                    "leaf": "",
                    "leaf_file": "",
                    "loop": False,
                    "data": False,
                }
            ],
            "tid": 4242,
            "model_functions": [["GPT.forward", "/src/model.py", 120]],
            "loop_functions": [],
        }
    }
    assert P.clean_info({"outside": {"tid": -1}})["outside"]["tid"] is None
    assert P.clean_info({"loader": {"id": 2, "kind": "bogus"}})["loader"]["kind"] is None
    assert P.clean_info({"loader": {"id": 2, "kind": "torchdata"}})["loader"]["kind"] == "torchdata"


def test_the_calibration_times_copies_that_touch_none_of_the_wrappers_state():
    state = ("_st", "_live", "_last_end", "_measured", "_span", "_wrapped", "_tid", "_native", "_burst_left")
    before = {name: list(getattr(_outside, name)) for name in state}
    _hot.reset_buffer()
    step_ns, forward_ns = _outside._price()
    assert step_ns >= 0 and forward_ns >= 0
    assert {name: list(getattr(_outside, name)) for name in state} == before
    assert len(_hot.swap_buffer()) == 0  # no record reaches the monitor


def test_the_model_is_found_from_the_training_threads_frames_and_else_among_all_objects(monkeypatch):
    class Trainer:  # holds the model and its optimizer two attributes deep, as a framework's trainer does
        def __init__(self) -> None:
            self.state = SimpleNamespace(model=torch.nn.Sequential(_Net()))
            self.optimizers = [torch.optim.SGD(self.state.model.parameters(), lr=0.01)]

    trainer = Trainer()
    scanned: list[bool] = []
    collected = _model_search._collected
    monkeypatch.setattr(_model_search, "_collected", lambda *a: scanned.append(True) or collected(*a))
    roots, optimizers = _model_search.find_targets(torch)
    assert roots == [trainer.state.model] and optimizers == trainer.optimizers and not scanned
    del trainer, roots, optimizers

    def hidden() -> tuple[torch.nn.Module, torch.optim.Optimizer]:  # reachable from no frame: only from a closure
        net = _Net()
        return net, torch.optim.SGD(net.parameters(), lr=0.01)

    def holder() -> Callable[[], tuple[torch.nn.Module, torch.optim.Optimizer]]:
        pair = hidden()
        return lambda: pair

    get = holder()
    monkeypatch.setattr(_model_search, "_reachable", lambda *a: ([], []))  # what other tests left may be reachable
    roots, optimizers = _model_search.find_targets(torch)
    assert scanned and get()[0] in roots and get()[1] in optimizers


def test_a_block_whose_forward_the_thread_is_in_is_not_taken_for_the_model():
    model = torch.nn.Sequential(_Net(), _Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    block = model[0]  # a frame inside the model: the block's forward, its `self`
    assert _model_search._roots([block], [opt], whole=True) == []  # it holds a part of what the optimizer trains
    assert _model_search._roots([block, model], [opt], whole=True) == [model]
    assert _model_search._roots([block], [opt]) == [block]  # among every object, the block is all there is
    other = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)  # trains no module found: no veto
    assert _model_search._roots([model], [opt, other], whole=True) == [model]
