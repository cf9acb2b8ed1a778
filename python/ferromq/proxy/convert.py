"""Messages between the 5.x clients' protocol and the store, as Apache RocketMQ's proxy converts
them (`GrpcConverter`, `SendMessageActivity`). The rules of a send (the proxy's checks with its
codes and texts, the stored properties and system flag, the message's type, a FIFO group's queue)
live once, in Rust (`ferromq_grpc::convert`): the gRPC front applies them to the sends it serves on
the data plane, and this module, through the binding, to the sends the service serves. A stored
record becomes a v2 `Message` with its receipt handle here."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from google.protobuf import duration_pb2, timestamp_pb2

from ferromq import _store
from ferromq.message import StoredMessage
from ferromq.protocol.constants import (
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
)
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.status import ProxyError

# System property names the 5.x protocol carries in its own fields.
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_BORN_HOST = "__BORNHOST"
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"

# Names a client may not set as user properties, and which a received message does not show as
# its user properties (Java's MessageConst.STRING_HASH_SET; `_store` holds the list).
SYSTEM_PROPERTIES = frozenset(_store.GRPC_SYSTEM_PROPERTIES)

SYSFLAG_COMPRESSED = 0x1


def _refusal(e: ValueError) -> Exception:
    """The binding's ValueError(code, message) as the front's ProxyError."""
    if len(e.args) == 2 and isinstance(e.args[0], int):
        return ProxyError(e.args[0], e.args[1])
    return e


def check_topic_name(name: str) -> None:
    """ILLEGAL_TOPIC, with the proxy's texts, for a name a client may not use."""
    try:
        _store.grpc_check_topic(name)
    except ValueError as e:
        raise _refusal(e) from None


def message_type_of(properties: dict[str, str]) -> int:
    """A message's type by its properties (what the topic's message.type is checked against)."""
    return pb.MessageType.Value(_store.grpc_message_type(properties))


def millis(ts: timestamp_pb2.Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def duration_ms(d: duration_pb2.Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


@dataclass(frozen=True)
class Outgoing:
    """A v2 message as the broker stores it."""

    topic: str
    body: bytes
    properties_string: str
    sys_flag: int
    born_timestamp: int
    """0: the client gave none."""
    message_type: str
    """NORMAL, FIFO, DELAY or TRANSACTION."""
    message_group: str | None


def to_store(m: pb.Message, peer: str, now_ms: int) -> Outgoing:
    """The RocketMQ message of a v2 message from `peer` (SendMessageActivity.buildMessage), after
    the proxy's checks on it in its order (ProxyError on the first that fails)."""
    try:
        properties, sys_flag, born, message_type, group = _store.grpc_outgoing(
            m.SerializeToString(), peer, now_ms
        )
    except ValueError as e:
        raise _refusal(e) from None
    return Outgoing(m.topic.name, bytes(m.body), properties, sys_flag, born, message_type, group)


def fifo_queue(message_group: str, queues: int) -> int:
    """The write queue of a message group: Guava's consistentHash of the group's Java hash code, as
    the proxy's SendMessageQueueSelector picks it (a group keeps its queue while the count does)."""
    return _store.fifo_queue(message_group, queues)


def _timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def to_v2(m: StoredMessage, topic: str, receipt_handle: str | None) -> pb.Message:
    """A stored message as a 5.x client receives it (GrpcConverter.buildMessage): `topic` is the
    one it asked for (a retry message shows its original topic)."""
    props = m.properties
    sp = pb.SystemProperties(
        message_id=props.get(PROPERTY_UNIQ_KEY) or m.msg_id,
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(m.body).hexdigest().upper()),
        body_encoding=pb.GZIP if m.sys_flag & SYSFLAG_COMPRESSED else pb.IDENTITY,
        message_type=message_type_of(props),  # type: ignore[arg-type]
        born_timestamp=_timestamp(m.born_timestamp),
        born_host=props.get(PROPERTY_BORN_HOST) or m.born_host.rsplit(":", 1)[0],
        store_timestamp=_timestamp(m.store_timestamp),
        store_host=m.store_host,
        queue_id=m.queue_id,
        queue_offset=m.queue_offset,
        delivery_attempt=m.reconsume_times + 1,
    )
    tag = props.get(PROPERTY_TAGS)
    if tag is not None:
        sp.tag = tag
    sp.keys.extend(m.keys)
    if PROPERTY_TIMER_DELAY_SEC in props and props[PROPERTY_TIMER_DELAY_SEC].isdigit():
        sp.delivery_timestamp.CopyFrom(
            _timestamp(m.born_timestamp + int(props[PROPERTY_TIMER_DELAY_SEC]) * 1000)
        )
    elif props.get(PROPERTY_TIMER_DELIVER_MS, "").isdigit():
        sp.delivery_timestamp.CopyFrom(_timestamp(int(props[PROPERTY_TIMER_DELIVER_MS])))
    if PROPERTY_SHARDING_KEY in props:
        sp.message_group = props[PROPERTY_SHARDING_KEY]
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    if PROPERTY_TRACE_CONTEXT in props:
        sp.trace_context = props[PROPERTY_TRACE_CONTEXT]
    if PROPERTY_DLQ_ORIGIN_TOPIC in props and PROPERTY_DLQ_ORIGIN_MESSAGE_ID in props:
        sp.dead_letter_queue.topic = props[PROPERTY_DLQ_ORIGIN_TOPIC]
        sp.dead_letter_queue.message_id = props[PROPERTY_DLQ_ORIGIN_MESSAGE_ID]
    user = {k: v for k, v in props.items() if k not in SYSTEM_PROPERTIES}
    return pb.Message(topic=pb.Resource(name=topic), user_properties=user, system_properties=sp, body=m.body)
