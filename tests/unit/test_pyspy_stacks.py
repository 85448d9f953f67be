"""What py-spy's output becomes: stack samples classified (data wait, checkpoint, compute), odd output parsed
without a crash, and the ptrace permission check explained, on this system and case by case."""

from __future__ import annotations

import os

import pytest

from trainmon.sources.pyspy import py_spy as pyspy
from trainmon.sources.pyspy import py_stacks as stacks
from trainmon.sources.pyspy.py_stacks import CHECKPOINT, COMPUTE, DATA_WAIT, StackFrame, ThreadStack

# ---------------------------------------------------------------- ptrace


def test_ptrace_status_reads_the_system() -> None:
    ok, why = pyspy.ptrace_status()
    assert isinstance(ok, bool) and why and "\n" not in why
    scope = pyspy.read_ptrace_scope()
    assert ("Yama absent" if scope is None else f"ptrace_scope={scope}") in why
    cap = pyspy.has_cap_sys_ptrace()
    if cap is not None:
        assert ("CAP_SYS_PTRACE present" if cap else "no CAP_SYS_PTRACE") in why


@pytest.mark.parametrize(
    ("scope", "cap", "ok", "words"),
    [
        (None, False, True, "same user"),
        (0, False, True, "same user"),
        (1, False, False, "sudo sysctl kernel.yama.ptrace_scope=0"),
        (1, True, True, "any process"),
        (2, False, False, "only CAP_SYS_PTRACE"),
        (3, True, False, "disabled until reboot"),
    ],
)
def test_ptrace_status_logic(
    monkeypatch: pytest.MonkeyPatch, scope: int | None, cap: bool, ok: bool, words: str
) -> None:
    monkeypatch.setattr(pyspy, "read_ptrace_scope", lambda: scope)
    monkeypatch.setattr(pyspy, "has_cap_sys_ptrace", lambda: cap)
    got_ok, why = pyspy.ptrace_status()
    assert got_ok is ok and words in why


# ---------------------------------------------------------------- classification


def _thread(*frames: tuple[str, str]) -> ThreadStack:
    return ThreadStack(
        thread_id=1,
        os_thread_id=1,
        name="MainThread",
        is_main=True,
        active=True,
        owns_gil=True,
        frames=[StackFrame(name, path, 1, os.path.basename(path)) for name, path in frames],
    )


SITE = "/venv/lib/python3.11/site-packages/"
DL = SITE + "torch/utils/data/dataloader.py"


def test_classify_main_thread_samples() -> None:
    assert (
        stacks.classify(
            _thread(
                ("Condition.wait", "/usr/lib/python3.11/threading.py"),
                ("Queue.get", "/usr/lib/python3.11/queue.py"),
                ("_MultiProcessingDataLoaderIter._try_get_data", DL),
                ("train", "/home/u/train.py"),
            )
        )
        == DATA_WAIT
    )
    assert (
        stacks.classify(
            _thread(
                ("SlowDataset.__getitem__", "/home/u/train.py"),
                ("_SingleProcessDataLoaderIter._next_data", DL),
                ("_BaseDataLoaderIter.__next__", DL),
                ("train", "/home/u/train.py"),
            )
        )
        == DATA_WAIT
    )
    assert (
        stacks.classify(
            _thread(
                ("_save", SITE + "torch/serialization.py"),
                ("save", SITE + "torch/serialization.py"),
                ("train", "/home/u/train.py"),
            )
        )
        == CHECKPOINT
    )
    assert (
        stacks.classify(_thread(("Linear.forward", SITE + "torch/nn/modules/linear.py"), ("train", "/home/u/train.py")))
        == COMPUTE
    )
    # a DataLoader constructor is not a wait
    assert stacks.classify(_thread(("DataLoader.__init__", DL))) == COMPUTE


def test_parse_tolerates_odd_output() -> None:
    assert "could not parse" in (stacks.parse_dump(7, "not json").error or "")
    assert "unexpected" in (stacks.parse_dump(7, "{}").error or "")
    result = stacks.parse_dump(7, '[{"thread_id": 3, "thread_name": null, "os_thread_id": null, "frames": [{}]}]')
    assert result.error is None and result.threads[0].name == "?" and not result.threads[0].is_main
    assert result.threads[0].frames[0].label() == "? (?:0)"


RAW = (
    "py-spy> Sampling process 50 times a second for 1 seconds. Press Control-C to exit.\n"
    "\n"
    f"thread (4242): MainThread;<module> (/home/u/train.py:90);train (/home/u/train.py:40);"
    f"_BaseDataLoaderIter.__next__ ({DL}:733);_MultiProcessingDataLoaderIter._next_data ({DL}:1480);"
    f"_MultiProcessingDataLoaderIter._get_data ({DL}:1442);Queue.get (/usr/lib/python3.11/queue.py:180) 31\n"
    f"thread (4242): MainThread;<module> (/home/u/train.py:90);train (/home/u/train.py:44);"
    f"Linear.forward ({SITE}torch/nn/modules/linear.py:125) 17\n"
    "thread (4250): QueueFeederThread;Thread._bootstrap (/usr/lib/python3.11/threading.py:995) 48\n"
    "thread (0x7F3A2B): MainThread;<module> (train.py:3) 2\n"
    "thread (4242): MainThread;odd frame without a place 1\n"
    "not a stack line 5\n"
    "thread (4242): MainThread;<module> (/home/u/train.py:90) many\n"
    "py-spy> Wrote raw flamegraph data to '/tmp/x'. Samples: 99 Errors: 1\n"
)


def test_parse_collapsed_record_output() -> None:
    parsed = stacks.parse_collapsed(4242, RAW)
    assert [n for _, n in parsed] == [31, 17, 48, 2, 1]  # messages and malformed lines skipped
    wait, compute, feeder, hex_main, odd = (thread for thread, _ in parsed)
    assert wait.is_main and wait.os_thread_id == 4242 and wait.name == "MainThread"
    assert [f.name for f in wait.frames][:2] == [
        "Queue.get",
        "_MultiProcessingDataLoaderIter._get_data",
    ]  # innermost first
    assert wait.frames[-1].label() == "<module> (train.py:90)"
    assert compute.frames[0].filename == SITE + "torch/nn/modules/linear.py"
    assert compute.frames[0].short == "torch/nn/modules/linear.py" and compute.frames[0].line == 125
    assert stacks.classify(wait) == DATA_WAIT and stacks.classify(compute) == COMPUTE
    assert not feeder.is_main and feeder.name == "QueueFeederThread"
    assert hex_main.is_main and hex_main.os_thread_id is None  # no native id: told by its name
    assert hex_main.frames[0].short == "train.py"  # py-spy's own short name kept as it is
    assert odd.frames[0].label() == "odd frame without a place (?:0)"
