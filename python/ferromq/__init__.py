"""ferromq: an Apache RocketMQ 4.x compatible message broker with a Rust store."""

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
