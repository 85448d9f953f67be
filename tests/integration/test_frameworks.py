"""transformers.Trainer, Lightning and accelerate fits as their users write them, on the CPU, under ``trainmon run``
(no trainmon code) and with the explicit callbacks: the verdict, the optimizer steps, samples/s and tokens/s
against each script's own counts, the advice in the framework's own settings, and the ranks of
``accelerate launch`` and Lightning's ``strategy="ddp"`` grouped as one job.

Each workload (tests/workloads/hf_bert.py, lit_text.py, acc_loop.py) tokenizes its texts in ``__getitem__`` with
``num_workers=0``, so each is input-bound in the main process; each prints what it counted itself.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from testsupport.paths import ROOT, WORKLOADS
from testsupport.procs import child_env, free_port, report_json, start_recorder, stop, trainmon_cmd
from trainmon.record import load_recording

pytest.importorskip("transformers")
pytest.importorskip("lightning")
pytest.importorskip("accelerate")

TOLERANCE = 0.15  # trainmon's steady-state figures against the script's own counts
HF = str(WORKLOADS / "hf_bert.py")
LIT = str(WORKLOADS / "lit_text.py")
ACC = str(WORKLOADS / "acc_loop.py")


def _own(stdout: str) -> dict[int, dict]:
    """What each rank of the workload counted itself, by rank (0 for a single process)."""
    out = {}
    decoder = json.JSONDecoder()
    # Ranks share stdout: two ranks' lines can meet on one line, so each object is decoded where it starts.
    for start in (m.start() for m in re.finditer(r'\{"(?:rank|global_step)"', stdout)):
        row, _ = decoder.raw_decode(stdout, start)
        if "global_step" in row:
            out[row.get("rank", 0)] = row
    return out


def _under_run(rec: str, *cmd: str, timeout: float = 240, **env: str) -> tuple[dict, dict[int, dict]]:
    res = subprocess.run(
        trainmon_cmd("run", "--no-tui", "--record", rec, "--", *cmd),
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    assert "Error in sitecustomize" not in res.stderr and "Traceback" not in res.stderr, res.stderr[-4000:]
    return report_json(rec), _own(res.stdout)


def _under_record(addr: str, rec: str, *cmd: str, timeout: float = 240) -> tuple[dict, dict[int, dict]]:
    """The script reports to a ``trainmon record`` of its own (``TRAINMON_ADDR``), as with a monitor in another pane."""
    recorder = start_recorder(addr, rec)
    try:
        res = subprocess.run(
            cmd, env=child_env(TRAINMON_ADDR=addr), capture_output=True, text=True, timeout=timeout, cwd=ROOT
        )
        assert res.returncode == 0, res.stderr[-4000:]
    finally:
        time.sleep(1.0)  # the agents' last batches reach the recorder
        stop(recorder)
    return report_json(rec), _own(res.stdout)


def _near(got: float | None, want: float, what: str) -> None:
    assert got is not None and abs(got - want) <= TOLERANCE * want, f"{what}: trainmon {got}, the script {want:.1f}"


def _check_run(run: dict, own: dict, framework: str) -> None:
    assert run["framework"]["name"] == framework and run["framework"]["version"]
    assert run["steps"] == own["global_step"], (run["steps"], own["global_step"])  # optimizer steps, not batches
    _near(run["samples_per_s"], own["samples_per_s"], "samples/s")
    _near(run["tokens_per_s"], own["tokens_per_s"], "tokens/s")
    assert run["dataloader"]["batch_size"] == 8


def _phases(rec: str, name: str) -> list[int]:
    """How many ``name`` phases each run of the recording holds, by rank order."""
    store, _ = load_recording(rec)
    runs = sorted((r for r in store.runs.values() if r.steps.total), key=lambda r: r.rank or 0)
    return [sum(1 for p in r.phases if p[2] == name) for r in runs]


def test_transformers_trainer_under_trainmon_run_with_gradient_accumulation(tmp_path):
    """No trainmon code: the Trainer gets trainmon's callback by itself; its DataLoaderShard has no batch_size."""
    rec = str(tmp_path / "hf.tmrec")
    report, own = _under_run(rec, sys.executable, HF, str(tmp_path / "out"), "--accum", "4", "--max-steps", "90")
    (run,) = [r for r in report["runs"] if r["steps"]]
    _check_run(run, own[0], "transformers")
    assert own[0]["trainmon_callbacks"] == 1
    assert run["batch_size_source"] == "batches"
    assert _phases(rec, "eval") == [own[0]["evaluations"]] and own[0]["evaluations"] >= 2  # eval_steps=40
    verdict = report["verdict"]
    assert verdict["code"] == "input.main_process"
    assert "dataloader_num_workers=0" in verdict["summary"]
    text = " ".join(verdict["advice"])
    assert "TrainingArguments(dataloader_num_workers=" in text and "dataloader_persistent_workers=True" in text
    assert "DataLoader(num_workers" not in text


