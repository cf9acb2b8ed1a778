"""RECALL_MESSAGE (RocketMQ 5.3.2+): a producer cancels a timer message before it is due, with the
recall handle its send reply carried.

The handle is URL-safe base64 of "v1 TOPIC BROKER_NAME DELIVER_MS UNIQ_KEY". The broker answers
a recall by storing a recall message: a timer message for the same slot carrying
TIMER_DEL_UNIQKEY=TOPIC+UNIQ_KEY; when the slot is due the timer delivers neither.
"""

from __future__ import annotations

import base64
import binascii
import time

from ferromq.broker.processors.context import ContextHandler, RecallContext, bind
from ferromq.errors import BrokerError
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
)
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

RECALL_TAG = "_RECALL_TAG_"
PROPERTY_BORN_TIMESTAMP = "BORN_TIMESTAMP"


def decode_handle(handle: str) -> tuple[str, str, str, str]:
    """(topic, broker name, deliver time, message id) of a recall handle; BrokerError
    ILLEGAL_OPERATION when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(handle.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raw = ""
    items = raw.split(" ")
    if len(items) < 5 or items[0] != "v1":
        raise BrokerError("recall handle is invalid", ResponseCode.ILLEGAL_OPERATION)
    return items[1], items[2], items[3], items[4]


async def recall_message(ctx: RecallContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    ext = cmd.ext
    topic, handle = ext.get("topic"), ext.get("recallHandle")
    if not topic or not handle:
        raise BrokerError("recall failed, topic and recallHandle are required", ResponseCode.SYSTEM_ERROR)
    code, remark, msg_id = recall(ctx, topic, handle, ext.get("producerGroup"), conn.peer)
    if code != ResponseCode.SUCCESS:
        return cmd.reply(code, remark=remark)
    return cmd.reply(ResponseCode.SUCCESS, ext={"msgId": msg_id})


def recall(
    ctx: RecallContext, topic: str, handle: str, producer_group: str | None, born_host: str
) -> tuple[int, str, str]:
    """Recalls the timer message `handle` names, whichever protocol brought it: (response code,
    remark, message id)."""
    cfg = ctx.config
    if not cfg.recall_message_enable:
        return ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden", ""
    if cfg.is_slave:
        return ResponseCode.SLAVE_NOT_AVAILABLE, "recall failed, broker service not available", ""
    if not cfg.broker_permission & 2 and not cfg.allow_recall_when_broker_not_writeable:
        return ResponseCode.SERVICE_NOT_AVAILABLE, "recall failed, broker service not available", ""
    if ctx.topics.get(topic) is None:
        return ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{topic}] not exist", ""
    try:
        handle_topic, broker_name, deliver_ms, msg_id = decode_handle(handle)
    except BrokerError as e:
        return ResponseCode.ILLEGAL_OPERATION, str(e), ""
    if handle_topic != topic:
        return ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match", ""
    if broker_name != cfg.broker_name:
        return ResponseCode.ILLEGAL_OPERATION, "recall failed, broker service not available", ""
    now = int(time.time() * 1000)
    try:
        left = int(deliver_ms) - now
    except ValueError:
        left = -1
    if left <= 0 or left >= cfg.timer_max_delay_sec * 1000:
        return ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid", ""
    properties = {
        "TAGS": RECALL_TAG,
        PROPERTY_TIMER_DEL_UNIQKEY: f"{topic}+{msg_id}",
        PROPERTY_UNIQ_KEY: msg_id,
        PROPERTY_TIMER_DELIVER_MS: deliver_ms,
        PROPERTY_BORN_TIMESTAMP: str(now),
    }
    if producer_group:
        properties[PROPERTY_PRODUCER_GROUP] = producer_group
    # Not waiting for the disk: Java answers SUCCESS even when its flush times out.
    r = ctx.store.put(
        topic, 0, b"0", properties=properties, born_timestamp=now, born_host=born_host, wait=False
    )
    ctx.message_arrived(r.topic, r.queue_id, r.queue_offset + 1, r.tags_code)
    return ResponseCode.SUCCESS, "", msg_id


HANDLERS: dict[int, ContextHandler[RecallContext]] = {RequestCode.RECALL_MESSAGE: recall_message}


def handlers(ctx: RecallContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)
