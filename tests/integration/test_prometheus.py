"""A real HTTP scrape of the exporter while a real training reports, parsed with prometheus-client's parser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request

import pytest

from testsupport.fake_pynvml import FakeNvml
from testsupport.paths import LOOP, ROOT
from testsupport.procs import child_env, free_port, start_python, trainmon_cmd, wait_for
from trainmon.diagnose.findings import CODES, SEVERITIES
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
    assert info.name == "trainmon_verdict_info" and set(info.labels) == {"host", "code", "severity"}
    assert info.labels["code"] in CODES and info.labels["severity"] in SEVERITIES
    assert fams["trainmon_verdict_severity"][0].value == SEVERITIES.index(info.labels["severity"])
    (run_verdict,) = fams["trainmon_run_verdict_info"]
    assert run_verdict.labels["pid"] == str(train.pid) and run_verdict.labels["code"] in CODES
    assert {s.labels["gpu"]: s.value for s in fams["trainmon_gpu_throttled"]} == {"0": 0.0, "1": 0.0}
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


# Labels name things (identities, codes); numbers are values. A label outside this set is a new dimension.
IDENTITY_LABELS = {
    "host",
    "node",
    "job_id",
    "rank",
    "pid",
    "name",
    "gpu",
    "device",
    "reason",
    "trainmon_verdict_code",
    "part",
}
CODE_LABELS = {"code", "severity"}  # a bounded set each: the code table and the three severities


def _series(text: str) -> tuple[set[tuple], list]:
    """The identities of a scrape's series with their code labels left out (they name what holds now), and its
    samples."""
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    ids = {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in CODE_LABELS))) for s in samples}
    return ids, samples


def test_series_stay_flat_while_the_figures_change_and_promtool_accepts_them(addr):
    nvml = FakeNvml(2)
    m = Monitor(addr, interval=0.3, nvml_module=nvml)
    m.start()
    env = {
        "TRAINMON_ADDR": addr,
        "TRAINMON_NODE": "node-a",
        "MASTER_ADDR": "10.1.2.3",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "1",
        "RANK": "0",
    }
    # Data loaded in the main process for half the run, then by two workers: step time and data wait move.
    args = ["--workers", "0", "--cpu-ms", "1", "--width", "64", "--switch-at", "0.5", "--seconds", "14"]
    texts: list[str] = []
    try:
        host, port = serve(m, "127.0.0.1:0")
        train = start_python("-m", "trainmon.demo.train", *args, "--steps", "1000000", env=env)
        try:
            assert wait_for(lambda: m.last_snapshot and any(r.steps > 30 for r in m.last_snapshot.runs), 60)
            start = time.monotonic()
            while train.poll() is None and time.monotonic() - start < 30:
                with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as resp:
                    text = resp.read().decode()
                if train.poll() is None:
                    texts.append(text)
                if len(texts) == 4:
                    nvml.devices[1].clock_reasons = 0x20  # software thermal slowdown from now on
                time.sleep(0.7)
        finally:
            train.kill()
            train.communicate()
    finally:
        m.stop()
    assert len(texts) >= 8, len(texts)
    scrapes = [_series(t) for t in texts]
    first_ids = scrapes[0][0]
    for ids, samples in scrapes:
        assert ids == first_ids, ids ^ first_ids
        assert len(samples) == len(scrapes[0][1])
    labels = {k for _, samples in scrapes for s in samples for k in s.labels}
    assert labels <= IDENTITY_LABELS | CODE_LABELS, labels - IDENTITY_LABELS - CODE_LABELS
    for _, samples in scrapes:
        for s in samples:
            assert s.labels.get("code", "ok.compute_bound") in CODES and s.labels.get("severity", "ok") in SEVERITIES

    def values(name: str) -> list[float]:
        return [s.value for _, samples in scrapes for s in samples if s.name == name and s.labels.get("gpu") != "0"]

    waits = values("trainmon_data_wait_ratio")
    assert max(waits) - min(waits) > 0.2, waits  # the figures did change under the same series
    assert len(set(values("trainmon_step_time_seconds"))) > 3
    assert values("trainmon_gpu_throttled")[0] == 0 and values("trainmon_gpu_throttled")[-1] == 1
    run = next(s for s in scrapes[-1][1] if s.name == "trainmon_steps_total")
    assert run.labels["job_id"] == "10.1.2.3:29500/1" and run.labels["node"] == "node-a"
    assert run.labels["rank"] == "0" and run.labels["pid"] == str(train.pid)

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus); the series checks above ran")
    res = subprocess.run([promtool, "check", "metrics"], input=texts[-1], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "" and res.stderr.strip() == "", (res.stdout, res.stderr)
