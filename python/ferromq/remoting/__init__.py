"""asyncio transport for the remoting protocol: connections, server, client, dispatch."""

from ferromq.remoting.connection import CloseReason, Connection
from ferromq.remoting.dispatch import Dispatcher, Handler
from ferromq.remoting.server import RemotingServer

__all__ = ["CloseReason", "Connection", "Dispatcher", "Handler", "RemotingServer"]
