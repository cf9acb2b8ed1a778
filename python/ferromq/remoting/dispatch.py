"""Routes requests to handlers by code and turns exceptions into response codes: the only place
where that happens."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable

from ferromq.errors import FerroMQError
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.command import MAX_FRAME_SIZE, RemotingCommand
from ferromq.remoting.connection import Connection

logger = logging.getLogger(__name__)

Handler = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand | None]]
# A handler for the hot path: it answers at once when it can (no task is created for it), or
# returns an awaitable when it must wait (a SYNC_FLUSH send waiting for the disk). An
# `asyncio.Future` it returns goes to the connection as is, so it must resolve to the answer
# (an error reply included), never to an exception.
ImmediateHandler = Callable[
    [Connection, RemotingCommand], RemotingCommand | Awaitable[RemotingCommand | None] | None
]
# Runs before any handler (the broker's ACL): raises a `FerroMQError` to refuse the request.
Guard = Callable[[Connection, RemotingCommand], None]


# Told of each answered request: (request code, response code, nanoseconds since it arrived).
ReplyObserver = Callable[[int, int, int], None]


class Dispatcher:
    def __init__(
        self,
        handlers: dict[int, Handler],
        name: str,
        immediate: dict[int, ImmediateHandler] | None = None,
        guard: Guard | None = None,
        on_reply: ReplyObserver | None = None,
    ) -> None:
        self._handlers = dict(handlers)
        self._immediate = dict(immediate or {})
        self._name = name
        self._guard = guard
        self._on_reply = on_reply

    def __call__(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand | None] | None:
        if self._on_reply is None:
            return self._dispatch(conn, cmd)
        started = time.perf_counter_ns()
        answer = self._dispatch(conn, cmd)
        if isinstance(answer, RemotingCommand):
            self._on_reply(cmd.code, answer.code, time.perf_counter_ns() - started)
        elif isinstance(answer, asyncio.Future):
            answer.add_done_callback(functools.partial(self._observe, cmd.code, started))
        elif answer is not None:
            return self._timed(cmd.code, started, answer)
        return answer

    def _observe(self, code: int, started: int, done: asyncio.Future[RemotingCommand | None]) -> None:
        reply = None if done.cancelled() or done.exception() is not None else done.result()
        if reply is not None and self._on_reply is not None:
            self._on_reply(code, reply.code, time.perf_counter_ns() - started)

    async def _timed(
        self, code: int, started: int, answer: Awaitable[RemotingCommand | None]
    ) -> RemotingCommand | None:
        reply = await answer
        if reply is not None and self._on_reply is not None:
            self._on_reply(code, reply.code, time.perf_counter_ns() - started)
        return reply

    def _dispatch(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand | None] | None:
        if self._guard is not None:
            try:
                self._guard(conn, cmd)
            except Exception as e:
                return self._refusal(conn, cmd, e)
        fast = self._immediate.get(cmd.code)
        if fast is None:
            return self._run(conn, cmd, None)
        try:
            answer = fast(conn, cmd)
        except Exception as e:
            return self._refusal(conn, cmd, e)
        if answer is None:
            return None
        if isinstance(answer, RemotingCommand):
            return _bounded(cmd, answer)
        if isinstance(answer, asyncio.Future):
            return answer
        return self._run(conn, cmd, answer)

    async def _run(
        self, conn: Connection, cmd: RemotingCommand, answer: Awaitable[RemotingCommand | None] | None
    ) -> RemotingCommand | None:
        try:
            if answer is not None:
                reply = await answer
            else:
                handler = self._handlers.get(cmd.code)
                if handler is None:
                    return cmd.reply(
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
                    )
                reply = await handler(conn, cmd)
        except Exception as e:
            return self._refusal(conn, cmd, e)
        return None if reply is None else _bounded(cmd, reply)

    def _refusal(self, conn: Connection, cmd: RemotingCommand, e: Exception) -> RemotingCommand:
        """A typed error keeps its RocketMQ code and message; anything else is logged with its
        traceback and answered SYSTEM_ERROR with a generic remark (no Python text leaves)."""
        if isinstance(e, FerroMQError):
            logger.debug("%s: request %d from %s refused: %s", self._name, cmd.code, conn.peer, e)
            return cmd.reply(e.code, str(e))
        logger.error(
            "%s: request %d (opaque %d) from %s failed",
            self._name,
            cmd.code,
            cmd.opaque,
            conn.peer,
            exc_info=e,
        )
        return cmd.reply(
            ResponseCode.SYSTEM_ERROR, f"the server failed to process request code {cmd.code}; see its log"
        )


# Room left in a frame for the reply's header (the body gets the rest).
_HEADER_ROOM = 64 * 1024


def _bounded(cmd: RemotingCommand, reply: RemotingCommand) -> RemotingCommand:
    """The reply, or a SYSTEM_ERROR refusal when its body would not fit in one frame (a client
    cannot read a frame over the limit)."""
    if len(reply.body) <= MAX_FRAME_SIZE - _HEADER_ROOM:
        return reply
    logger.warning(
        "reply to request %d (opaque %d) refused: its body of %d bytes exceeds the frame limit",
        cmd.code,
        cmd.opaque,
        len(reply.body),
    )
    return cmd.reply(
        ResponseCode.SYSTEM_ERROR,
        f"the reply ({len(reply.body)} bytes) would exceed the frame limit of {MAX_FRAME_SIZE} bytes; "
        "ask for less (one topic, fewer queues)",
    )
