"""contrib/prometheus: the rules load, their unit tests pass under promtool, and they query only what the
exporter serves."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from testsupport.paths import ROOT
from trainmon import metrics

pytest.importorskip("prometheus_client")
from trainmon.export import prometheus as p

RULES = ROOT / "contrib" / "prometheus" / "trainmon.rules.yml"
RULE_TESTS = ROOT / "contrib" / "prometheus" / "trainmon.rules.test.yml"


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian package prometheus; .ci/run installs it)")
    return tool


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_rules_are_valid():
    res = _run("check", "rules", RULES.name, cwd=RULES.parent)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: 11 rules found" in res.stdout


def test_the_rules_unit_tests_pass():
    res = _run("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_a_broken_expectation_fails_the_unit_tests(tmp_path):
    shutil.copy(RULES, tmp_path / RULES.name)
    text = RULE_TESTS.read_text().replace("node_verdict: input.main_process", "node_verdict: ok.compute_bound", 1)
    (tmp_path / RULE_TESTS.name).write_text(text)
    res = _run("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert res.returncode != 0 and "TrainmonRankStepTimeDiverges" in res.stdout + res.stderr


def test_the_rules_query_only_exported_metrics():
    source = Path(p.__file__).read_text()
    fields = [*p.HOST_EXPORTS.values(), *(f for table in p.FAMILY_EXPORTS.values() for f in table.values())]
    exported = {f.name for f in fields} | set(re.findall(r'"(trainmon_\w+)"', source))
    exported |= {f"{name}_total" for name in re.findall(r'CounterMetricFamily\(\s*"(trainmon_\w+)"', source)}
    exported |= {f"{name}_info" for name in re.findall(r'InfoMetricFamily\(\s*"(trainmon_\w+)"', source)}
    # The run and verdict metrics are spelled once, in trainmon.metrics (the exporter and the cluster view read them).
    exported |= {m.exposed for m in vars(metrics).values() if isinstance(m, metrics.Metric)}
    text = RULES.read_text()
    recorded = set(re.findall(r"record: (\S+)", text))
    used = {m for m in re.findall(r"(?<![:\w])trainmon_\w+", text)}
    assert used and used <= exported, used - exported
    assert all(name.startswith("job_id:trainmon_") for name in recorded)
