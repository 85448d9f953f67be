"""A real Prometheus server for tests: on loopback, a temporary config and storage, short scrape and rule
intervals, the contrib rules with their ``for:`` durations shortened; and its HTTP API."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from testsupport.paths import ROOT
from testsupport.procs import free_port, wait_for

RULES = ROOT / "contrib" / "prometheus" / "trainmon.rules.yml"


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def fast_rules(for_s: int = 3) -> str:
    """The contrib rules as shipped, each ``for:`` shortened to ``for_s`` seconds (the expressions untouched)."""
    return re.sub(r"(?m)^(\s+for: )\S+$", rf"\g<1>{for_s}s", RULES.read_text())


def start_prometheus(tmp: Path, targets: list[str], interval_s: float = 1.0) -> tuple[subprocess.Popen, str]:
    """Prometheus scraping ``targets`` (HOST:PORT) every ``interval_s``; returns it and its base URL once ready."""
    binary = prometheus_binary()
    assert binary is not None, "prometheus is not installed"
    (tmp / "trainmon.rules.yml").write_text(fast_rules())
    interval = f"{int(interval_s * 1000)}ms"
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": [str(tmp / "trainmon.rules.yml")],
        "scrape_configs": [{"job_name": "trainmon", "static_configs": [{"targets": targets}]}],
    }
    (tmp / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "prometheus.log", "w"),  # noqa: SIM115 - the child keeps it
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    if not wait_for(lambda: proc.poll() is not None or ready(), 30, 0.2) or proc.poll() is not None:
        proc.kill()
        raise RuntimeError(f"prometheus did not start: {(tmp / 'prometheus.log').read_text()[-2000:]}")
    return proc, url


def api(url: str, path: str, **params: str) -> Any:
    """GET ``/api/v1/PATH`` and its ``data``."""
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{url}/api/v1/{path}{query}", timeout=10) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]


def firing(url: str, alertname: str) -> list[dict[str, Any]]:
    """The alerts named ``alertname`` that fire now."""
    return [a for a in api(url, "alerts")["alerts"] if a["labels"]["alertname"] == alertname and a["state"] == "firing"]
