"""What the client sends and receives: Message, MessageQueue, SendResult, received messages, and
the client-side message id (UNIQ_KEY)."""

from __future__ import annotations

import itertools
import os
import socket
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from enum import IntEnum

from ferromq.message import StoredMessage, decode_messages, encode_properties
from ferromq.protocol.constants import (
    PROPERTY_PRIORITY,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    RETRY_PREFIX,
    SYSFLAG_COMPRESSED,
)

# Bodies above this are zlib-compressed (level 5), as the Java and C++ clients do.
COMPRESS_OVER = 4096
COMPRESS_LEVEL = 5


@dataclass
class Message:
    """A message to send. `properties` are user properties; tags, keys and delay have fields."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | list[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    flag: int = 0
    deliver_time_ms: int | None = None
    """A timer message (RocketMQ 5.x brokers and ferromq): delivered at this epoch time in ms,
    rounded down to the broker's timerPrecisionMs (TIMER_DELIVER_MS)."""
    delay_ms: int | None = None
    """A timer message delivered this many ms after the broker stores it (TIMER_DELAY_MS)."""
    priority: int | None = None
    """A priority message (RocketMQ 5.4 brokers and ferromq), 0 the lowest: on a PRIORITY topic the broker
    stores it in queue min(priority, write queues - 1), and pops read the higher queues first. A broker
    drops it from a transaction, delayed or ordered (message group) message."""

    def __post_init__(self) -> None:
        if self.priority is not None and self.priority < 0:
            raise ValueError(f"a message's priority is 0 or more, not {self.priority}")

    def all_properties(self) -> dict[str, str]:
        """User properties plus the system ones the fields stand for."""
        props = dict(self.properties)
        if self.tags:
            props["TAGS"] = self.tags
        if self.keys:
            props["KEYS"] = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
        if self.delay_level > 0:
            props["DELAY"] = str(self.delay_level)
        if self.deliver_time_ms is not None:
            props[PROPERTY_TIMER_DELIVER_MS] = str(self.deliver_time_ms)
        if self.delay_ms is not None:
            props[PROPERTY_TIMER_DELAY_MS] = str(self.delay_ms)
        if self.priority is not None:
            props[PROPERTY_PRIORITY] = str(self.priority)
        return props


@dataclass(frozen=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, object]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}


class SendStatus(IntEnum):
    """RocketMQ's send statuses, numbered as the Java enum's ordinals; printed by name."""

    SEND_OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)


@dataclass(frozen=True)
class SendResult:
    status: SendStatus
    msg_id: str
    """The client message id (the UNIQ_KEY property); for a batch, comma-separated."""
    offset_msg_id: str
    """The broker's id (store host + CommitLog offset); for a batch, comma-separated."""
    message_queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    recall_handle: str | None = None
    """A timer message's handle for `Producer.recall` (RocketMQ 5.3.2+ brokers and ferromq)."""


@dataclass(frozen=True)
class ReceivedMessage:
    """A consumed message: the stored record, with its body decompressed and, for retries,
    the original topic restored."""

    topic: str
    body: bytes
    tags: str | None
    keys: list[str]
    properties: dict[str, str]
    msg_id: str
    """UNIQ_KEY when present, else the offsetMsgId (what the Java and C++ clients report)."""
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    commitlog_offset: int
    reconsume_times: int
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    sys_flag: int
    flag: int

    @classmethod
    def from_stored(cls, m: StoredMessage, broker_name: str) -> ReceivedMessage:
        props = dict(m.properties)
        topic = props.get(PROPERTY_RETRY_TOPIC, m.topic) if m.topic.startswith(RETRY_PREFIX) else m.topic
        return cls(
            topic=topic,
            body=m.payload(),
            tags=props.get("TAGS"),
            keys=[k for k in props.get("KEYS", "").split(" ") if k],
            properties=props,
            msg_id=props.get("UNIQ_KEY") or m.msg_id,
            offset_msg_id=m.msg_id,
            queue=MessageQueue(m.topic, broker_name, m.queue_id),
            queue_offset=m.queue_offset,
            commitlog_offset=m.physical_offset,
            reconsume_times=m.reconsume_times,
            born_timestamp=m.born_timestamp,
            store_timestamp=m.store_timestamp,
            born_host=m.born_host,
            store_host=m.store_host,
            sys_flag=m.sys_flag,
            flag=m.flag,
        )


def decode_received(body: bytes, broker_name: str) -> list[ReceivedMessage]:
    return [ReceivedMessage.from_stored(m, broker_name) for m in decode_messages(body)]


def compress_body(body: bytes) -> tuple[bytes, int]:
    """(body to send, sysflag bits): zlib level 5 above 4 KiB, like the official clients."""
    if len(body) > COMPRESS_OVER:
        packed = zlib.compress(body, COMPRESS_LEVEL)
        if len(packed) < len(body):
            return packed, SYSFLAG_COMPRESSED
    return body, 0


def encode_batch(messages: list[tuple[bytes, int, str]]) -> bytes:
    """The batch body of SEND_BATCH_MESSAGE: (body, flag, properties) per message."""
    out = bytearray()
    for body, flag, props in messages:
        p = props.encode()
        out += struct.pack(">iiiii", 20 + len(body) + 2 + len(p), 0, 0, flag, len(body))
        out += body
        out += struct.pack(">h", len(p)) + p
    return bytes(out)


class UniqueIdGenerator:
    """Client message ids in the Java layout (MessageClientIDSetter): IPv4, pid, a per-process
    random, milliseconds since the start of the month, a counter; 32 upper-case hex digits."""

    def __init__(self) -> None:
        try:
            ip = socket.inet_aton(socket.gethostbyname(socket.gethostname()))
        except OSError:
            ip = b"\x7f\x00\x00\x01"
        self._prefix = ip + struct.pack(
            ">hi", os.getpid() & 0x7FFF, int.from_bytes(os.urandom(4), "big") >> 1
        )
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def next(self) -> str:
        now = time.localtime()
        month_start = time.mktime((now.tm_year, now.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        since = int((time.time() - month_start) * 1000) & 0x7FFFFFFF
        with self._lock:
            n = next(self._counter) & 0xFFFF
        return (self._prefix + struct.pack(">iH", since, n)).hex().upper()


def properties_string(props: dict[str, str]) -> str:
    return encode_properties(props)
