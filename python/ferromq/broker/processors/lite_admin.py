"""What a broker holds of RocketMQ 5.5's lite topics, as LiteManagerProcessor answers it:
GET_PARENT_TOPIC_INFO (a LITE topic: its expiration, how many lite topics it has, how many light
message queues the broker holds) and GET_LITE_TOPIC_INFO (one lite topic's offsets and when it was
last written). No lite consumer is served yet: no group is bound to a topic, no client subscribes a
lite topic, and a broker names itself the lite topic's shard (as 5.5.0 does when it is the topic's only
broker)."""

from __future__ import annotations

from typing import Any

from ferromq.broker import lite
from ferromq.broker.processors.context import AdminContext, ContextHandler, bind
from ferromq.broker.topics import LITE_MESSAGE_TYPE, TopicConfig
from ferromq.jsonutil import dumps
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import GetLiteTopicInfoRequestHeader, GetParentTopicInfoRequestHeader
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler


def _lite_topic(ctx: AdminContext, cmd: RemotingCommand, topic: str) -> TopicConfig | RemotingCommand:
    """The LITE topic `topic`, or the refusal Java answers."""
    tc = ctx.topics.get(topic)
    if tc is None:
        return cmd.reply(ResponseCode.TOPIC_NOT_EXIST, remark=f"Topic [{topic}] not exist.")
    if tc.message_type != LITE_MESSAGE_TYPE:
        return cmd.reply(ResponseCode.INVALID_PARAMETER, remark=f"Topic [{topic}] type not match.")
    return tc


async def parent_topic_info(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    topic = GetParentTopicInfoRequestHeader.of(cmd).topic
    tc = _lite_topic(ctx, cmd, topic)
    if isinstance(tc, RemotingCommand):
        return tc
    body: dict[str, Any] = {
        "liteTopicCount": len(ctx.store.lmq_infos(lite.lite_queue_prefix(topic))),
        "lmqNum": ctx.store.lmq_count(),
        "topic": topic,
        "ttl": tc.lite_topic_expiration,
    }
    return cmd.reply(ResponseCode.SUCCESS, body=dumps(body))


async def lite_topic_info(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = GetLiteTopicInfoRequestHeader.of(cmd)
    tc = _lite_topic(ctx, cmd, h.parent_topic)
    if isinstance(tc, RemotingCommand):
        return tc
    name = lite.lite_queue_prefix(h.parent_topic) + h.lite_topic
    max_offset = ctx.store.max_offset(name, 0)
    min_offset, last = 0, 0
    if max_offset > 0:
        min_offset = ctx.store.min_offset(name, 0)
        last = ctx.store.store_time(name, 0, max_offset - 1) or 0
    body = {
        "liteTopic": h.lite_topic,
        "parentTopic": h.parent_topic,
        "shardingToBroker": True,
        "subscriber": [],
        "topicOffset": {"lastUpdateTimestamp": last, "maxOffset": max_offset, "minOffset": min_offset},
    }
    return cmd.reply(ResponseCode.SUCCESS, body=dumps(body))


HANDLERS: dict[int, ContextHandler[AdminContext]] = {
    RequestCode.GET_PARENT_TOPIC_INFO: parent_topic_info,
    RequestCode.GET_LITE_TOPIC_INFO: lite_topic_info,
}


def handlers(ctx: AdminContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)
