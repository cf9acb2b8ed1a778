"""One TCP connection speaking the remoting protocol, in either direction.

The transport hands bytes to the connection (an asyncio protocol), which decodes frames at once.
Replies complete the future waiting under their opaque. A request
handler either answers at once (it returns the reply or None: no task, no scheduling), returns a
future whose result is the answer, or returns another awaitable, which runs as a task of its own
(in arrival order), so a held long poll never blocks the socket. Frames written while the loop
is busy are joined into one socket write per loop iteration. Closing the connection fails every
pending request with `ConnectionClosedError`.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Awaitable, Callable
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

logger = logging.getLogger(__name__)

# A handler answers at once (a reply, or None for no reply) or returns an awaitable of the answer.
RequestHandler = Callable[
    ["Connection", RemotingCommand], Awaitable[RemotingCommand | None] | RemotingCommand | None
]

# Requests of one connection being handled at once; past this, reading pauses.
MAX_INFLIGHT_REQUESTS = 4096


class CloseReason(StrEnum):
    PEER_CLOSED = "peer closed"
    READ_ERROR = "read error"
    PARSE_ERROR = "malformed frame"
    LOCAL_CLOSE = "closed locally"
    SHUTDOWN = "shutdown"


class Connection(asyncio.Protocol):
    """The protocol object of one socket: the transport hands it bytes (`data_received`), it
    decodes frames and dispatches them right there (no reader task, no stream buffer)."""

    def __init__(self, handler: RequestHandler | None = None, *, max_frame: int = MAX_FRAME_SIZE) -> None:
        self._handler = handler
        self._max_frame = max_frame
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
        self._reading_paused = False
        self._closed = asyncio.Event()
        self._lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._on_close: list[Callable[[Connection], None]] = []
        self._buf = bytearray()
        # A request of the current chunk became a task that has not started yet.
        self._behind_task = False
        # Frames waiting for the one write of this loop iteration.
        self._out: list[bytes] = []
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
        self.peer_host = _ipv4(str(peer[0]))
        self.peer_port = int(peer[1])
        self.peer = f"{self.peer_host}:{self.peer_port}"

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        # Tasks made by the previous chunk have started by now (their first steps were queued
        # before this read callback).
        self._behind_task = False
        # Whole frames are decoded straight from the chunk; only a partial frame is kept.
        buf: bytes | bytearray
        if self._buf:
            buf = self._buf
            buf += data
        else:
            buf = data
        consumed = 0
        try:
            while True:
                decoded = decode_frame(buf, self._max_frame, consumed)
                if decoded is None:
                    break
                cmd, used = decoded
                consumed += used
                self._dispatch(cmd)
        except MalformedFrame as e:
            logger.warning("closing connection from %s: %s", self.peer, e)
            self._shutdown(CloseReason.PARSE_ERROR)
            return
        finally:
            # The answers given at once to this chunk's requests leave in one write.
            self._flush()
        if buf is data:
            if consumed < len(data):
                self._buf = bytearray(data[consumed:])
        elif consumed:
            del self._buf[:consumed]

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
        self._wake_drainers()

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
        task.add_done_callback(self._request_done)

    def _count_inflight(self) -> None:
        self._inflight += 1
        if self._inflight >= MAX_INFLIGHT_REQUESTS and not self._reading_paused and self._transport:
            self._reading_paused = True
            self._transport.pause_reading()

    def _one_done(self) -> None:
        self._inflight -= 1
        if self._reading_paused and self._inflight <= MAX_INFLIGHT_REQUESTS // 2 and not self.closed:
            self._reading_paused = False
            if self._transport is not None:
                self._transport.resume_reading()

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._one_done()
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
        if body:
            self._out.append(body)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._out:
            return
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        try:
            transport.write(data)
        except (ConnectionError, RuntimeError) as e:
            logger.debug("write to %s failed: %s", self.peer, e)

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

    async def drain(self) -> None:
        """Waits while the socket's send buffer is over its high-water mark."""
        self._flush()
        if not self._write_paused or self.closed:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def _shutdown(self, reason: CloseReason) -> None:
        if self.closed:
            return
        self.close_reason = self.close_reason or reason
        self._closed.set()
        err = ConnectionClosedError(f"connection to {self.peer} closed: {self.close_reason}")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        self._flush()
        if self._transport is not None:
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
            await self._lost


def _ipv4(host: str) -> str:
    """`::ffff:a.b.c.d` peers of a dual-stack socket are IPv4 clients."""
    return host[7:] if host.startswith("::ffff:") else host


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("task %s died", task.get_name(), exc_info=task.exception())


async def open_connection(
    host: str, port: int, handler: RequestHandler | None = None, timeout: float = 3.0
) -> Connection:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeout):
        _, conn = await loop.create_connection(lambda: Connection(handler), host, port)
    return conn
