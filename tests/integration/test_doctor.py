"""`trainmon doctor` on this machine, with real files, sockets and subprocesses; pynvml faked only at its boundary."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainmon import doctor
from trainmon import protocol as P
from trainmon.sources.pyspy import py_spy as pyspy


def _rows_by_check(rows: list[tuple[str, str, str]]) -> dict[str, tuple[str, str]]:
    return {check: (status, detail) for check, status, detail in rows}


@pytest.fixture
def sock_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short private directory (Unix socket paths are limited to ~107 bytes) used as the default socket dir."""
    base = Path(tempfile.mkdtemp(prefix="tmdoc-", dir="/tmp"))
    target = base / "trainmon"
    monkeypatch.delenv("TRAINMON_ADDR", raising=False)
    monkeypatch.setattr(P, "default_socket_dir", lambda: str(target))
    yield target
    shutil.rmtree(base, ignore_errors=True)


def test_real_run_here(sock_dir: Path) -> None:
    rows, can_run = doctor.run_doctor()
    by = _rows_by_check(rows)
    assert all(status in ("ok", "warn", "fail") for _, status, _ in rows)
    assert all("\n" not in detail for _, _, detail in rows)
    assert by["python"][0] == "ok" and sys.executable in by["python"][1]
    assert by["psutil"][0] == "ok"
    assert by["textual"][0] == "ok"
    assert by["socket dir"] == ("ok", f"{sock_dir} (created with mode 0700 when the monitor starts)")
    assert not sock_dir.exists()  # the doctor inspects, it does not create
    assert by["monitor"][0] == "ok" and "none listening" in by["monitor"][1]
    if importlib.util.find_spec("torch") is not None:
        assert by["torch"][0] == "ok"
    if pyspy.find_pyspy() is not None:
        assert by["py-spy"][0] == "ok" and pyspy.pyspy_version() in by["py-spy"][1]
    assert by["ptrace"][0] in ("ok", "warn")
    if not Path("/dev/nvidiactl").exists():
        status, detail = by["nvml"]
        assert status == "warn" and "NVML unavailable" in detail and "without GPU data" in detail
    assert can_run is True


def test_doctor_imports_neither_textual_nor_torch() -> None:
    code = "import sys, trainmon.doctor as d; d.run_doctor(); print('textual' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_existing_private_dir_and_a_listening_monitor(sock_dir: Path) -> None:
    sock_dir.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_dir / "monitor.sock"))
    listener.listen(1)
    try:
        by = _rows_by_check(doctor.check_socket())
    finally:
        listener.close()
    assert by["socket dir"] == ("ok", f"{sock_dir} (yours, mode 0700)")
    assert by["monitor"] == ("ok", f"a monitor is listening on {sock_dir / 'monitor.sock'}")
    # the listener is gone, its file remains: a stale socket
    assert "stale socket" in _rows_by_check(doctor.check_socket())["monitor"][1]


def test_loose_mode_is_a_warning(sock_dir: Path) -> None:
    sock_dir.mkdir()
    sock_dir.chmod(0o755)
    status, detail = _rows_by_check(doctor.check_socket())["socket dir"]
    assert status == "warn" and "0755" in detail


@pytest.fixture
def no_torch_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "check_torch", lambda: [("torch", "ok", "not probed")])


def test_socket_path_is_a_file(sock_dir: Path, no_torch_probe: None) -> None:
    sock_dir.write_text("not a directory")
    rows, can_run = doctor.run_doctor()
    status, detail = _rows_by_check(rows)["socket dir"]
    assert status == "fail" and "not a directory" in detail
    assert can_run is False
    assert "cannot run here" in doctor.format_doctor(rows, can_run)


def test_socket_dir_owned_by_another_user(sock_dir: Path, no_torch_probe: None) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another uid")
    sock_dir.mkdir(mode=0o700)
    os.chown(sock_dir, 65534, 65534)
    rows, can_run = doctor.run_doctor()
    status, detail = _rows_by_check(rows)["socket dir"]
    assert status == "fail" and "belongs to uid 65534" in detail
    assert can_run is False


