"""Prometheus's HTTP API, as much as the cluster view reads: instant queries and the alerts (standard library)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

TIMEOUT_S = 5.0


class ClusterError(Exception):
    """Prometheus cannot be read, or holds nothing of trainmon: one line for the user."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def base_url(url: str) -> str:
    """``host:9090`` → ``http://host:9090``; a trailing slash or ``/graph`` path is dropped."""
    url = url.strip()
    if "://" not in url:
        url = f"http://{url}"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ClusterError(f"--prometheus needs a URL such as http://HOST:9090, got {url!r}")
    path = parts.path.rstrip("/")
    if path.endswith("/graph"):
        path = path[: -len("/graph")]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class Prometheus:
    def __init__(self, url: str, timeout: float = TIMEOUT_S) -> None:
        self.url = base_url(url)
        self.timeout = timeout

    def _get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=self.timeout) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:
            raise ClusterError(f"Prometheus at {self.url} answered HTTP {exc.code} to /api/v1/{path}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ClusterError(f"cannot reach Prometheus at {self.url}: {reason}") from None
        except ValueError:
            raise ClusterError(f"{self.url} does not answer like Prometheus (no JSON from /api/v1/{path})") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            raise ClusterError(f"Prometheus at {self.url} refused /api/v1/{path}: {error or 'no status'}")
        return body.get("data")

    def query(self, expr: str) -> list[Sample]:
        """An instant query's vector."""
        data = self._get("query", query=expr)
        out = []
        for item in (data or {}).get("result", []) if isinstance(data, dict) else []:
            metric = dict(item.get("metric", {}))
            try:
                value = float(item["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            out.append(Sample(metric.pop("__name__", ""), metric, value))
        return out

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing), each with ``labels``, ``annotations`` and ``state``."""
        data = self._get("alerts")
        alerts = data.get("alerts", []) if isinstance(data, dict) else []
        return [a for a in alerts if isinstance(a, dict) and isinstance(a.get("labels"), dict)]
