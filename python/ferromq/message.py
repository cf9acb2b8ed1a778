"""Stored messages as Python sees them, and the RocketMQ properties string."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from ferromq import _store
from ferromq.protocol.constants import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    SYSFLAG_COMPRESSED,
    SYSFLAG_COMPRESSION_TYPE_MASK,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)

# Re-exported: the names stored messages are read with.
__all__ = [
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "SYSFLAG_COMPRESSED",
    "SYSFLAG_COMPRESSION_TYPE_MASK",
    "TRANSACTION_COMMIT_TYPE",
    "TRANSACTION_PREPARED_TYPE",
    "TRANSACTION_ROLLBACK_TYPE",
    "StoredMessage",
    "decode_messages",
    "decode_properties",
    "encode_properties",
    "tag_codes",
]


# The properties string (`name\x01value` entries joined by `\x02`) is read and written by the
# store crate's one codec (`ferromq_store::message`), which the data plane and the store use too;
# the binding's functions are bound here directly (a wrapper would add a Python call to each).
encode_properties = _store.encode_properties
"""`props` as a client writes them: in order, an empty name or a None value left out, any other
value as its `str()`; ValueError for a name or value holding a separator."""
decode_properties = _store.decode_properties
"""A properties string as Java's decoder reads it: entries without a name or a value dropped, a
repeated name in its first position with its last value."""


@dataclass(frozen=True)
class StoredMessage:
    """One record of the CommitLog, decoded."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    flag: int
    sys_flag: int
    body_crc: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    properties_string: str
    body: bytes
    msg_id: str
    """The broker's offsetMsgId (store host + CommitLog offset)."""

    @cached_property
    def properties(self) -> dict[str, str]:
        return decode_properties(self.properties_string)

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get("KEYS", "").split(" ") if k]

    @property
    def uniq_key(self) -> str | None:
        """The client's message id (UNIQ_KEY property), what clients call msgId."""
        return self.properties.get("UNIQ_KEY")

    @property
    def compressed(self) -> bool:
        return bool(self.sys_flag & SYSFLAG_COMPRESSED)

    def payload(self) -> bytes:
        """The body as the producer meant it: decompressed if the producer compressed it."""
        if not self.compressed:
            return self.body
        kind = (self.sys_flag & SYSFLAG_COMPRESSION_TYPE_MASK) >> 8
        if kind in (0, 3):  # ZLIB
            return zlib.decompress(self.body)
        raise ValueError(f"unsupported compression type {kind} (only zlib is)")


def decode_messages(buf: bytes, *, check_crc: bool = False) -> list[StoredMessage]:
    """Decodes records packed back to back (a store read, a pull or query body)."""
    return [StoredMessage(*fields) for fields in _store.decode_records(buf, check_crc)]


def tag_codes(expression: str | Iterable[str] | None) -> list[int] | None:
    """Tag hash codes of a subscription (`TagA || TagB`, read by the broker's one reader,
    `_store.parse_tag_expression`, as the data plane and the broker read it: sorted, each once;
    ValueError when it names no tag, such as `||`) or of a list of tags; None for `*`, an empty
    expression or none."""
    if expression is None:
        return None
    if isinstance(expression, str):
        parsed = _store.parse_tag_expression(expression)
        return None if parsed is None else [_store.java_hash(t) for t in parsed]
    tags = [t.strip() for t in expression if t.strip()]
    if not tags or "*" in tags:
        return None
    return [_store.java_hash(t) for t in tags]
