"""What a blocked thread waits on, from a fake /proc (real files and links under tmp_path): the system call and its
descriptor (read/recv, poll's pollfd array in the process's memory, select's bit sets, epoll's targets), unix and
netlink tables, network filesystems by mount, and the wait-channel fallback where the system call is not known."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from trainmon.sources.host.sockets import NET, OTHER, QUEUE, UNKNOWN, NetWaits

PID = 300
UNIX_INODE, TCP_INODE, NETLINK_INODE = 5001, 5002, 5003
POLL_AT = 4096  # where the fake memory holds a pollfd array
SELECT_AT = 8192
UNIX_TABLE = (
    "Num       RefCount Protocol Flags    Type St Inode Path\n"
    f"0000000000000000: 00000002 00000000 00010000 0001 01 {UNIX_INODE} /run/x.sock\n"
)
NETLINK_TABLE = (
    "sk               Eth Pid        Groups   Rmem     Wmem     Dump  Locks    Drops    Inode\n"
    f"0000000000000000 0   300        00000000 0        0        0     2        0        {NETLINK_INODE}\n"
)
MOUNTS = (
    "22 1 253:1 / / rw,relatime - ext4 /dev/vda1 rw\n"
    "77 22 0:50 / /mnt/data rw,relatime - nfs4 server:/export rw,vers=4.2\n"
    "78 22 0:51 / /mnt/bucket rw,relatime - fuse.mountpoint-s3 mountpoint-s3 rw\n"
)


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    base = tmp_path / str(PID)
    (base / "fd").mkdir(parents=True)
    (base / "fdinfo").mkdir()
    (base / "net").mkdir()
    (base / "net" / "unix").write_text(UNIX_TABLE)
    (base / "net" / "netlink").write_text(NETLINK_TABLE)
    (base / "mountinfo").write_text(MOUNTS)
    links = {
        3: f"socket:[{UNIX_INODE}]",
        4: f"socket:[{TCP_INODE}]",
        5: "pipe:[777]",
        6: "/mnt/data/shard-0001.tar",
        7: "/home/me/data/shard-0001.tar",
        8: f"socket:[{NETLINK_INODE}]",
        9: "anon_inode:[eventpoll]",
        10: "anon_inode:[eventpoll]",
        11: "/mnt/bucket/train/0001.jpg",
    }
    for fd, target in links.items():
        os.symlink(target, base / "fd" / str(fd))
        mnt = {6: 77, 11: 78}.get(fd, 22)
        (base / "fdinfo" / str(fd)).write_text(f"pos:\t0\nflags:\t02\nmnt_id:\t{mnt}\nino:\t1\n")
    (base / "fdinfo" / "9").write_text("pos:\t0\nflags:\t02\nmnt_id:\t15\ntfd:        4 events:       19 data: 4\n")
    (base / "fdinfo" / "10").write_text("pos:\t0\nflags:\t02\nmnt_id:\t15\ntfd:        5 events:       19 data: 5\n")
    mem = bytearray(12288)
    mem[POLL_AT : POLL_AT + 16] = struct.pack("ihhihh", 5, 1, 0, 4, 1, 0)  # pollfd {5 (pipe)}, {4 (tcp)}
    mem[SELECT_AT : SELECT_AT + 8] = (1 << 3).to_bytes(8, "little")  # select on fd 3 (unix) only
    (base / "mem").write_bytes(bytes(mem))
    return tmp_path


def thread(root: Path, tid: int, syscall: str, wchan: str = "0") -> str:
    task = root / str(PID) / "task" / str(tid)
    task.mkdir(parents=True, exist_ok=True)
    (task / "syscall").write_text(syscall + "\n")
    (task / "wchan").write_text(wchan)
    return str(tid)


def call(nr: int, *args: int) -> str:
    return " ".join([str(nr), *(hex(a) for a in (*args, 0, 0, 0, 0, 0, 0)[:6]), "0x7ffd0000", "0x7f000000"])


def classify(root: Path, syscall: str, *, arch: str = "x86_64", wchan: str = "0", holds: bool = False) -> int:
    net = NetWaits(str(root), arch=arch)
    net.begin_pass()
    return net.classify(PID, thread(root, 301, syscall, wchan), holds)


@pytest.mark.parametrize(
    ("syscall", "expected"),
    [
        (call(45, 4, 0x1000, 65536), NET),  # recvfrom on a TCP socket (http.client, urllib3: recv_into)
        (call(0, 4, 0x1000, 65536), NET),  # read() on it (a network filesystem client's way)
        (call(42, 4, 0x1000, 16), NET),  # connect() still in progress
        (call(45, 3, 0x1000, 65536), OTHER),  # recvfrom on a unix socket (resource_sharer, DataLoader queues)
        (call(45, 8, 0x1000, 65536), OTHER),  # a netlink socket
        (call(0, 5, 0x1000, 4), QUEUE),  # a pipe (a multiprocessing queue)
        (call(0, 6, 0x1000, 4), NET),  # a file on NFS
        (call(17, 11, 0x1000, 4), NET),  # pread on a FUSE object-store mount
        (call(0, 7, 0x1000, 4), OTHER),  # a file on the local disk
        (call(7, POLL_AT, 2, 30000), NET),  # poll with a timeout, as botocore's reads do: pipe and TCP socket
        (call(7, POLL_AT, 1, 30000), QUEUE),  # poll on the pipe alone (a DataLoader worker waiting for work)
        (call(7, POLL_AT, 1000, 30000), UNKNOWN),  # too many to read
        (call(23, 4, SELECT_AT, 0, 0), OTHER),  # select on the unix socket
        (call(232, 9, 0x1000, 8), NET),  # epoll_wait on a set holding the TCP socket (asyncio, aiohttp)
        (call(232, 10, 0x1000, 8), QUEUE),  # ... on a set holding the pipe only
        (call(202, 0x7F00, 0x89, 0), OTHER),  # futex: a lock, a condition, a queue
        (call(230, 1, 0, 0x7FFD), OTHER),  # clock_nanosleep: time.sleep
        ("running", OTHER),
        ("-1 0x7ffd 0x7f00", OTHER),  # blocked outside a system call
    ],
)
def test_by_system_call(proc: Path, syscall: str, expected: int) -> None:
    assert classify(proc, syscall) == expected


def test_arm64_numbers(proc: Path) -> None:
    assert classify(proc, call(207, 4, 0x1000, 4096), arch="aarch64") == NET  # recvfrom
    assert classify(proc, call(73, POLL_AT, 1, 0, 0), arch="aarch64") == QUEUE  # ppoll on the pipe
    assert classify(proc, call(98, 0x7F00, 0x89), arch="aarch64") == OTHER  # futex


@pytest.mark.parametrize(
    ("wchan", "holds", "expected"),
    [
        ("wait_woken", True, NET),  # TCP recv (sk_wait_data) in a process holding a network socket
        ("wait_woken", False, OTHER),
        ("sk_wait_data", False, NET),
        ("rpc_wait_bit_killable", False, NET),  # NFS
        ("request_wait_answer", False, NET),  # FUSE
        ("poll_schedule_timeout.constprop.0", True, UNKNOWN),  # a pipe or a socket: cannot tell
        ("do_epoll_wait", True, UNKNOWN),
        ("unix_stream_read_generic", True, OTHER),
        ("futex_do_wait", True, OTHER),
        ("hrtimer_nanosleep", True, OTHER),
        ("anon_pipe_read", True, OTHER),
        ("0", True, UNKNOWN),  # hidden by the kernel
    ],
)
def test_by_wait_channel_where_the_system_call_is_not_known(proc: Path, wchan: str, holds: bool, expected: int) -> None:
    assert classify(proc, call(45, 4, 0, 0), arch="unknown", wchan=wchan, holds=holds) == expected


def test_hidden_wait_channels_are_noted(proc: Path) -> None:
    net = NetWaits(str(proc), arch="unknown")
    assert net.classify(PID, thread(proc, 302, "running", "0")) == UNKNOWN
    assert PID in net.wchan_hidden
    net.forget(PID)
    assert PID not in net.wchan_hidden


def test_network_sockets_held(proc: Path) -> None:
    net = NetWaits(str(proc))
    assert net.network_sockets([PID, 99999]) == {PID: 1, 99999: None}  # the TCP one; unix and netlink are not


def test_a_new_socket_is_looked_up_once_the_tables_are_read_again(proc: Path) -> None:
    net = NetWaits(str(proc))
    net.begin_pass()
    tid = thread(proc, 303, call(45, 12, 0, 0))
    os.symlink("socket:[6001]", proc / str(PID) / "fd" / "12")
    (proc / str(PID) / "net" / "unix").write_text(UNIX_TABLE + "0000000000000001: 00000002 0 0 0001 01 6001\n")
    assert net.classify(PID, tid) == OTHER  # a new unix socket: found once the table is read again
    os.symlink("socket:[6002]", proc / str(PID) / "fd" / "13")
    assert net.classify(PID, thread(proc, 304, call(45, 13, 0, 0))) == NET  # not in the tables: TCP or UDP
