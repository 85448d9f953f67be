"""Pids of trainings in another pid namespace (Docker, Kubernetes, ``unshare --pid``), mapped into the monitor's.

An agent reports its own namespace's pids: a training in a container is pid 1, its DataLoader workers 7 and 8.
The monitor's /proc knows them by other numbers. The kernel gives the monitor the peer's pid in its own
namespace (SO_PEERCRED on the Unix socket; for loopback TCP, the process holding the peer's socket inode);
``/proc/<pid>/status`` lists a process's pid in every namespace from the monitor's down (``NSpid:``), so
the last field is the pid the process sees itself as. Workers are found among the main process's
descendants by that last field. A pid that cannot be mapped is never read, sampled or dumped.

Standard library only; every function takes ``proc_root`` (tests give a fake tree) and, but `tcp_row`, never raises.
"""

from __future__ import annotations

import os

OWN = "own"  # the training shares the monitor's pid namespace: its pids are the monitor's
MAPPED = "mapped"  # another namespace, its main process found in the monitor's
UNMAPPED = "unmapped"  # another namespace (or a peer the monitor cannot see): its pids are not the monitor's

MAX_DESCENDANTS = 4096  # processes walked to map workers (a training's tree is far smaller)
MAX_FD_SCAN = 20000  # descriptor links read to find who holds a loopback socket
_READ_MAX = 8192


def _read_text(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, _READ_MAX).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def parse_nspid(status: str) -> list[int] | None:
    """The ``NSpid:`` line of a /proc status file: the pid in each namespace, the monitor's first."""
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            try:
                pids = [int(x) for x in line[6:].split()]
            except ValueError:
                return None
            return pids or None
    return None


def nspid(pid: int, proc_root: str = "/proc") -> list[int] | None:
    """``pid``'s pids from the monitor's namespace down (None: gone, unreadable, or a kernel without NSpid)."""
    text = _read_text(f"{proc_root}/{pid}/status")
    return parse_nspid(text) if text is not None else None


def inner_pid(pid: int, proc_root: str = "/proc") -> int | None:
    """The pid ``pid`` (a pid of the monitor's namespace) has in its own, innermost namespace."""
    pids = nspid(pid, proc_root)
    return pids[-1] if pids else None


def children(pid: int, proc_root: str = "/proc") -> list[int]:
    """Direct children of ``pid``, from every thread's ``task/<tid>/children``."""
    out: list[int] = []
    try:
        tids = os.listdir(f"{proc_root}/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        text = _read_text(f"{proc_root}/{pid}/task/{tid}/children")
        if text:
            out.extend(int(x) for x in text.split() if x.isdigit())
    return out


def descendants(pid: int, proc_root: str = "/proc", limit: int = MAX_DESCENDANTS) -> list[int]:
    """Every descendant of ``pid``, breadth first, at most ``limit`` of them."""
    out: list[int] = []
    seen = {pid}
    queue = [pid]
    while queue and len(out) < limit:
        for child in children(queue.pop(0), proc_root):
            if child not in seen and len(out) < limit:
                seen.add(child)
                out.append(child)
                queue.append(child)
    return out


def map_main(agent_pid: int, peer_pid: int | None, proc_root: str = "/proc") -> tuple[str, int | None]:
    """(namespace, the main process's pid in the monitor's namespace or None) for a run whose hello says
    ``agent_pid`` and whose connection's peer is ``peer_pid`` (None: not known)."""
    if peer_pid is None or peer_pid <= 0:
        return UNMAPPED, None
    if peer_pid == agent_pid:
        return OWN, peer_pid  # the common case: not a single read
    if inner_pid(peer_pid, proc_root) == agent_pid:
        return MAPPED, peer_pid
    return UNMAPPED, None  # the peer is not the process the hello describes (a launcher, a proxy)


def map_workers(main_pid: int, agent_pids: list[int], proc_root: str = "/proc") -> list[int]:
    """The monitor-side pid of each of ``agent_pids`` (pids of the main process's namespace), 0 where no
    descendant of ``main_pid`` (a monitor-side pid) has it as its innermost pid."""
    if not agent_pids:
        return []
    wanted = set(agent_pids)
    found: dict[int, int] = {}
    for pid in descendants(main_pid, proc_root):
        inner = inner_pid(pid, proc_root)
        if inner in wanted and inner not in found:
            found[inner] = pid
            if len(found) == len(wanted):
                break
    return [found.get(p, 0) for p in agent_pids]


def socket_holders(inode: int, proc_root: str = "/proc", limit: int = MAX_FD_SCAN) -> list[int]:
    """Pids (monitor's namespace) with a descriptor on socket ``inode``, reading at most ``limit`` fd links."""
    target = f"socket:[{inode}]"
    out: list[int] = []
    budget = limit
    try:
        entries = [e for e in os.listdir(proc_root) if e.isdigit()]
    except OSError:
        return out
    for entry in entries:
        fd_dir = f"{proc_root}/{entry}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            budget -= 1
            if budget < 0:
                return out
            try:
                if os.readlink(f"{fd_dir}/{fd}") == target:
                    out.append(int(entry))
                    break
            except OSError:
                continue
    return out


# Columns of a /proc/net/tcp{,6} row: sl, local_address, rem_address, st, tx_queue:rx_queue, tr:tm->when,
# retrnsmt, uid, timeout, inode, …
TCP_LOCAL, TCP_REMOTE, TCP_UID, TCP_INODE = 1, 2, 7, 9


def tcp_row(table: str, local: str, remote: str) -> list[str] | None:
    """The columns of the row of /proc/net/tcp{,6} ``table`` that lists the socket with these local and remote
    addresses (as the table prints them), None where no row does. Raises OSError where the table cannot be read:
    its callers tell that apart from a socket not listed."""
    with open(table) as fh:
        for line in fh:
            fields = line.split()
            if len(fields) > TCP_INODE and fields[TCP_LOCAL] == local and fields[TCP_REMOTE] == remote:
                return fields
    return None


def tcp_inode(table: str, local: str, remote: str) -> int | None:
    """The inode of the socket listed in /proc/net/tcp{,6} ``table`` with these local and remote addresses
    (as the table prints them)."""
    try:
        row = tcp_row(table, local, remote)
        return (int(row[TCP_INODE]) or None) if row is not None else None
    except (OSError, ValueError):
        return None


def pick_peer(agent_pid: int, holders: list[int], proc_root: str = "/proc") -> int | None:
    """Of the processes holding a peer's socket, the one the hello describes: its own pid, or the one whose
    innermost pid it is (a forked child may hold the socket too); else the first (map_main then finds it is
    not the process the hello describes); None when nobody here holds it."""
    if agent_pid in holders:
        return agent_pid
    for pid in holders:
        if inner_pid(pid, proc_root) == agent_pid:
            return pid
    return holders[0] if holders else None
