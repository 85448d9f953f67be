"""Layering rules of DESIGN.md, checked in fresh interpreters."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import child_env

THIRD_PARTY = ("torch", "psutil", "textual", "rich", "pynvml", "numpy")


def _modules_after(stmt: str) -> set[str]:
    code = f"import sys, json\n{stmt}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("module", ["trainmon.agent", "trainmon.protocol"])
def test_agent_and_protocol_use_only_the_standard_library(module):
    mods = _modules_after(f"import {module}; {module}.__name__")
    third = {m for m in mods if m.split(".")[0] in THIRD_PARTY}
    assert not third, f"{module} imported {sorted(third)}"
    ours = {m for m in mods if m.startswith("trainmon.")}
    assert ours <= {"trainmon.agent", "trainmon.agent._hot", "trainmon.agent._sender", "trainmon.agent._redact",
                    "trainmon.agent._torch_hooks", "trainmon.protocol"}, ours


def test_attach_does_not_import_torch():
    mods = _modules_after("import trainmon.agent as a; a.attach('/nonexistent/x.sock'); a.detach()")
    assert "torch" not in mods


@pytest.mark.parametrize("module", ["trainmon.sources.agents", "trainmon.sources.host", "trainmon.sources.gpu",
                                    "trainmon.sources.disk", "trainmon.sources.procs", "trainmon.sources.pyspy",
                                    "trainmon.doctor", "trainmon.launch", "trainmon.store",
                                    "trainmon.diagnose", "trainmon.record", "trainmon.report", "trainmon.monitor",
                                    "trainmon.cli"])
def test_core_layers_never_import_textual(module):
    mods = _modules_after(f"import {module}")
    assert not {m for m in mods if m.split(".")[0] in ("textual",)}, module
