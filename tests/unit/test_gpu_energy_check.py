"""The energy check of scripts/gpu_check.py on a machine without a GPU: the integration of nvidia-smi's power
samples, how the three joules per step are judged, and what it writes. The result rows are made up here to drive
the judging code; they are not GPU results (docs/gpu-validation.md says what awaits a real GPU)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType

import pytest

from testsupport.paths import ROOT

SCRIPT = ROOT / "scripts" / "gpu_check.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


gc = load()


def energy_row(**kw) -> dict:
    return {"trainmon_j_step": 41.0, "method": "nvml_counter", "counter_j_step": 40.6, "smi_j_step": 39.0, **kw}


def test_power_samples_are_integrated_over_the_span_only():
    samples = [(t / 10, 200.0) for t in range(0, 101)]  # 200 W every 100 ms for 10 s
    assert gc.integrate(samples, 1.0, 9.0) == pytest.approx(1600.0)
    ramp = [(0.0, 100.0), (1.0, 300.0), (2.0, 300.0)]
    assert gc.integrate(ramp, 0.0, 2.0) == pytest.approx(200.0 + 300.0)  # trapezoids
    assert gc.integrate(ramp, 0.5, 2.0) == pytest.approx(450.0)  # the ends held from the nearest sample inside
    assert gc.integrate(ramp, 0.5, 1.5) is None  # one sample inside: nothing to integrate
    assert gc.integrate(ramp, 5.0, 9.0) is None


def test_trainmon_against_the_counter_and_the_counter_against_nvidia_smi():
    status, why = gc.check_energy(energy_row())
    assert status == "pass" and "trainmon 41.00 J/step (nvml_counter), NVML counter 40.60 (+1.0%)" in why
    assert "nvidia-smi power.draw × time 39.00 (counter +4.1%)" in why
    assert gc.check_energy(energy_row(trainmon_j_step=43.0))[0] == "fail"  # +5.9 % off the same counter
    assert gc.check_energy(energy_row(smi_j_step=30.0))[0] == "fail"  # the counter 35 % above nvidia-smi
    status, why = gc.check_energy(energy_row(smi_j_step=None, smi_error="not runnable: no nvidia-smi"))
    assert status == "pass" and why.endswith("nvidia-smi: not runnable: no nvidia-smi")
    assert gc.check_energy(energy_row(trainmon_j_step=None)) == (
        "fail",
        "the report has no joules per step (runs[].energy)",
    )
    assert gc.check_energy({"error": "energy: the training failed:\nTraceback"}) == (
        "fail",
        "energy: the training failed:",
    )


def test_the_energy_result_is_in_the_markdown_and_the_exit_status():
    text = gc.markdown("NVIDIA H100", [], {}, "2030-01-01", energy_row())
    assert "Energy over 10 s of steady load: **pass**: trainmon 41.00 J/step" in text and "| case |" not in text
    assert gc.passed([], energy_row()) and not gc.passed([], energy_row(smi_j_step=20.0))


def test_energy_only_without_cuda_is_one_line_and_exit_2():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the script would run the check")
    out = subprocess.run([sys.executable, str(SCRIPT), "--energy-only"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and out.stderr.startswith("gpu_check: no CUDA GPU")


def test_the_power_log_reads_nvidia_smi_lines_and_skips_what_is_not_a_number(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"  # prints as `nvidia-smi --query-gpu=uuid,power.draw --format=csv,...` does
    fake.write_text(
        f"#!{sys.executable}\n"
        "import sys, time\n"
        "for line in ('GPU-aaaa, 101.50', 'GPU-bbbb, [N/A]', 'GPU-aaaa, 99.25'):\n"
        "    print(line, flush=True)\n"
        "time.sleep(60)\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{gc.os.environ['PATH']}")
    log = gc.PowerLog()
    deadline = gc.time.monotonic() + 20
    while len(log.samples) < 2 and gc.time.monotonic() < deadline:
        gc.time.sleep(0.05)
    samples = log.stop()
    assert [(uuid, w) for _, uuid, w in samples] == [("GPU-aaaa", 101.5), ("GPU-aaaa", 99.25)]
    assert log.error is None and log.proc.returncode is not None


def test_without_nvidia_smi_the_power_log_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    log = gc.PowerLog()
    assert log.stop() == [] and log.error.startswith("not runnable:")
