"""`trainmon run`: the agent in every Python process of a command, no code change; CMD's exit status.

Where the monitor options may stand on the command line: tests/unit/test_cli_parser.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testsupport.procs import child_env, free_port, report_json, trainmon_cmd

SCRIPT = """
import sys, torch
m = torch.nn.Linear(4, 1); o = torch.optim.SGD(m.parameters(), lr=0.1)
for x in torch.utils.data.DataLoader(torch.randn(160, 4), batch_size=4):
    o.zero_grad(); m(x).sum().backward(); o.step()
sys.exit(3)
"""


def test_run_attaches_without_code_change_and_keeps_the_exit_status(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    rec = tmp_path / "r.tmrec"
    res = subprocess.run(
        trainmon_cmd("run", "--no-tui", "--record", str(rec), "--", sys.executable, str(script)),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 3, res.stderr
    (run,) = report_json(str(rec))["runs"]
    assert run["steps"] == 40 and run["name"] == "train.py"


def test_an_existing_sitecustomize_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = '1'\n")
    script = tmp_path / "check.py"
    script.write_text(
        "import os, sys, trainmon.agent as a\n"
        "sys.exit(0 if os.environ.get('USER_SITECUSTOMIZE_RAN') == '1' and a.attached() else 9)\n"
    )
    env = child_env()
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    res = subprocess.run(
        trainmon_cmd("run", "--no-tui", "--", sys.executable, str(script)),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr


def test_missing_command_is_one_line_and_127():
    res = subprocess.run(
        trainmon_cmd("run", "--no-tui", "--", "no-such-command-xyz"),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 127 and "command not found: no-such-command-xyz" in res.stderr
    assert "Traceback" not in res.stderr
    res = subprocess.run(trainmon_cmd("run", "--no-tui"), env=child_env(), capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "nothing to run" in res.stderr


def test_a_file_that_is_not_a_program_is_one_line_and_126(tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(b"\x00\x01 not an executable format")
    data.chmod(0o755)  # executable bit set, so exec fails with ENOEXEC, not EACCES
    res = subprocess.run(
        trainmon_cmd("run", "--no-tui", "--", str(data)), env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 126 and f"cannot run {data}: Exec format error" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("launcher", [["-m", "torch.distributed.run"]], ids=["torchrun"])
def test_every_rank_under_torchrun_is_attached_and_grouped(tmp_path, launcher):
    rec = tmp_path / "d.tmrec"
    cmd = [
        sys.executable,
        *launcher,
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        "-m",
        "trainmon.demo.train",
        "--no-attach",
        "--workers",
        "0",
        "--slow-rank",
        "1",
        "--slow-sleep-ms",
        "1",
        "--seconds",
        "18",
        "--steps",
        "1000000",
    ]
    res = subprocess.run(
        trainmon_cmd("run", "--no-tui", "--record", str(rec), "--", *cmd),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    report = report_json(str(rec))
    assert sorted(r["rank"] for r in report["runs"]) == [0, 1]
    assert report["idle_processes"], "the launcher itself attached but never trained"
    assert report["verdict"]["code"] == "dist.straggler" and report["verdict"]["evidence"]["rank"] == 1
