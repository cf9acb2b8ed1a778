"""A TCP server whose connections hand requests to one handler, with the bounds that keep a
long-running server alive among misbehaving peers: a connection cap (at which the longest-idle
connection makes room for a new one) and a smaller one per peer address, an idle timeout (RocketMQ's
`serverChannelMaxIdleTimeSeconds`: no complete request for that long), a read timeout for
unfinished frames, a shared budget of buffered request bytes and a per-connection bound of
unread reply bytes; and TLS as RocketMQ's remoting serves it (see `ferromq.remoting.tls`)."""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import ssl
import time
from collections import Counter
from dataclasses import dataclass

from ferromq.protocol.command import MAX_FRAME_SIZE
from ferromq.remoting.connection import (
    CloseReason,
    Connection,
    ConnectionLimits,
    ReplyBudget,
    RequestBudget,
    RequestHandler,
    plain_host,
)
from ferromq.remoting.tls import HANDSHAKE_FIRST_BYTE, TlsConfigError, TlsMode, TlsSettings

logger = logging.getLogger(__name__)

# File descriptors kept free of connections (store files, name-server links, logs).
FD_RESERVE = 256
# At most one log line per this many seconds about refused connections.
REFUSAL_LOG_INTERVAL = 10.0


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Bounds of a remoting server; None or 0 turns a timeout off."""

    idle_timeout: float | None = 120.0
    """Seconds without a complete request before a connection is closed (Java's
    serverChannelMaxIdleTimeSeconds, 120; a byte alone does not reset the clock)."""
    read_timeout: float | None = 30.0
    """Seconds an unfinished frame may take to arrive."""
    max_connections: int = 10_000
    """Open connections; at the limit the longest-idle one is closed for each new one. Kept under
    the process's file descriptor limit."""
    max_connections_per_address: int = 1000
    """Open connections of one peer address; more from it are closed as soon as accepted."""
    request_buffer_bytes: int = 128 * 1024 * 1024
    """Bytes of unfinished request frames all connections may hold together."""
    reply_buffer_bytes: int = 16 * 1024 * 1024
    """Unread reply bytes per connection past which its requests are not read."""
    total_reply_buffer_bytes: int = 128 * 1024 * 1024
    """Unread reply bytes of all connections together past which only connections with none
    unread are read."""
    max_inflight_requests: int = 100_000
    """Requests being handled (held pulls included) of all connections together, past which no
    connection that adds one is read until an eighth of them are done."""


