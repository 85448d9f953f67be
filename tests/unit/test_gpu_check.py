"""scripts/gpu_check.py on a machine without a GPU: its case table, how it judges a case, the ground-truth
arithmetic, the table and markdown it writes, and its one-line exit where there is no CUDA.

The result rows below are made up here to drive the judging code; they are not GPU results. The real cases run
in tests/gpu (``-m gpu``) on a CUDA machine.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType

import pytest

from testsupport.paths import ROOT
from trainmon.diagnose.findings import CODES

SCRIPT = ROOT / "scripts" / "gpu_check.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


gc = load()


def row(case: str, verdict: str | None = None, **kw) -> dict:
    """A made-up result row for ``case`` (what run_case returns after a real run)."""
    return {"case": case, "verdict": verdict, "gpm": True, "wait": 0.4, **kw}


def test_importing_the_script_imports_no_torch():
    out = subprocess.run(
        [sys.executable, "-c", f"import runpy, sys; runpy.run_path({str(SCRIPT)!r}); print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_the_case_table_covers_each_bottleneck_with_its_verdict():
    want = {
        "input-starved": ("input.main_process",),
        "gpu-bound": ("ok.compute_bound",),
        "hidden-wait": (),
        "pageable-h2d": ("input.host_to_device",),
        "item-sync": ("host.sync",),
        "tiny-mlp": ("gpu.small_work",),
        "fp32-matmul": ("gpu.no_tensor_cores",),
    }
    assert {name: case.expect for name, case in gc.CASES.items()} == want
    assert gc.CASES["hidden-wait"].forbid == ("input.",)
    assert {n for n, c in gc.CASES.items() if c.needs_gpm} == {"tiny-mlp", "fp32-matmul"}
    assert {n for n, c in gc.CASES.items() if c.judge_exposed} == {"input-starved", "gpu-bound", "hidden-wait"}
    for name, case in gc.CASES.items():
        assert case.name == name and case.what
        assert all(code in CODES for code in case.expect), case
        assert all(any(code.startswith(p) for code in CODES) for p in case.forbid), case
    assert list(gc.COST) == ["no agent", "agent, no probe", "agent + exposed probe"]


def test_the_verdict_check_passes_the_expected_code_and_fails_any_other():
    cases = gc.CASES
    assert gc.check_verdict(cases["input-starved"], row("input-starved", "input.main_process")) == (
        "pass",
        "input.main_process",
    )
    status, why = gc.check_verdict(cases["input-starved"], row("input-starved", "input.too_few_workers"))
    assert status == "fail" and "expected input.main_process" in why
    status, why = gc.check_verdict(cases["gpu-bound"], row("gpu-bound", None))
    assert status == "fail" and why.startswith("no verdict")


def test_the_hidden_wait_fails_on_any_input_verdict_and_passes_otherwise():
    case = gc.CASES["hidden-wait"]
    for code in ("input.main_process", "input.too_few_workers", "input.host_to_device"):
        status, why = gc.check_verdict(case, row("hidden-wait", code))
        assert status == "fail" and "input.*" in why
    assert gc.check_verdict(case, row("hidden-wait", "ok.compute_bound"))[0] == "pass"
    assert gc.check_verdict(case, row("hidden-wait", "host.overhead"))[0] == "pass"


def test_gpm_cases_say_n_a_without_gpm_and_are_judged_with_it():
    case = gc.CASES["fp32-matmul"]
    status, why = gc.check_verdict(case, row("fp32-matmul", "ok.compute_bound", gpm=False))
    assert status == "n/a" and "GPM" in why
    assert gc.check_verdict(case, row("fp32-matmul", "gpu.no_tensor_cores"))[0] == "pass"
    assert gc.check_verdict(case, row("fp32-matmul", "ok.compute_bound"))[0] == "fail"


def test_a_failed_training_fails_its_checks():
    r = {"case": "gpu-bound", "error": "gpu-bound: the training failed:\nTraceback ..."}
    assert gc.check_verdict(gc.CASES["gpu-bound"], r) == ("fail", "gpu-bound: the training failed:")
    assert gc.check_exposed(gc.CASES["gpu-bound"], r)[0] == "fail"
    assert not gc.passed([r])


def test_exposed_idle_is_compared_within_the_tolerance():
    case = gc.CASES["input-starved"]
    assert gc.EXPOSED_TOLERANCE == (0.05, 0.15)
    assert gc.check_exposed(case, row("input-starved", exposed=0.70, truth_exposed=0.80))[0] == "pass"  # ≤ 0.17
    status, why = gc.check_exposed(case, row("input-starved", exposed=0.55, truth_exposed=0.80))
    assert status == "fail" and "limit 0.170" in why
    assert gc.check_exposed(case, row("input-starved", exposed=None, truth_exposed=0.8))[0] == "fail"
    assert gc.check_exposed(case, row("input-starved", exposed=0.5, truth_exposed=None))[0] == "fail"
    assert gc.check_exposed(gc.CASES["item-sync"], row("item-sync", exposed=0.9, truth_exposed=0.0))[0] == "n/a"
    hidden = gc.CASES["hidden-wait"]
    assert gc.check_exposed(hidden, row("hidden-wait", exposed=0.02, truth_exposed=0.0))[0] == "pass"
    assert gc.check_exposed(hidden, row("hidden-wait", exposed=0.30, truth_exposed=0.0))[0] == "fail"


def test_ground_truth_counts_the_part_of_each_wait_with_nothing_running():
    gpu = [(0.0, 10.0), (8.0, 12.0), (15.0, 30.0), (50.0, 50.0)]  # overlapping kernels merge; empty ones drop
    waits = [(10.0, 20.0), (30.0, 34.0)]
    steps = [(0.0, 20.0), (20.0, 40.0)]
    truth = gc.ground_truth(gpu, waits, steps)
    # busy: [0, 12] and [15, 30] = 27 of 40; wait 1 has 10 - (2 + 5) = 3 idle, wait 2 all 4
    assert truth == pytest.approx({"idle": 13 / 40, "exposed": 7 / 40, "wait": 14 / 40})
    assert gc.merge([(3, 4), (0, 2), (1, 3)]) == [(0, 4)]
    assert gc.overlap([(0, 2), (5, 9)], 1, 6) == 2


def test_the_profiled_ranges_are_read_from_a_real_profile():
    """On the CPU there is no GPU track: the steps and waits come out, no GPU work, all idle."""
    torch = pytest.importorskip("torch")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(4):
            with torch.profiler.record_function(gc.STEP_LABEL):
                with torch.profiler.record_function(gc.WAIT_LABEL):
                    torch.ones(64).sum()
                torch.ones(256, 256) @ torch.ones(256, 256)
    gpu, waits, steps = gc.profile_intervals(prof.events())
    assert gpu == [] and len(waits) == 4 and len(steps) == 4
    assert all(s0 <= w0 <= w1 <= s1 for (w0, w1), (s0, s1) in zip(waits, sorted(steps), strict=True))
    truth = gc.ground_truth(gpu, waits, steps)
    assert truth["idle"] == 1.0 and 0 < truth["exposed"] == truth["wait"] < 1


def test_the_table_has_a_row_per_case_with_its_checks():
    rows = [
        row("input-starved", "input.main_process", wait=0.81, exposed=0.78, truth_exposed=0.8, truth_idle=0.85),
        row("tiny-mlp", "ok.compute_bound", gpm=False, wait=0.01),
        row("hidden-wait", "input.main_process", wait=0.6, exposed=0.4, truth_exposed=0.01, truth_idle=0.02),
    ]
    lines = gc.format_table(rows).splitlines()
    assert lines[0].startswith("case ") and lines[0].split("  ")[-1].strip() == "exposed check"
    assert list(gc.TABLE_HEADER) == [c.strip() for c in lines[0].split("  ") if c.strip()]
    assert set(lines[1]) <= {"-", " "} and len(lines) == 5
    assert lines[2].split()[:7] == ["input-starved", "input.main_process", "pass", "0.810", "0.780", "0.800", "0.850"]
    assert "pass: |0.780 - 0.800| = 0.020" in lines[2]
    assert lines[3].split()[:5] == ["tiny-mlp", "ok.compute_bound", "n/a", "0.010", "-"]
    assert lines[4].split()[2] == "fail" and "fail: |0.400 - 0.010|" in lines[4]
    assert not gc.passed(rows) and gc.passed(rows[:2])


def test_markdown_goes_between_the_markers_with_the_device_name(tmp_path):
    doc = tmp_path / "gpu-validation.md"
    doc.write_text(f"# Title\n\nMethod.\n\n{gc.BEGIN}\nnot run yet\n{gc.END}\n\nAfter.\n")
    cost = {"no agent": 100.0, "agent, no probe": 102.5, "agent + exposed probe": 106.0}
    rows = [row("gpu-bound", "ok.compute_bound", wait=0.01, exposed=0.0, truth_exposed=0.0, truth_idle=0.02)]
    gc.write_markdown(doc, gc.markdown("NVIDIA H100 80GB HBM3 (CUDA 12.8, torch 2.13.0)", rows, cost, "2030-01-01"))
    text = doc.read_text()
    assert text.startswith("# Title\n\nMethod.\n\n") and text.endswith(f"{gc.END}\n\nAfter.\n")
    assert "not run yet" not in text and "**NVIDIA H100 80GB HBM3 (CUDA 12.8, torch 2.13.0)**" in text
    assert "| gpu-bound | ok.compute_bound | pass |" in text
    assert "agent + exposed probe       106.0 µs/step  (+6.0 µs)" in text
    doc.write_text("no markers\n")
    with pytest.raises(SystemExit, match="no '<!-- gpu_check results: begin -->'"):
        gc.write_markdown(doc, "x")


def test_the_validation_page_has_the_result_markers():
    text = gc.DOC.read_text()
    assert text.index(gc.BEGIN) < text.index(gc.END)


def test_without_cuda_it_says_so_in_one_line_and_exits_2():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the script would run the validation")
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stdout == "" and out.stderr.count("\n") == 1
    assert out.stderr.startswith("gpu_check: no CUDA GPU here")


def test_an_unknown_case_is_one_line_and_exit_2():
    out = subprocess.run([sys.executable, str(SCRIPT), "--cases", "warp-drive"], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "unknown case 'warp-drive'" in out.stderr
