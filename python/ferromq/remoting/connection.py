"""One TCP connection speaking the remoting protocol, in either direction.

The transport hands bytes to the connection (an asyncio protocol), which decodes frames at once.
Replies complete the future waiting under their opaque. A request
handler either answers at once (it returns the reply or None: no task, no scheduling), returns a
future whose result is the answer, or returns another awaitable, which runs as a task of its own
(in arrival order), so a held long poll never blocks the socket. Frames written while the loop
is busy are joined into one socket write per loop iteration. Closing the connection fails every
pending request with `ConnectionClosedError`, and records why it closed (`close_reason`).

Memory stays bounded on a server connection (`ConnectionLimits`): a peer that does not read its
replies stops being read once `reply_buffer_bytes` wait for it (the requests already read wait
undecoded, and requests handled as tasks start their work, only once the replies drain); the
unfinished frames of all connections share one `RequestBudget` of bytes (each reserves its whole
length; a connection whose frame does not fit is not read until it does), which also bounds the
requests being handled by all connections together. A client connection (no limits) always reads.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import ssl as ssl_module
import struct
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from enum import StrEnum
from typing import cast

from ferromq.errors import ConnectionClosedError, RequestTimeoutError
from ferromq.protocol.command import (
    FLAG_ONEWAY,
    MAX_FRAME_SIZE,
    MalformedFrame,
    RemotingCommand,
    decode_frame,
    encode_parts,
)

_INT = struct.Struct(">i")

logger = logging.getLogger(__name__)

# A handler answers at once (a reply, or None for no reply) or returns an awaitable of the answer.
RequestHandler = Callable[
    ["Connection", RemotingCommand], Awaitable[RemotingCommand | None] | RemotingCommand | None
]

# Requests of one connection being handled at once; past this, reading pauses.
MAX_INFLIGHT_REQUESTS = 4096


# How long `close` lets a peer take the replies still buffered for it before dropping them.
CLOSE_LINGER_SECONDS = 2.0

# Frames answered at once are joined into one write until this many bytes wait.
_FLUSH_AT = 64 * 1024


class CloseReason(StrEnum):
    PEER_CLOSED = "peer closed"
    READ_ERROR = "read error"
    PARSE_ERROR = "malformed frame"
    LOCAL_CLOSE = "closed locally"
    SHUTDOWN = "shutdown"
    IDLE = "idle timeout"
    READ_TIMEOUT = "unfinished frame timed out"
    CONNECTION_LIMIT = "connection limit reached"
    ADDRESS_LIMIT = "connection limit of the address reached"
    EVICTED = "longest idle at the connection limit"
    TLS_REQUIRED = "plain connection in TLS enforcing mode"
    TLS_HANDSHAKE = "TLS handshake failed"


# Closes that drop unsent replies (the peer stopped reading, or is not wanted) instead of
# waiting for them to drain.
_ABORTIVE = frozenset(
    {
        CloseReason.IDLE,
        CloseReason.READ_TIMEOUT,
        CloseReason.CONNECTION_LIMIT,
        CloseReason.ADDRESS_LIMIT,
        CloseReason.EVICTED,
    }
)


class ReplyBudget:
    """The reply bytes all connections of a server leave unsent together (their transports' write
    buffers), past which a connection with replies of its own unsent is not read: pipelined
    requests of peers that do not read cannot build replies without bound, whatever the number of
    connections. A connection with none unsent is always read (a new client is served).

    Each connection reports its transport's buffer after it writes and when it drains; those held
    are looked at again every `RECHECK` seconds (a buffer shrinks without telling anyone)."""

    RECHECK = 0.2

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._sizes: dict[Connection, int] = {}  # connections with replies unsent -> bytes
        self._held: set[Connection] = set()
        self._recheck: asyncio.TimerHandle | None = None

    def report(self, conn: Connection, size: int) -> None:
        self.used += size - self._sizes.get(conn, 0)
        if size:
            self._sizes[conn] = size
        else:
            self._sizes.pop(conn, None)

    def holds(self, conn: Connection, size: int) -> bool:
        """Whether `conn`, with `size` reply bytes unsent, must wait before it is read again."""
        self.report(conn, size)
        return size > 0 and self.used >= self.limit

    def hold(self, conn: Connection) -> None:
        self._held.add(conn)
        if self._recheck is None:
            self._recheck = asyncio.get_running_loop().call_later(self.RECHECK, self._look_again)

    def forget(self, conn: Connection) -> None:
        self.report(conn, 0)
        self._held.discard(conn)

    def _look_again(self) -> None:
        self._recheck = None
        for conn in list(self._sizes):
            conn._report_replies()
        held, self._held = self._held, set()
        for conn in held:
            conn._resume_after_replies()  # holds itself again if it must


class RequestBudget:
    """The bytes of unfinished request frames all connections of a server may hold together, and
    the count of requests they are having handled.

    A connection with an unfinished frame reserves the frame's whole length (its header says it).
    A reservation that does not fit waits, first come first served, with the connection not being
    read; one that fits, or any when nothing is reserved (a frame larger than the budget), is
    granted, so every granted frame can complete and no set of waiting connections deadlocks."""

    def __init__(self, limit: int, max_inflight: int | None = None) -> None:
        self.limit = limit
        self.used = 0
        self._waiting: dict[Connection, int] = {}  # insertion-ordered: connection -> bytes needed
        # Requests being handled by all connections, and those not read while too many are.
        self.inflight = 0
        self.max_inflight = max_inflight
        self._busy: set[Connection] = set()

    def request_started(self, conn: Connection) -> bool:
        """Counts a request being handled; True when there are too many (`conn` is then not read
        until an eighth of them are done)."""
        self.inflight += 1
        if self.max_inflight is not None and self.inflight >= self.max_inflight:
            self._busy.add(conn)
            return True
        return False

    def request_done(self) -> None:
        self.inflight -= 1
        if self._busy and self.max_inflight is not None and self.inflight <= self.max_inflight * 7 // 8:
            busy, self._busy = self._busy, set()
            for conn in busy:
                conn._resume("busy")

    def _fits(self, need: int) -> bool:
        return self.used == 0 or self.used + need <= self.limit

    def reserve(self, conn: Connection, held: int, need: int) -> bool:
        """Moves `conn`'s reservation from `held` to `need` bytes; False (and `conn` waits, its
        reservation released) when a larger one does not fit or others wait before it."""
        self.used -= held
        if need <= held:
            self.used += need
            self._wake()
            return True
        self._wake()  # those waiting before, first (`held` is free now)
        if not self._waiting and self._fits(need):
            self.used += need
            return True
        self._waiting[conn] = need
        return False

    def release(self, conn: Connection, held: int) -> None:
        self._waiting.pop(conn, None)
        self._busy.discard(conn)
        self.used -= held
        self._wake()

    def _wake(self) -> None:
        while self._waiting:
            conn, need = next(iter(self._waiting.items()))
            if not self._fits(need):
                return
            del self._waiting[conn]
            self.used += need
            conn._budget_granted(need)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Bounds of one server connection (None: no bound)."""

    reply_buffer_bytes: int | None = None
    """Reply bytes waiting for the peer to read them, past which its requests are not read."""
    request_budget: RequestBudget | None = None
    reply_budget: ReplyBudget | None = None


