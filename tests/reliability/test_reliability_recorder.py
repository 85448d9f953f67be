"""Recorder faults. ``kill -9`` mid-run and truncated/corrupt files are covered by
tests/integration/test_record_report.py (test_kill_9_loses_at_most_the_last_second,
test_report_on_truncated_and_corrupt_files_reads_up_to_the_damage); a full disk is here."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from testsupport.paths import TINY
from testsupport.procs import start_python, start_recorder
from testsupport.reliability import note
from trainmon.record import load_recording


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {res.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_gives_a_clear_message_a_clean_stop_and_a_readable_file(small_disk, addr):
    rec = str(small_disk / "full.tmrec")
    recorder = start_recorder(addr, rec)
    # ~8000 steps/s for ~5 s: a few hundred KiB of compressed recording, more than the disk holds
    agent = start_python(TINY, "40000", "0.02", env={"TRAINMON_ADDR": addr})
    recorder.wait(timeout=60)  # stops by itself once the disk is full
    err = recorder.stderr.read()
    out, agent_err = agent.communicate(timeout=60)
    size = os.path.getsize(rec)
    store, warnings = load_recording(rec)
    note(
        "full_disk",
        recorder_exit=recorder.returncode,
        file_bytes=size,
        runs=len(store.runs),
        records_seen=sum(r.records for r in store.runs.values()),
        message=err.strip().splitlines()[-1],
    )
    assert recorder.returncode == 1
    assert err.strip().splitlines()[-1] == f"trainmon: error: the disk holding {rec} is full; recording stopped"
    assert "Traceback" not in err
    assert agent.returncode == 0 and agent_err == "" and json.loads(out)["steps"] == 40000  # training never noticed
    assert warnings == []  # cut back to the last whole chunk: nothing torn
    (run,) = store.runs.values()
    assert 0 < run.steps.total < 40000  # what fitted on the disk, up to the last whole chunk
    assert size <= 200 * 1024
