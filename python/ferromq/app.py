"""The composition at the top: a broker with the proxy's gRPC port.

`ferromq.broker` does not import `ferromq.proxy` (the proxy serves over the broker's interfaces);
this module, above both, gives the broker the gRPC server it starts when grpcServerPort is set.
`ferromq serve`, `ferromq broker`, `ferromq proxy` (local mode) and `ferromq.testing` build their
brokers here.
"""

from __future__ import annotations

from ferromq.broker.broker import Broker, GrpcPort
from ferromq.broker.config import BrokerConfig


def grpc_port(broker: Broker, host: str, port: int) -> GrpcPort:
    """The proxy's gRPC server over `broker` (local mode)."""
    from ferromq.proxy.local import LocalBackend
    from ferromq.proxy.server import GrpcServer  # grpcio only where gRPC is served

    return GrpcServer(LocalBackend(broker), host, port)


def make_broker(config: BrokerConfig, host: str = "0.0.0.0") -> Broker:
    """A broker that serves gRPC on `config.grpc_server_port` when that is set."""
    return Broker(config, host, grpc_port=grpc_port)
