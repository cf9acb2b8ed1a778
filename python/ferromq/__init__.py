"""ferromq: an Apache RocketMQ 4.x compatible message broker with a Rust store."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ferromq._store import __version__
    from ferromq.errors import FerroMQError, StoreError
    from ferromq.message import StoredMessage, decode_messages
    from ferromq.store import FlushDiskType, MessageStore, StoreConfig

__all__ = [
    "FerroMQError",
    "FlushDiskType",
    "MessageStore",
    "StoreConfig",
    "StoreError",
    "StoredMessage",
    "__version__",
    "decode_messages",
]

# The names above are imported on first use: a process that needs one part of the package does
# not pay for the rest (every Spark query plans in fresh Python workers that import
# ferromq.spark, three times a query; the store's asyncio wrapper alone costs them ~20 ms each).
_HOME = {
    "__version__": "ferromq._store",
    "FerroMQError": "ferromq.errors",
    "StoreError": "ferromq.errors",
    "StoredMessage": "ferromq.message",
    "decode_messages": "ferromq.message",
    "FlushDiskType": "ferromq.store",
    "MessageStore": "ferromq.store",
    "StoreConfig": "ferromq.store",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'ferromq' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
