"""The name server: which brokers are alive and which topics each serves."""

from ferromq.namesrv.routeinfo import RouteInfoManager
from ferromq.namesrv.server import NameServer

__all__ = ["NameServer", "RouteInfoManager"]
