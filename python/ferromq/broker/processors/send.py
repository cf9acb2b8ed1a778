"""SEND_MESSAGE (V1 header), SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (short header) and
CONSUMER_SEND_MSG_BACK."""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferromq.broker.topics import (
    DLQ_PREFIX,
    NOT_ALLOWED_SEND,
    RETRY_PREFIX,
    TRANS_HALF_TOPIC,
    TopicConfig,
    topic_problem,
)
from ferromq.errors import BrokerError, NoPermissionError, SubscriptionGroupNotExistError, TopicNotExistError
from ferromq.message import (
    PROPERTY_SEPARATOR,
    TRANSACTION_PREPARED_TYPE,
    decode_properties,
    encode_properties,
)
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import ext_bool, ext_int, ext_str
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

if TYPE_CHECKING:
    from ferromq.broker.broker import Broker

# SendMessageRequestHeaderV2's one-letter names.
_V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
}
# Clients from this version on may set maxReconsumeTimes themselves (MQVersion V3_4_9).
VERSION_WITH_MAX_RECONSUME = 121
MULTI_TAGS_FLAG = 0x2
TRANSACTION_TYPE_MASK = 0xC


@dataclass
class SendHeader:
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    batch: bool
    max_reconsume_times: int | None


def parse_send_header(cmd: RemotingCommand) -> SendHeader:
    if "a" in cmd.ext and "producerGroup" not in cmd.ext:
        cmd.ext = {_V2_NAMES.get(k, k): v for k, v in cmd.ext.items()}
    max_rt = cmd.ext.get("maxReconsumeTimes")
    return SendHeader(
        producer_group=ext_str(cmd, "producerGroup"),
        topic=ext_str(cmd, "topic"),
        default_topic=ext_str(cmd, "defaultTopic", "TBW102"),
        default_topic_queue_nums=ext_int(cmd, "defaultTopicQueueNums", 4),
        queue_id=ext_int(cmd, "queueId"),
        sys_flag=ext_int(cmd, "sysFlag", 0),
        born_timestamp=ext_int(cmd, "bornTimestamp", 0),
        flag=ext_int(cmd, "flag", 0),
        properties=cmd.ext.get("properties", ""),
        reconsume_times=ext_int(cmd, "reconsumeTimes", 0),
        # Java sends "true"; the C++ client "1" (a Java broker would read that as false and store the
        # whole batch as one message; ferromq stores the messages of the batch).
        batch=ext_bool(cmd, "batch"),
        max_reconsume_times=int(max_rt) if max_rt and max_rt.lstrip("-").isdigit() else None,
    )


def decode_batch(body: bytes) -> list[tuple[int, bytes, str]]:
    """(flag, body, properties) of each message of a client-encoded batch body."""
    out = []
    at = 0
    try:
        while at < len(body):
            total, _magic, _crc, flag, body_len = struct.unpack_from(">iiiii", body, at)
            start = at + 20
            if total < 22 or body_len < 0 or start + body_len + 2 > at + total or at + total > len(body):
                raise BrokerError(f"malformed batch message at byte {at}", ResponseCode.MESSAGE_ILLEGAL)
            inner = body[start : start + body_len]
            (props_len,) = struct.unpack_from(">h", body, start + body_len)
            props_at = start + body_len + 2
            props = body[props_at : props_at + props_len].decode()
            out.append((flag, inner, props))
            at += total
    except (struct.error, UnicodeDecodeError) as e:
        raise BrokerError(f"malformed batch body: {e}", ResponseCode.MESSAGE_ILLEGAL) from None
    if not out:
        raise BrokerError("empty batch", ResponseCode.MESSAGE_ILLEGAL)
    return out


def _join_properties(inner: str, outer: str) -> str:
    if not outer:
        return inner
    if not inner or inner.endswith(PROPERTY_SEPARATOR):
        return inner + outer
    return inner + PROPERTY_SEPARATOR + outer