class RemotingServer:
    def __init__(
        self,
        handler: RequestHandler,
        host: str = "127.0.0.1",
        port: int = 0,
        max_frame: int = MAX_FRAME_SIZE,
        limits: ServerLimits | None = None,
        tls: TlsSettings | None = None,
    ) -> None:
        self._handler = handler
        self.tls = tls or TlsSettings(mode=TlsMode.DISABLED)
        self._tls_context: ssl.SSLContext | None = None
        self._listener: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        # Accepted sockets whose first byte is awaited: their peer host and accept time.
        self._sniffing: dict[asyncio.Task[None], tuple[str, float]] = {}
        self._host = host
        self._port = port
        self._max_frame = max_frame
        self.limits = limits or ServerLimits()
        self._budget = RequestBudget(self.limits.request_buffer_bytes, self.limits.max_inflight_requests)
        self._conn_limits = ConnectionLimits(
            self.limits.reply_buffer_bytes, self._budget, ReplyBudget(self.limits.total_reply_buffer_bytes)
        )
        self._max_connections = self.limits.max_connections
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.connections: set[Connection] = set()
        self._per_address: Counter[str] = Counter()
        self.closed_by_reason: Counter[str] = Counter()
        """How many connections closed for each `CloseReason` (refused ones included)."""
        # Per kind of refusal line: (refusals since the last line, when that line was written).
        self._refusal_lines: dict[str, tuple[int, float]] = {}

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        if self._listener is not None:
            return int(self._listener.getsockname()[1])
        assert self._server is not None, "server not started"
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def open_connections(self) -> int:
        """Connections served, and (TLS-capable servers) accepted ones whose first byte is awaited."""
        return len(self.connections) + len(self._sniffing)

    @property
    def buffered_request_bytes(self) -> int:
        """Bytes reserved by unfinished request frames (the budget's use)."""
        return self._budget.used

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.tls.mode == TlsMode.DISABLED:
            # A TLS client's first bytes read as an oversized frame: it is closed, as in Java.
            self._server = await loop.create_server(self._accept, self._host, self._port)
        else:
            family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
            self._listener = socket.create_server((self._host, self._port), family=family, backlog=1024)
            self._listener.setblocking(False)
            self._acceptor = loop.create_task(
                self._accept_loop(self._listener), name=f"remoting-accept-{self.port}"
            )
        self._start_sweeping()

    def _start_sweeping(self) -> None:
        """Closes idle and slow connections."""
        self._max_connections = fd_bounded(self.limits.max_connections)
        timeouts = [t for t in (self.limits.idle_timeout, self.limits.read_timeout) if t]
        if timeouts:
            period = min(max(min(timeouts) / 4, 0.05), 5.0)
            self._sweeper = asyncio.get_running_loop().create_task(
                self._sweep_loop(period), name="remoting-sweeper"
            )

    async def _accept_loop(self, listener: socket.socket) -> None:
        """Accepts connections for a TLS-capable server: each is looked at before it is served."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listener)
            except OSError as e:
                # Out of file descriptors and the like: wait instead of spinning on the error.
                self._log_refusal("accept failed", str(e))
                await asyncio.sleep(0.1)
                continue
            self._adopt(sock)

    def _adopt(self, sock: socket.socket) -> None:
        """Serves an accepted socket: TLS or plain by its first byte."""
        try:
            host = plain_host(str(sock.getpeername()[0]))
        except OSError:
            sock.close()
            return
        refusal = self._make_room(host)
        if refusal is not None:
            self.closed_by_reason[str(refusal)] += 1
            sock.close()
            return
        task = asyncio.get_running_loop().create_task(self._sniff(sock))
        self._sniffing[task] = (host, time.monotonic())
        self._per_address[host] += 1
        task.add_done_callback(self._stop_sniffing)

    def _stop_sniffing(self, task: asyncio.Task[None]) -> None:
        """Gives the socket's place back (its connection, if it becomes one, takes its own)."""
        entry = self._sniffing.pop(task, None)
        if entry is not None:
            self._release(entry[0])

    async def _sniff(self, sock: socket.socket) -> None:
        """Java's handshake sniffer: a first byte of 0x16 starts TLS, anything else is plain TCP
        (closed in enforcing mode). Waits for that byte no longer than the idle timeout."""
        loop = asyncio.get_running_loop()
        sock.setblocking(False)
        try:
            async with asyncio.timeout(self.limits.idle_timeout or None):
                first = await _peek(loop, sock)
        except TimeoutError:
            self.closed_by_reason[str(CloseReason.IDLE)] += 1
            first = b""
        except OSError:
            first = b""
        except asyncio.CancelledError:
            sock.close()  # evicted for a newer connection, or the server stops
            raise
        if not first:
            sock.close()
            return
        context = None
        if first[0] == HANDSHAKE_FIRST_BYTE:
            context = self._server_tls_context()
            if context is None:
                sock.close()
                return
        elif self.tls.mode == TlsMode.ENFORCING:
            self.closed_by_reason[str(CloseReason.TLS_REQUIRED)] += 1
            self._log_refusal("plain connection(s) closed: tls.server.mode is enforcing")
            sock.close()
            return
        task = asyncio.current_task()
        if task is not None:
            self._stop_sniffing(task)
        handshake_timeout = (self.limits.read_timeout or None) if context is not None else None
        try:
            await loop.connect_accepted_socket(
                self._accept, sock, ssl=context, ssl_handshake_timeout=handshake_timeout
            )
        except (OSError, ssl.SSLError, TimeoutError) as e:
            logger.info("port %d: TLS handshake failed: %s", self.port, e)
            self.closed_by_reason[str(CloseReason.TLS_HANDSHAKE)] += 1
            sock.close()

    def _server_tls_context(self) -> ssl.SSLContext | None:
        """Made at the first TLS client (test mode's certificate costs a key generation)."""
        if self._tls_context is None:
            try:
                self._tls_context = self.tls.server_context()
            except TlsConfigError as e:
                self._log_refusal("TLS connection(s) closed", str(e))
                return None
        return self._tls_context

    def _accept(self) -> Connection:
        conn = Connection(
            self._handler, max_frame=self._max_frame, limits=self._conn_limits, admit=self._admit
        )
        conn.on_close(self._closed)
        return conn

    def _admit(self, conn: Connection) -> CloseReason | None:
        """A connection is served once its peer is known, if `_make_room` finds it a place."""
        refusal = self._make_room(conn.peer_host)
        if refusal is None:
            self.connections.add(conn)
            self._per_address[conn.peer_host] += 1
        return refusal

    def _make_room(self, host: str) -> CloseReason | None:
        """A new connection is refused past its address's share of the connections; at the limit
        the longest-idle connection (by its last request; a silent socket by its accept) is
        closed to make room for it, so a host that opens idle connections by the thousand cannot
        lock everyone else out. Refusals and evictions are logged at most once per
        REFUSAL_LOG_INTERVAL each."""
        share = self.limits.max_connections_per_address
        if self._per_address[host] >= share:
            self._log_refusal(
                "connection(s) refused: an address holds its share",
                f"serverMaxConnectionsPerAddress={share}, last from {host}",
            )
            return CloseReason.ADDRESS_LIMIT
        if self.open_connections < self._max_connections:
            return None
        conn = min((c for c in self.connections if not c.closed), key=lambda c: c.last_request, default=None)
        task = min(self._sniffing, key=lambda t: self._sniffing[t][1], default=None)
        if conn is None and task is None:
            self._note_refused()
            return CloseReason.CONNECTION_LIMIT
        self._log_refusal(
            "longest-idle connection(s) closed for new ones at the limit",
            f"serverMaxConnections={self._max_connections}, {self.open_connections} open",
        )
        if task is not None and (conn is None or self._sniffing[task][1] < conn.last_request):
            self._stop_sniffing(task)  # its place is free at once
            task.cancel()
            self.closed_by_reason[str(CloseReason.EVICTED)] += 1
        elif conn is not None:
            conn.abort(CloseReason.EVICTED)
        return None

    def _release(self, host: str) -> None:
        self._per_address[host] -= 1
        if self._per_address[host] <= 0:
            del self._per_address[host]

    def _closed(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self._release(conn.peer_host)
        self.closed_by_reason[str(conn.close_reason)] += 1

    def _note_refused(self) -> None:
        self._log_refusal(
            f"connection(s) refused: the limit (serverMaxConnections={self._max_connections}) is reached",
            f"{len(self.connections)} open",
        )

    def _log_refusal(self, kind: str, detail: str = "") -> None:
        """One warning per kind at most every REFUSAL_LOG_INTERVAL, with the count since the last."""
        now = time.monotonic()
        count, last = self._refusal_lines.get(kind, (0, -REFUSAL_LOG_INTERVAL))
        count += 1
        if now - last >= REFUSAL_LOG_INTERVAL:
            logger.warning(
                "port %d: %s (%d since the last such line)%s",
                self.port,
                kind,
                count,
                f": {detail}" * bool(detail),
            )
            self._refusal_lines[kind] = (0, now)
        else:
            self._refusal_lines[kind] = (count, last)

    async def _sweep_loop(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            self.sweep(time.monotonic())

    def sweep(self, now: float) -> None:
        """Closes connections idle past `idle_timeout` and those whose unfinished frame is older
        than `read_timeout` (not while the server itself holds them back: unread replies, the
        request budget, requests in flight; the timeout starts again when they are read again).
        One log line per reason and sweep, however many connections it closes."""
        idle, read = self.limits.idle_timeout, self.limits.read_timeout
        idle_peers: list[str] = []
        slow_peers: list[str] = []
        for conn in list(self.connections):
            if idle and now - conn.last_request > idle and not conn.reading_paused_for:
                idle_peers.append(conn.peer)
                conn.abort(CloseReason.IDLE)
            elif (
                read
                and conn.partial_since is not None
                and now - conn.partial_since > read
                and not conn.reading_paused_for
            ):
                slow_peers.append(conn.peer)
                conn.abort(CloseReason.READ_TIMEOUT)
        if idle_peers:
            logger.info(
                "port %d: closed %d connection(s) with no traffic for %g s (%s)",
                self.port,
                len(idle_peers),
                idle,
                _some(idle_peers),
            )
        if slow_peers:
            logger.info(
                "port %d: closed %d connection(s) whose frame did not arrive within %g s (%s)",
                self.port,
                len(slow_peers),
                read,
                _some(slow_peers),
            )

    async def stop(self) -> None:
        if self._server is None and self._listener is None and self._sweeper is None:
            return
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        tasks = [t for t in (self._acceptor, *self._sniffing) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._acceptor = None
        if self._listener is not None:
            self._listener.close()
        if self._server is not None:
            self._server.close()
        # Together: each may linger a moment for a peer to take its last replies.
        await asyncio.gather(*(conn.close(CloseReason.SHUTDOWN) for conn in list(self.connections)))
        if self._server is not None:
            await self._server.wait_closed()
        self._server = None
        self._listener = None


async def _peek(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    """The first byte the peer sent, left in the socket (b"" when it closed without a byte)."""
    while True:
        try:
            return sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            pass
        readable = loop.create_future()
        loop.add_reader(sock.fileno(), readable.set_result, None)
        try:
            await readable
        finally:
            loop.remove_reader(sock.fileno())


def _some(peers: list[str], shown: int = 3) -> str:
    return ", ".join(peers[:shown]) + (f" and {len(peers) - shown} more" if len(peers) > shown else "")


# Where the hard limit is unlimited, Linux still caps a process's descriptors at fs.nr_open.
NR_OPEN_PATH = "/proc/sys/fs/nr_open"


def raise_open_file_limit() -> int | None:
    """Raises this process's soft open file limit to its hard limit, as RocketMQ's start scripts
    do with `ulimit -n` (every connection holds a descriptor; 1024 or 4096 are common soft
    limits), and logs one line: the limit, and the connections it leaves room for. The soft
    limit in force after (None where it cannot be read)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return None
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            with open(NR_OPEN_PATH, encoding="ascii") as f:
                target = int(f.read().strip())
        except (OSError, ValueError):
            target = soft
    raised = ""
    if soft != resource.RLIM_INFINITY and target != resource.RLIM_INFINITY and target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            raised, soft = f" (raised from {soft}, the hard limit)", target
        except (OSError, ValueError) as e:
            raised = f" (not raised to {target}: {e})"
    if soft == resource.RLIM_INFINITY:
        logger.info("open file limit: none; connections are bounded by serverMaxConnections")
    else:
        logger.info(
            "open file limit %d%s: room for %d connections (each port up to serverMaxConnections)",
            soft,
            raised,
            max(16, soft - FD_RESERVE),
        )
    return int(soft)


def fd_bounded(max_connections: int) -> int:
    """`max_connections`, lowered to what the file descriptor limit leaves room for (accepts
    failing with EMFILE would lock every client out, and log each failure)."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return max_connections
    if soft == resource.RLIM_INFINITY:
        return max_connections
    room = max(16, soft - FD_RESERVE)
    if room < max_connections:
        logger.info("connection limit %d lowered to %d (open file limit %d)", max_connections, room, soft)
        return room
    return max_connections
