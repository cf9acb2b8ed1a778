"""Routes requests to handlers by code and turns exceptions into response codes: the only place
where that happens."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ferromq.errors import FerroMQError
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.command import RemotingCommand
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


class Dispatcher:
    def __init__(
        self,
        handlers: dict[int, Handler],
        name: str,
        immediate: dict[int, ImmediateHandler] | None = None,
    ) -> None:
        self._handlers = dict(handlers)
        self._immediate = dict(immediate or {})
        self._name = name

    def __call__(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand | None] | None:
        fast = self._immediate.get(cmd.code)
        if fast is None:
            return self._run(conn, cmd, None)
        try:
            answer = fast(conn, cmd)
        except Exception as e:
            return self._refusal(conn, cmd, e)
        if answer is None or isinstance(answer, RemotingCommand | asyncio.Future):
            return answer
        return self._run(conn, cmd, answer)

    async def _run(
        self, conn: Connection, cmd: RemotingCommand, answer: Awaitable[RemotingCommand | None] | None
    ) -> RemotingCommand | None:
        try:
            if answer is not None:
                return await answer
            handler = self._handlers.get(cmd.code)
            if handler is None:
                return cmd.reply(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
                )
            return await handler(conn, cmd)
        except Exception as e:
            return self._refusal(conn, cmd, e)

    def _refusal(self, conn: Connection, cmd: RemotingCommand, e: Exception) -> RemotingCommand:
        if isinstance(e, FerroMQError):
            logger.debug("%s: request %d from %s refused: %s", self._name, cmd.code, conn.peer, e)
            return cmd.reply(e.code, str(e))
        logger.error("%s: request %d from %s failed", self._name, cmd.code, conn.peer, exc_info=e)
        return cmd.reply(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
