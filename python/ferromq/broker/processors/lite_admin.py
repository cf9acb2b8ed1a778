"""What a broker holds of RocketMQ 5.5's lite topics, as LiteManagerProcessor answers it:
GET_PARENT_TOPIC_INFO (a LITE topic: its expiration, how many lite topics it has, how many light
message queues the broker holds, the lite groups bound to it), GET_LITE_TOPIC_INFO (one lite topic's
offsets, when it was last written, its subscribers: (client, group), or ("*", group) for a wildcard
group) and GET_LITE_GROUP_INFO (a lite group's lag: of one lite topic, or the top K of its lite topics
by lag count). A broker names itself the lite topic's shard (as 5.5.0 does when it is the topic's only
broker).

Where ferromq answers otherwise: 5.5.0 keeps the top K by lag *time* only when the lite pops record it
(liteLagLatencyCollectEnable, off by default); ferromq records none, so `lagTimestampTopK` is always
empty and, without a lite topic, `earliestUnconsumedTimestamp` -1 (5.5.0's answer with its defaults).
A topK below 1 gives an empty `lagCountTopK` where 5.5.0 fails (a PriorityQueue of capacity 0)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ferromq.broker import lite
from ferromq.broker.processors.context import AdminContext, ContextHandler, bind
from ferromq.broker.topics import LITE_MESSAGE_TYPE, LMQ_PREFIX, TopicConfig
from ferromq.jsonutil import dumps
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import (
    GetLiteGroupInfoRequestHeader,
    GetLiteTopicInfoRequestHeader,
    GetParentTopicInfoRequestHeader,
)
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

if TYPE_CHECKING:
    from ferromq.broker.lite_consumers import LiteConsumers

LITE_QUEUE_PREFIX = f"{LMQ_PREFIX}$"
"""Every lite topic's light message queue name starts with this (LiteUtil.LITE_TOPIC_PREFIX)."""


class LiteAdminContext(AdminContext, Protocol):
    """AdminContext, and the lite consumers (who subscribes a lite topic)."""

    @property
    def lite_consumers(self) -> LiteConsumers: ...


def _lite_topic(ctx: LiteAdminContext, cmd: RemotingCommand, topic: str) -> TopicConfig | RemotingCommand:
    """The LITE topic `topic`, or the refusal Java answers."""
    tc = ctx.topics.get(topic)
    if tc is None:
        return cmd.reply(ResponseCode.TOPIC_NOT_EXIST, remark=f"Topic [{topic}] not exist.")
    if tc.message_type != LITE_MESSAGE_TYPE:
        return cmd.reply(ResponseCode.INVALID_PARAMETER, remark=f"Topic [{topic}] type not match.")
    return tc


