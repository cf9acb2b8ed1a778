"""The broker's port served by the Rust data plane (`ferromq._store.DataPlane`): connections,
framing and the hot sends run on Rust threads, one per core; every other request comes to this
event loop, where the usual `Connection` (handed whole frames through a small transport) and
`Dispatcher` answer it as they answer a socket's.

The plane writes to an eventfd when it has work for Python (frames, closes, arrivals of messages
held pulls wait for); one wake-up takes all of it. Bounds: the connection cap, the idle and read
timeouts, the request byte budget and the per-connection reply bound are kept by the plane; the
bound of requests in flight by the `Connection`s, as for a socket."""

from __future__ import annotations

import asyncio
import logging
import os
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from ferromq import _store
from ferromq.protocol.command import MAX_FRAME_SIZE
from ferromq.remoting.connection import (
    CloseReason,
    Connection,
    ConnectionLimits,
    RequestBudget,
    RequestHandler,
)
from ferromq.remoting.server import ServerLimits, fd_bounded
from ferromq.remoting.tls import PlaneTls, TlsConfigError, TlsMode, TlsSettings

logger = logging.getLogger(__name__)

# (topic, queue id, next offset, tags codes stored or None for any) of queues sends stored into.
Arrivals = list[tuple[str, int, int, list[int] | None]]

_OPEN, _DATA, _CLOSED, _DRAINED = 0, 1, 2, 4
_REASONS = {r.value: r for r in CloseReason}


class PlaneTransport(asyncio.Transport):
    """What a `Connection` needs of a transport, over one plane connection. Past `reply_bound`
    reply bytes queued in the plane, the connection is told to pause writing (it then stops
    answering the peer's requests) until the plane says half of them are written."""

    def __init__(
        self,
        plane: _store.DataPlane,
        conn_id: int,
        peer: tuple[str, int],
        protocol: Connection,
        reply_bound: int,
    ) -> None:
        super().__init__()
        self._plane = plane
        self._id = conn_id
        self._peer = peer
        self._protocol = protocol
        self._reply_bound = reply_bound
        self._closing = False
        self._writing_paused = False
        self._reading = True
        # Frames the plane read before it saw a pause: given to the connection on resume.
        self._held = bytearray()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._peer if name == "peername" else default

    def get_protocol(self) -> Connection:
        return self._protocol

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        queued = self._plane.write(self._id, data if type(data) is bytes else bytes(data))
        if queued > self._reply_bound and not self._writing_paused:
            self._writing_paused = True
            self._protocol.pause_writing()

    def drained(self) -> None:
        """The plane wrote half of the replies queued past the bound."""
        if self._writing_paused:
            self._writing_paused = False
            self._protocol.resume_writing()

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._plane.close(self._id, False, CloseReason.LOCAL_CLOSE.value)

    def abort(self) -> None:
        self._closing = True
        self._plane.close(self._id, True, CloseReason.LOCAL_CLOSE.value)

    def is_closing(self) -> bool:
        return self._closing

    def feed(self, data: bytes) -> None:
        """Frames from the plane: to the connection, unless it paused reading meanwhile."""
        if self._reading and not self._held:
            self._protocol.data_received(data)
        else:
            self._held += data

    def pause_reading(self) -> None:
        self._reading = False
        self._plane.set_reading(self._id, False)

    def resume_reading(self) -> None:
        self._reading = True
        self._plane.set_reading(self._id, True)
        if self._held:
            asyncio.get_running_loop().call_soon(self._give_held)

    def _give_held(self) -> None:
        if self._reading and self._held and not self._closing:
            data, self._held = bytes(self._held), bytearray()
            self._protocol.data_received(data)

    def is_reading(self) -> bool:
        return self._reading and not self._closing

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """The plane bounds unsent replies itself (serverReplyBufferBytes)."""

    def get_write_buffer_size(self) -> int:
        return 0  # the plane's (the Connection asks only to set its limits)


