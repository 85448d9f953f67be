"""A real HTTP scrape of the exporter while a real training reports, parsed with prometheus-client's parser."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request

import pytest

from testsupport.fake_pynvml import FakeNvml
from testsupport.paths import LOOP, ROOT
from testsupport.procs import child_env, free_port, start_python, trainmon_cmd, wait_for
from trainmon.monitor import Monitor

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families

from trainmon.export import prometheus as p
from trainmon.export.prometheus import serve


def _scrape(host: str, port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    return {fam.name: fam.samples for fam in text_string_to_metric_families(text)}


def test_scrape_has_host_gpu_disk_run_and_verdict_metrics(addr):
    m = Monitor(addr, interval=0.3, nvml_module=FakeNvml(2))
    m.start()
    try:
        host, port = serve(m, "127.0.0.1:0")
        train = start_python(LOOP, "400", "0", "none", "3", env={"TRAINMON_ADDR": addr})
        try:
            assert wait_for(lambda: any(r.steps.total > 30 for r in m.store.runs.values()), 60)
            assert wait_for(lambda: m.last_snapshot and any(r.steps > 30 for r in m.last_snapshot.runs), 10)
            fams = _scrape(host, port)
        finally:
            train.kill()
            train.communicate()
    finally:
        m.stop()
    assert all(name.startswith("trainmon_") for name in fams)
    cpu = fams["trainmon_cpu_busy_percent"][0]
    assert 0 <= cpu.value <= 100 and cpu.labels["host"]
    gpu_util = fams["trainmon_gpu_utilization_percent"]
    assert sorted(s.labels["gpu"] for s in gpu_util) == ["0", "1"]
    assert fams["trainmon_gpu_memory_total_bytes"][0].value > 1e9
    assert (
        "trainmon_disk_read_bytes_per_second" in fams
        and "device" in fams["trainmon_disk_read_bytes_per_second"][0].labels
    )
    steps = [s for s in fams["trainmon_steps"] if s.name == "trainmon_steps_total"]
    assert steps and steps[0].value > 30 and steps[0].labels["pid"] == str(train.pid)
    assert 0 <= fams["trainmon_data_wait_ratio"][0].value <= 1
    assert fams["trainmon_step_time_seconds"][0].value > 0
    info = (fams.get("trainmon_verdict") or fams["trainmon_verdict_info"])[0]
    assert info.name == "trainmon_verdict_info" and info.labels["code"] and info.labels["severity"]
    states = {s.labels["trainmon_verdict_code"]: s.value for s in fams["trainmon_verdict_code"]}
    assert sum(states.values()) == 1 and states[info.labels["code"]] == 1


def test_bad_address_is_refused():
    with pytest.raises(ValueError, match="HOST:PORT"):
        serve(object(), "/tmp/not-tcp")


def test_grafana_dashboard_queries_only_exported_metrics():
    dash = json.loads((ROOT / "contrib" / "grafana" / "trainmon.json").read_text())
    fields = [*p.HOST_EXPORTS.values(), *(f for table in p.FAMILY_EXPORTS.values() for f in table.values())]
    exported = {f.name for f in fields}
    exported |= {
        "trainmon_step_time_seconds",
        "trainmon_data_wait_ratio",
        "trainmon_samples_per_second",
        "trainmon_steps_total",
        "trainmon_agent_dropped_records_total",
        "trainmon_verdict_info",
    }
    used = {m for panel in dash["panels"] for t in panel["targets"] for m in re.findall(r"trainmon_\w+", t["expr"])}
    assert used and used <= exported, used - exported


def test_record_serves_metrics_from_the_cli(addr, tmp_path):
    port = free_port()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'prometheus = "127.0.0.1:{port}"\n[thresholds]\nwait_warning = 0.07\n')
    rec = subprocess.Popen(
        trainmon_cmd("--config", str(cfg), "record", "-o", str(tmp_path / "r.tmrec"), "--listen", addr, "-q"),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def scraped() -> dict | None:
            try:
                return _scrape("127.0.0.1", port)
            except OSError:
                return None

        assert wait_for(lambda: scraped() is not None and "trainmon_cpu_busy_percent" in scraped(), 30)
    finally:
        rec.terminate()
        _, err = rec.communicate(timeout=30)
    assert rec.returncode == 0 and f"127.0.0.1:{port}/metrics" in err
