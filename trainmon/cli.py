"""Command line: ``trainmon [live] | demo | run | record | report | replay | doctor``. Errors are one line, exit 2.

The live, demo, run and replay commands open the screen (trainmon.tui) when stdin, stdout and stderr are a
terminal, and print one status line per second otherwise (CI, pipes).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from trainmon import __version__

EXIT_USAGE = 2


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2 (or ``status``)."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


def _positive(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value}")
    return x


def build_parser() -> argparse.ArgumentParser:
    from trainmon.demo.scenarios import DEFAULT, SCENARIOS
    from trainmon.report.render import FORMATS

    p = argparse.ArgumentParser(prog="trainmon", description="What is the GPU waiting for, and what should I change?")
    p.add_argument("--version", action="version", version=f"trainmon {__version__}")
    p.add_argument(
        "--listen",
        metavar="ADDR",
        default=None,
        help="address agents connect to: a Unix socket path or HOST:PORT (default: $TRAINMON_ADDR or "
        "a per-user socket)",
    )
    p.add_argument("--interval", type=_positive, default=None, metavar="S", help="refresh interval (default 1 s)")
    p.add_argument(
        "--config", metavar="FILE", default=None, help="config file (default ~/.config/trainmon/config.toml)"
    )
    p.add_argument("--prometheus", metavar="HOST:PORT", default=None, help="serve Prometheus /metrics here")
    p.add_argument("--token", default=None, help="shared token required from agents on a non-loopback TCP address")
    p.add_argument(
        "--pid",
        type=int,
        action="append",
        default=[],
        metavar="PID",
        help="watch a job started without the agent (py-spy sampling); repeatable",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    d = sub.add_parser("demo", help="run a built-in demo training under the monitor")
    d.add_argument("--scenario", default=DEFAULT, choices=sorted(SCENARIOS), help=f"default: {DEFAULT}")
    d.add_argument("--seconds", type=_positive, default=None, help="override the scenario's duration")

    r = sub.add_parser("run", help="run CMD with the agent attached (no code change)")
    r.add_argument("--record", metavar="FILE", default=None, help="also record to FILE")
    r.add_argument("--no-tui", action="store_true", help="print status lines instead of the screen")
    r.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ...")

    rec = sub.add_parser("record", help="record headless to a file")
    rec.add_argument("--output", "-o", required=True, metavar="FILE")
    rec.add_argument("--duration", type=_positive, default=None, metavar="S", help="stop after S seconds")
    rec.add_argument("--listen", dest="sub_listen", metavar="ADDR", default=None)
    rec.add_argument("--interval", dest="sub_interval", type=_positive, default=None, metavar="S")
    rec.add_argument("--quiet", "-q", action="store_true", help="no status lines")
    rec.add_argument(
        "--prometheus",
        dest="sub_prometheus",
        metavar="HOST:PORT",
        default=None,
        help="serve Prometheus /metrics here while recording",
    )
    rec.add_argument(
        "--pid",
        dest="sub_pid",
        type=int,
        action="append",
        default=[],
        metavar="PID",
        help="also watch this process without the agent (py-spy sampling)",
    )

    sub.add_parser("doctor", help="what works here: NVML, py-spy/ptrace, socket directory, torch")

    rep = sub.add_parser("report", help="summarise a recording")
    rep.add_argument("file")
    rep.add_argument("--format", "-f", default="text", choices=FORMATS)

    sv = sub.add_parser("serve", help="the live screen (or a replay) in a web browser, via textual-serve")
    sv.add_argument("--host", default="127.0.0.1", help="bind address (default loopback)")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --host (anyone who can reach it sees your jobs: prefer an SSH tunnel)",
    )
    sv.add_argument("--replay", metavar="FILE", default=None, help="serve a recording instead of the live monitor")

    rp = sub.add_parser("replay", help="a recording through the live screen (status lines when not a terminal)")
    rp.add_argument("file")
    rp.add_argument("--speed", default="1", metavar="X", help="playback speed (default 1: real time)")
    return p


def _speed(value: str) -> float:
    """Checked here rather than by argparse, so a bad value is one error line like every other."""
    try:
        x = float(value)
    except ValueError:
        raise CliError(f"--speed: expected a factor such as 2 or 0.5, got {value!r}") from None
    if not 0 < x <= 1000:
        raise CliError(f"--speed: must be greater than 0 and at most 1000, got {value}")
    return x


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="trainmon: %(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    from trainmon.config import ConfigError, load

    try:
        args.settings = load(args.config)
    except ConfigError as exc:
        print(f"trainmon: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.settings.theme == "mono":
        os.environ.setdefault("NO_COLOR", "1")
    handlers: dict[str | None, Callable[[argparse.Namespace], int]] = {
        None: cmd_live,
        "demo": cmd_demo,
        "run": cmd_run,
        "record": cmd_record,
        "report": cmd_report,
        "doctor": cmd_doctor,
        "replay": cmd_replay,
        "serve": cmd_serve,
    }
    try:
        return handlers[args.command](args)
    except CliError as exc:
        print(f"trainmon: error: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


# ------------------------------------------------------------------ helpers


def _listen(args: argparse.Namespace) -> str | None:
    return getattr(args, "sub_listen", None) or args.listen or args.settings.address


def _interval(args: argparse.Namespace) -> float:
    return getattr(args, "sub_interval", None) or args.interval or args.settings.interval


def _start_monitor(
    address: str | None, interval: float, token: str | None, sinks=None, pids=(), args: argparse.Namespace | None = None
):
    from trainmon.monitor import Monitor
    from trainmon.sources.agents import AddressError

    settings = getattr(args, "settings", None)
    monitor = Monitor(
        address,
        interval=interval,
        token=token,
        sinks=sinks,
        thresholds=settings.thresholds if settings is not None else None,
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
    prometheus = None
    if args is not None:
        prometheus = getattr(args, "sub_prometheus", None) or args.prometheus or args.settings.prometheus
    if prometheus:
        try:
            from trainmon.export.prometheus import serve
        except ImportError:
            monitor.stop()
            raise CliError("--prometheus needs prometheus-client: pip install 'trainmon[prometheus]'") from None
        try:
            host, port = serve(monitor, prometheus)
        except (ValueError, OSError) as exc:
            monitor.stop()
            raise CliError(f"cannot serve Prometheus metrics on {prometheus}: {exc}") from None
        print(f"trainmon: Prometheus metrics on http://{host}:{port}/metrics", file=sys.stderr, flush=True)
    return monitor


def _pids(args: argparse.Namespace) -> list[int]:
    return [*args.pid, *getattr(args, "sub_pid", [])]


def _stop_event() -> threading.Event:
    stop = threading.Event()

    def handler(signum, frame):
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


def _print_status(snap) -> None:
    from trainmon.monitor import status_line

    try:
        print(status_line(snap), flush=True)
    except BrokenPipeError:
        pass


def use_tui() -> bool:
    """The screen needs a terminal on stdin (keys), stdout and stderr (Textual draws on stderr)."""
    if os.environ.get("TEXTUAL_DRIVER", "").startswith("textual.drivers.web_driver"):
        return True  # served to a browser by `trainmon serve`
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return all(stream is not None and stream.isatty() for stream in (sys.stdin, sys.stdout, sys.stderr))
    except (AttributeError, ValueError):
        return False


def _private_address() -> tuple[str, tempfile.TemporaryDirectory]:
    tmp = tempfile.TemporaryDirectory(prefix="trainmon-")
    os.chmod(tmp.name, 0o700)
    return os.path.join(tmp.name, "monitor.sock"), tmp


# ------------------------------------------------------------------ commands


def cmd_live(args: argparse.Namespace) -> int:
    monitor = _start_monitor(_listen(args), _interval(args), args.token, pids=_pids(args), args=args)
    if use_tui():
        from trainmon.tui.app import Job
        from trainmon.tui.run import run_tui
        from trainmon.view import LiveFeed

        hint = (
            f"listening on {monitor.address}: trainmon.agent.attach() in the script, or TRAINMON_ADDR={monitor.address}"
        )
        job = Job(
            notice=lambda: None if monitor.store.runs or monitor.extra_pids else hint,
            running=lambda: False,
            confirm_quit=False,
        )
        try:
            return run_tui(LiveFeed(monitor), job=job)
        finally:
            monitor.stop()
    print(
        f"trainmon {__version__}: listening on {monitor.address} — in training: trainmon.agent.attach() "
        f"(or TRAINMON_ADDR={monitor.address})",
        file=sys.stderr,
        flush=True,
    )
    monitor.listeners.append(_print_status)
    stop = _stop_event()
    try:
        stop.wait()
    finally:
        monitor.stop()
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    from trainmon.record import Recorder, RecorderError

    try:
        recorder = Recorder(args.output)
    except RecorderError as exc:
        raise CliError(str(exc)) from None
    try:
        monitor = _start_monitor(
            _listen(args), _interval(args), args.token, sinks=[recorder], pids=_pids(args), args=args
        )
    except CliError:
        recorder.close()
        raise
    print(f"trainmon: recording to {args.output}; agents connect to {monitor.address}", file=sys.stderr, flush=True)
    if not args.quiet:
        monitor.listeners.append(_print_status)
    stop = _stop_event()
    deadline = time.monotonic() + args.duration if args.duration else None
    try:
        while not stop.is_set():
            timeout = 0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic()))
            if stop.wait(timeout) or (deadline is not None and time.monotonic() >= deadline):
                break
            if recorder.error:
                break
    finally:
        monitor.stop()
        recorder.close()
    if recorder.error:
        print(f"trainmon: error: {recorder.error}", file=sys.stderr)
        return 1
    runs = len(monitor.store.runs)
    steps = sum(r.steps.total for r in monitor.store.runs.values())
    print(
        f"trainmon: wrote {args.output} ({recorder.bytes_written / 1024:.0f} KiB, {runs} run(s), {steps} steps)",
        file=sys.stderr,
    )
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from trainmon.doctor import format_doctor, run_doctor

    rows, can_run = run_doctor()
    text = format_doctor(rows, can_run)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0 if can_run else 1


def cmd_serve(args: argparse.Namespace) -> int:
    import ipaddress
    import shlex
    import socket as socket_mod

    try:
        from textual_serve.server import Server
    except ImportError:
        raise CliError("trainmon serve needs textual-serve: pip install textual-serve") from None
    try:
        loopback = ipaddress.ip_address(socket_mod.gethostbyname(args.host)).is_loopback
    except (OSError, ValueError):
        raise CliError(f"cannot resolve --host {args.host}") from None
    if not loopback and not args.allow_remote:
        raise CliError(
            f"{args.host} is not a loopback address: pass --allow-remote, or better, tunnel over SSH "
            f"(ssh -L {args.port}:127.0.0.1:{args.port} HOST)"
        )
    if not 0 < args.port < 65536:
        raise CliError(f"--port must be 1-65535, got {args.port}")
    command = [sys.executable, "-m", "trainmon"]
    if args.config:
        command += ["--config", args.config]
    if args.replay:
        if not os.path.isfile(args.replay):
            raise CliError(f"no such file: {args.replay}")
        command += ["replay", os.path.abspath(args.replay)]
    else:
        command += [*(["--listen", args.listen] if args.listen else []), "--interval", str(_interval(args))]
    print(
        f"trainmon: serving on http://{args.host}:{args.port} (one screen per browser tab)", file=sys.stderr, flush=True
    )
    Server(shlex.join(command), host=args.host, port=args.port, title="trainmon").serve()
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from trainmon.record import RecordingError, load_recording
    from trainmon.report import build_report, render

    try:
        store, warnings = load_recording(args.file)
    except RecordingError as exc:
        raise CliError(f"{args.file}: {exc}") from None
    report = build_report(store, args.settings.thresholds)
    if warnings:
        report["warnings"] = warnings
        for w in warnings:
            print(f"trainmon: warning: {args.file}: {w}", file=sys.stderr)
    sys.stdout.write(render(report, args.format, store=store))
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from trainmon.record import RecordingError, load_recording
    from trainmon.replay import ReplayFeed, status_lines

    speed = _speed(args.speed)
    try:
        store, warnings = load_recording(args.file)
    except RecordingError as exc:
        raise CliError(f"{args.file}: {exc}") from None
    for w in warnings:
        print(f"trainmon: warning: {args.file}: {w}", file=sys.stderr)
    feed = ReplayFeed(store, speed, name=os.path.basename(args.file))
    if not feed.ticks:
        raise CliError(f"{args.file}: the recording holds no samples to replay")
    if use_tui():
        from trainmon.tui.run import run_tui

        feed.clock.play()
        return run_tui(feed)
    for line in status_lines(feed):
        print(line, flush=True)
    return 0


def _require_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        raise CliError("the demo trains a real PyTorch model: install torch first (pip install torch)")


def _run_child(cmd: list[str], env: dict[str, str], monitor, on_tick: bool) -> int:
    try:
        child = subprocess.Popen(cmd, env=env)
    except FileNotFoundError:
        raise CliError(f"command not found: {cmd[0]}", status=127) from None
    except PermissionError:
        raise CliError(f"permission denied: {cmd[0]}", status=126) from None

    def forward(signum, frame):
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    monitor.track(child.pid, "child")
    if on_tick:
        monitor.listeners.append(_print_status)
    try:
        return child.wait()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _stop_child(child: subprocess.Popen, gentle: bool) -> None:
    """SIGINT first when the job deserves a chance to save (``trainmon run``), then SIGTERM, then SIGKILL."""
    steps = ((signal.SIGINT, 10.0), (signal.SIGTERM, 5.0)) if gentle else ((signal.SIGTERM, 5.0),)
    for sig, wait_s in steps:
        try:
            child.send_signal(sig)
            child.wait(timeout=wait_s)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue
    child.kill()
    child.wait()


def _run_child_tui(
    cmd: list[str], env: dict[str, str], monitor, what: str, running_notice: str | None, confirm_quit: bool
) -> tuple[int, str, bool]:
    """Run CMD under the screen; its output goes to a log file (it would tear the screen).

    Returns (CMD's exit status, the log's path, whether CMD was stopped because the user quit the screen).
    """
    from trainmon.tui.app import Job
    from trainmon.tui.run import run_tui
    from trainmon.view import LiveFeed

    fd, log_path = tempfile.mkstemp(prefix="trainmon-", suffix=".log")
    with os.fdopen(fd, "wb") as out:
        try:
            child = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        except FileNotFoundError:
            os.unlink(log_path)
            raise CliError(f"command not found: {cmd[0]}", status=127) from None
        except PermissionError:
            os.unlink(log_path)
            raise CliError(f"permission denied: {cmd[0]}", status=126) from None
        monitor.track(child.pid, "child")

        def notice() -> str | None:
            rc = child.poll()
            if rc is None:
                return running_notice
            return f"{what} exited with status {rc} · its output: {log_path} · q quits"

        feed = LiveFeed(monitor)
        stopped = False
        try:
            run_tui(feed, job=Job(notice, running=lambda: child.poll() is None, confirm_quit=confirm_quit))
        finally:
            feed.close()
            if child.poll() is None:
                stopped = True
                _stop_child(child, gentle=confirm_quit)
        return child.wait(), log_path, stopped


def cmd_demo(args: argparse.Namespace) -> int:
    from trainmon.demo.scenarios import SCENARIOS, command
    from trainmon.report import build_report, render

    _require_torch()
    scenario = SCENARIOS[args.scenario]
    tui = use_tui()
    address, tmp = _private_address()
    with tmp:
        monitor = _start_monitor(address, _interval(args), None, args=args)
        print(f"trainmon demo: scenario {scenario.name} — {scenario.description}", flush=True)
        cmd = command(scenario, ["--seconds", str(args.seconds)] if args.seconds else None)
        env = dict(os.environ, TRAINMON_ADDR=address, TRAINMON_DEMO_NAME=f"demo:{scenario.name}")
        try:
            if tui:
                status, log_path, stopped = _run_child_tui(
                    cmd,
                    env,
                    monitor,
                    "the demo training",
                    f"demo {scenario.name}: {scenario.description} (expected: {scenario.expected})",
                    False,
                )
                os.unlink(log_path)
                if stopped:
                    status = 0  # the user ended the demo: not a failure
            else:
                status = _run_child(cmd, env, monitor, on_tick=True)
            time.sleep(0.3)  # the agent's last batch arrives
        finally:
            monitor.stop()
        print()
        sys.stdout.write(render(build_report(monitor.store), "text"))
        print(f"(expected verdict for this scenario: {scenario.expected})")
    return status


def cmd_run(args: argparse.Namespace) -> int:
    from trainmon.launch import agent_env

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise CliError("nothing to run: trainmon run [--record FILE] [--no-tui] -- CMD ...")
    recorder = None
    if args.record:
        from trainmon.record import Recorder, RecorderError

        try:
            recorder = Recorder(args.record)
        except RecorderError as exc:
            raise CliError(str(exc)) from None
    tui = not args.no_tui and use_tui()
    log_path = None
    address, tmp = _private_address()
    with tmp:
        monitor = _start_monitor(address, _interval(args), None, sinks=[recorder] if recorder else None, args=args)
        try:
            with agent_env(address) as env:
                if tui:
                    status, log_path, _ = _run_child_tui(cmd, env, monitor, cmd[0], None, True)
                else:
                    status = _run_child(cmd, env, monitor, on_tick=True)
            time.sleep(0.3)
        finally:
            monitor.stop()
            if recorder is not None:
                recorder.close()
    if log_path is not None:
        print(f"trainmon: {' '.join(cmd)} exited with status {status}; its output: {log_path}", file=sys.stderr)
    if recorder is not None and recorder.error:
        print(f"trainmon: error: {recorder.error}", file=sys.stderr)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main())
