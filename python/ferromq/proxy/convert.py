"""Messages between the 5.x clients' protocol and the store, as Apache RocketMQ's proxy converts
them (`GrpcConverter`, `SendMessageActivity`): a v2 `Message` to be sent becomes a RocketMQ
message (properties, system flag), a stored record becomes a v2 `Message` with its receipt
handle. The checks a send must pass (`validate_send`) are the proxy's, with its codes and texts."""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass

from google.protobuf import duration_pb2, timestamp_pb2

from ferromq import _store
from ferromq.message import StoredMessage, encode_properties
from ferromq.protocol.constants import (
    PROPERTY_CHECK_IMMUNITY,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRAN_MSG,
    PROPERTY_UNIQ_KEY,
)
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.status import Code, ProxyError

# System property names the 5.x protocol carries in its own fields.
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_BORN_HOST = "__BORNHOST"
PROPERTY_BORN_TIMESTAMP = "BORN_TIMESTAMP"
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"

# Names a client may not set as user properties, and which a received message does not show as
# its user properties (Java's MessageConst.STRING_HASH_SET).
SYSTEM_PROPERTIES = frozenset(
    {
        "TRACE_ON",
        "MSG_REGION",
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        "__BORNHOST",
        "BORN_TIMESTAMP",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "__CRC32#",
    }
)

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_TRANSACTION_PREPARED = 0x4

# The proxy's limits (ProxyConfig defaults).
MAX_BODY_SIZE = 4 * 1024 * 1024
MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTY_BYTES = 16384
MAX_MESSAGE_GROUP_SIZE = 64
MAX_DELAY_MS = 86_400_000
MAX_TRANSACTION_RECOVERY_SECONDS = 3600


def message_type_of(properties: dict[str, str]) -> int:
    """A message's type by its properties (what the topic's message.type is checked against)."""
    if properties.get(PROPERTY_TRAN_MSG, "").lower() == "true":
        return pb.TRANSACTION
    if any(k in properties for k in (PROPERTY_DELAY, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC)):
        return pb.DELAY
    if PROPERTY_TIMER_DELAY_MS in properties:
        return pb.DELAY
    if PROPERTY_SHARDING_KEY in properties:
        return pb.FIFO
    return pb.NORMAL


def _control(text: str) -> bool:
    return any(unicodedata.category(c) == "Cc" for c in text)


def millis(ts: timestamp_pb2.Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def duration_ms(d: duration_pb2.Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def validate_send(m: pb.Message, now_ms: int) -> None:
    """The checks of SendMessageActivity on one message, in its order (ProxyError on the first
    that fails)."""
    if len(m.body) == 0:
        raise ProxyError(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(m.body) > MAX_BODY_SIZE:
        raise ProxyError(Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {MAX_BODY_SIZE}")
    user = m.user_properties
    if len(user) > MAX_USER_PROPERTIES:
        raise ProxyError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE, f"too many user properties, max is {MAX_USER_PROPERTIES}"
        )
    size = 0
    for key, value in user.items():
        if key in SYSTEM_PROPERTIES:
            raise ProxyError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {key}")
        if _control(key):
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the key of property cannot contain control character"
            )
        if _control(value):
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the value of property cannot contain control character"
            )
        size += len(key.encode()) + len(value.encode())
    sp = m.system_properties
    if sp.HasField("tag"):
        tag = sp.tag
        if tag and not tag.strip():
            raise ProxyError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot be the char sequence of whitespace")
        if "|" in tag:
            raise ProxyError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
        if _control(tag):
            raise ProxyError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain control character")
        size += len(tag.encode())
    for key in sp.keys:
        if not key.strip():
            raise ProxyError(Code.ILLEGAL_MESSAGE_KEY, "key cannot be the char sequence of whitespace")
        if _control(key):
            raise ProxyError(Code.ILLEGAL_MESSAGE_KEY, "key cannot contain control character")
        size += len(key.encode())
    if size > MAX_USER_PROPERTY_BYTES:
        raise ProxyError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"the total size of user property is too large, max is {MAX_USER_PROPERTY_BYTES}",
        )
    if not sp.message_id.strip():
        raise ProxyError(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    if sp.message_type == pb.TRANSACTION and sp.HasField("orphaned_transaction_recovery_duration"):
        if sp.orphaned_transaction_recovery_duration.seconds > MAX_TRANSACTION_RECOVERY_SECONDS:
            raise ProxyError(
                Code.BAD_REQUEST,
                "the max transaction recovery time of message is too large, max is "
                f"{MAX_TRANSACTION_RECOVERY_SECONDS}",
            )
    if sp.HasField("delivery_timestamp") and millis(sp.delivery_timestamp) - now_ms > MAX_DELAY_MS:
        raise ProxyError(
            Code.ILLEGAL_DELIVERY_TIME, f"the max delay time of message is too large, max is {MAX_DELAY_MS}"
        )
    if sp.HasField("message_group"):
        group = sp.message_group
        if not group.strip():
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_GROUP, "message group cannot be the char sequence of whitespace"
            )
        if len(group.encode()) >= MAX_MESSAGE_GROUP_SIZE:
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_GROUP, f"message group exceed the max size {MAX_MESSAGE_GROUP_SIZE}"
            )
        if _control(group):
            raise ProxyError(Code.ILLEGAL_MESSAGE_GROUP, "message group cannot contain control character")


