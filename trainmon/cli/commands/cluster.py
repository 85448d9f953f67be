"""``trainmon cluster --prometheus URL``: every node and rank of every job, from Prometheus."""

from __future__ import annotations

import argparse
import sys

from trainmon.cli.command import Command
from trainmon.cli.errors import CliError
from trainmon.cli.options import positive_seconds
from trainmon.cli.terminal import use_tui


class ClusterCommand(Command):
    name = "cluster"
    help = "every node and rank of every job, from the Prometheus that scrapes the monitors"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--prometheus", dest="cluster_url", metavar="URL", default=None, help="the Prometheus server's URL"
        )
        parser.add_argument(
            "--refresh", type=positive_seconds, default=2.0, metavar="S", help="query every S seconds (default 2)"
        )
        parser.add_argument("--once", action="store_true", help="print the table once and exit (no screen)")

    def run(self, args: argparse.Namespace) -> int:
        from trainmon.cluster.prom import ClusterError, Prometheus
        from trainmon.cluster.rows import table_text
        from trainmon.cluster.state import fetch

        if not args.cluster_url:
            raise CliError("cluster needs --prometheus URL (the server that scrapes the trainmon monitors)")
        try:
            prom = Prometheus(args.cluster_url)
            th = args.settings.thresholds  # a config file's, as every monitor judges with
            state = fetch(prom, th)  # a Prometheus that cannot be read fails here, in one line, before any screen
        except ClusterError as exc:
            raise CliError(str(exc)) from None
        if args.once or not use_tui():
            sys.stdout.write(table_text(state))
            return 0
        from trainmon.tui.cluster import run_cluster

        return run_cluster(prom.url, args.refresh, th)
