"""The backend of local mode: the broker the gRPC front runs in, called in process. Every call goes
through the broker's own decisions, the same as a remoting request (a send through `store_send`
and the Rust send rules, a pop through the POP rules and long polling), so no rule is written a
third time here."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from ferromq.broker.clients import ClientChannel, Subscription
from ferromq.broker.pop.formats import ORDER_REVIVE_QUEUE, ExtraInfo, retry_mark
from ferromq.broker.pop.service import PopRequest
from ferromq.broker.processors.context import (
    EndTransactionContext,
    PopHandlersContext,
    RecallContext,
    SendContext,
)
from ferromq.broker.processors.end_transaction import finish_transaction
from ferromq.broker.processors.pop import wait_for_pop
from ferromq.broker.processors.recall import recall
from ferromq.broker.processors.send import Producer, send_back, store_send
from ferromq.errors import BrokerError
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.headers import EndTransactionRequestHeader, SendMessageRequestHeader
from ferromq.proxy.backend import LiteNotifier
from ferromq.proxy.results import BrokerQueues, Popped, SendOutcome
from ferromq.proxy.status import Code, ProxyError

if TYPE_CHECKING:
    from ferromq import _store
    from ferromq.acl.plain import PlainAcl
    from ferromq.auth.evaluator import Auth
    from ferromq.broker.config import BrokerConfig
    from ferromq.broker.subscriptions import SubscriptionGroupConfig
    from ferromq.proxy.sessions import Session
    from ferromq.remoting.plane import PlaneServer


class LocalBroker(SendContext, EndTransactionContext, RecallContext, PopHandlersContext, Protocol):
    """What local mode uses of the broker it runs in: the processors' own contexts (it calls their
    functions), its ACLs and its port's data plane."""

    @property
    def acl(self) -> PlainAcl | None: ...
    @property
    def auth(self) -> Auth | None: ...
    @property
    def server(self) -> PlaneServer | None: ...


