"""The agent's torch.compile watch without torch._dynamo: its callbacks on made-up arguments (they must never raise:
one raising would fail the compilation), and its reading of torch's compilation records from a stand-in module."""

from __future__ import annotations

import collections
import sys
import types
from dataclasses import dataclass

import pytest

from trainmon import protocol as P
from trainmon.agent import _compile, _hot
from trainmon.agent._compile import CompileWatch, is_limit, parse_id


@dataclass
class Metrics:  # the fields of torch._dynamo.utils.CompilationMetrics the watch reads
    compile_id: str
    co_name: str | None = None
    co_filename: str | None = None
    co_firstlineno: int | None = None
    entire_frame_compile_time_s: float | None = None
    duration_us: int | None = None
    fail_type: str | None = None
    fail_reason: str | None = None
    recompile_reason: str | None = None
    num_graph_breaks: int | None = None
    is_forward: bool | None = True
    start_time_us: int | None = None


def test_compile_ids():
    assert parse_id("3/1") == (3, 1)
    assert parse_id("!0/3/2") == (3, 2)  # under compiled autograd
    assert parse_id("!0") is None and parse_id(None) is None and parse_id("x") is None
    assert is_limit("Unsupported", "Dynamo recompile limit exceeded\n  Explanation: ...")
    assert not is_limit("Unsupported", "graph break") and not is_limit(None, "recompile limit")


def test_the_callbacks_never_raise_and_record_a_span():
    _hot.reset_buffer()
    watch = CompileWatch(lambda msg: None)

    class Broken:
        @property
        def compile_id(self):
            raise RuntimeError("boom")

    watch._start(Broken())
    watch._end(Broken())
    watch._end(types.SimpleNamespace(compile_id="0/1", callback_trigger=None))  # an end without its start
    args = types.SimpleNamespace(compile_id="2/3", callback_trigger=types.SimpleNamespace(value=2))
    watch._start(args)
    watch._end(args)
    records = _hot.swap_buffer()
    assert len(records) == 4
    assert records[0] == P.K_COMPILE | 3 << 8 and records[3] == 3 << 8 | 2 and records[2] >= records[1]


@pytest.fixture
def fake_dynamo(monkeypatch):
    """``torch._dynamo.utils`` and ``.config`` as the watch reads them: a bounded deque of records, counters."""
    utils = types.SimpleNamespace(_compilation_metrics=collections.deque(maxlen=64), counters={})
    config = types.SimpleNamespace(recompile_limit=8)
    monkeypatch.setitem(sys.modules, "torch._dynamo", types.ModuleType("torch._dynamo"))
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", utils)
    monkeypatch.setitem(sys.modules, "torch._dynamo.config", config)
    return utils


def test_each_record_is_told_once_named_and_a_limit_with_its_setting(fake_dynamo):
    told: list[dict] = []
    watch = CompileWatch(told.append)
    watch.installed = True  # no callback handler to register in the stand-in
    records = fake_dynamo._compilation_metrics
    records.append(Metrics("0/0", "forward", "/src/model.py", 12, 2.5, start_time_us=1))
    records.append(Metrics("0/0", is_forward=False, duration_us=40_000))  # its backward, compiled lazily
    watch.poll()
    records.append(Metrics("0/1", "forward", "/src/model.py", 12, 0.8, recompile_reason="0/0: tensor 'x' size"))
    records.append(
        Metrics(
            "0/8",
            fail_type="Unsupported",
            fail_reason="Dynamo recompile limit exceeded\n  Context: Limit type: recompile_limit",
        )
    )
    watch.poll()
    watch.poll()  # nothing new
    bodies = [m["compile"] for m in told]
    assert [(b["id"], b["forward"], b["limit"]) for b in bodies] == [
        ("0/0", True, False),
        ("0/0", False, False),
        ("0/1", True, False),
        ("0/8", True, True),
    ]
    assert all(b["name"] == "forward" and b["file"] == "/src/model.py" for b in bodies)  # backward, limit: the frame's
    assert bodies[1]["seconds"] == 0.04 and bodies[2]["reason"] == "0/0: tensor 'x' size"
    assert bodies[3]["limit_type"] == "recompile_limit" and bodies[3]["limit_value"] == 8
    assert all(P.clean_compile(b) is not None for b in bodies)


def test_graph_breaks_are_told_when_their_count_changes(fake_dynamo):
    told: list[dict] = []
    watch = CompileWatch(told.append)
    watch.installed = True
    watch.poll()
    assert told == []  # no graph_break counter yet: the watch never adds one
    assert "graph_break" not in fake_dynamo.counters
    fake_dynamo.counters["graph_break"] = collections.Counter({"print() called": 2, "data-dependent branch": 1})
    watch.poll()
    watch.poll()
    assert told == [
        {
            "graph_breaks": {
                "total": 3,
                "reasons": [{"reason": "print() called", "count": 2}, {"reason": "data-dependent branch", "count": 1}],
            }
        }
    ]


def test_records_dropped_from_a_full_deque_do_not_repeat_the_rest(fake_dynamo):
    told: list[dict] = []
    watch = CompileWatch(told.append)
    watch.installed = True
    records = fake_dynamo._compilation_metrics
    for k in range(3):
        records.append(Metrics(f"0/{k}", "f", "a.py", 1, 0.1))
    watch.poll()
    for k in range(3, 70):  # more than the deque holds between two polls: the oldest are gone
        records.append(Metrics(f"0/{k}", "f", "a.py", 1, 0.1))
    watch.poll()
    ids = [m["compile"]["id"] for m in told]
    assert len(ids) == len(set(ids)) and ids[-1] == "0/69", ids[-3:]


def test_the_agent_leaves_dynamos_callbacks_as_it_found_them():
    handler = types.SimpleNamespace(start=[], end=[])
    handler.register_start_callback = handler.start.append
    handler.register_end_callback = handler.end.append
    handler.remove_start_callback = handler.start.remove
    handler.remove_end_callback = handler.end.remove
    dynamo = types.SimpleNamespace(callback=types.SimpleNamespace(callback_handler=handler))
    watch = CompileWatch(lambda msg: None)
    watch._register(dynamo)
    assert len(handler.start) == len(handler.end) == 1
    watch.uninstall()
    assert handler.start == handler.end == [] and not watch.installed
    assert _compile.MODULE == "torch._dynamo"
