"""The GPU validation cases of scripts/gpu_check.py as tests, on a real CUDA GPU: each case trains under a real
``trainmon record``, is diagnosed, and has its exposed GPU idle compared with torch.profiler's ground truth
(docs/gpu-validation.md). Skipped, with the reason, where there is no CUDA GPU.

    pytest -m gpu tests/gpu
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from testsupport.paths import ROOT


def _cuda() -> str | None:
    """Why these tests cannot run here, or None."""
    try:
        import torch
    except ImportError:
        return "no torch"
    return None if torch.cuda.is_available() else "needs a CUDA GPU (torch.cuda.is_available() is False)"


pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.skipif(_cuda() is not None, reason=str(_cuda()))]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


gc = load()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(gc.CASES))
def test_case_verdict_and_exposed_idle(name, tmp_path):
    case = gc.CASES[name]
    row = gc.run_case(case, 20.0, str(tmp_path))
    status, why = gc.check_verdict(case, row)
    if status == "n/a":
        pytest.skip(why)
    assert status == "pass", f"{why}: {row['summary']}"
    status, why = gc.check_exposed(case, row)
    assert status != "fail", why
