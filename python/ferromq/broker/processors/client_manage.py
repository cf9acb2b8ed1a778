"""HEART_BEAT, UNREGISTER_CLIENT, CHECK_CLIENT_CONFIG."""

from __future__ import annotations

import logging
import time
from typing import Any

from ferromq.broker.clients import ClientChannel, Subscription, parse_subscription
from ferromq.broker.processors.bodies import json_object, shaped
from ferromq.broker.processors.context import ClientManageContext, ContextHandler, bind
from ferromq.broker.processors.pull import check_sql92
from ferromq.errors import BrokerError
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import RETRY_PREFIX
from ferromq.protocol.headers import UnregisterClientRequestHeader
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

logger = logging.getLogger(__name__)


def _subscriptions(raw: list[dict[str, Any]]) -> list[Subscription]:
    subs = []
    for s in raw or []:
        version = s.get("subVersion", 0)
        subs.append(
            parse_subscription(
                str(s.get("topic", "")),
                s.get("subString"),
                s.get("expressionType"),
                int(version) if str(version).lstrip("-").isdigit() else 0,
            )
        )
    return subs


async def heartbeat(ctx: ClientManageContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    if not cmd.body:
        # As Java 4.9.7, which cannot decode a missing HeartbeatData either.
        raise BrokerError("heartbeat without a body", ResponseCode.SYSTEM_ERROR)
    data = json_object(cmd, "the heartbeat body")
    with shaped("the heartbeat body"):
        _heartbeat(ctx, conn, cmd, data)
    return cmd.reply(ResponseCode.SUCCESS)


async def unregister(ctx: ClientManageContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = UnregisterClientRequestHeader.of(cmd)
    ctx.clients.unregister(h.client_id, h.producer_group or None, h.consumer_group or None, conn)
    return cmd.reply(ResponseCode.SUCCESS)


async def check_client_config(
    ctx: ClientManageContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    """Java clients ask before an SQL92 subscription: refuse what pulls would refuse."""
    data = json_object(cmd, "the CHECK_CLIENT_CONFIG body", empty_ok=True)
    with shaped("the CHECK_CLIENT_CONFIG body"):
        sub = data.get("subscriptionData") or {}
        sql92 = str(sub.get("expressionType", "TAG")).upper() == "SQL92"
        expression = str(sub.get("subString", ""))
    if sql92:
        check_sql92(ctx, expression)
    return cmd.reply(ResponseCode.SUCCESS)


HANDLERS: dict[int, ContextHandler[ClientManageContext]] = {
    RequestCode.HEART_BEAT: heartbeat,
    RequestCode.UNREGISTER_CLIENT: unregister,
    RequestCode.CHECK_CLIENT_CONFIG: check_client_config,
}


def handlers(ctx: ClientManageContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)


def _heartbeat(
    ctx: ClientManageContext, conn: Connection, cmd: RemotingCommand, data: dict[str, Any]
) -> None:
    client_id = str(data.get("clientID") or conn.peer)
    conn.client_id, conn.language, conn.version = client_id, cmd.language, cmd.version
    now = time.monotonic()
    channel = ClientChannel(client_id, conn, cmd.language, cmd.version, now)
    ctx.clients.watch(conn)
    for consumer in data.get("consumerDataSet") or []:
        group = str(consumer.get("groupName", ""))
        cfg = ctx.groups.find_or_create(group)
        if cfg is None:
            continue
        if cfg.retry_queue_nums > 0 and ctx.topics.get(RETRY_PREFIX + group) is None:
            ctx.topics.create_system_topic(RETRY_PREFIX + group, cfg.retry_queue_nums)
            ctx.registration_changed()
        subs = _subscriptions(consumer.get("subscriptionDataSet") or [])
        ctx.clients.register_consumer(group, channel, consumer, subs)
    for producer in data.get("producerDataSet") or []:
        ctx.clients.register_producer(str(producer.get("groupName", "")), channel)
