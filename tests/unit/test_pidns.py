"""Trainings in another pid namespace: NSpid parsing and the descendant walk on a fake /proc, the mapping of a
run's main process and workers, the Run, the tracked pids, the process table, and the cleaned hello."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import pytest

from testsupport.procs import wait_for
from trainmon import protocol as P
from trainmon.ingest import pidns
from trainmon.ingest.agent_server import AgentServer
from trainmon.monitor import Monitor
from trainmon.store.store import Store
from trainmon.view.extract import proc_rows
from trainmon.view.frames import NS_NOTE

MAIN, W1, W2, OTHER = 5000, 5001, 5002, 6000  # the monitor's pids; the training sees itself as 1, 7, 8


def _proc(root: Path, pid: int, nspid: list[int], children: dict[int, list[int]] | None = None) -> None:
    """A fake /proc/<pid>: a status with its NSpid line, and children per thread."""
    d = root / str(pid)
    (d / "task").mkdir(parents=True)
    (d / "status").write_text(f"Name:\tpython\nPid:\t{pid}\nNSpid:\t{' '.join(map(str, nspid))}\nPPid:\t0\n")
    for tid, kids in (children or {pid: []}).items():
        (d / "task" / str(tid)).mkdir()
        (d / "task" / str(tid) / "children").write_text(" ".join(map(str, kids)) + (" " if kids else ""))


@pytest.fixture
def fake_proc(tmp_path: Path) -> str:
    # The main (1 inside) has a worker started by its main thread and one by another thread; worker 7 has
    # a child of its own (pin-memory or a compile helper); 6000 is an unrelated process that is also "7" inside.
    _proc(tmp_path, MAIN, [MAIN, 1], {MAIN: [W1], MAIN + 10: [W2]})
    _proc(tmp_path, W1, [W1, 7], {W1: [W1 + 100]})
    _proc(tmp_path, W2, [W2, 8])
    _proc(tmp_path, W1 + 100, [W1 + 100, 9])
    _proc(tmp_path, OTHER, [OTHER, 7])
    return str(tmp_path)


def test_parse_nspid() -> None:
    assert pidns.parse_nspid("Name:\tx\nNSpid:\t4242\t17\t1\nPPid:\t1\n") == [4242, 17, 1]
    assert pidns.parse_nspid("NSpid:\t4242\n") == [4242]
    assert pidns.parse_nspid("Name:\tx\n") is None  # a kernel older than 4.1
    assert pidns.parse_nspid("NSpid:\tx y\n") is None
    assert pidns.parse_nspid("NSpid:\n") is None


def test_nspid_of_this_process() -> None:
    pids = pidns.nspid(os.getpid())
    assert pids is not None and pids[0] == os.getpid()
    assert pidns.nspid(1 << 30) is None  # no such process


def test_descendants_walk_every_thread_and_depth(fake_proc: str) -> None:
    assert sorted(pidns.children(MAIN, fake_proc)) == [W1, W2]
    assert sorted(pidns.descendants(MAIN, fake_proc)) == [W1, W2, W1 + 100]
    assert len(pidns.descendants(MAIN, fake_proc, limit=2)) == 2
    assert pidns.descendants(12345, fake_proc) == []  # gone


def test_map_main(fake_proc: str) -> None:
    assert pidns.map_main(MAIN, MAIN, fake_proc) == ("own", MAIN)
    assert pidns.map_main(1, MAIN, fake_proc) == ("mapped", MAIN)
    assert pidns.map_main(3, MAIN, fake_proc) == ("unmapped", None)  # the peer is not that process
    assert pidns.map_main(1, None, fake_proc) == ("unmapped", None)  # the peer is not known (remote TCP)
    assert pidns.map_main(1, 12345, fake_proc) == ("unmapped", None)  # gone


def test_map_own_namespace_reads_nothing(tmp_path: Path) -> None:
    assert pidns.map_main(MAIN, MAIN, str(tmp_path / "missing")) == ("own", MAIN)


def test_map_workers_only_among_descendants(fake_proc: str) -> None:
    # 7 is W1 (a descendant), never OTHER (also 7 inside, but not the main's child); 99 is nowhere.
    assert pidns.map_workers(MAIN, [7, 8, 99], fake_proc) == [W1, W2, 0]
    assert pidns.map_workers(MAIN, [], fake_proc) == []
    assert pidns.map_workers(12345, [7], fake_proc) == [0]


def test_socket_holders_and_tcp_inode(tmp_path: Path) -> None:
    for pid, links in {10: ["socket:[111]", "/dev/null"], 11: ["socket:[222]"], 12: ["socket:[111]"]}.items():
        (tmp_path / str(pid) / "fd").mkdir(parents=True)
        for fd, target in enumerate(links):
            os.symlink(target, tmp_path / str(pid) / "fd" / str(fd))
    (tmp_path / "self").mkdir()
    assert sorted(pidns.socket_holders(111, str(tmp_path))) == [10, 12]
    assert pidns.socket_holders(333, str(tmp_path)) == []
    assert len(pidns.socket_holders(111, str(tmp_path), limit=1)) <= 1
    table = tmp_path / "tcp"
    table.write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:A000 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 111 1\n"
    )
    assert pidns.tcp_inode(str(table), "0100007F:A000", "0100007F:1F90") == 111
    assert pidns.tcp_inode(str(table), "0100007F:A001", "0100007F:1F90") is None
    assert pidns.tcp_inode(str(tmp_path / "none"), "a", "b") is None


def test_pick_peer(fake_proc: str) -> None:
    assert pidns.pick_peer(MAIN, [W1, MAIN], fake_proc) == MAIN
    assert pidns.pick_peer(1, [W1, MAIN], fake_proc) == MAIN
    assert pidns.pick_peer(3, [W1, MAIN], fake_proc) == W1  # then map_main finds it is not that process
    assert pidns.pick_peer(3, [], fake_proc) is None


def test_clean_hello_drops_what_only_the_monitor_may_say() -> None:
    sent = {"pid": 1, "host": "h", "peer_pid": 4242, "pid_namespace": "mapped"}
    clean = P.clean_hello(sent)
    assert "peer_pid" not in clean and "pid_namespace" not in clean
    kept = P.clean_hello(sent, monitor=True)  # a recording the monitor wrote
    assert kept["peer_pid"] == 4242 and kept["pid_namespace"] == "mapped"
    bad = P.clean_hello({"pid": 1, "peer_pid": "x", "pid_namespace": "root"}, monitor=True)
    assert bad["peer_pid"] is None and bad["pid_namespace"] is None


def test_clean_info_drops_agent_sent_proc_pids() -> None:
    sent = {"workers": {"loader": 0, "pids": [7, 8], "proc_pids": [1, 2]}}
    assert P.clean_info(sent)["workers"] == {"loader": 0, "pids": [7, 8]}
    assert P.clean_info(sent, monitor=True)["workers"]["proc_pids"] == [1, 2]
    wrong_length = {"workers": {"loader": 0, "pids": [7, 8], "proc_pids": [1]}}
    assert "proc_pids" not in P.clean_info(wrong_length, monitor=True)["workers"]


def _store(namespace: str | None, peer: int | None, proc_pids: list[int] | None) -> Store:
    store = Store()
    hello: dict = {"pid": 1, "host": "h", "session": "s", "name": "train"}
    if namespace is not None:
        hello.update(pid_namespace=namespace, peer_pid=peer)
    store.hello(1, 0.0, hello)
    workers: dict = {"loader": 0, "pids": [7, 8]}
    if proc_pids is not None:
        workers["proc_pids"] = proc_pids
    store.info(1, 0.0, {"workers": workers})
    return store


def test_run_mapping() -> None:
    own = _store(None, None, None).runs[1]  # a recording from before the check: its pids were the monitor's
    assert (own.pid_namespace, own.proc_pid, own.pid, own.worker_pids()) == ("own", 1, 1, [7, 8])
    mapped = _store("mapped", MAIN, [W1, 0]).runs[1]
    assert (mapped.proc_pid, mapped.pid, mapped.agent_pid) == (MAIN, MAIN, 1)
    assert mapped.worker_pids() == [W1] and mapped.agent_worker_pids() == [7, 8]
    assert mapped.unmapped_worker_pids() == [8]
    unmapped = _store("unmapped", MAIN, None).runs[1]
    assert (unmapped.proc_pid, unmapped.pid, unmapped.worker_pids()) == (None, 1, [])
    assert unmapped.unmapped_worker_pids() == [7, 8]


def test_tracked_pids_are_the_monitors_only() -> None:
    monitor = Monitor(listen=False, sources=[])
    monitor.store = _store("mapped", MAIN, [W1, W2])
    assert monitor.tracked_pids() == {MAIN: "main", W1: "worker", W2: "worker"}
    monitor.store = _store("unmapped", None, None)
    assert monitor.tracked_pids() == {}  # never pid 1 (init here), 7 or 8
    monitor.store = _store(None, None, None)
    assert monitor.tracked_pids() == {1: "main", 7: "worker", 8: "worker"}


def test_process_table_rows() -> None:
    store = _store("mapped", MAIN, [W1, 0])
    store.sample(1.0, {f"proc.{MAIN}.rss_mb": 100.0, f"proc.{W1}.rss_mb": 50.0, "proc.1.rss_mb": 9.0})
    rows = {r.key: r for r in proc_rows(store, {}, 1.0, 3.0)}
    assert rows[str(MAIN)].role == "main" and rows[str(W1)].name.startswith("worker 0")
    assert rows["1"].role == "proc"  # pid 1 here is another process: not the run's
    assert rows["ns1-8"].note == NS_NOTE and rows["ns1-8"].rss_mb != rows["ns1-8"].rss_mb
    store = _store("unmapped", None, None)
    store.sample(1.0, {"proc.1.rss_mb": 9.0})
    rows = {r.key: r for r in proc_rows(store, {}, 1.0, 3.0)}
    assert rows["1"].role == "proc"
    noted = [(k, r.role) for k, r in rows.items() if r.note]
    assert noted == [("ns1-1", "main"), ("ns1-7", "worker"), ("ns1-8", "worker")]


class _Sink:
    def __init__(self) -> None:
        self.hellos: list[dict] = []
        self.infos: list[dict] = []

    def hello(self, run_id, t, hello) -> None:
        self.hellos.append(hello)

    def info(self, run_id, t, info) -> None:
        self.infos.append(info)

    def events(self, *a) -> None: ...
    def closed(self, *a) -> None: ...
    def sample(self, *a) -> None: ...
    def meta(self, *a) -> None: ...


@pytest.mark.parametrize(("pid", "namespace"), [(os.getpid(), "own"), (1, "unmapped")])
def test_server_sets_peer_pid_and_namespace(pid: int, namespace: str) -> None:
    """Over the Unix socket: the peer's own pid is its namespace; a hello claiming pid 1 from a process whose
    innermost pid is not 1 is not mapped, and an agent-sent peer_pid never gets through."""
    sink = _Sink()
    with tempfile.TemporaryDirectory() as d:
        server = AgentServer(sink, os.path.join(d, "m.sock"), token=None)
        server.start()
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(server.address)
                hello = {"pid": pid, "host": "h", "peer_pid": 1, "pid_namespace": "own"}
                sock.sendall(P.PREAMBLE + P.json_frame(P.F_HELLO, hello))
                sock.sendall(P.json_frame(P.F_INFO, {"workers": {"loader": 0, "pids": [7], "proc_pids": [1]}}))
                assert wait_for(lambda: sink.infos, 10)
        finally:
            server.stop()
    assert sink.hellos[0]["peer_pid"] == os.getpid()
    assert sink.hellos[0]["pid_namespace"] == namespace
    expected = {"loader": 0, "pids": [7]} if namespace == "own" else {"loader": 0, "pids": [7], "proc_pids": [0]}
    assert sink.infos[0]["workers"] == expected


@pytest.mark.parametrize(("pid", "namespace"), [(os.getpid(), "own"), (1, "unmapped")])
def test_loopback_tcp_peer_found_by_its_socket(pid: int, namespace: str) -> None:
    """Over loopback TCP the peer's pid comes from its socket's inode (/proc/net/tcp, then /proc/*/fd)."""
    sink = _Sink()
    server = AgentServer(sink, "127.0.0.1:0", token=None)
    server.start()
    try:
        host, port = server.address.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(P.PREAMBLE + P.json_frame(P.F_HELLO, {"pid": pid, "host": "h"}))
            assert wait_for(lambda: sink.hellos, 10)
    finally:
        server.stop()
    assert (sink.hellos[0]["peer_pid"], sink.hellos[0]["pid_namespace"]) == (os.getpid(), namespace)
