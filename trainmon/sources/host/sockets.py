"""What a blocked thread waits on: the network (a socket, a network filesystem) or something else.

``/proc/<pid>/io`` ``rchar`` counts read() only: HTTP clients and object-store SDKs (urllib3, requests, boto3,
fsspec, http.client) read sockets with recv()/recv_into(), so their remote reads never show there. The kernel
tells instead where each blocked thread sleeps:

- ``/proc/<pid>/task/<tid>/syscall`` (readable where ptrace would be allowed): the system call and its
  arguments. A read, recv, send or connect names its descriptor; poll and select name an array in the
  process's memory (``/proc/<pid>/mem``, a few bytes); epoll names an epoll descriptor whose targets
  ``/proc/<pid>/fdinfo`` lists. A descriptor is a network one when ``/proc/<pid>/fd/<n>`` is a
  ``socket:[inode]`` that the process's ``/proc/<pid>/net/{unix,netlink}`` do not list (a TCP or UDP socket), or a
  file on a network filesystem (NFS, CIFS, Ceph, FUSE: ``fdinfo`` ``mnt_id`` → ``mountinfo``). The TCP tables
  themselves are never read: ``/proc/net/tcp`` walks the kernel's whole connection hash (tens of ms a read on a
  host with a large one), the unix and netlink tables are small.
- ``/proc/<pid>/task/<tid>/wchan`` (readable where the process may be inspected): the kernel function it sleeps
  in. TCP receives sleep in ``wait_woken`` (``sk_wait_data``), unix sockets in ``unix_stream_read_generic``,
  poll in ``poll_schedule_timeout``. Used when the system call cannot be read; poll and epoll then stay
  unresolved, since pipes and sockets sleep alike there. ``0`` where the kernel hides it.

Standard library only, never raises: every read that fails gives UNKNOWN or OTHER.
"""

from __future__ import annotations

import os
import platform
import struct
import threading
from dataclasses import dataclass, field

NET = 1  # waits on a socket or a network filesystem
QUEUE = 2  # waits on pipes only: a multiprocessing queue (a DataLoader worker's index queue: it is ahead)
OTHER = 0  # waits on something else (a lock, a sleep, a local file), or runs
UNKNOWN = -1  # blocked, but on what cannot be told (poll without access to the system call, hidden wchan)

_READ_MAX = 4096
_MAX_POLL_FDS = 64  # poll/select sets larger than this are not read (a worker's socket waits poll one or two)
_MAX_FDS = 4096  # descriptors scanned per process for its connections
_KNOWN_MAX = 4096  # network socket inodes remembered, until this many
_REFRESHES = 8  # unix/netlink table reads per pass and namespace at most (one per new socket seen)

# System call numbers (arch/*/entry/syscalls): x86-64, and the generic table arm64 uses.
_SYSCALLS: dict[str, dict[str, tuple[int, ...]]] = {
    "x86_64": {
        "fd": (0, 1, 17, 18, 19, 20, 40, 42, 44, 45, 46, 47, 295, 296, 299, 307),  # read…writev, sendfile, connect…
        "poll": (7, 271),  # poll, ppoll
        "select": (23, 270),  # select, pselect6
        "epoll": (232, 281, 441),  # epoll_wait, epoll_pwait, epoll_pwait2
    },
    "aarch64": {
        "fd": (63, 64, 65, 66, 67, 68, 69, 70, 71, 203, 206, 207, 211, 212, 243, 269),
        "poll": (73,),
        "select": (72,),
        "epoll": (22, 441),
    },
}
_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())

