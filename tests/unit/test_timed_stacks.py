"""The monitor's py-spy attribution of a training thread's time outside the model (sources/pyspy/timed_stacks.py)."""

from __future__ import annotations

from trainmon.protocol.clean import clean_info
from trainmon.sources.pyspy.py_stacks import parse_collapsed
from trainmon.sources.pyspy.spy_process import Recording
from trainmon.sources.pyspy.timed_stacks import Attribution, TimedAttribution, wanted
from trainmon.store import Store

TORCH = "/venv/lib/python3.11/site-packages/torch"
LOOP = "thread (4242): MainThread;<module> (/src/train.py:90);train (/src/train.py:60)"
RAW = "\n".join(
    [
        # inside the model: forward through torch's module call, backward, the optimizer
        f"{LOOP};Module._wrapped_call_impl ({TORCH}/nn/modules/module.py:1773);GPT.forward (/src/model.py:40) 30",
        f"{LOOP};Tensor.backward ({TORCH}/_tensor.py:625);backward ({TORCH}/autograd/__init__.py:354) 25",
        f"{LOOP};Adam.step ({TORCH}/optim/adam.py:230) 5",
        # outside it: a pure-Python get_batch, and one sample of it that torch's no_grad decorates
        f"{LOOP};get_batch (/src/train.py:30);encode (/src/bpe.py:12) 28",
        f"{LOOP};get_batch (/src/train.py:31);__enter__ ({TORCH}/autograd/grad_mode.py:80) 2",
        # a metric in Python, under the agent's own bookkeeping frame (not a cost of the training's)
        f"{LOOP};log_metrics (/src/train.py:70);span (/venv/trainmon/agent/_hot.py:116) 6",
        # the loop's own line
        f"{LOOP} 4",
        # another thread: never the training thread's time
        "thread (4250): Thread-1;run (/usr/lib/python3.11/threading.py:990) 99",
    ]
)


def test_time_outside_the_model_is_put_to_the_first_frame_below_the_loop():
    a = Attribution()
    assert a.add(parse_collapsed(4242, RAW), 4242) == 100  # the training thread's samples only
    msg = a.message(4242)
    assert msg["source"] == "py-spy" and msg["tid"] == 4242
    assert msg["model_samples"] == 60 and msg["samples"] == 40
    hot = {h["name"]: h for h in msg["hot"]}
    assert hot["get_batch"]["samples"] == 30 and hot["get_batch"]["leaf"] == "encode"
    assert not hot["get_batch"]["loop"]  # grad_mode's no_grad is any code's, not the model's: get_batch stays outside
    assert hot["log_metrics"]["samples"] == 6 and hot["log_metrics"]["leaf"] == "log_metrics"  # the agent's frame gone
    assert hot["train"]["loop"] and hot["train"]["samples"] == 4


def test_a_torn_stack_does_not_make_a_function_part_of_the_loop():
    a = Attribution()
    torn = f"{LOOP};get_batch (/src/train.py:30);Module._call_impl ({TORCH}/nn/modules/module.py:1784) 1"
    a.add(parse_collapsed(4242, RAW + "\n" + torn), 4242)
    assert not {h["name"]: h for h in a.message(4242)["hot"]}["get_batch"]["loop"]


def test_the_agents_loop_functions_are_taken_over_what_the_samples_suggest():
    a = Attribution(loop=[("<module>", "/src/train.py")])  # train() itself is not the loop, by the agent's samples
    a.add(parse_collapsed(4242, RAW), 4242)
    hot = {h["name"]: h for h in a.message(4242)["hot"]}
    assert hot["train"]["samples"] == 40 and not hot["train"]["loop"]


def test_no_function_is_named_before_a_sample_inside_the_model_tells_the_loop():
    a = Attribution()
    a.add(parse_collapsed(4242, "\n".join(RAW.splitlines()[3:])), 4242)
    assert a.message(4242)["hot"] == [] and a.message(4242)["samples"] == 40


def test_only_the_monitor_may_give_timed_samples_and_a_recording_keeps_them():
    msg = Attribution().message(1)
    assert "outside_timed" not in clean_info({"outside_timed": msg})  # from the wire: dropped
    assert clean_info({"outside_timed": msg}, monitor=True)["outside_timed"]["samples"] == 0


def _store_with_run(outside_share: float) -> Store:
    store = Store()
    store.hello(1, 0.0, {"pid": 4242, "session": "s", "connection": 1, "world_size": 1, "rank": 0})
    run = store.runs[1]
    run.deriver.outside_share[:] = [outside_share, 1.0, 0.0]
    return store


def test_a_burst_goes_to_a_run_whose_steps_spend_a_material_share_outside_the_model():
    store = _store_with_run(0.3)
    run = store.runs[1]
    assert wanted(run)
    emitted: list[tuple[int, dict]] = []
    calls: list[tuple[int, int]] = []

    def record(pid, seconds, rate, output, stop=None):
        calls.append((pid, rate))
        return Recording(pid, stacks=parse_collapsed(pid, RAW))

    timed = TimedAttribution(lambda rid, t, info: emitted.append((rid, info)), record=record, available=lambda: True)
    assert timed.consider(store, 100.0) == 1
    assert timed.wait_idle(5.0)
    assert calls == [(4242, 100)]
    assert emitted and emitted[0][0] == 1 and emitted[0][1]["outside_timed"]["samples"] == 40
    assert timed.consider(store, 101.0) is None  # the next burst waits its pause
    store.info(1, 101.0, clean_info(emitted[0][1], monitor=True))
    assert run.outside_timed is not None and run.outside_timed["source"] == "py-spy"
    timed.close()


def test_a_run_with_little_time_outside_the_model_is_not_sampled():
    store = _store_with_run(0.02)
    timed = TimedAttribution(lambda *a: None, record=lambda *a, **k: Recording(0), available=lambda: True)
    assert timed.consider(store, 100.0) is None