class PlaneServer:
    """`RemotingServer`'s surface over a data plane: the broker's one server. TLS clients are
    served by the plane too (rustls), in permissive mode beside plain ones, in enforcing mode
    instead of them."""

    def __init__(
        self,
        handler: RequestHandler,
        host: str = "127.0.0.1",
        port: int = 0,
        max_frame: int = MAX_FRAME_SIZE,
        limits: ServerLimits | None = None,
        tls: TlsSettings | None = None,
        threads: int = 0,
        rpc_buckets_ms: Sequence[float] = (),
    ) -> None:
        self.tls = tls or TlsSettings(mode=TlsMode.DISABLED)
        self._rpc_buckets_ms = list(rpc_buckets_ms)
        self._handler = handler
        self._host = host
        self._port = port
        self._max_frame = max_frame
        self.limits = limits or ServerLimits()
        self._threads = threads or os.cpu_count() or 1
        budget = RequestBudget(self.limits.request_buffer_bytes, self.limits.max_inflight_requests)
        # Whole frames only reach a Connection here: the byte budget is the plane's; the reply
        # bound and the bound of requests in flight are kept by the Connection as on a socket.
        self._conn_limits = ConnectionLimits(self.limits.reply_buffer_bytes, budget)
        self._transports: dict[int, PlaneTransport] = {}
        self.plane: _store.DataPlane | None = None
        self.connections: set[Connection] = set()
        self._closed_here: Counter[str] = Counter()
        self.on_arrivals: Callable[[Arrivals], None] | None = None
        """Called with what the plane stored when it wakes the loop (held pulls to wake)."""
        self.on_open: Callable[[_store.DataPlane, int, Connection], None] | None = None
        """Called with each plane connection as it opens (its id and its `Connection`)."""

    @property
    def port(self) -> int:
        assert self.plane is not None, "server not started"
        return self.plane.port

    @property
    def open_connections(self) -> int:
        return self.plane.open_connections if self.plane is not None else 0

    @property
    def waiting_for_budget(self) -> int:
        """Connections not read until their unfinished frame fits in the request budget."""
        return self.plane.waiting_for_budget if self.plane is not None else 0

    @property
    def buffered_request_bytes(self) -> int:
        """Bytes reserved by unfinished request frames (the budget's use)."""
        return self.plane.buffered_request_bytes if self.plane is not None else 0

    @property
    def closed_by_reason(self) -> Counter[str]:
        """Closes per `CloseReason`: those Python saw, and those of connections it never saw
        (refused at the cap, silent before their first byte)."""
        out = Counter(self._closed_here)
        if self.plane is not None:
            for why, n in self.plane.closed_by_reason():
                out[why] += n
        return out

    async def start(self) -> None:
        """Binds and serves. Raises `TlsConfigError` when the TLS settings cannot serve (in test
        mode without the `cryptography` package TLS clients are not served: a warning says so)."""
        lim = self.limits
        tls = self._plane_tls()
        self.plane = _store.DataPlane(
            self._host,
            self._port,
            threads=self._threads,
            max_frame=self._max_frame,
            max_connections=fd_bounded(lim.max_connections),
            max_connections_per_address=lim.max_connections_per_address,
            idle_timeout_ms=int((lim.idle_timeout or 0) * 1000),
            read_timeout_ms=int((lim.read_timeout or 0) * 1000),
            request_buffer_bytes=lim.request_buffer_bytes,
            reply_buffer_bytes=lim.reply_buffer_bytes,
            total_reply_buffer_bytes=lim.total_reply_buffer_bytes,
            rpc_buckets_ms=self._rpc_buckets_ms,
            tls=tls,
        )
        asyncio.get_running_loop().add_reader(self.plane.wake_fd, self.drain)
        logger.info("port %d served by the data plane on %d threads", self.plane.port, self._threads)

    def _plane_tls(self) -> PlaneTls | None:
        settings = self.tls
        try:
            return settings.plane_tls()
        except TlsConfigError as e:
            test_certificate = settings.test_mode_enable and not settings.cert_path
            if settings.mode == TlsMode.PERMISSIVE and test_certificate:
                logger.warning("port %d: TLS clients are not served: %s", self._port, e)
                return None
            raise

    def drain(self) -> None:
        """Takes what the plane has for Python: connection events in order, then arrivals."""
        plane = self.plane
        if plane is None:
            return
        events = plane.take_events()
        for kind, conn_id, payload in events:
            if kind == _DATA:
                transport = self._transports.get(conn_id)
                if transport is not None:
                    transport.feed(payload)
            elif kind == _OPEN:
                self._opened(plane, conn_id, payload)
            elif kind == _DRAINED:
                transport = self._transports.get(conn_id)
                if transport is not None:
                    transport.drained()
            else:
                transport = self._transports.pop(conn_id, None)
                if transport is not None:
                    conn = transport.get_protocol()
                    conn.close_reason = conn.close_reason or _REASONS.get(payload, CloseReason.PEER_CLOSED)
                    # After the requests read before the close have started (a closing consumer's
                    # last offset commits run as tasks, which the close would cancel), as a
                    # socket's connection_lost comes in a later loop iteration than its data.
                    asyncio.get_running_loop().call_soon(conn.connection_lost, None)
        if self.on_arrivals is not None:
            arrivals = plane.take_arrivals()
            if arrivals:
                self.on_arrivals(arrivals)

    def _opened(self, plane: _store.DataPlane, conn_id: int, peer: tuple[str, int]) -> None:
        conn = Connection(self._handler, max_frame=self._max_frame, limits=self._conn_limits)
        conn.on_close(self._closed)
        transport = PlaneTransport(plane, conn_id, peer, conn, self.limits.reply_buffer_bytes)
        conn.connection_made(transport)
        self._transports[conn_id] = transport
        self.connections.add(conn)
        if self.on_open is not None:
            self.on_open(plane, conn_id, conn)

    def plane_connections(self) -> list[tuple[int, Connection]]:
        """The plane's open connections and their ids."""
        return [(conn_id, t.get_protocol()) for conn_id, t in self._transports.items()]

    def _closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self._closed_here[str(conn.close_reason)] += 1

    def sweep(self, now: float) -> None:
        """The plane closes idle and slow connections itself."""

    async def stop(self) -> None:
        plane = self.plane
        if plane is None:
            return
        # Graceful closes first: each lingers a moment for its peer to take its last replies.
        await asyncio.gather(*(conn.close(CloseReason.SHUTDOWN) for conn in list(self.connections)))
        asyncio.get_running_loop().remove_reader(plane.wake_fd)
        plane.stop(1000)
        for transport in list(self._transports.values()):
            transport.get_protocol().connection_lost(None)
        self._transports.clear()
        self.plane = None
