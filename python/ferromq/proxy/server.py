"""The broker's gRPC port (`grpcServerPort`, Apache RocketMQ's proxy port, 8081 by default): the
RocketMQ 5.x clients' MessagingService, served by grpcio's asyncio server on the broker's event
loop (`ferromq.proxy.service`)."""

from __future__ import annotations

import errno
import logging
from typing import TYPE_CHECKING

import grpc

from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2_grpc as rpc
from ferromq.proxy.service import MessagingService

if TYPE_CHECKING:
    from ferromq.broker.broker import Broker

logger = logging.getLogger(__name__)
# grpcio's Cython layer logs every poller wake-up at DEBUG: not what `ferromq -v` is for.
logging.getLogger("grpc._cython.cygrpc").setLevel(logging.INFO)

# Java's grpcMaxInboundMessageSize (130 MiB): a send of 4 MiB bodies in a batch fits.
MAX_INBOUND_MESSAGE_SIZE = 130 * 1024 * 1024
# Calls that may wait for the event loop: past grpcio's defaults (1000, hard 3000) it answers
# CANCELLED within a second or so, where Java's proxy lets a call wait for its deadline. Bounded
# still (a queued call holds its request).
MAX_PENDING_REQUESTS = 10_000
MAX_PENDING_REQUESTS_HARD = 20_000
# Seconds the server waits for calls in flight when it stops (long polls end sooner).
STOP_GRACE_SECONDS = 1.0


class GrpcServer:
    def __init__(self, broker: Broker, host: str, port: int) -> None:
        self._broker = broker
        self._host = host
        self._requested_port = port
        self.port = 0
        self.service = MessagingService(broker, self.endpoint)
        self._server: grpc.aio.Server | None = None

    def endpoint(self) -> tuple[str, int]:
        """Where clients reach this port (what routes name)."""
        host = self._host if self._host not in ("0.0.0.0", "::", "") else self._broker.config.broker_ip1
        return host, self.port

    async def start(self) -> None:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_INBOUND_MESSAGE_SIZE),
                ("grpc.server.max_pending_requests", MAX_PENDING_REQUESTS),
                ("grpc.server.max_pending_requests_hard_limit", MAX_PENDING_REQUESTS_HARD),
                ("grpc.so_reuseport", 0),
            ]
        )
        rpc.add_MessagingServiceServicer_to_server(self.service, server)  # type: ignore[no-untyped-call]
        port = server.add_insecure_port(f"{self._host}:{self._requested_port}")
        if port == 0:  # grpcio says no more (most often: the port is taken)
            raise OSError(errno.EADDRINUSE, f"cannot listen for gRPC on {self._host}:{self._requested_port}")
        await server.start()
        self._server, self.port = server, port
        self.service.renewals.start()
        logger.info("gRPC (RocketMQ 5.x clients) listening on %s:%d", self._host, port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(STOP_GRACE_SECONDS)
        await self.service.renewals.stop()
        for client_id in list(self.service.sessions.by_id):
            self.service.sessions.remove(client_id)
