"""DiskSource against real ``iostat -x`` while the disk holding the test's directory reads under real load."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from testsupport.files import write_random_file
from trainmon.sources.host.disk import DiskSource


def disk_of(path: Path) -> str | None:
    """The whole block device holding `path` (partitions mapped to their parent), or None."""
    st_dev = os.stat(path).st_dev
    sys_dev = Path(f"/sys/dev/block/{os.major(st_dev)}:{os.minor(st_dev)}")
    if not sys_dev.exists():
        return None
    real = sys_dev.resolve()
    if (real / "partition").exists():
        real = real.parent
    return real.name.replace("!", "/")


def parse_iostat(text: str, dev: str) -> dict[str, float]:
    """Columns of the device's line in the last report of `iostat -x`."""
    header: list[str] | None = None
    found: dict[str, float] = {}
    for raw in text.splitlines():
        parts = raw.split()
        if parts and parts[0].startswith("Device"):
            header = parts
        elif header and parts and parts[0] == dev:
            found = {h: float(v.replace(",", ".")) for h, v in zip(header[1:], parts[1:], strict=False)}
    return found


def rel_diff(ours: float, theirs: float) -> float:
    return abs(ours - theirs) / max(abs(theirs), 1e-9)


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    return write_random_file(tmp_path / "blob.bin", 256)


def test_matches_iostat_under_sustained_direct_reads(data_file: Path) -> None:
    iostat = shutil.which("iostat")
    if iostat is None:
        pytest.skip("iostat (sysstat) not installed")
    if shutil.which("dd") is None:
        pytest.skip("dd not installed")
    dev = disk_of(data_file)
    if dev is None:
        pytest.skip(f"{data_file} is not on a block device (tmpfs/overlay/btrfs subvolume)")
    probe = subprocess.run(
        ["dd", f"if={data_file}", "of=/dev/null", "iflag=direct", "bs=1M", "count=1"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        pytest.skip(f"direct I/O unsupported here: {probe.stderr.strip()}")

    # O_DIRECT bypasses the page cache, so looping over a 256 MB file keeps the disk reading the whole time.
    loop = subprocess.Popen(
        ["sh", "-c", f"while :; do dd if='{data_file}' of=/dev/null iflag=direct bs=1M status=none || exit 3; done"],
        start_new_session=True,
    )
    try:
        time.sleep(0.5)  # let the read stream settle
        env = {**os.environ, "LC_ALL": "C", "S_COLORS": "never", "S_TIME_FORMAT": ""}
        src = DiskSource()
        stat = subprocess.Popen(
            [iostat, "-x", "-d", "-k", dev, "3", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        src.sample(time.monotonic())
        out_text, err_text = stat.communicate(timeout=15)
        ours = src.sample(time.monotonic())
    finally:
        os.killpg(loop.pid, signal.SIGTERM)
        loop.wait(timeout=10)
    assert stat.returncode == 0, err_text
    theirs = parse_iostat(out_text, dev)
    assert theirs, f"no line for {dev} in iostat output:\n{out_text}"
    p = f"disk.{dev}."
    pairs = {
        "rMB/s": (ours[p + "read_mb_s"], theirs["rkB/s"] / 1024.0),
        "r/s": (ours[p + "r_s"], theirs["r/s"]),
        "%util": (ours[p + "util_pct"], theirs["%util"]),
    }
    report = ", ".join(f"{k}: ours {a:.1f} iostat {b:.1f} ({rel_diff(a, b):.1%})" for k, (a, b) in pairs.items())
    print(f"iostat agreement on {dev}: {report}")
    assert theirs["rkB/s"] > 10 * 1024, f"the read load did not reach the disk: {report}"
    for key, (a, b) in pairs.items():
        assert rel_diff(a, b) <= 0.10, f"{key} disagrees: {report}"
