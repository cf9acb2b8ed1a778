"""HEART_BEAT, UNREGISTER_CLIENT, CHECK_CLIENT_CONFIG."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from ferromq.broker.clients import ClientChannel, Subscription, parse_subscription
from ferromq.broker.processors.pull import check_sql92
from ferromq.broker.topics import RETRY_PREFIX
from ferromq.errors import BrokerError
from ferromq.jsonutil import loads_lenient
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import ext_str
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

if TYPE_CHECKING:
    from ferromq.broker.broker import Broker

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


def handlers(broker: Broker) -> dict[int, Handler]:
    async def heartbeat(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if not cmd.body:
            # As Java 4.9.7, which cannot decode a missing HeartbeatData either.
            raise BrokerError("heartbeat without a body", ResponseCode.SYSTEM_ERROR)
        try:
            data = loads_lenient(cmd.body)
        except ValueError as e:
            raise BrokerError(f"heartbeat body is not JSON: {e}", ResponseCode.SYSTEM_ERROR) from None
        client_id = str(data.get("clientID") or conn.peer)
        conn.client_id, conn.language, conn.version = client_id, cmd.language, cmd.version
        now = time.monotonic()
        channel = ClientChannel(client_id, conn, cmd.language, cmd.version, now)
        broker.clients.watch(conn)
        for consumer in data.get("consumerDataSet") or []:
            group = str(consumer.get("groupName", ""))
            cfg = broker.groups.find_or_create(group)
            if cfg is None:
                continue
            if cfg.retry_queue_nums > 0 and broker.topics.get(RETRY_PREFIX + group) is None:
                broker.topics.create_system_topic(RETRY_PREFIX + group, cfg.retry_queue_nums)
                broker.registration_changed()
            subs = _subscriptions(consumer.get("subscriptionDataSet") or [])
            broker.clients.register_consumer(group, channel, consumer, subs)
        for producer in data.get("producerDataSet") or []:
            broker.clients.register_producer(str(producer.get("groupName", "")), channel)
        return cmd.reply(ResponseCode.SUCCESS)

    async def unregister(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        broker.clients.unregister(
            ext_str(cmd, "clientID"),
            cmd.ext.get("producerGroup") or None,
            cmd.ext.get("consumerGroup") or None,
            conn,
        )
        return cmd.reply(ResponseCode.SUCCESS)

    async def check_client_config(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Java clients ask before an SQL92 subscription: refuse what pulls would refuse."""
        try:
            data = loads_lenient(cmd.body) if cmd.body else {}
        except ValueError as e:
            raise BrokerError(f"check body is not JSON: {e}", ResponseCode.SYSTEM_ERROR) from None
        sub = data.get("subscriptionData") or {}
        if str(sub.get("expressionType", "TAG")).upper() == "SQL92":
            check_sql92(broker, str(sub.get("subString", "")))
        return cmd.reply(ResponseCode.SUCCESS)

    return {
        RequestCode.HEART_BEAT: heartbeat,
        RequestCode.UNREGISTER_CLIENT: unregister,
        RequestCode.CHECK_CLIENT_CONFIG: check_client_config,
    }