def handlers(broker: Broker) -> dict[int, Handler]:
    async def send(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return await send_message(broker, conn, cmd)

    async def send_back(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return await consumer_send_msg_back(broker, conn, cmd)

    return {
        RequestCode.SEND_MESSAGE: send,
        RequestCode.SEND_MESSAGE_V2: send,
        RequestCode.SEND_BATCH_MESSAGE: send,
        RequestCode.CONSUMER_SEND_MSG_BACK: send_back,
    }


def _check_topic_for_send(broker: Broker, h: SendHeader) -> TopicConfig:
    problem = topic_problem(h.topic)
    if problem:
        raise BrokerError(problem, ResponseCode.SYSTEM_ERROR)
    if h.topic in NOT_ALLOWED_SEND:
        raise BrokerError(f"Sending message to topic[{h.topic}] is forbidden.", ResponseCode.SYSTEM_ERROR)
    if not broker.config.broker_permission & 2:
        raise NoPermissionError(f"the broker[{broker.config.broker_ip1}] sending message is forbidden")
    tc = broker.topics.get(h.topic)
    if tc is None:
        if h.topic.startswith(RETRY_PREFIX):
            tc = broker.topics.create_system_topic(h.topic, 1)
        else:
            tc = broker.topics.create_in_send(h.topic, h.default_topic, h.default_topic_queue_nums)
        if tc is None:
            raise TopicNotExistError(f"topic[{h.topic}] not exist, apply first please!")
        broker.registration_changed()
    if not tc.writable:
        raise NoPermissionError(f"the topic[{h.topic}] sending message is forbidden")
    return tc


async def send_message(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = parse_send_header(cmd)
    tc = _check_topic_for_send(broker, h)
    queue_id = h.queue_id
    if queue_id < 0:
        queue_id = random.randrange(tc.write_queue_nums)
    if queue_id >= max(tc.write_queue_nums, tc.read_queue_nums):
        raise BrokerError(
            f"request queueId[{queue_id}] is illegal, {tc.topic_name} Producer: {conn.peer}",
            ResponseCode.SYSTEM_ERROR,
        )
    topic, sys_flag = h.topic, h.sys_flag
    props = decode_properties(h.properties)
    # 4.9.7 keeps WAIT out of the stored properties; it only says whether to wait for the disk.
    wait = props.pop("WAIT", "true").lower() != "false"
    if topic.startswith(RETRY_PREFIX) and not h.batch:
        group = topic[len(RETRY_PREFIX) :]
        cfg = broker.groups.find_or_create(group)
        if cfg is None:
            raise SubscriptionGroupNotExistError(f"subscription group not exist, {group}")
        max_times = cfg.retry_max_times
        if (cmd.version or 0) >= VERSION_WITH_MAX_RECONSUME and h.max_reconsume_times is not None:
            max_times = h.max_reconsume_times
        if h.reconsume_times >= max_times:
            topic, queue_id = DLQ_PREFIX + group, 0
            broker.topics.create_system_topic(topic, 1)
            props.pop("DELAY", None)
            broker.registration_changed()
    props["CLUSTER"] = broker.config.broker_cluster_name
    if tc.topic_filter_type == "MULTI_TAG":
        sys_flag |= MULTI_TAGS_FLAG
    if props.get("TRAN_MSG", "").lower() == "true" and not h.batch:
        if broker.config.reject_transaction_message:
            raise NoPermissionError(
                f"the broker[{broker.config.broker_ip1}] sending transaction message is forbidden"
            )
        props["REAL_TOPIC"], props["REAL_QID"] = topic, str(queue_id)
        props.setdefault("PGROUP", h.producer_group)
        topic, queue_id = TRANS_HALF_TOPIC, 0
        sys_flag &= ~TRANSACTION_TYPE_MASK
        broker.topics.create_system_topic(TRANS_HALF_TOPIC, 1)
    elif sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_PREPARED_TYPE:
        # A prepared flag without TRAN_MSG is not a transaction ferromq can finish: store it plainly.
        sys_flag &= ~TRANSACTION_TYPE_MASK

    if h.batch:
        items = decode_batch(cmd.body)
        outer = encode_properties(props)
        result = broker.store.put_batch(
            topic,
            queue_id,
            [b for _, b, _ in items],
            [_join_properties(p, outer) for _, _, p in items],
            [f for f, _, _ in items],
            born_timestamp=h.born_timestamp,
            born_host=conn.peer,
            wait=False,
        )
        msg_id = ",".join(result.msg_ids)
        queue_offset, end_offset, count = result.first_queue_offset, result.end_offset, len(result)
        tags_code = None
    else:
        r = broker.store.put(
            topic,
            queue_id,
            cmd.body,
            properties=encode_properties(props),
            flag=h.flag,
            sys_flag=sys_flag,
            born_timestamp=h.born_timestamp,
            born_host=conn.peer,
            reconsume_times=h.reconsume_times,
            wait=False,
        )
        topic, queue_id = r.topic, r.queue_id
        msg_id, queue_offset, end_offset, count = r.msg_id, r.queue_offset, r.end_offset, 1
        tags_code = broker.tags_code_of(props)
    code = ResponseCode.SUCCESS
    if broker.sync_flush and wait:
        if not await broker.store.flushed(end_offset):
            code = ResponseCode.FLUSH_DISK_TIMEOUT
    broker.message_arrived(topic, queue_id, queue_offset + count, tags_code)
    return cmd.reply(
        code,
        ext={
            "msgId": msg_id,
            "queueId": queue_id,
            "queueOffset": queue_offset,
            "MSG_REGION": broker.config.region_id,
            "TRACE_ON": broker.config.trace_on,
        },
    )


async def consumer_send_msg_back(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """A consumer failed a message: store it again in the group's retry topic (with a delay) or,
    after too many attempts, in its dead-letter topic."""
    group = ext_str(cmd, "group")
    offset = ext_int(cmd, "offset")
    delay_level = ext_int(cmd, "delayLevel", 0)
    cfg = broker.groups.find_or_create(group)
    if cfg is None:
        raise SubscriptionGroupNotExistError(f"subscription group not exist, {group}")
    if not broker.config.broker_permission & 2:
        raise NoPermissionError(f"the broker[{broker.config.broker_ip1}] sending message is forbidden")
    if cfg.retry_queue_nums <= 0:
        return cmd.reply(ResponseCode.SUCCESS)
    msg = broker.store.read(offset)
    if msg is None:
        raise BrokerError(f"look message by offset failed, {offset}", ResponseCode.SYSTEM_ERROR)
    props = dict(msg.properties)
    props.setdefault("RETRY_TOPIC", msg.topic)
    props["WAIT"] = "false"
    max_times = cfg.retry_max_times
    if (cmd.version or 0) >= VERSION_WITH_MAX_RECONSUME and cmd.ext.get("maxReconsumeTimes"):
        max_times = ext_int(cmd, "maxReconsumeTimes")
    if msg.reconsume_times >= max_times or delay_level < 0:
        topic, queue_id = DLQ_PREFIX + group, 0
        broker.topics.create_system_topic(topic, 1)
        props.pop("DELAY", None)
    else:
        topic = RETRY_PREFIX + group
        broker.topics.create_system_topic(topic, cfg.retry_queue_nums)
        queue_id = random.randrange(cfg.retry_queue_nums)
        props["DELAY"] = str(delay_level if delay_level > 0 else 3 + msg.reconsume_times)
    props["ORIGIN_MESSAGE_ID"] = props.get("ORIGIN_MESSAGE_ID") or msg.msg_id
    broker.registration_changed()
    r = broker.store.put_copy(msg, topic, queue_id, props, reconsume_times=msg.reconsume_times + 1)
    broker.message_arrived(r.topic, r.queue_id, r.queue_offset + 1, broker.tags_code_of(props))
    return cmd.reply(ResponseCode.SUCCESS)
