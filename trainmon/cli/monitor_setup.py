"""The headless Monitor as the command line configures it: address, interval, watched pids, Prometheus exporter."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterable
from typing import TYPE_CHECKING

from trainmon.cli.errors import CliError

if TYPE_CHECKING:
    from trainmon.monitor import Monitor
    from trainmon.store.store import Ingest


def listen_address(args: argparse.Namespace) -> str | None:
    """--listen, else the config file's address (None: $TRAINMON_ADDR or the per-user socket)."""
    return args.listen or args.settings.address


def interval(args: argparse.Namespace) -> float:
    return args.interval or args.settings.interval


def prometheus_address(args: argparse.Namespace) -> str | None:
    return args.prometheus or args.settings.prometheus


def watched_pids(args: argparse.Namespace) -> list[int]:
    """The agentless jobs to watch (--pid, before and after the command name)."""
    return list(args.pid)


def private_address() -> tuple[str, tempfile.TemporaryDirectory]:
    """A socket in a fresh 0700 directory, for a monitor that only its own child commands connect to."""
    tmp = tempfile.TemporaryDirectory(prefix="trainmon-")
    os.chmod(tmp.name, 0o700)
    return os.path.join(tmp.name, "monitor.sock"), tmp


def start_monitor(
    args: argparse.Namespace,
    address: str | None,
    *,
    token: str | None = None,
    sinks: list[Ingest] | None = None,
    pids: Iterable[int] = (),
) -> Monitor:
    """A started Monitor on ``address``, watching ``pids``, with the Prometheus exporter when one is asked for."""
    from trainmon.ingest.agent_server import AddressError
    from trainmon.monitor import Monitor

    monitor = Monitor(
        address,
        interval=interval(args),
        token=token,
        sinks=sinks,
        thresholds=args.settings.thresholds,
        discover=False if getattr(args, "no_discover", False) else None,
    )
    for pid in pids:
        error = monitor.watch_pid(pid)
        if error:
            monitor.stop()
            raise CliError(error)
    try:
        monitor.start()
    except AddressError as exc:
        raise CliError(str(exc)) from None
    prometheus = prometheus_address(args)
    if prometheus:
        _serve_prometheus(monitor, prometheus)
    return monitor


def _serve_prometheus(monitor: Monitor, address: str) -> None:
    try:
        from trainmon.export.prometheus import serve
    except ImportError:
        monitor.stop()
        raise CliError("--prometheus needs prometheus-client: pip install 'trainmon[prometheus]'") from None
    try:
        host, port = serve(monitor, address)
    except (ValueError, OSError) as exc:
        monitor.stop()
        raise CliError(f"cannot serve Prometheus metrics on {address}: {exc}") from None
    print(f"trainmon: Prometheus metrics on http://{host}:{port}/metrics", file=sys.stderr, flush=True)
