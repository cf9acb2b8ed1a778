"""One TCP connection speaking the remoting protocol, in either direction.

A reader task decodes frames. Replies complete the future waiting under their opaque. A request
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


class Connection:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        handler: RequestHandler | None = None,
        *,
        max_frame: int = MAX_FRAME_SIZE,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._handler = handler
        self._max_frame = max_frame
        peer = writer.get_extra_info("peername") or ("?", 0)
        self.peer_host: str = _ipv4(str(peer[0]))
        self.peer_port: int = int(peer[1])
        self.peer = f"{self.peer_host}:{self.peer_port}"
        # Set by whoever learns them (the broker, from heartbeats).
        self.client_id: str | None = None
        self.language: str | None = None
        self.version: int | None = None
        self.close_reason: CloseReason | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaque = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._inflight = asyncio.Semaphore(MAX_INFLIGHT_REQUESTS)
        self._closed = asyncio.Event()
        self._on_close: list[Callable[[Connection], None]] = []
        self._read_task: asyncio.Task[None] | None = None
        # Frames waiting for the one write of this loop iteration.
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._loop = asyncio.get_running_loop()

    def start(self) -> None:
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        self._read_task.add_done_callback(_log_crash)

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

    async def _read_loop(self) -> None:
        buf = bytearray()
        reason = CloseReason.PEER_CLOSED
        try:
            while True:
                data = await self._reader.read(256 * 1024)
                if not data:
                    break
                buf += data
                consumed = 0
                try:
                    while True:
                        decoded = decode_frame(memoryview(buf)[consumed:], self._max_frame)
                        if decoded is None:
                            break
                        cmd, used = decoded
                        consumed += used
                        await self._dispatch(cmd)
                finally:
                    # The answers given at once to this chunk's requests leave in one write.
                    self._flush()
                if consumed:
                    del buf[:consumed]
        except MalformedFrame as e:
            logger.warning("closing connection from %s: %s", self.peer, e)
            reason = CloseReason.PARSE_ERROR
        except (ConnectionError, OSError) as e:
            logger.debug("read error on %s: %s", self.peer, e)
            reason = CloseReason.READ_ERROR
        except asyncio.CancelledError:
            reason = self.close_reason or CloseReason.LOCAL_CLOSE
        finally:
            self._shutdown(reason)

    async def _dispatch(self, cmd: RemotingCommand) -> None:
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
        answer = self._handler(self, cmd)
        if answer is None or isinstance(answer, RemotingCommand):
            if answer is not None and not cmd.is_oneway:
                self.write(answer)
            return
        await self._inflight.acquire()
        if isinstance(answer, asyncio.Future):
            # A future (a send waiting for the disk) answers from its callback: no task.
            answer.add_done_callback(functools.partial(self._future_done, cmd))
            return
        task = self._loop.create_task(self._handle(cmd, answer))
        self._tasks.add(task)
        task.add_done_callback(self._request_done)

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._inflight.release()
        _log_crash(task)

    def _future_done(self, cmd: RemotingCommand, answer: asyncio.Future[RemotingCommand | None]) -> None:
        self._inflight.release()
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
        if self.closed and self._writer.is_closing():
            return
        try:
            self._writer.write(data)
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
            await self._writer.drain()
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
        try:
            await self._writer.drain()
        except ConnectionError as e:
            logger.debug("one-way request to %s failed: %s", self.peer, e)

    async def drain(self) -> None:
        await self._writer.drain()

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
        self._writer.close()
        for task in list(self._tasks):
            task.cancel()
        for cb in self._on_close:
            try:
                cb(self)
            except Exception:
                logger.exception("close callback of %s failed", self.peer)

    async def close(self, reason: CloseReason = CloseReason.LOCAL_CLOSE) -> None:
        self.close_reason = self.close_reason or reason
        if self._read_task is not None and not self._read_task.done():
            self._read_task.cancel()
            await asyncio.gather(self._read_task, return_exceptions=True)
        self._shutdown(reason)
        tasks = list(self._tasks)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await self._writer.wait_closed()
        except (ConnectionError, OSError):
            pass


def _ipv4(host: str) -> str:
    """`::ffff:a.b.c.d` peers of a dual-stack socket are IPv4 clients."""
    return host[7:] if host.startswith("::ffff:") else host


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("task %s died", task.get_name(), exc_info=task.exception())


async def open_connection(
    host: str, port: int, handler: RequestHandler | None = None, timeout: float = 3.0
) -> Connection:
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(host, port)
    conn = Connection(reader, writer, handler)
    conn.start()
    return conn
