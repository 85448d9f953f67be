"""Security: nobody but the user can talk to the monitor, the agent talks to nobody else, no secret
leaves the training process. Other users are real: a forked child drops to uid 65534 (nobody)."""

from __future__ import annotations

import ast
import json
import os
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from testsupport.paths import ROOT, TINY
from testsupport.procs import PY, child_env, start_python, start_recorder, stop, wait_for
from trainmon import protocol as P
from trainmon.agent._redact import MASK, redact_argv
from trainmon.ingest import agent_server as agents_mod
from trainmon.ingest.agent_server import AddressError, AgentServer
from trainmon.record.format import FILE_HEADER, iter_chunks
from trainmon.store.store import Store

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")


def as_other_user(fn: Callable[[], object], timeout: float = 20.0) -> object:
    """Run ``fn`` in a forked child that has become uid/gid 65534; return its JSON-able result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            result = fn()
        except BaseException as exc:
            result = {"error": repr(exc)}
        os.write(w, json.dumps(result).encode())
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + timeout
    chunks = []
    with os.fdopen(r, "rb") as fh:
        chunks.append(fh.read())
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        assert time.monotonic() < deadline, "the other-user child hung"
        time.sleep(0.05)
    return json.loads(b"".join(chunks))


def _connect_and_hello(path: str) -> Callable[[], dict]:
    def run() -> dict:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5)
        try:
            sock.connect(path)
        except OSError as exc:
            return {"connected": False, "errno": exc.errno}
        try:
            sock.sendall(P.PREAMBLE + P.json_frame(P.F_HELLO, {"pid": os.getpid(), "host": "intruder"}))
            while sock.recv(4096):
                pass
            return {"connected": True, "closed_by_monitor": True}
        except (ConnectionResetError, BrokenPipeError):
            return {"connected": True, "closed_by_monitor": True}
        except TimeoutError:
            return {"connected": True, "closed_by_monitor": False}

    return run


@pytest.fixture
def server_factory():
    servers: list[AgentServer] = []

    def make(address: str | None, **kwargs) -> tuple[AgentServer, Store]:
        store = Store()
        server = AgentServer(store, address, **kwargs)
        server.start()
        servers.append(server)
        return server, store

    yield make
    for server in servers:
        server.stop()


# ------------------------------------------------------------------ the Unix socket


def test_default_socket_is_a_private_unix_socket(monkeypatch, tmp_path, server_factory):
    monkeypatch.delenv("TRAINMON_ADDR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    server, _ = server_factory(None)
    assert server.address == str(tmp_path / "trainmon" / "monitor.sock")
    assert P.parse_tcp(server.address) is None  # TCP only when asked
    assert stat.S_IMODE(os.stat(tmp_path / "trainmon").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(server.address).st_mode) == 0o600


def test_default_directory_without_xdg_is_per_user_and_tightened(monkeypatch, server_factory):
    base = tempfile.mkdtemp(prefix="tm-sec-", dir="/tmp")
    monkeypatch.delenv("TRAINMON_ADDR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", base)
    mine = os.path.join(base, f"trainmon-{os.getuid()}")
    os.mkdir(mine, 0o755)  # left too open (by an older version, or a umask)
    server, _ = server_factory(None)
    assert server.address == os.path.join(mine, "monitor.sock")
    assert stat.S_IMODE(os.stat(mine).st_mode) == 0o700


@needs_root
def test_a_socket_directory_owned_by_someone_else_is_refused(sock_dir):
    theirs = os.path.join(sock_dir, "theirs")
    os.mkdir(theirs, 0o700)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(AddressError, match="belongs to uid 65534"):
        AgentServer(Store(), os.path.join(theirs, "m.sock")).bind()


@needs_root
def test_another_user_cannot_reach_the_default_socket(addr, server_factory):
    _server, store = server_factory(addr)
    result = as_other_user(_connect_and_hello(addr))
    assert result == {"connected": False, "errno": 13}  # EACCES: the 0700 directory and the 0600 socket
    assert store.runs == {}


@needs_root
def test_another_user_is_refused_by_peer_credentials(sock_dir, server_factory):
    # Open the filesystem layer on purpose (only in this test) so the uid check itself is what refuses.
    os.chmod(sock_dir, 0o755)
    path = os.path.join(sock_dir, "open.sock")
    server, store = server_factory(path)
    os.chmod(path, 0o666)
    result = as_other_user(_connect_and_hello(path))
    assert result == {"connected": True, "closed_by_monitor": True}
    assert store.runs == {} and server.rejected == 1
    assert server.connection_count == 0


def _fake_monitor_of_another_user(path: str, seconds: float) -> Callable[[], dict]:
    def run() -> dict:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        os.chmod(path, 0o666)
        listener.listen(16)
        listener.settimeout(0.2)
        connections = received = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            connections += 1
            conn.settimeout(1.0)
            try:
                while data := conn.recv(65536):
                    received += len(data)
            except OSError:
                pass
            conn.close()
        return {"connections": connections, "received": received}

    return run


@needs_root
def test_the_agent_never_reports_to_another_users_monitor(sock_dir):
    os.chmod(sock_dir, 0o777)
    path = os.path.join(sock_dir, "theirs.sock")
    code = (
        f"import json, time, trainmon.agent as a\na.attach({path!r})\n"
        "for _ in range(40):\n    a.step(); time.sleep(0.05)\n"
        "print(json.dumps({**a.stats(), 'refused': a._agent.sender.refused}))"
    )
    proc = None

    def start_agent() -> None:
        nonlocal proc
        wait_for(lambda: os.path.exists(path), 10)
        proc = start_python("-c", code)

    starter = threading.Thread(target=start_agent)
    starter.start()
    theirs = as_other_user(_fake_monitor_of_another_user(path, 4.0))
    starter.join()
    assert proc is not None
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err == "", err
    stats = json.loads(out)
    assert theirs["connections"] >= 1 and theirs["received"] == 0  # not one byte: not even the hello
    assert stats["connections"] == 0 and "uid 65534" in stats["refused"]


# ------------------------------------------------------------------ TCP


def test_tcp_listens_on_loopback_by_default(server_factory):
    server, _ = server_factory(":0")
    host, port = P.parse_tcp(server.address)
    assert host == "127.0.0.1" and port > 0
    assert server._listener.getsockname()[0] == "127.0.0.1"


def _tcp_connect_and_hello(host: str, port: int) -> Callable[[], dict]:
    def run() -> dict:
        sock = socket.create_connection((host, port), timeout=5)
        try:
            sock.sendall(P.PREAMBLE + P.json_frame(P.F_HELLO, {"pid": os.getpid(), "host": "intruder"}))
            while sock.recv(4096):
                pass
            return {"closed_by_monitor": True}
        except (ConnectionResetError, BrokenPipeError):
            return {"closed_by_monitor": True}
        except TimeoutError:
            return {"closed_by_monitor": False}
        finally:
            sock.close()

    return run


@needs_root
def test_loopback_tcp_without_a_token_refuses_other_users(monkeypatch, server_factory):
    monkeypatch.delenv("TRAINMON_TOKEN", raising=False)
    server, store = server_factory("127.0.0.1:0")
    host, port = P.parse_tcp(server.address)
    assert as_other_user(_tcp_connect_and_hello(host, port)) == {"closed_by_monitor": True}
    assert store.runs == {} and server.rejected == 1
    res = subprocess.run(
        [PY, TINY, "10", "1"], env=child_env(TRAINMON_ADDR=server.address), capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert wait_for(lambda: len(store.runs) == 1 and next(iter(store.runs.values())).steps.total == 10, 10)


def test_non_loopback_tcp_requires_a_token(monkeypatch):
    monkeypatch.delenv("TRAINMON_TOKEN", raising=False)
    with pytest.raises(AddressError, match="requires a token") as info:
        AgentServer(Store(), "0.0.0.0:0").bind()
    assert "SSH tunnel" in str(info.value)


def _non_loopback_ipv4() -> str | None:
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    return None


def _tiny(addr: str, steps: int, token: str | None) -> subprocess.Popen:
    env = {"TRAINMON_ADDR": addr, **({"TRAINMON_TOKEN": token} if token is not None else {})}
    return start_python(TINY, str(steps), "5", env=env)


def test_token_on_a_real_non_loopback_address(monkeypatch, server_factory):
    ip = _non_loopback_ipv4()
    if ip is None:
        pytest.skip("no non-loopback IPv4 address on this machine")
    compared = []
    real = agents_mod.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append(len(a))
        return real(a, b)

    monkeypatch.setattr(agents_mod.hmac, "compare_digest", spy)
    monkeypatch.setenv("TRAINMON_TOKEN", "right-token-5e1f")  # the server's token comes from the environment
    server, store = server_factory("0.0.0.0:0")
    port = P.parse_tcp(server.address)[1]
    addr = f"{ip}:{port}"
    procs = {
        "right": _tiny(addr, 30, "right-token-5e1f"),
        "wrong": _tiny(addr, 30, "wrong-token-0000"),
        "missing": _tiny(addr, 30, None),
    }
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and err == "", err  # refused agents train on, quietly
        results[name] = json.loads(out)
    assert wait_for(lambda: any(r.ended for r in store.runs.values()), 10)
    assert [r.pid for r in store.runs.values()] == [results["right"]["pid"]]
    (run,) = store.runs.values()
    assert run.steps.total == 30 and run.hello["peer"].startswith(ip + ":")  # it came over the real interface
    assert server.protocol_errors >= 2 and len(compared) >= 2  # wrong and right were compared in constant time


# ------------------------------------------------------------------ what leaves the process


FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "yaml"}


def test_no_pickle_no_eval_anywhere_in_trainmon():
    offences = []
    for path in sorted((ROOT / "trainmon").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.split(".")[0]]
            if set(names) & FORBIDDEN_MODULES:
                offences.append(f"{path}:{node.lineno} imports {names}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec"):
                offences.append(f"{path}:{node.lineno} calls {node.func.id}")
    assert not offences


@pytest.mark.parametrize(
    "argv, secret",
    [
        (["--db=host=h user=u password=pw-conninfo port=5"], "pw-conninfo"),
        (["https://host/data?token=tok-query&x=1"], "tok-query"),
        (['--config={"api_key": "k-json", "lr": 1}'], "k-json"),
        (["-H", "Authorization: Bearer eyJ-bearer.x"], "eyJ-bearer"),
        (["--hf-token", "hf-next-arg"], "hf-next-arg"),
        (["HF_TOKEN=hf-assign"], "hf-assign"),
        (["--data", "postgresql://u:pg-pass@h/db"], "pg-pass"),
    ],
)
def test_secrets_inside_arguments_are_redacted(argv, secret):
    out = redact_argv(argv)
    assert secret not in " ".join(out) and MASK in " ".join(out)


def test_ml_arguments_that_merely_mention_tokens_are_kept():
    argv = ["--max-tokens", "512", "--tokenizer", "bert-base", "--num-tokens=5"]
    assert redact_argv(argv) == argv


def _recording_text(path: str) -> bytes:
    data = Path(path).read_bytes()
    return data + b"".join(iter_chunks(data, []))  # the compressed bytes and what they inflate to


def test_environment_and_argv_secrets_never_reach_a_recording(addr, tmp_path):
    rec = str(tmp_path / "secrets.tmrec")
    env_secrets = {
        "MY_SECRET": "env-secret-4242",
        "AWS_SECRET_ACCESS_KEY": "aws-env-secret-99",
        "HF_TOKEN": "hf-env-token-77",
        "DATABASE_URL": "postgres://u:db-env-pw@h/db",
    }
    argv_secrets = [
        "--password=argv-pw-1",
        "--token",
        "argv-token-2",
        "WANDB_API_KEY=argv-wandb-3",
        "--data",
        "s3://user:argv-s3-4@bucket/x",
    ]
    recorder = start_recorder(addr, rec)
    try:
        res = subprocess.run(
            [PY, TINY, "20", "2", "0", "1", *argv_secrets],
            capture_output=True,
            text=True,
            timeout=60,
            env=child_env(TRAINMON_ADDR=addr, **env_secrets),
        )
        assert res.returncode == 0, res.stderr
        time.sleep(1.0)
    finally:
        stop(recorder)
    text = _recording_text(rec)
    assert text.startswith(FILE_HEADER) and b"tiny_agent.py" in text  # the hello is in there, readable
    for secret in [*env_secrets.values(), "argv-pw-1", "argv-token-2", "argv-wandb-3", "argv-s3-4"]:
        assert secret.encode() not in text, secret
    assert b"--password=***" in text
