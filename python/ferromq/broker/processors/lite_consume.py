"""RocketMQ 5.5's lite consumers over remoting, as its proxy (in cluster mode) calls a broker:
LITE_SUBSCRIPTION_CTL (subscriptions), POP_LITE_MESSAGE (with long polling), and the admin views
GET_LITE_CLIENT_INFO, GET_BROKER_LITE_INFO and TRIGGER_LITE_DISPATCH. A lite message's ack and change of
invisible time are ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME with a `liteTopic` (broker/processors/pop.py).
The rules are in `ferromq.broker.lite_consumers`; this module reads the requests and writes the replies with
5.5.0's codes and remarks."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import orjson

from ferromq.broker.lite_consumers import LiteConsumers, LitePopped, Notifier
from ferromq.broker.processors.context import ContextHandler, bind
from ferromq.broker.state import BrokerState
from ferromq.broker.topics import LITE_MESSAGE_TYPE
from ferromq.jsonutil import dumps
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import (
    GetLiteClientInfoRequestHeader,
    NotifyUnsubscribeLiteRequestHeader,
    PopLiteMessageRequestHeader,
    TriggerLiteDispatchRequestHeader,
)
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

# GET_LITE_CLIENT_INFO names at most this many lite topics (LiteManagerProcessor.MAX_RETURN_COUNT).
MAX_RETURN_COUNT = 10_000


class LiteConsumeContext(BrokerState, Protocol):
    @property
    def lite_consumers(self) -> LiteConsumers: ...


def _notifier(conn: Connection) -> Notifier:
    """NOTIFY_UNSUBSCRIBE_LITE to the client's proxy on `conn`, one way (Broker2Client)."""

    def notify(client_id: str, group: str, lite_topic: str) -> None:
        if conn.closed:
            return
        ext = NotifyUnsubscribeLiteRequestHeader(
            lite_topic=lite_topic, consumer_group=group, client_id=client_id
        ).to_ext()
        cmd = RemotingCommand(code=RequestCode.NOTIFY_UNSUBSCRIBE_LITE, ext=ext)
        asyncio.get_running_loop().create_task(conn.oneway(cmd))

    return notify


async def lite_subscription_ctl(
    ctx: LiteConsumeContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    if not cmd.body:  # a frame without a body is Java's null body
        return cmd.reply(ResponseCode.ILLEGAL_OPERATION, remark="Request body is null.")
    try:
        data = orjson.loads(cmd.body)
        entries = data.get("subscriptionSet") if isinstance(data, dict) else None
    except orjson.JSONDecodeError:
        entries = None
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        return cmd.reply(ResponseCode.ILLEGAL_OPERATION, remark="LiteSubscriptionCtlRequestBody is empty.")
    ctx.lite_consumers.sync(entries, _notifier(conn))
    return cmd.reply(ResponseCode.SUCCESS)


def _pop_reply(cmd: RemotingCommand, result: LitePopped) -> RemotingCommand:
    if not result.found:
        return cmd.reply(ResponseCode.POLLING_TIMEOUT, remark="NO_MESSAGE_IN_QUEUE", ext=result.header())
    return cmd.reply(ResponseCode.SUCCESS, remark="FOUND", ext=result.header(), body=result.body)


async def pop_lite_message(
    ctx: LiteConsumeContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    h = PopLiteMessageRequestHeader.of(cmd)
    result = await ctx.lite_consumers.pop(
        h.client_id,
        h.consumer_group,
        h.topic,
        h.max_msg_num,
        h.invisible_time,
        max(0, h.poll_time),
        h.attempt_id or None,
    )
    return _pop_reply(cmd, result)


async def lite_client_info(
    ctx: LiteConsumeContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    h = GetLiteClientInfoRequestHeader.of(cmd)
    tc = ctx.topics.get(h.parent_topic)
    if tc is None:
        return cmd.reply(ResponseCode.TOPIC_NOT_EXIST, remark=f"Topic [{h.parent_topic}] not exist.")
    if tc.message_type != LITE_MESSAGE_TYPE:
        return cmd.reply(ResponseCode.INVALID_PARAMETER, remark=f"Topic [{h.parent_topic}] type not match.")
    if ctx.groups.groups.get(h.group) is None:
        return cmd.reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark=f"Group [{h.group}] not exist.")
    lite = ctx.lite_consumers
    if lite.bind_topic(h.group) != h.parent_topic:
        return cmd.reply(
            ResponseCode.INVALID_PARAMETER, remark=f"Subscription [{h.group}]-[{h.parent_topic}] not match."
        )
    count, lmqs, last_access = lite.client_info(h.client_id, min(h.max_count, MAX_RETURN_COUNT))
    body: dict[str, Any] = {
        "clientId": h.client_id,
        "group": h.group,
        "lastAccessTime": last_access,
        "lastConsumeTime": 0,
        "liteTopicCount": count,
        "parentTopic": h.parent_topic,
    }
    if lmqs is not None:
        body["liteTopicSet"] = lmqs
    return cmd.reply(ResponseCode.SUCCESS, body=dumps(body))


async def broker_lite_info(
    ctx: LiteConsumeContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    lite = ctx.lite_consumers
    topic_meta = {
        name: tc.lite_topic_expiration
        for name, tc in ctx.topics.topics.items()
        if tc.message_type == LITE_MESSAGE_TYPE
    }
    group_meta: dict[str, list[str]] = {}
    for name in ctx.groups.groups:
        bound = lite.bind_topic(name)
        if bound is not None:
            group_meta.setdefault(bound, []).append(name)
    lmqs = ctx.store.lmq_count()
    body = {
        "cqTableSize": lmqs,
        "currentLmqNum": lmqs,
        "eventMapSize": len(lite.events),
        "groupMeta": {k: sorted(v) for k, v in group_meta.items()},
        "liteSubscriptionCount": lite.active,
        # ferromq bounds no count of light message queues (5.5.0's maxLmqConsumeQueueNum).
        "maxLmqNum": -1,
        "offsetTableSize": len(ctx.offsets.table),
        "orderInfoCount": sum(len(q) for q in lite.orders.table.values()),
        "storeType": "default",
        "topicMeta": topic_meta,
    }
    return cmd.reply(ResponseCode.SUCCESS, body=dumps(body))


async def trigger_lite_dispatch(
    ctx: LiteConsumeContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    h = TriggerLiteDispatchRequestHeader.of(cmd)
    if ctx.groups.groups.get(h.group) is None:
        return cmd.reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark=f"Group [{h.group}] not exist.")
    if not ctx.lite_consumers.bind_topic(h.group):
        return cmd.reply(ResponseCode.INVALID_PARAMETER, remark=f"Group [{h.group}] is not a LITE group.")
    ctx.lite_consumers.full_dispatch(h.group, h.client_id or None)
    return cmd.reply(ResponseCode.SUCCESS)


HANDLERS: dict[int, ContextHandler[LiteConsumeContext]] = {
    RequestCode.LITE_SUBSCRIPTION_CTL: lite_subscription_ctl,
    RequestCode.POP_LITE_MESSAGE: pop_lite_message,
    RequestCode.GET_LITE_CLIENT_INFO: lite_client_info,
    RequestCode.GET_BROKER_LITE_INFO: broker_lite_info,
    RequestCode.TRIGGER_LITE_DISPATCH: trigger_lite_dispatch,
}


def handlers(ctx: LiteConsumeContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)