class LocalBackend:
    def __init__(self, broker: LocalBroker) -> None:
        self._broker = broker

    @property
    def config(self) -> BrokerConfig:
        return self._broker.config

    @property
    def reserved_topics(self) -> frozenset[str]:
        return self._broker.topics.reserved

    @property
    def acl(self) -> PlainAcl | None:
        return self._broker.acl

    @property
    def auth(self) -> Auth | None:
        """The broker's ACL 2.0: its users and ACLs guard the gRPC port too (Java 5.3.3's proxy
        checks it only when rmq-proxy.json turns it on; a broker.conf that secures the broker must
        not leave its gRPC port open)."""
        return self._broker.auth

    @property
    def data_plane(self) -> _store.DataPlane | None:
        server = self._broker.server
        return server.plane if server is not None else None

    async def queues(self, topic: str) -> list[BrokerQueues] | None:
        tc = self._broker.topics.get(topic)
        if tc is None:
            return None
        return [BrokerQueues(self.config.broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm)]

    async def message_type(self, topic: str) -> str:
        tc = self._broker.topics.get(topic)
        return tc.message_type if tc is not None else "UNSPECIFIED"

    async def group(self, group: str) -> SubscriptionGroupConfig | None:
        return self._broker.groups.groups.get(group)

    async def send(
        self, session: Session, broker_name: str, h: SendMessageRequestHeader, body: bytes
    ) -> SendOutcome:
        language = session.language or "PYTHON"
        stored = store_send(self._broker, h, body, session.peer, Producer(session, language, 0))
        code = stored.code if isinstance(stored.code, int) else await stored.code
        return SendOutcome(code, stored.reply_ext)

    async def pop(self, broker_name: str, req: PopRequest) -> Popped:
        broker = self._broker
        tc = broker.topics.get(req.topic)
        if tc is None:
            raise ProxyError(Code.TOPIC_NOT_FOUND, f"topic[{req.topic}] not exist, apply first please!")
        if not tc.readable or not broker.config.broker_permission & 4:
            raise ProxyError(Code.FORBIDDEN, "no readable queue")
        if broker.groups.find_or_create(req.group) is None:
            raise ProxyError(
                Code.CONSUMER_GROUP_NOT_FOUND, f"subscription group [{req.group}] does not exist"
            )
        result = broker.pop.try_pop(req)
        if not result.found and req.poll_time > 0:
            result = await wait_for_pop(broker, req)
        popped = result.popped
        return Popped(
            result.found,
            popped.body if result.found else b"",
            popped.pop_time,
            popped.invisible_time,
            popped.revive_qid,
            {(retry_mark(topic), queue_id): start for topic, queue_id, start, _ in popped.takes},
            broker.config.broker_name,
        )

    async def pop_lite(
        self,
        broker_name: str,
        client_id: str,
        group: str,
        topic: str,
        max_msgs: int,
        invisible_ms: int,
        poll_ms: int,
        attempt_id: str | None,
    ) -> Popped:
        lite = self._broker.lite_consumers
        got = await lite.pop(client_id, group, topic, max_msgs, invisible_ms, poll_ms, attempt_id)
        return Popped(
            got.found,
            got.body,
            got.pop_time,
            got.invisible_time,
            ORDER_REVIVE_QUEUE,
            {},
            self.config.broker_name,
            got.counts,
        )

    async def sync_lite(self, entry: dict[str, Any], notify: LiteNotifier) -> None:
        self._broker.lite_consumers.sync([entry], notify)

    async def ack(self, group: str, topic: str, receipt: ExtraInfo, lite_topic: str | None = None) -> None:
        if lite_topic:
            self._broker.lite_consumers.ack(
                group,
                topic,
                lite_topic,
                receipt.queue_id,
                receipt.offset,
                receipt.pop_time,
                receipt.revive_qid,
            )
            return
        self._broker.pop.ack(group, topic, receipt.queue_id, receipt.offset, receipt)

    async def change_invisible(
        self,
        group: str,
        topic: str,
        receipt: ExtraInfo,
        invisible_ms: int,
        lite_topic: str | None = None,
        suspend: bool = False,
    ) -> tuple[int, int, int]:
        if lite_topic:
            pop_time, invisible = self._broker.lite_consumers.change_invisible(
                group, topic, lite_topic, receipt.offset, receipt.pop_time, invisible_ms, suspend
            )
            return pop_time, invisible, receipt.revive_qid
        return self._broker.pop.change_invisible(
            group, topic, receipt.queue_id, receipt.offset, receipt, invisible_ms
        )

    async def dead_letter(self, group: str, receipt: ExtraInfo, commit_log_offset: int) -> None:
        send_back(self._broker, group, commit_log_offset, -1, 0)

    async def end_transaction(
        self, session: Session, broker_name: str, h: EndTransactionRequestHeader
    ) -> None:
        finish_transaction(self._broker, h, session.peer)

    async def recall(self, session: Session, topic: str, handle: str) -> str:
        code, remark, message_id = recall(self._broker, topic, handle, topic, session.peer)
        if code != ResponseCode.SUCCESS:
            raise BrokerError(remark, ResponseCode(code))
        return message_id

    def _channel(self, session: Session) -> ClientChannel:
        return ClientChannel(session.client_id_, session, session.language or "PYTHON", 0, time.monotonic())

    async def register_producer(self, session: Session, topics: list[str]) -> None:
        """The proxy's producer group is the topic."""
        channel = self._channel(session)
        for topic in topics:
            self._broker.clients.register_producer(topic, channel)

    async def register_consumer(
        self, session: Session, group: str, data: dict[str, str], subscriptions: list[Subscription]
    ) -> None:
        self._broker.clients.register_consumer(group, self._channel(session), data, subscriptions)

    async def unregister(self, session: Session, topics: list[str], group: str | None) -> None:
        clients = self._broker.clients
        for topic in topics:
            clients.unregister(session.client_id_, topic, None, session)
        if group is not None:
            clients.unregister(session.client_id_, None, group, session)
