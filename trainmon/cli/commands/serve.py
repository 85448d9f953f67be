"""``trainmon serve``: the live screen (or a replay) in a web browser through textual-serve, loopback unless told."""

from __future__ import annotations

import argparse
import os
import sys

from trainmon.cli.command import Command
from trainmon.cli.errors import CliError
from trainmon.cli.monitor_setup import interval


class Serve(Command):
    name = "serve"
    help = "the live screen (or a replay) in a web browser, via textual-serve"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="bind address (default loopback)")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--allow-remote",
            action="store_true",
            help="allow a non-loopback --host (anyone who can reach it sees your jobs: prefer an SSH tunnel)",
        )
        parser.add_argument(
            "--replay", metavar="FILE", default=None, help="serve a recording instead of the live monitor"
        )

    def run(self, args: argparse.Namespace) -> int:
        import shlex

        try:
            from textual_serve.server import Server
        except ImportError:
            raise CliError("trainmon serve needs textual-serve: pip install textual-serve") from None
        _check_bind_address(args.host, args.port, args.allow_remote)
        command = [sys.executable, "-m", "trainmon", *_screen_arguments(args)]
        print(
            f"trainmon: serving on http://{args.host}:{args.port} (one screen per browser tab)",
            file=sys.stderr,
            flush=True,
        )
        Server(shlex.join(command), host=args.host, port=args.port, title="trainmon").serve()
        return 0


def _check_bind_address(host: str, port: int, allow_remote: bool) -> None:
    import ipaddress
    import socket

    try:
        loopback = ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        raise CliError(f"cannot resolve --host {host}") from None
    if not loopback and not allow_remote:
        raise CliError(
            f"{host} is not a loopback address: pass --allow-remote, or better, tunnel over SSH "
            f"(ssh -L {port}:127.0.0.1:{port} HOST)"
        )
    if not 0 < port < 65536:
        raise CliError(f"--port must be 1-65535, got {port}")


def _screen_arguments(args: argparse.Namespace) -> list[str]:
    """The ``trainmon`` arguments of the screen each browser tab runs: this config, then the replay or live monitor."""
    arguments = ["--config", args.config] if args.config else []
    if args.replay:
        if not os.path.isfile(args.replay):
            raise CliError(f"no such file: {args.replay}")
        return [*arguments, "replay", os.path.abspath(args.replay)]
    return [*arguments, *(["--listen", args.listen] if args.listen else []), "--interval", str(interval(args))]