def test_transformers_trainer_with_the_callback_and_a_monitor_elsewhere(tmp_path, addr):
    """The README's one line: TrainmonCallback attaches; the Trainer gets no second one."""
    rec = str(tmp_path / "hf.tmrec")
    report, own = _under_record(
        addr, rec, sys.executable, HF, str(tmp_path / "out"), "--callback", "--accum", "4", "--max-steps", "90"
    )
    (run,) = report["runs"]
    _check_run(run, own[0], "transformers")
    assert own[0]["trainmon_callbacks"] == 1
    assert _phases(rec, "eval") == [own[0]["evaluations"]]
    assert report["verdict"]["code"] == "input.main_process"
    assert "TrainingArguments(dataloader_num_workers=" in report["verdict"]["advice"][0]


def test_lightning_under_trainmon_run_with_gradient_accumulation(tmp_path):
    rec = str(tmp_path / "lit.tmrec")
    report, own = _under_run(rec, sys.executable, LIT, str(tmp_path / "root"), "--accum", "4", "--max-steps", "120")
    (run,) = [r for r in report["runs"] if r["steps"]]
    _check_run(run, own[0], "lightning")
    assert own[0]["trainmon_callbacks"] == 1
    assert _phases(rec, "eval") == [own[0]["evaluations"]] and own[0]["evaluations"] >= 10  # every 40 batches
    verdict = report["verdict"]
    assert verdict["code"] == "input.main_process"
    assert all("train_dataloader()" in line for line in verdict["advice"] if "num_workers" in line)


def test_lightning_ddp_ranks_with_the_callback_are_one_job(tmp_path, addr):
    """strategy="ddp" on the CPU: Lightning starts rank 1 itself and gives rank 0 its environment only after
    attach() ran; once the process group exists both say which job they are, and are grouped as one."""
    rec = str(tmp_path / "ddp.tmrec")
    report, own = _under_record(
        addr,
        rec,
        sys.executable,
        LIT,
        str(tmp_path / "root"),
        "--callback",
        "--devices",
        "2",
        "--accum",
        "4",
        "--max-steps",
        "60",
    )
    runs = sorted(report["runs"], key=lambda r: r["rank"])
    assert [r["rank"] for r in runs] == [0, 1]
    assert runs[0]["job"]["id"] and runs[0]["job"]["id"] == runs[1]["job"]["id"]
    for run in runs:
        _check_run(run, own[run["rank"]], "lightning")
        assert own[run["rank"]]["trainmon_callbacks"] == 1
    store, _ = load_recording(rec)
    assert len({r.job_key for r in store.runs.values()}) == 1


def test_accelerate_launch_ranks_are_one_job(tmp_path):
    rec = str(tmp_path / "acc.tmrec")
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    launch += ["--main_process_port", str(free_port()), ACC, "--accum", "4", "--steps", "50"]
    report, own = _under_run(rec, *launch)
    runs = sorted((r for r in report["runs"] if r["steps"]), key=lambda r: r["rank"])
    assert [r["rank"] for r in runs] == [0, 1]
    assert runs[0]["job"]["id"] and runs[0]["job"]["id"] == runs[1]["job"]["id"]
    assert report["idle_processes"], "the launcher attached but never trained"
    for run in runs:
        _check_run(run, own[run["rank"]], "accelerate")
        assert run["batch_size_source"] == "batches"  # prepare() shards the batches: no batch_size
    verdict = report["verdict"]
    assert verdict["code"] == "input.main_process"
    assert "accelerator.prepare()" in verdict["advice"][0]