def test_socket_dir_cannot_be_created(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setattr(P, "default_socket_dir", lambda: str(blocker / "sub" / "trainmon"))
    status, _ = _rows_by_check(doctor.check_socket())["socket dir"]
    assert status == "fail"


def test_trainmon_addr_is_probed(sock_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    monkeypatch.setenv("TRAINMON_ADDR", f"127.0.0.1:{port}")
    try:
        status, detail = _rows_by_check(doctor.check_socket())["monitor"]
    finally:
        server.close()
    assert status == "ok" and detail == f"a monitor is listening on 127.0.0.1:{port} (from TRAINMON_ADDR)"


# ---------------------------------------------------------------- NVML


def test_nvml_absent_is_a_warning_without_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    (row,) = doctor.check_nvml()
    assert row[0] == "nvml" and row[1] == "warn"
    assert "pip install nvidia-ml-py" in row[2]


def test_nvml_init_failure_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("pynvml")

    def fail() -> None:
        raise RuntimeError("Driver Not Loaded\nsecond line")

    fake.nvmlInit = fail  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    (row,) = doctor.check_nvml()
    assert row[1] == "warn" and "Driver Not Loaded second line" in row[2] and "\n" not in row[2]


def _fake_nvml(names: list[str], gpm: list[bool]) -> types.ModuleType:
    fake = types.ModuleType("pynvml")
    calls: list[str] = []
    fake.calls = calls  # type: ignore[attr-defined]
    fake.nvmlInit = lambda: calls.append("init")  # type: ignore[attr-defined]
    fake.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    fake.nvmlSystemGetDriverVersion = lambda: "550.54.15"  # type: ignore[attr-defined]
    fake.nvmlSystemGetNVMLVersion = lambda: b"12.550.54.15"  # type: ignore[attr-defined]
    fake.nvmlDeviceGetCount = lambda: len(names)  # type: ignore[attr-defined]
    fake.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    fake.nvmlDeviceGetName = lambda h: names[h]  # type: ignore[attr-defined]

    def gpm_support(h: int) -> types.SimpleNamespace:
        if h >= len(gpm):
            raise RuntimeError("Not Supported")
        return types.SimpleNamespace(isSupportedDevice=int(gpm[h]))

    fake.nvmlGpmQueryDeviceSupport = gpm_support  # type: ignore[attr-defined]
    return fake


def test_nvml_devices_and_gpm(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_nvml(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "Tesla T4"], [True, False])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    rows = doctor.check_nvml()
    assert rows[0] == ("nvml", "ok", "driver 550.54.15, NVML 12.550.54.15, 3 device(s)")
    assert rows[1] == ("gpu 0", "ok", "NVIDIA H100 80GB HBM3, GPM supported")
    assert rows[2] == ("gpu 1", "ok", "NVIDIA A100-SXM4-40GB, GPM not supported (pre-Hopper)")
    assert rows[3] == ("gpu 2", "ok", "Tesla T4, GPM unavailable (Not Supported)")
    assert fake.calls == ["init", "shutdown"]


def test_nvml_without_gpm_function(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_nvml(["Tesla V100"], [])
    del fake.nvmlGpmQueryDeviceSupport
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert doctor.check_nvml()[1] == ("gpu 0", "ok", "Tesla V100, GPM unknown (nvidia-ml-py too old)")


# ---------------------------------------------------------------- other checks and rendering


def test_missing_pyspy_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pyspy, "find_pyspy", lambda: None)
    (row,) = doctor.check_pyspy()
    assert row[:2] == ("py-spy", "warn") and "pip install py-spy" in row[2]


def test_a_crashing_check_becomes_a_fail_row() -> None:
    def check_boom() -> list[tuple[str, str, str]]:
        raise ValueError("kaput")

    assert doctor._run_check(check_boom) == [("boom", "fail", "check crashed: ValueError: kaput")]


def test_format_is_aligned() -> None:
    rows = [("python", "ok", "3.11"), ("socket dir", "fail", "bad"), ("nvml", "warn", "none")]
    text = doctor.format_doctor(rows)
    lines = text.splitlines()
    assert lines == ["python      ok    3.11", "socket dir  fail  bad", "nvml        warn  none"]
    assert doctor.format_doctor(rows, True).endswith("the monitor can run here")
    assert doctor.format_doctor([]) == ""