# Where a thread sleeps on the network, by kernel function (the part before a ".constprop.0"-like suffix).
# Where a thread sleeps reading a pipe (a multiprocessing queue's read end, once poll said it is readable or without
# a timeout).
PIPE_WCHANS = frozenset({"pipe_read", "pipe_wait", "pipe_read_wait"})
NET_WCHANS = frozenset(
    {
        "sk_wait_data",
        "tcp_recvmsg",
        "tcp_recvmsg_locked",
        "inet_wait_for_connect",
        "__inet_stream_connect",
        "sk_stream_wait_memory",
        "sk_stream_wait_connect",
        # network filesystems: NFS and SunRPC, FUSE (s3fs, gcsfuse, mountpoint-s3), CIFS
        "rpc_wait_bit_killable",
        "nfs_wait_bit_killable",
        "nfs4_wait_clnt_recover",
        "request_wait_answer",
        "fuse_wait_answer",
        "wait_for_response",
        "cifs_wait_mid_response",
    }
)
# Generic sleeps that TCP receives use (sk_wait_data calls wait_woken): network waits only in a process that holds
# a network socket.
GENERIC_NET_WCHANS = frozenset({"wait_woken"})
# Sleeps that could be on a socket or on anything else (pipes, eventfds): unresolved without the system call.
MULTIPLEX_WCHANS = frozenset(
    {"poll_schedule_timeout", "do_poll", "do_sys_poll", "do_select", "core_sys_select", "do_epoll_wait", "ep_poll"}
)
NETWORK_FS = frozenset({"nfs", "nfs4", "cifs", "smb3", "ceph", "9p", "lustre", "gpfs", "glusterfs", "beegfs", "afs"})


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, _READ_MAX)
    finally:
        os.close(fd)


@dataclass
class _NetNs:
    local: set[int] = field(default_factory=set)  # unix and netlink socket inodes at the last refresh
    network: set[int] = field(default_factory=set)  # socket inodes missing from a refresh after they were seen
    refreshed_pass: int = -1
    refreshes: int = 0  # in that pass