async def parent_topic_info(ctx: LiteAdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    topic = GetParentTopicInfoRequestHeader.of(cmd).topic
    tc = _lite_topic(ctx, cmd, topic)
    if isinstance(tc, RemotingCommand):
        return tc
    body: dict[str, Any] = {}
    groups = sorted(name for name, g in ctx.groups.groups.items() if g.lite_bind_topic == topic)
    if groups:  # a set in Java (null when none): fastjson leaves null out
        body["groups"] = groups
    body |= {
        "liteTopicCount": len(ctx.store.lmq_infos(lite.lite_queue_prefix(topic))),
        "lmqNum": ctx.store.lmq_count(),
        "topic": topic,
        "ttl": tc.lite_topic_expiration,
    }
    return cmd.reply(ResponseCode.SUCCESS, body=dumps(body))


async def lite_topic_info(ctx: LiteAdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
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
        "subscriber": subscribers(ctx, h.parent_topic, name),
        "topicOffset": {"lastUpdateTimestamp": last, "maxOffset": max_offset, "minOffset": min_offset},
    }
    return cmd.reply(ResponseCode.SUCCESS, body=dumps(body))


def subscribers(ctx: LiteAdminContext, parent: str, lmq: str) -> list[dict[str, str]]:
    """LiteManagerProcessor.getSubscriber: the (client, group) pairs subscribed to `lmq`, and one
    ("*", group) for each wildcard group of its parent topic with a client online (Java's
    ClientGroup, a set there; sorted here)."""
    lc = ctx.lite_consumers
    pairs = {(client_id, group) for client_id, group in lc.subscribers.get(lmq, {})}
    for group, clients in lc.wildcards.get(parent, {}).items():
        if clients:
            pairs = {p for p in pairs if p[1] != group} | {("*", group)}
    return [{"clientId": c, "group": g} for c, g in sorted(pairs, key=lambda p: (p[1], p[0]))]


def _store_time(ctx: LiteAdminContext, lmq: str, offset: int) -> int:
    """getMessageStoreTimeStamp: -1 when no message is there."""
    t = ctx.store.store_time(lmq, 0, offset)
    return -1 if t is None else t


def lag_count_top_k(ctx: LiteAdminContext, group: str, top_k: int) -> tuple[list[dict[str, Any]], int]:
    """LiteConsumerLagCalculator.getLagCountTopK: over the group's committed offsets of lite topics
    (of any parent topic, as Java's), those behind their queue's max offset: the `top_k` most behind
    (most first) and the sum of all."""
    lagging: list[dict[str, Any]] = []
    total = 0
    suffix = f"@{group}"
    for key, queues in ctx.offsets.table.items():
        if not key.endswith(suffix):
            continue
        lmq = key[: -len(suffix)]
        consumer_offset = queues.get(0)
        if not lmq.startswith(LITE_QUEUE_PREFIX) or consumer_offset is None or consumer_offset < 0:
            continue
        diff = max(0, ctx.store.max_offset(lmq, 0) - consumer_offset)
        if diff <= 0:
            continue
        total += diff
        lagging.append(
            {
                "earliestUnconsumedTimestamp": _store_time(ctx, lmq, consumer_offset),
                "lagCount": diff,
                "liteTopic": lite_topic_name(lmq),
            }
        )
    lagging.sort(key=lambda info: (-info["lagCount"], info["liteTopic"]))
    return lagging[: max(0, top_k)], total


def lite_topic_name(lmq: str) -> str:
    """LiteUtil.getLiteTopic: what follows the parent topic's '$'."""
    rest = lmq[len(LITE_QUEUE_PREFIX) :]
    return rest.partition("$")[2]


async def lite_group_info(ctx: LiteAdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """GET_LITE_GROUP_INFO (mqadmin getLiteGroupInfo): a lite group's lag."""
    h = GetLiteGroupInfoRequestHeader.of(cmd)
    g = ctx.groups.groups.get(h.group)
    if g is None:
        return cmd.reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark=f"Group [{h.group}] not exist.")
    bind_topic = g.lite_bind_topic
    if not bind_topic:
        return cmd.reply(ResponseCode.INVALID_PARAMETER, remark=f"Group [{h.group}] is not a LITE group.")
    earliest, total = -1, 0
    extra: dict[str, Any] = {}
    if not h.lite_topic:
        top, total = lag_count_top_k(ctx, h.group, h.top_k)
        extra = {"lagCountTopK": top, "lagTimestampTopK": []}
    else:
        name = lite.lite_queue_prefix(bind_topic) + h.lite_topic
        max_offset = ctx.store.max_offset(name, 0)
        if max_offset > 0:
            commit = ctx.offsets.query(h.group, name, 0)
            if commit >= 0:
                total = max_offset - commit
                earliest = _store_time(ctx, name, commit)
                last = _store_time(ctx, name, commit - 1) if commit - 1 >= 0 else 0
                extra = {
                    "liteTopicOffsetWrapper": {
                        "brokerOffset": max_offset,
                        "consumerOffset": commit,
                        "lastTimestamp": last,
                        "pullOffset": 0,
                    }
                }
        else:
            total = -1
    body: dict[str, Any] = {"earliestUnconsumedTimestamp": earliest, "group": h.group}
    if "lagCountTopK" in extra:
        body["lagCountTopK"] = extra["lagCountTopK"]
        body["lagTimestampTopK"] = extra["lagTimestampTopK"]
    if h.lite_topic is not None:
        body["liteTopic"] = h.lite_topic
    if "liteTopicOffsetWrapper" in extra:
        body["liteTopicOffsetWrapper"] = extra["liteTopicOffsetWrapper"]
    body["parentTopic"] = bind_topic
    body["totalLagCount"] = total
    return cmd.reply(ResponseCode.SUCCESS, body=dumps(body))


HANDLERS: dict[int, ContextHandler[LiteAdminContext]] = {
    RequestCode.GET_PARENT_TOPIC_INFO: parent_topic_info,
    RequestCode.GET_LITE_TOPIC_INFO: lite_topic_info,
    RequestCode.GET_LITE_GROUP_INFO: lite_group_info,
}


def handlers(ctx: LiteAdminContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)