@dataclass(frozen=True)
class Outgoing:
    """A v2 message as the broker stores it."""

    topic: str
    body: bytes
    properties: dict[str, str]
    sys_flag: int
    born_timestamp: int

    @property
    def properties_string(self) -> str:
        return encode_properties(self.properties)


def to_store(m: pb.Message, peer: str) -> Outgoing:
    """The RocketMQ message of a v2 message (SendMessageActivity.buildMessage)."""
    sp = m.system_properties
    topic = m.topic.name
    props = dict(m.user_properties)
    props[PROPERTY_TAGS] = sp.tag if sp.HasField("tag") else ""
    if sp.keys:
        props[PROPERTY_KEYS] = " ".join(sp.keys)
    props[PROPERTY_UNIQ_KEY] = sp.message_id
    sys_flag = 0
    if sp.message_type == pb.TRANSACTION:
        props[PROPERTY_TRAN_MSG] = "true"
        if sp.HasField("orphaned_transaction_recovery_duration"):
            props[PROPERTY_CHECK_IMMUNITY] = str(sp.orphaned_transaction_recovery_duration.seconds)
        sys_flag |= SYSFLAG_TRANSACTION_PREPARED
    if sp.body_encoding == pb.GZIP:
        sys_flag |= SYSFLAG_COMPRESSED
    if sp.HasField("delivery_timestamp"):
        props[PROPERTY_TIMER_DELIVER_MS] = str(millis(sp.delivery_timestamp))
    props[PROPERTY_RECONSUME_TIME] = str(sp.delivery_attempt) if sp.HasField("delivery_attempt") else "0"
    props[PROPERTY_PRODUCER_GROUP] = topic
    if sp.HasField("message_group") and sp.message_group:
        props[PROPERTY_SHARDING_KEY] = sp.message_group
    if sp.HasField("trace_context") and sp.trace_context:
        props[PROPERTY_TRACE_CONTEXT] = sp.trace_context
    props[PROPERTY_BORN_HOST] = sp.born_host or peer
    born = millis(sp.born_timestamp) if sp.HasField("born_timestamp") else 0
    if born > 0:
        props[PROPERTY_BORN_TIMESTAMP] = str(born)
    return Outgoing(topic, bytes(m.body), props, sys_flag, born)


def fifo_queue(message_group: str, queues: int) -> int:
    """The write queue of a message group: Guava's consistentHash of the group's Java hash code, as
    the proxy's SendMessageQueueSelector picks it (a group keeps its queue while the count does)."""
    state = _store.java_hash(message_group) & 0xFFFF_FFFF_FFFF_FFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFF_FFFF_FFFF_FFFF
        # (int)(state >>> 33) + 1, over 2^31
        d = ((state >> 33) + 1) / 2**31
        following = int((candidate + 1) / d)
        if 0 <= following < queues:
            candidate = following
        else:
            return candidate


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
