"""Stored messages as Python sees them, and the RocketMQ properties string."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
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


def encode_properties(props: Mapping[str, str]) -> str:
    """Serializes properties as RocketMQ stores them: `name\\x01value` joined by `\\x02`."""
    parts = []
    for k, v in props.items():
        if not k or v is None:
            continue
        v = str(v)
        for s in (k, v):
            if NAME_VALUE_SEPARATOR in s or PROPERTY_SEPARATOR in s:
                raise ValueError(f"property {k!r} contains a RocketMQ separator character")
        parts.append(f"{k}{NAME_VALUE_SEPARATOR}{v}")
    return PROPERTY_SEPARATOR.join(parts)


def decode_properties(s: str) -> dict[str, str]:
    """Parses a properties string the way Java's decoder does (empty names or values are dropped)."""
    out: dict[str, str] = {}
    for entry in s.split(PROPERTY_SEPARATOR):
        name, sep, value = entry.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            out[name] = value
    return out


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
