"""A TCP server whose connections hand requests to one handler."""

from __future__ import annotations

import asyncio
import logging

from ferromq.protocol.command import MAX_FRAME_SIZE
from ferromq.remoting.connection import CloseReason, Connection, RequestHandler

logger = logging.getLogger(__name__)


class RemotingServer:
    def __init__(
        self, handler: RequestHandler, host: str = "127.0.0.1", port: int = 0, max_frame: int = MAX_FRAME_SIZE
    ) -> None:
        self._handler = handler
        self._host = host
        self._port = port
        self._max_frame = max_frame
        self._server: asyncio.Server | None = None
        self.connections: set[Connection] = set()

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None, "server not started"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.get_running_loop().create_server(self._accept, self._host, self._port)

    def _accept(self) -> Connection:
        conn = Connection(self._handler, max_frame=self._max_frame)
        self.connections.add(conn)
        conn.on_close(self.connections.discard)
        return conn

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for conn in list(self.connections):
            await conn.close(CloseReason.SHUTDOWN)
        await self._server.wait_closed()
        self._server = None
