"""Socket server for agents: many concurrent connections, bounded, hostile input closes one connection.

`AgentServer` binds the listen address (a Unix socket in a private directory, or TCP), accepts, reads frames in
one selector thread and hands what they say to its `Ingest` sink. Who a peer is (its uid, its pid in the monitor's
pid namespace, the run's namespace) is ``trainmon.ingest.agent_peers``; reading /proc for it, ``pidns``.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import logging
import os
import resource
import selectors
import socket
import stat
import threading
import time
from dataclasses import dataclass, field

from trainmon import protocol as P
from trainmon.ingest.agent_peers import PeerPids, check_peer
from trainmon.store.store import Ingest

log = logging.getLogger("trainmon.agents")

MAX_CONNECTIONS = 1024
HELLO_TIMEOUT_S = 10.0  # TRAINMON_HELLO_TIMEOUT overrides it (tests use a short one)
RECV_BYTES = 256 * 1024
COALESCE_S = 0.02  # after a wake-up, let frames gather this long (adds at most this to a step's latency)
# ... and this long after a wake-up that read little: a few agents sending small frames would each wake the thread
# (two ranks at 10 steps/s: 20 wake-ups a second, each costing more than its frame). 150 ms after a 100 ms sender
# tick keeps a step's way to the store under 250 ms; a busy job's large frames keep the short window.
GATHER_QUIET_S = 0.15
QUIET_BYTES = 4096  # a wake-up that read less than this (all connections) was a quiet one
MAX_RUN_IDS = 65536  # (host, pid, session) → run id, oldest forgotten first
EXPIRE_EVERY_S = 0.5


class AddressError(Exception):
    """The listen address cannot be used (taken, unsafe directory, bad syntax)."""


@dataclass
class _Conn:
    sock: socket.socket
    peer: str
    opened: float
    reader: P.FrameReader = field(default_factory=P.FrameReader)
    run_id: int | None = None
    authed: bool = True
    bye: str | None = None
    pids: PeerPids = field(default_factory=PeerPids)  # the peer's and the run's pids in the monitor's namespace


class AgentServer:
    def __init__(
        self,
        sink: Ingest,
        address: str | None = None,
        *,
        token: str | None = None,
        clock=time.monotonic,
        hello_timeout: float | None = None,
    ) -> None:
        self.sink = sink
        self.address = P.resolve_address(address)
        self.token = token if token is not None else os.environ.get("TRAINMON_TOKEN")
        self.clock = clock
        self.hello_timeout = (
            hello_timeout if hello_timeout is not None else _env_seconds("TRAINMON_HELLO_TIMEOUT", HELLO_TIMEOUT_S)
        )
        self._next_expiry = 0.0
        self.rejected = 0
        self.protocol_errors = 0
        self.coalesce_s = COALESCE_S
        self.gather_quiet_s = GATHER_QUIET_S
        self._read_bytes = 0  # read since the last wake-up
        self._recv_buf = bytearray(RECV_BYTES)
        self._recv_view = memoryview(self._recv_buf)
        self._sel = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        self._conns: dict[int, _Conn] = {}
        self._run_ids: dict[tuple, int] = {}
        self._next_run = 1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.max_connections = _max_connections()
        self._accept_paused_until: float | None = None
        self._wakeup_r, self._wakeup_w = socket.socketpair()
        self._unix_path: str | None = None
        self._require_token = False

    # ------------------------------------------------------------ lifecycle

    def bind(self) -> None:
        tcp = P.parse_tcp(self.address)
        if tcp is None:
            self._listener = self._bind_unix(self.address)
        else:
            self._listener = self._bind_tcp(*tcp)
        self._listener.setblocking(False)
        self._sel.register(self._listener, selectors.EVENT_READ, "listen")
        self._wakeup_r.setblocking(False)
        self._sel.register(self._wakeup_r, selectors.EVENT_READ, "wakeup")

    def _bind_unix(self, path: str) -> socket.socket:
        directory = os.path.dirname(path) or "."
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise AddressError(f"cannot create socket directory {directory}: {exc.strerror}") from None
        st = os.stat(directory)
        if st.st_uid != os.getuid():
            raise AddressError(f"socket directory {directory} belongs to uid {st.st_uid}, not to you")
        if stat.S_IMODE(st.st_mode) & 0o077 and directory == P.default_socket_dir():
            os.chmod(directory, 0o700)
        if os.path.exists(path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.settimeout(0.5)
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # stale socket of a monitor that died
            else:
                raise AddressError(f"another trainmon monitor is already listening on {path}")
            finally:
                probe.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            sock.bind(path)
        except OSError as exc:
            sock.close()
            raise AddressError(f"cannot listen on {path}: {exc.strerror}") from None
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        sock.listen(256)
        self._unix_path = path
        return sock

    def _bind_tcp(self, host: str, port: int) -> socket.socket:
        try:
            loopback = ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
        except (OSError, ValueError):
            loopback = False
        if not loopback and not self.token:
            raise AddressError(
                f"listening on non-loopback {host}:{port} requires a token (--token or TRAINMON_TOKEN); "
                "for remote viewing prefer an SSH tunnel to a loopback address"
            )
        self._require_token = bool(self.token)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise AddressError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        sock.listen(256)
        if port == 0:
            self.address = f"{host}:{sock.getsockname()[1]}"
        return sock

    def start(self) -> None:
        if self._listener is None:
            self.bind()
        self._thread = threading.Thread(target=self._serve, name="trainmon-agents", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        try:
            self._wakeup_w.send(b"x")
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        for conn in list(self._conns.values()):
            self._close(conn, "monitor stopped")
        if self._listener is not None:
            self._listener.close()
        if self._unix_path and os.path.exists(self._unix_path):
            try:
                os.unlink(self._unix_path)
            except OSError:
                pass
        self._wakeup_r.close()
        self._wakeup_w.close()

    @property
    def connection_count(self) -> int:
        return len(self._conns)

    # ------------------------------------------------------------ loop

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                ready = self._sel.select(timeout=1.0)
            except OSError as exc:
                log.warning("select failed: %s", exc)
                time.sleep(0.1)
                continue
            accepted = False
            for key, _mask in ready:
                if key.data == "listen":
                    self._accept()
                    accepted = True
                elif key.data == "wakeup":
                    try:
                        self._wakeup_r.recv(64)
                    except OSError:
                        pass
                else:
                    self._read(key.data)
            self._expire_silent()
            self._resume_accepting()
            if ready and self.coalesce_s:
                # Let more frames gather in the sockets: one wake-up then reads many agents' batches
                # (each wake-up costs more than the frames it reads when 16 agents send 10 a second).
                # Connections arriving keep the short window: a full listen backlog refuses the next ones.
                quiet = self._read_bytes < QUIET_BYTES and not accepted
                self._read_bytes = 0
                self._stop.wait(max(self.coalesce_s, self.gather_quiet_s) if quiet else self.coalesce_s)

    def _pause_accepting(self) -> None:
        """Out of file descriptors: a readable listener would spin the loop, so stop watching it a while."""
        if self._accept_paused_until is None:
            log.warning("out of file descriptors with %d connections; not accepting for 1 s", len(self._conns))
            self._sel.unregister(self._listener)  # type: ignore[arg-type]
        self._accept_paused_until = self.clock() + 1.0

    def _resume_accepting(self) -> None:
        if self._accept_paused_until is not None and self.clock() >= self._accept_paused_until:
            self._accept_paused_until = None
            self._sel.register(self._listener, selectors.EVENT_READ, "listen")  # type: ignore[arg-type]

    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, addr = self._listener.accept()  # type: ignore[union-attr]
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    self._pause_accepting()
                return
            if len(self._conns) >= self.max_connections:
                self.rejected += 1
                sock.close()
                continue
            peer = check_peer(sock, addr, self._require_token)
            if peer is None:
                self.rejected += 1
                sock.close()
                continue
            sock.setblocking(False)
            pids = PeerPids.accepted(sock, peer, addr)
            conn = _Conn(sock, peer, self.clock(), authed=not self._require_token, pids=pids)
            self._conns[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _read(self, conn: _Conn) -> None:
        # Into one reused buffer: recv(256 KiB) would map and unmap a fresh 256 KiB object on every read.
        try:
            n = conn.sock.recv_into(self._recv_buf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(conn, f"read error: {exc.strerror or exc}")
            return
        self._read_bytes += n
        if not n:
            # No goodbye: the process was killed or the connection broke (it reconnects if alive).
            self._close(conn, conn.bye or "lost")
            return
        try:
            with self._recv_view[:n] as data:
                self.feed(conn, data)
        except P.ProtocolError as exc:
            self.protocol_errors += 1
            log.warning("closing connection from %s: %s", conn.peer, exc)
            self._close(conn, f"protocol error: {exc}")
        except Exception as exc:  # a bug must cost one connection, never the monitor
            self.protocol_errors += 1
            log.exception("closing connection from %s after an internal error", conn.peer)
            self._close(conn, f"internal error: {exc!r}")

    def feed(self, conn: _Conn, data: bytes | memoryview) -> None:
        """Parse and ingest what one connection sent; raises ProtocolError on hostile input."""
        for kind, payload in conn.reader.feed(data):
            self._handle(conn, kind, payload)

    def _handle(self, conn: _Conn, kind: int, payload: bytes) -> None:
        now = self.clock()
        if kind == P.F_AUTH:
            token = P.decode_json(payload).get("token")
            if (
                not isinstance(token, str)
                or not self.token
                or not hmac.compare_digest(token.encode(), self.token.encode())
            ):
                raise P.ProtocolError("bad token")
            conn.authed = True
            return
        if not conn.authed:
            raise P.ProtocolError("this listener requires a token")
        if kind == P.F_HELLO:
            if conn.run_id is not None:
                raise P.ProtocolError("second hello on one connection")
            hello = P.clean_hello(P.decode_json(payload))
            conn.run_id = run_id = self._run_id((hello["host"], hello["pid"], hello["session"]))
            hello["peer"] = conn.peer
            conn.pids.map_hello(conn.sock, conn.peer, hello)
            self.sink.hello(run_id, now, hello)
            return
        if conn.run_id is None:
            raise P.ProtocolError("data before hello")
        if kind == P.F_EVENTS:
            self.sink.events(conn.run_id, now, P.decode_events(payload))
        elif kind == P.F_INFO:
            info = P.clean_info(P.decode_json(payload))
            if "bye" in info:
                conn.bye = info["bye"]
            conn.pids.map_workers(info)
            if info:
                self.sink.info(conn.run_id, now, info)

    def _run_id(self, key: tuple) -> int:
        run_id = self._run_ids.get(key)
        if run_id is None:
            run_id = self._run_ids[key] = self._next_run
            self._next_run += 1
            while len(self._run_ids) > MAX_RUN_IDS:
                del self._run_ids[next(iter(self._run_ids))]
        return run_id

    def _expire_silent(self) -> None:
        now = self.clock()
        if now < self._next_expiry:
            return
        self._next_expiry = now + EXPIRE_EVERY_S
        for conn in list(self._conns.values()):
            if conn.run_id is None and now - conn.opened > self.hello_timeout:
                log.warning("closing connection from %s: no hello within %.0f s", conn.peer, self.hello_timeout)
                self._close(conn, "no hello")

    def _close(self, conn: _Conn, reason: str) -> None:
        fd = conn.sock.fileno()
        if fd >= 0:
            try:
                self._sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        self._conns.pop(fd, None)
        try:
            conn.sock.close()
        except OSError:
            pass
        if conn.run_id is not None:
            self.sink.closed(conn.run_id, self.clock(), reason)


def _max_connections() -> int:
    """MAX_CONNECTIONS, or fewer when the descriptor limit would run out first."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return MAX_CONNECTIONS
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(16, min(MAX_CONNECTIONS, soft - 128))  # the rest of the monitor needs descriptors too


def _env_seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default
