"""Layering rules of docs/architecture.md, checked in fresh interpreters."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from testsupport.paths import ROOT
from testsupport.procs import child_env

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
    assert ours <= {
        "trainmon.agent",
        "trainmon.agent._batch",
        "trainmon.agent._frameworks",
        "trainmon.agent._gc",
        "trainmon.agent._hot",
        "trainmon.agent._import_hook",
        "trainmon.agent._sender",
        "trainmon.agent._redact",
        "trainmon.agent._torch_hooks",
        "trainmon.protocol",
        "trainmon.protocol.clean",
        "trainmon.protocol.job",
        "trainmon.protocol.wire",
    }, ours


def test_attach_does_not_import_torch():
    mods = _modules_after("import trainmon.agent as a; a.attach('/nonexistent/x.sock'); a.detach()")
    assert "torch" not in mods


VIEW_MODULES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for p in (ROOT / "trainmon" / "view").rglob("*.py")
)


@pytest.mark.parametrize(
    "module",
    [
        "trainmon.ingest.agent_server",
        "trainmon.sources.host.host_source",
        "trainmon.sources.gpu.gpu_source",
        "trainmon.sources.host.disk",
        "trainmon.sources.host.procs",
        "trainmon.sources.pyspy.py_spy",
        "trainmon.sources.discovery.unattached",
        "trainmon.autodump",
        "trainmon.analyses.time_budget",
        "trainmon.analyses.phases",
        "trainmon.analyses.energy_per_step",
        "trainmon.doctor",
        "trainmon.launch",
        "trainmon.store",
        "trainmon.diagnose",
        "trainmon.record",
        "trainmon.report",
        "trainmon.monitor",
        "trainmon.cli",
        *VIEW_MODULES,
    ],
)
def test_core_layers_never_import_textual(module):
    mods = _modules_after(f"import {module}")
    assert not {m for m in mods if m.split(".")[0] in ("textual",)}, module


TUI_MODULES = sorted(f"trainmon.tui.{p.stem}" for p in (ROOT / "trainmon" / "tui").glob("*.py") if p.stem != "__init__")


def test_the_tui_only_renders_what_the_headless_layer_hands_it():
    """Importing every screen module pulls in no NVML, no psutil and no source or Monitor."""
    mods = _modules_after("; ".join(f"import {m}" for m in ["trainmon.tui", *TUI_MODULES]))
    assert {"trainmon.tui.app", "trainmon.view"} <= mods
    banned = {
        m
        for m in mods
        if m.split(".")[0] in ("psutil", "pynvml", "torch")
        or m.startswith(("trainmon.sources", "trainmon.ingest", "trainmon.monitor", "trainmon.agent"))
    }
    assert not banned, sorted(banned)


@pytest.mark.parametrize("module", TUI_MODULES)
def test_no_tui_module_names_nvml_psutil_sockets_or_sources(module):
    """Statically, not even a lazy import inside a function (asyncio brings socket along at run time)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    bad = {
        n
        for n in names
        if n.split(".")[0] in ("socket", "psutil", "pynvml", "torch")
        or n.startswith(("trainmon.sources", "trainmon.ingest", "trainmon.monitor", "trainmon.agent"))
    }
    assert not bad, f"{module} imports {sorted(bad)}"