class Connection(asyncio.Protocol):
    """The protocol object of one socket: the transport hands it bytes (`data_received`), it
    decodes frames and dispatches them right there (no reader task, no stream buffer)."""

    def __init__(
        self,
        handler: RequestHandler | None = None,
        *,
        max_frame: int = MAX_FRAME_SIZE,
        limits: ConnectionLimits | None = None,
        admit: Callable[[Connection], CloseReason | None] | None = None,
    ) -> None:
        """`admit`: asked once the peer's address is known (a server's connection limits); a
        reason closes the connection at once."""
        self._handler = handler
        self._admit = admit
        self._max_frame = max_frame
        self._limits = limits or ConnectionLimits()
        self._transport: asyncio.Transport | None = None
        self.peer_host = "?"
        self.peer_port = 0
        self.peer = "?:0"
        # Set by whoever learns them (the broker, from heartbeats).
        self.client_id: str | None = None
        self.language: str | None = None
        self.version: int | None = None
        self.close_reason: CloseReason | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaque = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        # Requests being handled (tasks and futures); past MAX_INFLIGHT_REQUESTS reading pauses.
        self._inflight = 0
        # Why reading is paused: "inflight" (this connection's), "busy" (all connections'),
        # "replies" (the peer does not read), "budget" (unfinished frames).
        self._pauses: set[str] = set()
        # Bytes of `_buf` counted in the request budget.
        self._budgeted = 0
        # Monotonic times: the last bytes read, the last bytes written, the last complete frame
        # read (or reading resumed: the idle clock), the start of the unfinished frame at the head
        # of `_buf` (None when there is none).
        now = time.monotonic()
        self.last_read = now
        self.last_write = now
        self.last_request = now
        self.partial_since: float | None = None
        self._closed = asyncio.Event()
        self._lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._on_close: list[Callable[[Connection], None]] = []
        self._buf = bytearray()
        # A request of the current chunk became a task that has not started yet.
        self._behind_task = False
        # Frames waiting for the one write of this loop iteration.
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._loop = asyncio.get_running_loop()
        # Writers waiting for the transport's buffer to drain (`drain`).
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses but have the same methods.
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername") or ("?", 0)
        self.peer_host = plain_host(str(peer[0]))
        self.peer_port = int(peer[1])
        self.peer = f"{self.peer_host}:{self.peer_port}"
        refusal = self._admit(self) if self._admit is not None else None
        if refusal is not None:
            self._shutdown(refusal)
            return
        limit = self._limits.reply_buffer_bytes
        if limit is not None:
            self._transport.set_write_buffer_limits(high=limit, low=limit // 2)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_read = time.monotonic()
        # Tasks made by the previous chunk have started by now (their first steps were queued
        # before this read callback).
        self._behind_task = False
        # Whole frames are decoded straight from the chunk; only a partial frame is kept.
        if self._buf:
            self._buf += data
            self._decode(self._buf, False)
        else:
            self._decode(data, True)

    def _decode(self, buf: bytes | bytearray, fresh: bool) -> None:
        """Decodes and dispatches the whole frames of `buf` (the read chunk when `fresh`, else
        `_buf`) until the peer's unread replies pass their bound; keeps the rest in `_buf`."""
        consumed = 0
        try:
            while not self._held_for_replies():
                decoded = decode_frame(buf, self._max_frame, consumed)
                if decoded is None:
                    break
                cmd, used = decoded
                consumed += used
                self._dispatch(cmd)
                if self._out_bytes >= _FLUSH_AT:
                    self._flush()  # may pause writing: the peer reads slower than we answer
        except MalformedFrame as e:
            logger.warning("closing connection from %s: %s", self.peer, e)
            self._shutdown(CloseReason.PARSE_ERROR)
            return
        finally:
            # The answers given at once to this chunk's requests leave in one write.
            self._flush()
        if self.closed:
            return
        if consumed:
            self.last_request = time.monotonic()
        if fresh:
            if consumed < len(buf):
                self._buf = bytearray(buf[consumed:])
        elif consumed:
            del self._buf[:consumed]
        if not self._buf:
            self.partial_since = None
        elif consumed or self.partial_since is None:
            self.partial_since = time.monotonic()
        if self._held_for_replies():
            self._pause("replies")
            if not self._write_paused and self._limits.reply_budget is not None:
                self._limits.reply_budget.hold(self)  # no drain event will come for this one
        self._account_buffer()

    def _held_for_replies(self) -> bool:
        """A server connection whose peer leaves too many replies unread takes no more requests:
        its own (past its bound), or all connections' together (past the reply budget, while
        some of them are its own). (Only with a reply bound: a client always reads, or two peers
        that both stop reading while their writes wait would wait for each other forever.)"""
        if self._limits.reply_buffer_bytes is None:
            return False
        if self._write_paused:
            return True
        budget = self._limits.reply_budget
        if budget is None or self._transport is None:
            return False
        return budget.holds(self, self._transport.get_write_buffer_size())

    def _report_replies(self) -> None:
        budget = self._limits.reply_budget
        if budget is not None and self._transport is not None:
            budget.report(self, 0 if self.closed else self._transport.get_write_buffer_size())

    def _account_buffer(self) -> None:
        """Reserves the length of the unfinished frame at the head of `_buf` in the request
        budget; pauses reading while the reservation waits."""
        budget = self._limits.request_budget
        if budget is None or "budget" in self._pauses:
            return
        need = 0
        if self._buf:
            need = 4 + _INT.unpack_from(self._buf)[0] if len(self._buf) >= 4 else len(self._buf)
        if need == self._budgeted:
            return
        held, self._budgeted = self._budgeted, 0
        if budget.reserve(self, held, need):
            self._budgeted = need
        else:
            self._pause("budget")

    def _budget_granted(self, need: int) -> None:
        self._budgeted = need
        self._resume("budget")

    def _pause(self, why: str) -> None:
        if not self._pauses and self._transport is not None and not self.closed:
            self._transport.pause_reading()
        self._pauses.add(why)

    def _resume(self, why: str) -> None:
        if why not in self._pauses:
            return
        self._pauses.discard(why)
        if not self._pauses and self._transport is not None and not self.closed:
            self._transport.resume_reading()
            self.last_request = time.monotonic()  # the idle clock measures the peer, too
            if self.partial_since is not None:
                # The read timeout measures the peer, not the time the server held it back.
                self.partial_since = time.monotonic()

    @property
    def reading_paused_for(self) -> frozenset[str]:
        """Why the connection is not being read (empty when it is)."""
        return frozenset(self._pauses)

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            logger.debug("read error on %s: %s", self.peer, exc)
        self._shutdown(CloseReason.READ_ERROR if exc is not None else CloseReason.PEER_CLOSED)
        if not self._lost.done():
            self._lost.set_result(None)
        self._wake_drainers()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._report_replies()
        self.last_write = time.monotonic()
        self._wake_drainers()
        if "replies" in self._pauses and not self.closed:
            # The requests read before the pause are answered first, then reading resumes.
            self._loop.call_soon(self._resume_after_replies)

    def _resume_after_replies(self) -> None:
        if self.closed or self._write_paused:
            return
        self._behind_task = False
        if self._buf:
            self._decode(self._buf, False)
        if not self._held_for_replies():
            self._resume("replies")

    def _wake_drainers(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    # -- the connection --------------------------------------------------------------------------

    def start(self) -> None:
        """Kept for callers of the stream-based version: a protocol reads as soon as it is made."""

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def on_close(self, callback: Callable[[Connection], None]) -> None:
        if self.closed:
            callback(self)
        else:
            self._on_close.append(callback)

    def _dispatch(self, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            fut = self._pending.pop(cmd.opaque, None)
            if fut is None:
                logger.debug("reply with unknown opaque %d from %s dropped", cmd.opaque, self.peer)
            elif not fut.done():
                fut.set_result(cmd)
            return
        if self._handler is None:
            logger.debug("request code %d from %s ignored (no handler)", cmd.code, self.peer)
            return
        if self._behind_task:
            # An earlier request of this chunk runs as a task that has not started yet: this one
            # waits its turn too, so requests still start in arrival order (a heartbeat before a
            # pull, a topic creation before a send).
            self._start(cmd, self._call(cmd))
            return
        answer = self._handler(self, cmd)
        if answer is None or isinstance(answer, RemotingCommand):
            if answer is not None and not cmd.is_oneway:
                self.write(answer)
            return
        if isinstance(answer, asyncio.Future):
            # A future (a send waiting for the disk; its work is done) answers from its callback.
            self._count_inflight()
            answer.add_done_callback(functools.partial(self._future_done, cmd))
            return
        self._behind_task = True
        self._start(cmd, answer)

    async def _call(self, cmd: RemotingCommand) -> RemotingCommand | None:
        assert self._handler is not None
        answer = self._handler(self, cmd)
        if answer is None or isinstance(answer, RemotingCommand):
            return answer
        return await answer

    def _start(self, cmd: RemotingCommand, answer: Awaitable[RemotingCommand | None]) -> None:
        self._count_inflight()
        task = self._loop.create_task(self._handle(cmd, answer))
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._request_done, answer))

    def _count_inflight(self) -> None:
        self._inflight += 1
        if self._inflight >= MAX_INFLIGHT_REQUESTS:
            self._pause("inflight")
        budget = self._limits.request_budget
        if budget is not None and budget.request_started(self):
            self._pause("busy")

    def _one_done(self) -> None:
        self._inflight -= 1
        if self._inflight <= MAX_INFLIGHT_REQUESTS // 2:
            self._resume("inflight")
        if self._limits.request_budget is not None:
            self._limits.request_budget.request_done()

    def _request_done(self, answer: Awaitable[RemotingCommand | None], task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._one_done()
        if isinstance(answer, Coroutine):
            # A task cancelled before its first step (the connection closed) never started it.
            answer.close()
        _log_crash(task)

    def _future_done(self, cmd: RemotingCommand, answer: asyncio.Future[RemotingCommand | None]) -> None:
        self._one_done()
        if answer.cancelled():
            return
        if answer.exception() is not None:
            logger.error("request %d from %s failed", cmd.code, self.peer, exc_info=answer.exception())
            return
        reply = answer.result()
        if reply is not None and not cmd.is_oneway:
            self.write(reply)

    async def _handle(self, cmd: RemotingCommand, answer: Awaitable[RemotingCommand | None]) -> None:
        # A request handled as a task does its work (a store read, a reply built) only once the
        # peer takes the replies it was given: pipelined requests do not pile up replies.
        await self.replies_drained()
        reply = await answer
        if reply is not None and not cmd.is_oneway and not self.closed:
            self.write(reply)

    def write(self, cmd: RemotingCommand) -> None:
        """Queues one frame for sending; the frames queued in one loop iteration go out in one
        socket write at its end (or when the reader finishes a chunk of requests)."""
        if self.closed:
            return
        head, body = encode_parts(cmd)
        self._out.append(head)
        self._out_bytes += len(head) + len(body)
        if body:
            self._out.append(body)
        if self._out_bytes >= _FLUSH_AT:
            self._flush()  # at once: a peer that reads slowly pauses writing before the next reply
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._out:
            return
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        self._out_bytes = 0
        self.last_write = time.monotonic()
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        try:
            transport.write(data)
        except (ConnectionError, RuntimeError) as e:
            logger.debug("write to %s failed: %s", self.peer, e)
        self._report_replies()

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Sends a request and waits for its reply (or raises RequestTimeoutError)."""
        if self.closed:
            raise ConnectionClosedError(f"connection to {self.peer} is closed")
        cmd.opaque = next(self._opaque)
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[cmd.opaque] = fut
        try:
            self.write(cmd)
            self._flush()
            await self.drain()
            async with asyncio.timeout(timeout):
                return await fut
        except TimeoutError:
            raise RequestTimeoutError(
                f"no reply from {self.peer} to request code {cmd.code} within {timeout:.1f}s"
            ) from None
        finally:
            self._pending.pop(cmd.opaque, None)

    async def oneway(self, cmd: RemotingCommand) -> None:
        """Sends a request that gets no reply."""
        cmd.opaque = next(self._opaque)
        cmd.flag |= FLAG_ONEWAY
        self.write(cmd)
        self._flush()
        await self.drain()

    async def replies_drained(self) -> None:
        """Waits while a server connection's peer leaves more replies unread than its bound (see
        `ConnectionLimits.reply_buffer_bytes`); at once otherwise, or when the connection closes."""
        while self._held_for_replies() and not self.closed:
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter

    async def drain(self) -> None:
        """Waits while the socket's send buffer is over its high-water mark."""
        self._flush()
        if not self._write_paused or self.closed:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def abort(self, reason: CloseReason) -> None:
        """Closes at once, recording `reason`; replies not yet sent are dropped for the reasons
        that mean the peer is gone or unwanted (idle, read timeout, connection limit)."""
        self._shutdown(reason)

    def _shutdown(self, reason: CloseReason) -> None:
        if self.closed:
            return
        self.close_reason = self.close_reason or reason
        self._closed.set()
        budget = self._limits.request_budget
        if budget is not None:
            budget.release(self, self._budgeted)
            self._budgeted = 0
        if self._limits.reply_budget is not None:
            self._limits.reply_budget.forget(self)
        self._buf = bytearray()
        logger.debug("connection %s closed: %s", self.peer, self.close_reason)
        err = ConnectionClosedError(f"connection to {self.peer} closed: {self.close_reason}")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        if self._transport is not None:
            if self.close_reason in _ABORTIVE:
                self._out.clear()
                self._transport.abort()
            else:
                self._flush()
                self._transport.close()
        for task in list(self._tasks):
            task.cancel()
        for cb in self._on_close:
            try:
                cb(self)
            except Exception:
                logger.exception("close callback of %s failed", self.peer)

    async def close(self, reason: CloseReason = CloseReason.LOCAL_CLOSE) -> None:
        self.close_reason = self.close_reason or reason
        self._shutdown(reason)
        tasks = list(self._tasks)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._transport is not None:
            try:
                # A peer that reads nothing would hold a graceful close open forever.
                async with asyncio.timeout(CLOSE_LINGER_SECONDS):
                    await asyncio.shield(self._lost)
            except TimeoutError:
                logger.debug("%s did not take its last replies; connection aborted", self.peer)
                self._transport.abort()
                await self._lost


def plain_host(host: str) -> str:
    """`::ffff:a.b.c.d` peers of a dual-stack socket are IPv4 clients."""
    return host[7:] if host.startswith("::ffff:") else host


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("task %s died", task.get_name(), exc_info=task.exception())


async def open_connection(
    host: str,
    port: int,
    handler: RequestHandler | None = None,
    timeout: float = 3.0,
    ssl: ssl_module.SSLContext | None = None,
) -> Connection:
    """A client connection (over TLS with an `ssl` context; the host name is not checked unless
    the context does)."""
    loop = asyncio.get_running_loop()
    server_hostname = host if ssl is not None and ssl.check_hostname else None
    async with asyncio.timeout(timeout):
        _, conn = await loop.create_connection(
            lambda: Connection(handler), host, port, ssl=ssl, server_hostname=server_hostname
        )
    return conn
