"""Producers and consumers the broker knows from heartbeats (RocketMQ's ProducerManager and
ConsumerManager). Entries disappear when their connection closes or goes silent for 120 s.

A producer is also known by the half messages it sends (RocketMQ knows it by heartbeats only): a
Java client that closed a connection (it does so when a call times out) carries on over a new one
and heartbeats there only every 30 s, and the transaction checks must reach it meanwhile."""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ferromq import _store
from ferromq.errors import SubscriptionParseError
from ferromq.protocol.command import RemotingCommand

logger = logging.getLogger(__name__)

CONSUME_TYPES = ["CONSUME_ACTIVELY", "CONSUME_PASSIVELY"]
MESSAGE_MODELS = ["BROADCASTING", "CLUSTERING"]
CONSUME_FROM = [
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
]


def _enum(value: Any, names: list[str], default: str) -> str:
    """Java sends enum names, the C++ client ordinals."""
    if isinstance(value, int) and 0 <= value < len(names):
        return names[value]
    if isinstance(value, str) and value in names:
        return value
    return default


@dataclass(frozen=True)
class Subscription:
    topic: str
    sub_string: str
    expression_type: str = "TAG"
    sub_version: int = 0
    tags: frozenset[str] = frozenset()
    # Hashes recomputed from the tags: the C++ client's codeSet is wrong (atoi of the tag).
    codes: tuple[int, ...] | None = None

    @property
    def matches_all(self) -> bool:
        return self.codes is None


def parse_subscription(
    topic: str, sub_string: str | None, expression_type: str | None, version: int
) -> Subscription:
    """A TAG subscription (`*`, `TagA || TagB`) or an SQL92 one (compiled elsewhere)."""
    etype = (expression_type or "TAG").upper()
    text = (sub_string or "*").strip()
    if etype == "TAG":
        try:
            tags = _store.parse_tag_expression(text)  # the data plane reads it the same way
        except ValueError as e:
            raise SubscriptionParseError(str(e)) from None
        if tags is None:
            return Subscription(topic, "*" if text in ("", "*") else text, "TAG", version)
        return Subscription(
            topic, text, "TAG", version, frozenset(tags), tuple(sorted(_store.java_hash(t) for t in tags))
        )
    if etype == "SQL92":
        return Subscription(topic, text, "SQL92", version)
    raise SubscriptionParseError(f"unknown expression type {expression_type!r}")


class ClientConnection(Protocol):
    """What the broker needs of a client's connection: a remoting `Connection`, or the telemetry
    stream of a 5.x client (`ferromq.proxy`), which carries the broker's requests to the client."""

    @property
    def closed(self) -> bool: ...
    @property
    def peer(self) -> str: ...
    @property
    def client_id(self) -> str | None: ...
    def on_close(self, callback: Callable[[Any], None]) -> None: ...
    async def oneway(self, cmd: RemotingCommand) -> None: ...
    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand: ...


@dataclass
class ClientChannel:
    client_id: str
    conn: ClientConnection
    language: str
    version: int
    last_update: float


@dataclass
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[str, ClientChannel] = field(default_factory=dict)
    subscriptions: dict[str, Subscription] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted(self.channels)