class NetWaits:
    """Classifies what blocked threads wait on, per process.

    ``begin_pass()`` before each round of observations: a socket inode in neither cached set (a new socket)
    re-reads that network namespace's unix and netlink tables (a few per pass at most); one still missing then
    is a network socket. Per-request HTTP clients open a new one for every sample; a read is a fraction of a ms.
    """

    def __init__(self, proc_root: str = "/proc", arch: str = _ARCH) -> None:
        self.proc_root = proc_root.rstrip("/") or "/"
        self.syscalls = _SYSCALLS.get(arch)  # None on other architectures: wait channels only
        self.syscall_denied: set[int] = set()  # pids whose syscall file cannot be read: wchan only
        self.wchan_hidden: set[int] = set()  # pids whose wchan reads "0" while blocked
        self._ns: dict[str, _NetNs] = {}
        self._pid_ns: dict[int, str] = {}
        self._mounts: dict[int, tuple[int, dict[int, str]]] = {}  # pid → (pass read, mount id → filesystem type)
        self._pass = 0
        self._lock = threading.Lock()  # the state sampler classifies, sample() counts connections

    # ---- public ----------------------------------------------------------------------------------------

    def begin_pass(self) -> None:
        with self._lock:
            self._pass += 1

    def forget(self, pid: int) -> None:
        with self._lock:
            self.syscall_denied.discard(pid)
            self.wchan_hidden.discard(pid)
            self._mounts.pop(pid, None)
            key = self._pid_ns.pop(pid, None)
            if key is not None and key not in self._pid_ns.values():
                self._ns.pop(key, None)

    def classify(self, pid: int, tid: str, holds_network: bool = False) -> int:
        """NET, QUEUE, OTHER or UNKNOWN for one blocked thread (call it for threads not running)."""
        with self._lock:
            return self._classify(pid, tid, holds_network)

    def _classify(self, pid: int, tid: str, holds_network: bool) -> int:
        if self.syscalls is not None and pid not in self.syscall_denied:
            try:
                data = _read(f"{self.proc_root}/{pid}/task/{tid}/syscall")
            except PermissionError:
                self.syscall_denied.add(pid)
            except OSError:
                return OTHER  # the thread exited
            else:
                return self._by_syscall(pid, data)
        return self._by_wchan(pid, tid, holds_network)

    def network_sockets(self, pids: list[int]) -> dict[int, int | None]:
        """Network (not unix, not netlink) sockets among each process's descriptors, inherited ones included
        (None where its fds cannot be read)."""
        with self._lock:
            self._pass += 1
            return {pid: self._network_sockets(pid) for pid in pids}

    def _network_sockets(self, pid: int) -> int | None:
        fd_dir = f"{self.proc_root}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            return None
        count = 0
        for fd in fds[:_MAX_FDS]:
            try:
                inode = _socket_inode(os.readlink(f"{fd_dir}/{fd}"))
            except OSError:
                continue
            if inode is not None and self._is_network_socket(pid, inode):
                count += 1
        return count

    # ---- by system call ------------------------------------------------------------------------------------

    def _by_syscall(self, pid: int, data: bytes) -> int:
        parts = data.split()
        if not parts or parts[0] in (b"running", b"-1"):
            return OTHER
        try:
            nr = int(parts[0])
            args = [int(a, 16) for a in parts[1:7]]
        except ValueError:
            return OTHER
        calls = self.syscalls or {}
        if len(args) < 3:
            return OTHER
        if nr in calls["fd"]:
            return NET if self._fd_is_net(pid, args[0]) else QUEUE if self._fd_is_pipe(pid, args[0]) else OTHER
        if nr in calls["poll"]:
            fds = self._poll_fds(pid, args[0], args[1])
        elif nr in calls["select"]:
            fds = self._select_fds(pid, args[0], args[1], args[2])
        elif nr in calls["epoll"]:
            fds = self._epoll_fds(pid, args[0])
        else:
            return OTHER
        if fds is None:
            return UNKNOWN
        if any(self._fd_is_net(pid, fd) for fd in fds):
            return NET
        return QUEUE if fds and all(self._fd_is_pipe(pid, fd) for fd in fds) else OTHER

    def _poll_fds(self, pid: int, addr: int, nfds: int) -> list[int] | None:
        if not 0 < nfds <= _MAX_POLL_FDS:
            return None
        raw = self._mem(pid, addr, 8 * nfds)  # struct pollfd {int fd; short events; short revents;}
        if raw is None:
            return None
        return [fd for (fd,) in struct.iter_unpack("i4x", raw) if fd >= 0]

    def _select_fds(self, pid: int, nfds: int, readfds: int, writefds: int) -> list[int] | None:
        if not 0 < nfds <= _MAX_POLL_FDS * 16:
            return None
        size = (nfds + 63) // 64 * 8
        out: set[int] = set()
        for addr in (readfds, writefds):
            if not addr:
                continue
            raw = self._mem(pid, addr, size)
            if raw is None:
                return None
            bits = int.from_bytes(raw, "little")
            out.update(i for i in range(nfds) if bits >> i & 1)
        return sorted(out)

    def _epoll_fds(self, pid: int, epfd: int) -> list[int] | None:
        try:
            data = _read(f"{self.proc_root}/{pid}/fdinfo/{epfd}")
        except OSError:
            return None
        fds = []
        for line in data.splitlines():
            if line.startswith(b"tfd:"):
                try:
                    fds.append(int(line.split()[1]))
                except (IndexError, ValueError):
                    continue
        return fds

    def _mem(self, pid: int, addr: int, size: int) -> bytes | None:
        try:
            fd = os.open(f"{self.proc_root}/{pid}/mem", os.O_RDONLY)
        except OSError:
            return None
        try:
            raw = os.pread(fd, size, addr)
        except (OSError, OverflowError, ValueError):
            return None
        finally:
            os.close(fd)
        return raw if len(raw) == size else None

    # ---- descriptors -----------------------------------------------------------------------------------------

    def _fd_is_pipe(self, pid: int, fd: int) -> bool:
        try:
            return os.readlink(f"{self.proc_root}/{pid}/fd/{fd}").startswith("pipe:")
        except OSError:
            return False

    def _fd_is_net(self, pid: int, fd: int) -> bool:
        try:
            link = os.readlink(f"{self.proc_root}/{pid}/fd/{fd}")
        except OSError:
            return False
        if link.startswith("/"):
            return self._on_network_fs(pid, fd)
        inode = _socket_inode(link)
        if inode is None:
            return False  # a pipe, an eventfd, an anonymous inode
        return self._is_network_socket(pid, inode)

    def _is_network_socket(self, pid: int, inode: int) -> bool:
        ns = self._netns(pid)
        if inode in ns.network:
            return True
        if inode in ns.local or not self._refresh(pid, ns) or inode in ns.local:
            return False  # a unix or netlink socket, or a new one the tables are read for next pass
        if len(ns.network) >= _KNOWN_MAX:
            ns.network.clear()
        ns.network.add(inode)
        return True

    def _on_network_fs(self, pid: int, fd: int) -> bool:
        try:
            info = _read(f"{self.proc_root}/{pid}/fdinfo/{fd}")
        except OSError:
            return False
        mnt_id = next((line.split()[1:2] for line in info.splitlines() if line.startswith(b"mnt_id:")), None)
        if not mnt_id or not mnt_id[0].isdigit():
            return False
        mount = int(mnt_id[0])
        cached = self._mounts.get(pid)
        if cached is None or (mount not in cached[1] and cached[0] != self._pass):
            cached = self._mounts[pid] = (self._pass, _read_mounts(f"{self.proc_root}/{pid}/mountinfo"))
        fstype = cached[1].get(mount, "")
        return fstype in NETWORK_FS or fstype == "fuse" or fstype.startswith("fuse.")

    # ---- network namespaces and their socket tables -----------------------------------------------------------

    def _netns(self, pid: int) -> _NetNs:
        key = self._pid_ns.get(pid)
        if key is None:
            try:
                key = os.readlink(f"{self.proc_root}/{pid}/ns/net")
            except OSError:
                key = f"pid:{pid}"  # no namespace link (old kernel, fake tree): the pid's own tables
            self._pid_ns[pid] = key
        ns = self._ns.get(key)
        if ns is None:
            ns = self._ns[key] = _NetNs()
        return ns

    def _refresh(self, pid: int, ns: _NetNs) -> bool:
        """Re-read the namespace's unix and netlink tables, at most _REFRESHES times per pass; False past that, or
        when they cannot be read (then nothing is called a network socket)."""
        if ns.refreshed_pass != self._pass:
            ns.refreshed_pass, ns.refreshes = self._pass, 0
        if ns.refreshes >= _REFRESHES:
            return False
        ns.refreshes += 1
        local = read_local_sockets(f"{self.proc_root}/{pid}/net")
        if local is None:
            return False
        ns.local = local
        return True

    # ---- by wait channel ------------------------------------------------------------------------------------

    def _by_wchan(self, pid: int, tid: str, holds_network: bool) -> int:
        try:
            raw = _read(f"{self.proc_root}/{pid}/task/{tid}/wchan")
        except OSError:
            return UNKNOWN
        name = raw.decode("ascii", "replace").strip().split(".", 1)[0]
        if name in ("", "0"):
            self.wchan_hidden.add(pid)
            return UNKNOWN
        if name in NET_WCHANS or (name in GENERIC_NET_WCHANS and holds_network):
            return NET
        if name in PIPE_WCHANS:
            return QUEUE
        if name in MULTIPLEX_WCHANS:
            return UNKNOWN
        return OTHER


def _socket_inode(link: str) -> int | None:
    if not link.startswith("socket:[") or not link.endswith("]"):
        return None
    try:
        return int(link[8:-1])
    except ValueError:
        return None


def read_local_sockets(net_dir: str) -> set[int] | None:
    """Inodes of the unix and netlink sockets in ``net_dir`` (None when the unix table cannot be read)."""
    out: set[int] = set()
    for name, column in (("unix", 6), ("netlink", 9)):
        try:
            with open(f"{net_dir}/{name}", "rb") as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            if name == "unix":
                return None
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > column and cols[column].isdigit():
                out.add(int(cols[column]))
    return out


def _read_mounts(path: str) -> dict[int, str]:
    """mount id → filesystem type from a mountinfo file ("36 35 98:0 /mnt1 /mnt2 rw - ext3 /dev/root rw")."""
    out: dict[int, str] = {}
    try:
        with open(path, "rb") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return out
    for line in lines:
        head, sep, tail = line.partition(b" - ")
        if not sep:
            continue
        try:
            out[int(head.split()[0])] = tail.split()[0].decode()
        except (IndexError, ValueError):
            continue
    return out
