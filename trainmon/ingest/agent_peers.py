"""Who is at the other end of an agent's connection: whether it may report, and its pids in the monitor's namespace.

`check_peer` admits this user's processes and root's (the Unix socket's SO_PEERCRED; over loopback TCP without a
token, the uid /proc/net/tcp lists for the peer's socket); a listener with a token leaves it to the token.
`PeerPids` holds the peer's pid in the monitor's pid namespace and, once the hello came, the run's namespace and
main process, which it writes into the hello and into the workers' info (``pidns`` reads /proc to map them).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import struct
from dataclasses import dataclass
from typing import Any

from trainmon.ingest import pidns

log = logging.getLogger("trainmon.agents")


def check_peer(sock: socket.socket, addr: Any, require_token: bool) -> str | None:
    """The peer's name ("pid N", "host:port"), or None (logged) where it may not report."""
    if sock.family != socket.AF_UNIX:
        return _check_tcp_peer(sock, addr, require_token)
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", creds)
    except (OSError, AttributeError):
        log.warning("refused a connection: cannot read its peer credentials")
        return None  # fail closed: an unidentified peer may be another user
    if uid not in (os.getuid(), 0):
        log.warning("refused a connection from uid %d (pid %d): only your own processes may report", uid, pid)
        return None
    return f"pid {pid}"


def _check_tcp_peer(sock: socket.socket, addr: Any, require_token: bool) -> str | None:
    """Loopback without a token: like the Unix socket, only this user's processes (and root's)."""
    peer = f"{addr[0]}:{addr[1]}"
    if require_token or not ipaddress.ip_address(addr[0]).is_loopback:
        return peer  # the token decides (a non-loopback listener always has one)
    uid = _loopback_peer_uid(sock)
    if uid is None or uid in (os.getuid(), 0):
        return peer
    log.warning(
        "refused a loopback connection from uid %d: only your own processes may report "
        "(to let other users in, give them a token)",
        uid,
    )
    return None


@dataclass
class PeerPids:
    """A connection's peer in the monitor's pid namespace, and the run's namespace once its hello came."""

    pid: int | None = None  # the peer's pid in the monitor's namespace (SO_PEERCRED), None: not known
    loopback: bool = False  # a loopback TCP peer: its pid is looked up from its socket at the hello
    namespace: str = pidns.OWN
    main_pid: int | None = None  # the run's main process in the monitor's namespace (None: unmapped)

    @classmethod
    def accepted(cls, sock: socket.socket, peer: str, addr: Any) -> PeerPids:
        """What is known of a peer just accepted as ``peer`` (`check_peer`'s name) from ``addr``."""
        if sock.family == socket.AF_UNIX:
            return cls(pid=_peer_pid(peer))
        return cls(loopback=_is_loopback(addr))

    def map_hello(self, sock: socket.socket, peer: str, hello: dict[str, Any]) -> None:
        """Put the peer's pid (monitor's namespace) and the run's pid namespace into the hello. Costs nothing
        when the peer's pid is the hello's (the common case); a loopback TCP peer's pid is looked up once,
        here, from its socket; any other TCP peer (remote, or unknown) is unmapped."""
        if self.loopback and self.pid is None:
            self.pid = _loopback_peer_pid(sock, hello["pid"])
        self.namespace, self.main_pid = pidns.map_main(hello["pid"], self.pid)
        hello["peer_pid"] = self.pid
        hello["pid_namespace"] = self.namespace
        if self.namespace != pidns.OWN:
            log.info(
                "%s reports pid %d from another pid namespace: %s",
                peer,
                hello["pid"],
                f"pid {self.main_pid} here" if self.main_pid else "not mapped, its processes are not read",
            )

    def map_workers(self, info: dict[str, Any]) -> None:
        """Namespace pids: each worker's pid in the monitor's namespace (0: not found), recorded with them."""
        if "workers" in info and self.namespace != pidns.OWN:
            pids = info["workers"]["pids"]
            main = self.main_pid
            info["workers"]["proc_pids"] = pidns.map_workers(main, pids) if main else [0] * len(pids)


def _tcp_addresses(sock: socket.socket) -> tuple[str, str, str]:
    """The /proc/net table of a TCP connection, then the peer's and our address as that table prints them (the IP
    as native-endian 32-bit words in hex). Raises OSError or ValueError."""
    table = "/proc/net/tcp6" if sock.family == socket.AF_INET6 else "/proc/net/tcp"
    addresses = []
    for host, port in (sock.getpeername()[:2], sock.getsockname()[:2]):
        packed = socket.inet_pton(sock.family, host)
        words = struct.unpack(f"={len(packed) // 4}I", packed)
        addresses.append("".join(f"{w:08X}" for w in words) + f":{port:04X}")
    return table, addresses[0], addresses[1]


def _loopback_peer_uid(sock: socket.socket) -> int | None:
    """The uid owning the other end of a loopback TCP connection (Linux); None where /proc cannot tell
    (another platform), -1 where the connection is not listed."""
    try:
        row = pidns.tcp_row(*_tcp_addresses(sock))
        return int(row[pidns.TCP_UID]) if row is not None else -1  # not listed (gone already): refused
    except (OSError, ValueError):
        return None


def _loopback_peer_pid(sock: socket.socket, agent_pid: int) -> int | None:
    """The pid (monitor's namespace) of the process at the other end of a loopback TCP connection: the
    peer's socket inode from /proc/net/tcp{,6}, then who holds it in /proc/*/fd (bounded). None if not found."""
    try:
        inode = pidns.tcp_inode(*_tcp_addresses(sock))
    except (OSError, ValueError):
        return None
    if inode is None:
        return None
    return pidns.pick_peer(agent_pid, pidns.socket_holders(inode))


def _peer_pid(peer: str) -> int | None:
    """The pid of a Unix peer as check_peer names it (\"pid N\")."""
    text = peer.removeprefix("pid ")
    return int(text) if text.isdigit() and int(text) > 0 else None


def _is_loopback(addr: Any) -> bool:
    try:
        return ipaddress.ip_address(addr[0]).is_loopback
    except (ValueError, TypeError, IndexError):
        return False