class ClientManager:
    """Producer groups and consumer groups, keyed by client id."""

    def __init__(self, on_consumers_changed: Callable[[str, ConsumerGroupInfo], None]) -> None:
        self.producers: dict[str, dict[str, ClientChannel]] = {}
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self._on_consumers_changed = on_consumers_changed
        self._watched: weakref.WeakSet[ClientConnection] = weakref.WeakSet()
        self.on_subscriptions_changed: Callable[[], None] | None = None
        """Called when a group's subscriptions change or the group goes (the data planes serve
        pulls by them)."""

    def watch(self, conn: ClientConnection) -> None:
        """Drops the connection's clients as soon as it closes (once per connection)."""
        if conn not in self._watched:
            self._watched.add(conn)
            conn.on_close(self.connection_closed)

    def register_producer(self, group: str, channel: ClientChannel) -> None:
        channels = self.producers.setdefault(group, {})
        # The connection may be known by its address (from a half message) until it heartbeats.
        for cid in [c for c, ch in channels.items() if ch.conn is channel.conn and c != channel.client_id]:
            del channels[cid]
        channels[channel.client_id] = channel

    def producer_seen(self, group: str, conn: ClientConnection, language: str, version: int) -> None:
        """A producer of `group` sent a half message over `conn`. A connection no heartbeat named as
        the group's is registered under its client id, or its address until a heartbeat comes."""
        if not group or conn.closed:
            return
        now = time.monotonic()
        channels = self.producers.setdefault(group, {})
        for ch in channels.values():
            if ch.conn is conn:
                ch.last_update = now
                return
        self.watch(conn)
        client_id = conn.client_id or conn.peer
        channels[client_id] = ClientChannel(client_id, conn, language, version, now)
        logger.info(
            "producer %s of group %s known from a half message on %s (no heartbeat on it yet)",
            client_id,
            group,
            conn.peer,
        )

    def register_consumer(
        self,
        group: str,
        channel: ClientChannel,
        consumer_data: dict[str, Any],
        subscriptions: list[Subscription],
    ) -> bool:
        """Records a consumer heartbeat; True when the group's members or subscriptions changed."""
        info = self.consumers.get(group)
        if info is None:
            info = self.consumers[group] = ConsumerGroupInfo(group)
        info.consume_type = _enum(consumer_data.get("consumeType"), CONSUME_TYPES, info.consume_type)
        info.message_model = _enum(consumer_data.get("messageModel"), MESSAGE_MODELS, info.message_model)
        info.consume_from_where = _enum(
            consumer_data.get("consumeFromWhere"), CONSUME_FROM, info.consume_from_where
        )
        old = info.channels.get(channel.client_id)
        member_changed = old is None or old.conn is not channel.conn
        info.channels[channel.client_id] = channel
        new_subs = {s.topic: s for s in subscriptions}
        subs_changed = {t: (s.sub_string, s.expression_type) for t, s in new_subs.items()} != {
            t: (s.sub_string, s.expression_type) for t, s in info.subscriptions.items()
        }
        newer = False
        if subs_changed:
            # Keep a newer version when the same expression arrives again.
            info.subscriptions = new_subs
        else:
            for t, s in new_subs.items():
                if s.sub_version > info.subscriptions[t].sub_version:
                    info.subscriptions[t] = s
                    newer = True
        if (subs_changed or newer) and self.on_subscriptions_changed is not None:
            self.on_subscriptions_changed()
        if member_changed:
            logger.info("consumer %s joined group %s from %s", channel.client_id, group, channel.conn.peer)
            self._on_consumers_changed(group, info)
        return member_changed or subs_changed

    def unregister(
        self,
        client_id: str,
        producer_group: str | None,
        consumer_group: str | None,
        conn: ClientConnection | None = None,
    ) -> None:
        if producer_group:
            channels = self.producers.get(producer_group, {})
            channels.pop(client_id, None)
            # Also an entry of this connection known by its address only (from a half message).
            for cid in [c for c, ch in channels.items() if conn is not None and ch.conn is conn]:
                del channels[cid]
            if not channels:
                self.producers.pop(producer_group, None)
        if consumer_group:
            info = self.consumers.get(consumer_group)
            if info is not None and info.channels.pop(client_id, None) is not None:
                logger.info("consumer %s left group %s", client_id, consumer_group)
                self._after_leave(info)

    def _after_leave(self, info: ConsumerGroupInfo) -> None:
        if not info.channels:
            del self.consumers[info.group]
            if self.on_subscriptions_changed is not None:
                self.on_subscriptions_changed()
        else:
            self._on_consumers_changed(info.group, info)

    def connection_closed(self, conn: ClientConnection) -> None:
        for group, channels in list(self.producers.items()):
            for cid in [c for c, ch in channels.items() if ch.conn is conn]:
                del channels[cid]
            if not channels:
                del self.producers[group]
        for info in list(self.consumers.values()):
            gone = [c for c, ch in info.channels.items() if ch.conn is conn]
            for cid in gone:
                del info.channels[cid]
                logger.info("consumer %s of group %s disconnected", cid, info.group)
            if gone:
                self._after_leave(info)

    def expire(self, now: float, max_idle: float) -> None:
        for group, channels in list(self.producers.items()):
            for cid in [c for c, ch in channels.items() if now - ch.last_update > max_idle]:
                logger.warning("producer %s of group %s expired", cid, group)
                del channels[cid]
            if not channels:
                del self.producers[group]
        for info in list(self.consumers.values()):
            gone = [c for c, ch in info.channels.items() if now - ch.last_update > max_idle]
            for cid in gone:
                logger.warning("consumer %s of group %s expired", cid, info.group)
                del info.channels[cid]
            if gone:
                self._after_leave(info)

    def producer_channel(self, group: str) -> ClientChannel | None:
        """One live channel of a producer group (for transaction checks): the one heard from last."""
        live = [ch for ch in self.producers.get(group, {}).values() if not ch.conn.closed]
        return max(live, key=lambda ch: ch.last_update, default=None)
