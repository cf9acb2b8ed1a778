"""What an address exposes: a server whose listening address is not loopback is reachable from
the network, and then must not take state changes from unauthenticated peers."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether `host` (an IP address, `[::1]`, or `localhost`) only reaches this machine. Any
    other name, and the wildcard addresses (0.0.0.0, ::), count as exposed."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
