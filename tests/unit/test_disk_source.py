"""DiskSource: exact iostat -x arithmetic on synthetic /proc/diskstats (against real iostat under real load:
tests/integration/test_disk_iostat.py)."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import pytest

from trainmon.sources.host.disk import DiskSource

FIELDS = (
    "rd_ios",
    "rd_merges",
    "rd_sectors",
    "rd_ticks",
    "wr_ios",
    "wr_merges",
    "wr_sectors",
    "wr_ticks",
    "in_flight",
    "io_ticks",
    "rq_ticks",
)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def line(name: str, major: int = 8, minor: int = 0, extra: str = " 0 0 0 0 0 0", **counters: int) -> str:
    values = " ".join(str(counters.get(f, 0)) for f in FIELDS)
    return f"{major:4d} {minor:7d} {name} {values}{extra}\n"


@pytest.fixture
def env(tmp_path: Path):
    sys_block = tmp_path / "block"
    for dev in ("sda", "nvme0n1", "dm-0", "loop0", "cciss!c0d0"):
        (sys_block / dev).mkdir(parents=True)
    stats = tmp_path / "diskstats"
    clock = Clock()
    src = DiskSource(str(stats), str(sys_block), clock=clock)
    return src, stats, clock


def test_first_call_primes_then_exact_iostat_columns(env) -> None:
    src, stats, clock = env
    stats.write_text(
        line(
            "sda",
            rd_ios=100,
            rd_sectors=8000,
            rd_ticks=50,
            wr_ios=10,
            wr_sectors=160,
            wr_ticks=20,
            io_ticks=1000,
            rq_ticks=3000,
        )
    )
    assert src.sample(0.0) == {}
    stats.write_text(
        line(
            "sda",
            rd_ios=300,
            rd_sectors=8000 + 2 * 2048 * 50,
            rd_ticks=450,
            wr_ios=30,
            wr_sectors=160 + 2048 * 4,
            wr_ticks=120,
            io_ticks=1500,
            rq_ticks=4000,
        )
    )
    clock.t += 2.0
    out = src.sample(2.0)
    assert out == pytest.approx(
        {
            "disk.sda.r_s": 100.0,
            "disk.sda.w_s": 10.0,
            "disk.sda.read_mb_s": 50.0,
            "disk.sda.write_mb_s": 2.0,
            "disk.sda.util_pct": 25.0,
            "disk.sda.r_await_ms": 2.0,
            "disk.sda.w_await_ms": 5.0,
            "disk.sda.aqu_sz": 0.5,
        }
    )
    assert src.devices() == ["sda"]


def test_no_io_means_zero_await_and_util_is_capped(env) -> None:
    src, stats, clock = env
    stats.write_text(line("sda", rd_ios=5, io_ticks=0))
    src.sample(0.0)
    # io_ticks can overshoot the wall interval slightly (tick accounting): iostat caps %util at 100.
    stats.write_text(line("sda", rd_ios=5, io_ticks=1100))
    clock.t += 1.0
    out = src.sample(1.0)
    assert out["disk.sda.util_pct"] == 100.0
    assert out["disk.sda.r_await_ms"] == 0.0 and out["disk.sda.w_await_ms"] == 0.0
    assert out["disk.sda.r_s"] == 0.0


def test_partitions_idle_loops_skipped_dm_and_slash_names_kept(env) -> None:
    src, stats, clock = env
    text = (
        line("sda", rd_ios=1)
        + line("sda1", minor=1, rd_ios=1)
        + line("nvme0n1", 259, 0, rd_ios=1)
        + line("nvme0n1p2", 259, 2, rd_ios=1)
        + line("loop0", 7, 0)
        + line("dm-0", 253, 0, wr_ios=3)
        + line("cciss/c0d0", 104, 0, rd_ios=2)
    )
    stats.write_text(text)
    src.sample(0.0)
    clock.t += 1.0
    out = src.sample(1.0)
    assert src.devices() == ["cciss/c0d0", "dm-0", "nvme0n1", "sda"]
    assert {k.rsplit(".", 1)[0] for k in out} == {f"disk.{d}" for d in src.devices()}


def test_old_kernel_lines_without_discard_columns_and_garbage(env) -> None:
    src, stats, clock = env
    stats.write_text(line("sda", extra="", rd_ios=1) + "garbage line\n 8 16 sdb x y z 1 2 3 4 5 6 7 8\n")
    src.sample(0.0)
    stats.write_text(line("sda", extra="", rd_ios=11) + "\n")
    clock.t += 1.0
    assert src.sample(1.0)["disk.sda.r_s"] == 10.0


def test_devices_appearing_and_leaving(env) -> None:
    src, stats, clock = env
    stats.write_text(line("sda", rd_ios=1))
    src.sample(0.0)
    stats.write_text(line("sda", rd_ios=2) + line("nvme0n1", 259, 0, rd_ios=7))
    clock.t += 1.0
    out = src.sample(1.0)
    assert "disk.sda.r_s" in out and not any(k.startswith("disk.nvme0n1.") for k in out)
    stats.write_text(line("nvme0n1", 259, 0, rd_ios=17))
    clock.t += 1.0
    out = src.sample(2.0)
    assert out["disk.nvme0n1.r_s"] == 10.0 and not any(k.startswith("disk.sda.") for k in out)
    assert src.devices() == ["nvme0n1"]


def test_32bit_tick_wrap_and_counter_reset(env) -> None:
    src, stats, clock = env
    stats.write_text(line("sda", rd_ios=10, rd_ticks=2**32 - 100, io_ticks=2**32 - 500, rq_ticks=2**32 - 1))
    src.sample(0.0)
    stats.write_text(line("sda", rd_ios=20, rd_ticks=100, io_ticks=500, rq_ticks=999))
    clock.t += 1.0
    out = src.sample(1.0)
    assert out["disk.sda.r_await_ms"] == 20.0
    assert out["disk.sda.util_pct"] == 100.0
    assert out["disk.sda.aqu_sz"] == 1.0
    # Device re-created (counters back near zero): skip one interval rather than report garbage.
    stats.write_text(line("sda", rd_ios=3, rd_ticks=1, io_ticks=2))
    clock.t += 1.0
    assert src.sample(2.0) == {}
    stats.write_text(line("sda", rd_ios=6, rd_ticks=4, io_ticks=102))
    clock.t += 1.0
    out = src.sample(3.0)
    assert out["disk.sda.r_s"] == 3.0 and out["disk.sda.util_pct"] == 10.0
    # Same name, new major:minor: also re-primed.
    stats.write_text(line("sda", major=9, rd_ios=100))
    clock.t += 1.0
    assert src.sample(4.0) == {}


def test_unreadable_file_never_raises_logs_once_and_recovers(env, caplog) -> None:
    src, stats, clock = env
    caplog.set_level(logging.WARNING, logger="trainmon.disk")
    for _ in range(3):
        assert src.sample(0.0) == {}
        clock.t += 1.0
    assert src.error and "diskstats" in src.error
    assert len([r for r in caplog.records if r.name == "trainmon.disk"]) == 1
    stats.write_text(line("sda", rd_ios=1))
    assert src.sample(3.0) == {}
    assert src.error is None
    stats.write_text(line("sda", rd_ios=5))
    clock.t += 2.0
    assert src.sample(5.0)["disk.sda.r_s"] == 2.0


def test_directory_instead_of_file_and_tiny_interval(tmp_path: Path) -> None:
    src = DiskSource(str(tmp_path), str(tmp_path))
    assert src.sample(0.0) == {} and src.error
    real = DiskSource()
    real.sample(0.0)
    # Back-to-back calls keep the older baseline instead of dividing by ~0.
    out = real.sample(0.0)
    assert all(math.isfinite(v) for v in out.values())


def test_real_proc_diskstats_values_are_finite() -> None:
    src = DiskSource()
    assert src.sample(0.0) == {}
    time.sleep(0.2)
    out = src.sample(0.2)
    assert src.error is None
    assert all(math.isfinite(v) and v >= 0 for v in out.values())
