"""``trainmon serve``: the live screen (or a replay) in a web browser, one screen process per tab, loopback unless
told."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from trainmon.cli.command import Command
from trainmon.cli.errors import CliError
from trainmon.cli.monitor_setup import interval

DEFAULT_MAX_SCREENS = 4
LIVE_CAP_REASON = (
    "The live screen is already open in another tab: its monitor holds the agent address, and one monitor can. "
    "Close that tab and press Restart, or serve a recording (--replay) for several screens."
)


class ServeCommand(Command):
    name = "serve"
    help = "the live screen (or a replay) in a web browser, one screen per tab"

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
        parser.add_argument(
            "--max-screens",
            type=int,
            default=DEFAULT_MAX_SCREENS,
            metavar="N",
            help=f"most replay screens (tabs) at once (default {DEFAULT_MAX_SCREENS}); the live screen is one "
            "tab at a time, as its monitor holds the agent address",
        )

    def run(self, args: argparse.Namespace) -> int:
        try:
            from trainmon.serve import ScreenServer, ServeConfig, screen_environment
        except ImportError:
            raise CliError("trainmon serve needs textual-serve: pip install 'trainmon[serve]'") from None
        _check_bind_address(args.host, args.port, args.allow_remote)
        if args.max_screens < 1:
            raise CliError(f"--max-screens must be at least 1, got {args.max_screens}")
        env = screen_environment()
        if args.token:
            env["TRAINMON_TOKEN"] = args.token  # not on the screens' command lines, where ps shows it
        if args.replay:
            cap = args.max_screens
            cap_reason = (
                f"{cap} screen{'s are' if cap > 1 else ' is'} already open, the most this server runs at once "
                "(trainmon serve --max-screens): close a tab and press Restart."
            )
        else:
            cap, cap_reason = 1, LIVE_CAP_REASON
        config = ServeConfig(
            argv=[sys.executable, "-m", "trainmon", *_screen_arguments(args)],
            env=env,
            max_screens=cap,
            cap_reason=cap_reason,
        )
        logging.getLogger("trainmon.serve").setLevel(logging.INFO)

        def ready() -> None:
            print(
                f"trainmon: serving on http://{args.host}:{args.port} (one screen per browser tab, "
                f"{'at most ' + str(cap) if cap > 1 else 'one tab at a time'}; Ctrl-C stops)",
                file=sys.stderr,
                flush=True,
            )

        try:
            ScreenServer(config).serve(args.host, args.port, ready)
        except OSError as exc:
            why = os.strerror(exc.errno) if exc.errno else str(exc)
            raise CliError(f"cannot serve on {args.host}:{args.port}: {why}") from None
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
    pids = [f"--pid={pid}" for pid in args.pid]
    listen = ["--listen", args.listen] if args.listen else []
    discover = ["--no-discover"] if getattr(args, "no_discover", False) else []
    return [*arguments, *listen, *pids, *discover, "--interval", str(interval(args))]
