"""The command line: monitor options are taken before and after the command name, and after ``run`` they
belong to the command being run."""

from __future__ import annotations

import pytest

from trainmon.cli import build_parser


@pytest.mark.parametrize(
    "argv, listen, interval, pids",
    [
        (["--listen", "A", "record", "-o", "f"], "A", None, []),
        (["record", "--listen", "B", "-o", "f"], "B", None, []),
        (["--listen", "A", "--interval", "2", "record", "--listen", "B", "-o", "f"], "B", 2.0, []),
        (["--pid", "1", "record", "--pid", "2", "--pid", "3", "-o", "f"], None, None, [1, 2, 3]),
        (["--pid", "1", "record", "-o", "f"], None, None, [1]),
        (["record", "--pid", "2", "-o", "f"], None, None, [2]),
    ],
)
def test_monitor_options_are_taken_before_and_after_the_command_name(argv, listen, interval, pids):
    args = build_parser().parse_args(argv)
    assert (args.listen, args.interval, args.pid) == (listen, interval, pids)


def test_options_after_run_belong_to_the_command():
    args = build_parser().parse_args(["--pid", "1", "run", "--", "python", "x.py", "--pid", "3"])
    assert args.pid == [1] and args.cmd == ["--", "python", "x.py", "--pid", "3"]
