"""Every command of the README runs as written: a newcomer copies them, so each is run here on CPU exactly as the
README prints it (in a shell, ``trainmon`` being the console script the checkout installs), in a fresh folder that
holds a small ``train.py`` with the README's own attach lines. The few that cannot run inside the suite are listed
with the reason. A command added to the README without a runner here fails the first test.

The monitor's default socket is made private to each test (``XDG_RUNTIME_DIR``), as a user's own session has it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testsupport.paths import ROOT
from testsupport.procs import child_env, wait_for

README = ROOT / "README.md"
BIN = Path(sys.executable).parent  # where the checkout's `trainmon` console script is installed

SKIPPED = {
    "pip install trainmon": "installs from the package index: the suite runs the checkout that `make` installed",
    "make demo": "checked from a fresh clone beside `make test` (it installs the demo extras and runs a minute)",
    "make test": "this suite is `make test`",
}

# The training the README's commands are tried on, written as a newcomer would: the README's attach lines, then an
# ordinary DataLoader loop (two epochs, about two seconds on a slow host).
TRAIN_PY = """\
import argparse
import torch
{attach}

ap = argparse.ArgumentParser()
ap.add_argument("--lr", type=float, default=0.01)
ap.add_argument("--epochs", type=int, default=2)
args = ap.parse_args()
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=args.lr)
loader = torch.utils.data.DataLoader(torch.randn(2000, 8), batch_size=8)
for epoch in range(args.epochs):
    for x in loader:
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
print("TRAINED", flush=True)
"""

# A training already running, as `trainmon attach` meets it: no trainmon in it.
RUNNING_PY = """\
import time, torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
print("READY", flush=True)
while True:
    for x in torch.utils.data.DataLoader(torch.randn(400, 8), batch_size=8):
        opt.zero_grad(); model(x).sum().backward(); opt.step(); time.sleep(0.002)
"""


def blocks(lang: str) -> list[str]:
    """The README's fenced code blocks of ``lang``, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", README.read_text(), re.S | re.M)


def commands() -> list[str]:
    """Every shell command line of the README, its trailing comment dropped."""
    out = []
    for block in blocks("sh"):
        for line in block.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command:
                out.append(command)
    return out


def attach_lines() -> str:
    (snippet,) = [b for b in blocks("python") if "attach()" in b]
    return snippet


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN_PY.format(attach=attach_lines()))
    (tmp_path / "run").mkdir(mode=0o700)
    return tmp_path


def shell_env(folder: Path) -> dict[str, str]:
    env = child_env(XDG_RUNTIME_DIR=str(folder / "run"))
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def sh(script: str, folder: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``script`` run by bash in ``folder``; its output through files, not pipes, since a command it leaves in the
    background (the headless block's recorder) would hold a pipe open after the shell exits."""
    out, err = folder / "sh.out", folder / "sh.err"
    with out.open("w") as o, err.open("w") as e:
        code = subprocess.run(
            ["bash", "-e", "-c", script], cwd=folder, env=shell_env(folder), stdout=o, stderr=e, timeout=timeout,
            stdin=subprocess.DEVNULL,
        ).returncode  # fmt: skip
    return subprocess.CompletedProcess(script, code, out.read_text(), err.read_text())


RUN_HERE = {
    "trainmon",
    "trainmon attach 4242",
    "trainmon run -- python train.py --lr 0.1",
    "trainmon record --output run.tmrec --duration 600 &",
    "python train.py",
    "trainmon report run.tmrec",
}


def test_every_readme_command_is_run_here_or_skipped_with_a_reason() -> None:
    found = commands()
    assert found, "no shell command found in the README"
    unknown = [c for c in found if c not in RUN_HERE and c not in SKIPPED]
    assert not unknown, f"README commands with no runner in this test: {unknown}"
    assert set(found) >= RUN_HERE, f"runners for commands the README no longer has: {RUN_HERE - set(found)}"
    print("figures: skipped README commands: " + "; ".join(f"{c!r}: {why}" for c, why in SKIPPED.items()))


def test_the_attach_snippet_runs_in_a_script_with_no_monitor(folder: Path) -> None:
    res = sh("python train.py --epochs 1", folder)
    assert res.returncode == 0 and "TRAINED" in res.stdout, res.stderr
    assert "Traceback" not in res.stderr


def test_trainmon_alone_listens_and_reports_a_training(folder: Path) -> None:
    """``trainmon`` with no terminal prints status lines (the screen is tested in tests/tui/); a training started
    next to it with the README's attach lines is reported; Ctrl-C ends it with status 0."""
    env = shell_env(folder)
    mon = subprocess.Popen(
        ["bash", "-c", "exec trainmon"], cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert wait_for(lambda: (folder / "run" / "trainmon" / "monitor.sock").exists(), 60)
        train = sh("python train.py --epochs 3", folder)
        assert train.returncode == 0, train.stderr
        time.sleep(1.5)  # a status line after the last batch
    finally:
        mon.send_signal(signal.SIGINT)
        out, _ = mon.communicate(timeout=60)
    assert mon.returncode == 0, out
    assert re.search(r"pid \d+: .*steps/s, data wait", out), out
    assert "Traceback" not in out


@pytest.mark.skipif(shutil.which("gdb") is None, reason="attach injects with gdb (apt-get install gdb)")
def test_trainmon_attach_gives_the_agent_to_a_training_already_running(folder: Path) -> None:
    script = folder / "running.py"
    script.write_text(RUNNING_PY)
    proc = subprocess.Popen(
        [sys.executable, str(script)], cwd=folder, env=child_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        command = next(c for c in commands() if c.startswith("trainmon attach "))
        res = sh(command.replace("4242", str(proc.pid)), folder)
        assert res.returncode == 0, res.stdout + res.stderr
        assert len(res.stdout.strip().splitlines()) == 1, res.stdout  # "prints one line"
        assert proc.poll() is None  # the training goes on
    finally:
        proc.kill()
        proc.wait()


def test_trainmon_run_starts_the_training_with_the_agent(folder: Path) -> None:
    (folder / "train.py").write_text(TRAIN_PY.format(attach=""))  # no code change: `trainmon run` attaches it
    command = next(c for c in commands() if c.startswith("trainmon run "))
    res = sh(command, folder)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "TRAINED" in res.stdout
    assert re.search(r"pid \d+: .*steps/s", res.stdout), res.stdout


def test_the_headless_block_records_and_reports(folder: Path) -> None:
    """The README's three lines as one shell script, as a user pastes them: the recorder in the background, the
    training, then the report of the recording while the recorder still runs."""
    (block,) = [b for b in blocks("sh") if "trainmon record" in b]
    res = sh(block, folder)
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        assert "VERDICT" in res.stdout and re.search(r"pid \d+ train\.py\s+\d+", res.stdout), res.stdout
    finally:
        for p in _recorders(folder):
            os.kill(p, signal.SIGINT)
    assert wait_for(lambda: not _recorders(folder), 30)


def _recorders(folder: Path) -> list[int]:
    """The background recorders the headless block left running in ``folder``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if b"record" in cmd and cwd == str(folder):
            out.append(int(entry.name))
    return out
