"""Routes requests to handlers by code and turns exceptions into response codes: the only place
where that happens."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ferromq.errors import FerroMQError
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import Connection

logger = logging.getLogger(__name__)

Handler = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand | None]]


class Dispatcher:
    def __init__(self, handlers: dict[int, Handler], name: str) -> None:
        self._handlers = dict(handlers)
        self._name = name

    async def __call__(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        handler = self._handlers.get(cmd.code)
        if handler is None:
            return cmd.reply(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
            )
        try:
            return await handler(conn, cmd)
        except FerroMQError as e:
            logger.debug("%s: request %d from %s refused: %s", self._name, cmd.code, conn.peer, e)
            return cmd.reply(e.code, str(e))
        except Exception as e:
            logger.exception("%s: request %d from %s failed", self._name, cmd.code, conn.peer)
            return cmd.reply(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
