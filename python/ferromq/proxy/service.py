"""MessagingService (apache.rocketmq.v2), as Apache RocketMQ's proxy serves it: over the broker it
runs in (local mode, `ferromq.proxy.local`) or the brokers a name server lists (cluster mode,
`ferromq.proxy.cluster`), both behind `ferromq.proxy.backend.Backend`. This module reads
requests, checks what the proxy checks, chooses queues, and writes the answers with the proxy's
codes and messages (see `ferromq.proxy.status`), the same in both modes."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf import timestamp_pb2
from google.protobuf.message import Message

from ferromq import _store
from ferromq.acl.permission import PUB, SUB
from ferromq.auth import contexts
from ferromq.auth.contexts import Needed
from ferromq.broker.clients import Subscription, parse_subscription
from ferromq.broker.pop.formats import ExtraInfo, real_topic
from ferromq.broker.pop.service import MAX_POP_NUMS, PopRequest
from ferromq.broker.sql92 import compile_sql92
from ferromq.broker.subscriptions import SubscriptionGroupConfig
from ferromq.errors import SubscriptionParseError
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.constants import (
    RETRY_PREFIX,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from ferromq.protocol.headers import EndTransactionRequestHeader, SendMessageRequestHeader
from ferromq.proxy import convert
from ferromq.proxy.auth import CONSUMER_TYPES, authenticate, authorize, check_grpc, needs_of, settings_needs
from ferromq.proxy.backend import Backend
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2 as spb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2_grpc as rpc
from ferromq.proxy.renew import Held, Renewals
from ferromq.proxy.results import BrokerQueues, Popped
from ferromq.proxy.sessions import Session, Sessions, merged_settings
from ferromq.proxy.status import PROXY_EXCEPTION, Code, ProxyError, ok, status, status_of

logger = logging.getLogger(__name__)

R = TypeVar("R")

# The client's address, set by the gRPC front (crates/grpc, ferromq_grpc::PEER_HEADER).
PEER_HEADER = "x-ferromq-peer"

_MESSAGE_TYPES = {
    "NORMAL": [pb.NORMAL],
    "FIFO": [pb.FIFO],
    "DELAY": [pb.DELAY],
    "TRANSACTION": [pb.TRANSACTION],
    "PRIORITY": [pb.PRIORITY],
    "LITE": [pb.LITE],
    "MIXED": [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION],
}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _metadata(context: grpc.aio.ServicerContext[Any, Any]) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def _peer(metadata: Mapping[str, str]) -> str:
    """The client's `ip:port` (`[ip6]:port`): grpcio sees only the gRPC front's Unix socket, so the
    front names the client in a header of its own, over any value the client sent."""
    return metadata.get(PEER_HEADER, "")


def _host_of(peer: str) -> str:
    """The address of `ip:port` or `[ip6]:port`."""
    return peer.rsplit(":", 1)[0].strip("[]")


def _duration_ms(d: Any) -> int:
    return int(d.seconds) * 1000 + int(d.nanos) // 1_000_000


def _decode_handle(handle: str) -> tuple[ExtraInfo, int]:
    """A receipt handle: the broker's ExtraInfo and, ninth, the CommitLog offset (-1 without)."""
    try:
        receipt = ExtraInfo.parse(handle)
        fields = handle.split(" ")
        commit_log_offset = int(fields[8]) if len(fields) > 8 else -1
    except ValueError:
        raise ProxyError(
            Code.INVALID_RECEIPT_HANDLE, f"receipt handle is illegal: {handle[:200]!r}"
        ) from None
    return receipt, commit_log_offset


def _check_unexpired(receipt: ExtraInfo) -> None:
    """The proxy refuses to ack a message, or change its invisible time, once it is visible again
    (AbstractProcessor.validateReceiptHandle)."""
    if receipt.expired(_now_ms()):
        raise ProxyError(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")


def _entries_status(codes: list[int]) -> pb.Status:
    """The top-level status of per-entry results (one code for all: it; else MULTIPLE_RESULTS)."""
    distinct = set(codes)
    if len(distinct) == 1:
        code = distinct.pop()
        return status(code, Code.Name(code))
    return status(Code.MULTIPLE_RESULTS, "MULTIPLE_RESULTS")


# The lite consumers: 5.5's push consumer, and the simple one of the Python client 5.1.2 (5.5.0's proxy
# serves only the first).
LITE_CONSUMERS = frozenset((pb.LITE_PUSH_CONSUMER, pb.LITE_SIMPLE_CONSUMER))
# What a lite client may name beyond its quota in one subscription sync before the proxy refuses it.
LITE_QUOTA_BUFFER = 300


class MessagingService(rpc.MessagingServiceServicer):
    def __init__(self, backend: Backend, endpoint: Callable[[], tuple[str, int]]) -> None:
        self.backend = backend
        self._endpoint = endpoint
        self.sessions = Sessions()
        self.front: _store.GrpcFront | None = None
        """The gRPC front, once it runs: it serves some clients' receives and acks itself."""
        self._served_by_front: set[str] = set()
        self._lite_clients: set[str] = set()
        self._round_robin = itertools.count()
        cfg = backend.config
        self.renewals = Renewals(
            backend.change_invisible,
            cfg.renew_ahead_time_millis,
            cfg.renew_schedule_period_millis / 1000.0,
        )

    # -- common ----------------------------------------------------------------------------------

    def _session(
        self,
        context: grpc.aio.ServicerContext[Any, Any],
        resources: Mapping[str, int] | None = None,
        request: Message | None = None,
        needed: Callable[[], Needed] | None = None,
    ) -> Session:
        """The calling client; with an ACL on, only once its signature is checked and it may touch
        `resources` (topics, and groups as their retry topics, to PUB / SUB). ACL 2.0 checks what
        `needed` gives instead when given (what Java's proxy checks of calls that name no topic or
        group the plain ACL looks at; called only with ACL 2.0 on, as it refuses blank names with
        Java's texts), and skips the checks its whitelists name for `request`."""
        md = _metadata(context)
        client_id = md.get("x-mq-client-id", "")
        peer = _peer(md)
        host = _host_of(peer)
        acl = self.backend.acl
        if acl is not None:
            account = authenticate(acl, md, host)
            authorize(account, resources or {})
        auth = self.backend.auth
        if auth is not None:
            rpc = request.DESCRIPTOR.full_name if request is not None else ""
            check_grpc(auth, md, host, rpc, needed or (lambda: needs_of(resources or {})))
        if not client_id:
            raise ProxyError(Code.CLIENT_ID_REQUIRED, "client id cannot be empty")
        return self.sessions.open(
            client_id, peer, md.get("x-mq-language", ""), md.get("x-mq-client-version", "")
        )

    async def _unary(self, make: Callable[..., R], body: Callable[[], Awaitable[R]]) -> R:
        """Runs an RPC's body; a refusal becomes a response carrying only its status."""
        try:
            return await body()
        except Exception as e:
            if not isinstance(e, ProxyError):
                logger.debug("gRPC request refused: %s", e, exc_info=True)
            return make(status=status_of(e))

    def _endpoints(self, request_endpoints: pb.Endpoints | None) -> pb.Endpoints:
        """The gRPC endpoints of every broker's queues: this front's, as the client reached it (in
        cluster mode too: every call goes through the proxy)."""
        if request_endpoints is not None and request_endpoints.addresses:
            return request_endpoints
        host, port = self._endpoint()
        return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=port)])

    # -- route and clients -------------------------------------------------------------------------

    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Any) -> spb.QueryRouteResponse:
        async def body() -> spb.QueryRouteResponse:
            self._session(context, request=request, needed=lambda: contexts.grpc_route(request.topic.name))
            name = request.topic.name
            convert.check_topic_name(name, self.backend.reserved_topics)
            brokers = await self.backend.queues(name)
            if brokers is None:
                raise ProxyError(
                    Code.TOPIC_NOT_FOUND,
                    f"CODE: 17  DESC: No topic route info in name server for the topic: {name}\n"
                    "For more information, please visit the url, "
                    "https://rocketmq.apache.org/docs/bestPractice/06FAQ",
                )
            endpoints = self._endpoints(request.endpoints if request.HasField("endpoints") else None)
            accepts = _MESSAGE_TYPES.get(await self.backend.message_type(name), [pb.MESSAGE_TYPE_UNSPECIFIED])
            queues = []
            for bq in brokers:
                broker = pb.Broker(name=bq.broker_name, id=0, endpoints=endpoints)
                for qid, permission in enumerate(
                    _permissions(bq.perm, bq.read_queue_nums, bq.write_queue_nums)
                ):
                    queues.append(
                        pb.MessageQueue(
                            topic=request.topic,
                            id=qid,
                            permission=permission,  # type: ignore[arg-type]
                            broker=broker,
                            accept_message_types=accepts,
                        )
                    )
            return spb.QueryRouteResponse(status=ok(), message_queues=queues)

        return await self._unary(spb.QueryRouteResponse, body)

    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: Any
    ) -> spb.QueryAssignmentResponse:
        async def body() -> spb.QueryAssignmentResponse:
            self._session(
                context,
                request=request,
                needed=lambda: contexts.grpc_sub(request.group.name, request.topic.name),
            )
            convert.check_topic_name(request.topic.name, self.backend.reserved_topics)
            convert.check_group_name(request.group.name)
            brokers = await self.backend.queues(request.topic.name) or []
            endpoints = self._endpoints(request.endpoints if request.HasField("endpoints") else None)
            fifo = await self._fifo_group(request.group.name)
            assignments = []
            # One assignment of queue -1 per broker (the broker's pop picks the queue), or, for a
            # FIFO group, each queue.
            for bq in brokers:
                if not bq.readable or bq.read_queue_nums <= 0:
                    continue
                broker = pb.Broker(name=bq.broker_name, id=0, endpoints=endpoints)
                permission = pb.READ_WRITE if bq.writable else pb.READ
                for qid in range(bq.read_queue_nums) if fifo else [-1]:
                    queue = pb.MessageQueue(topic=request.topic, id=qid, permission=permission, broker=broker)
                    assignments.append(pb.Assignment(message_queue=queue))
            if not assignments:
                raise ProxyError(Code.FORBIDDEN, "no readable queue")
            return spb.QueryAssignmentResponse(status=ok(), assignments=assignments)

        return await self._unary(spb.QueryAssignmentResponse, body)

    async def _fifo_group(self, group: str) -> bool:
        """Whether a group's assignments name each queue: a FIFO group's, not a lite one's."""
        cfg = await self.backend.group(group)
        return cfg is not None and cfg.consume_message_orderly and not cfg.lite_bind_topic

    async def _register(self, session: Session, settings: pb.Settings) -> None:
        """The client as the brokers' client managers know 4.x clients: a producer of each of its
        topics (the proxy's producer group is the topic), or a consumer of its group."""
        if settings.HasField("publishing"):
            await self.backend.register_producer(session, [t.name for t in settings.publishing.topics])
        elif settings.HasField("subscription"):
            group = settings.subscription.group.name
            convert.check_group_name(group)
            subscriptions = []
            for entry in settings.subscription.subscriptions:
                etype = "SQL92" if entry.expression.type == pb.SQL else "TAG"
                try:
                    subscriptions.append(
                        parse_subscription(entry.topic.name, entry.expression.expression, etype, 0)
                    )
                except SubscriptionParseError as e:
                    raise ProxyError(Code.ILLEGAL_FILTER_EXPRESSION, str(e)) from None
            simple = settings.client_type in (pb.SIMPLE_CONSUMER, pb.LITE_SIMPLE_CONSUMER)
            lite = settings.client_type in LITE_CONSUMERS
            await self._check_lite_mode(group, lite, [s.topic for s in subscriptions])
            data = {
                "consumeType": "CONSUME_ACTIVELY" if simple else "CONSUME_PASSIVELY",
                "messageModel": "LITE_SELECTIVE" if lite else "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            }
            await self.backend.register_consumer(session, group, data, subscriptions)

    async def _lite_group(self, group: str) -> SubscriptionGroupConfig:
        cfg = await self.backend.group(group)
        if cfg is None:
            raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, f"group not found: {group}")
        return cfg

    async def _check_lite_mode(self, group: str, lite: bool, topics: list[str]) -> None:
        """A lite group takes lite push consumers only, of its bind topic, and they no other group
        (RocketMQ 5.5's ClientProcessor.validateLiteMode and validateLiteSubTopic)."""
        cfg = await self._lite_group(group) if lite else await self.backend.group(group)
        bind = cfg.lite_bind_topic if cfg is not None else None
        if lite and not bind:
            raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, f"regular group cannot use LITE mode: {group}")
        if bind and not lite:
            raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, f"lite group must use LITE mode: {group}")
        if lite and topics:
            self._check_bind_topic(group, bind, topics[0])

    @staticmethod
    def _check_bind_topic(group: str, bind: str | None, topic: str) -> None:
        if bind != topic:
            raise ProxyError(
                Code.ILLEGAL_TOPIC,
                f"lite group {group} is expected to bind topic {bind}, but actual is {topic}",
            )

    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any) -> spb.HeartbeatResponse:
        async def body() -> spb.HeartbeatResponse:
            consumer = request.client_type in CONSUMER_TYPES
            needed = lambda: contexts.grpc_sub(request.group.name, None) if consumer else []  # noqa: E731
            session = self._session(context, request=request, needed=needed)
            if session.settings is None:
                raise ProxyError(Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client")
            await self._register(session, session.settings)
            return spb.HeartbeatResponse(status=ok())

        return await self._unary(spb.HeartbeatResponse, body)

    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: Any
    ) -> spb.NotifyClientTerminationResponse:
        async def body() -> spb.NotifyClientTerminationResponse:
            group = request.group.name
            needed = lambda: contexts.grpc_sub(group, None) if group.strip() else []  # noqa: E731
            session = self._session(context, request=request, needed=needed)
            settings = session.settings
            if settings is None:
                raise ProxyError(Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client")
            if settings.HasField("publishing"):
                await self.backend.unregister(session, [t.name for t in settings.publishing.topics], None)
            elif settings.HasField("subscription"):
                await self.backend.unregister(session, [], settings.subscription.group.name)
            await self.renewals.client_gone(session.client_id_)
            self.sessions.remove(session.client_id_)
            return spb.NotifyClientTerminationResponse(status=ok())

        return await self._unary(spb.NotifyClientTerminationResponse, body)

    async def Telemetry(
        self, request_iterator: AsyncIterator[spb.TelemetryCommand], context: Any
    ) -> AsyncIterator[spb.TelemetryCommand]:
        """The client's Settings in, the merged Settings and the broker's commands (transaction
        checks) out, until the client ends the stream."""
        md = _metadata(context)
        try:
            session = self._session(context, request=_TELEMETRY, needed=list)
        except ProxyError as e:
            yield spb.TelemetryCommand(status=status(e.status_code, e.message))
            return

        def check_settings(settings: pb.Settings) -> None:
            auth = self.backend.auth
            if auth is not None:
                rpc = _TELEMETRY.DESCRIPTOR.full_name
                check_grpc(auth, md, _host_of(_peer(md)), rpc, lambda: settings_needs(settings))

        reader = asyncio.create_task(self._read_telemetry(request_iterator, session, check_settings))
        command: asyncio.Future[spb.TelemetryCommand] | None = None
        try:
            while True:
                command = asyncio.ensure_future(session.next_command())
                done, _ = await asyncio.wait({command, reader}, return_when=asyncio.FIRST_COMPLETED)
                if command not in done:
                    # The client ended the stream. A connection that went can look so too (its end
                    # reaches grpcio before the cancel, through the front), so a lite client is
                    # taken as gone, as below.
                    self._lite_went(session)
                    return
                yield command.result()
                command = None
        except asyncio.CancelledError:
            self._lite_went(session)
            raise
        finally:
            # Also when gRPC closes the stream (the client went, the server stops).
            for task in (command, reader):
                if task is not None:
                    task.cancel()

    async def _read_telemetry(
        self,
        commands: AsyncIterator[spb.TelemetryCommand],
        session: Session,
        check_settings: Callable[[pb.Settings], None],
    ) -> None:
        async for command in commands:
            if not command.HasField("settings"):
                continue  # thread stack traces and verify results: nothing waits for them
            try:
                settings = command.settings
                check_settings(settings)
                if not (settings.HasField("publishing") or settings.HasField("subscription")):
                    raise ProxyError(
                        Code.BAD_REQUEST, "there is no publishing or subscription data in settings"
                    )
                group = None
                if settings.HasField("subscription"):
                    group = await self.backend.group(settings.subscription.group.name)
                merged = merged_settings(settings, group)
                session.settings = merged
                await self._register(session, merged)
                self._front_serves(session, merged)
                self._lite_client(session, merged)
                session.send(spb.TelemetryCommand(status=ok(), settings=merged))
            except Exception as e:
                session.send(spb.TelemetryCommand(status=status_of(e)))

    def _front_serves(self, session: Session, settings: pb.Settings) -> None:
        """Whether the gRPC front serves this client's receives and acks itself, on the data
        plane: a simple consumer's that is not FIFO (a FIFO consumer's orderly pops, and a push
        consumer's renewals, are this service's), with its retry policy's attempts."""
        front = self.front
        if front is None:
            return
        client_id = session.client_id_
        if settings.client_type != pb.SIMPLE_CONSUMER or settings.subscription.fifo:
            front.forget_client(client_id)
            return
        front.serve_client(client_id, settings.backoff_policy.max_attempts)
        if client_id not in self._served_by_front:
            self._served_by_front.add(client_id)
            session.on_close(lambda _: self._front_forgets(client_id))

    def _lite_client(self, session: Session, settings: pb.Settings) -> None:
        """A lite push consumer's subscriptions go from the brokers when it goes
        (offlineClientLiteSubscription)."""
        client_id = session.client_id_
        if settings.client_type not in LITE_CONSUMERS or client_id in self._lite_clients:
            return
        self._lite_clients.add(client_id)
        group, topics = settings.subscription.group.name, settings.subscription.subscriptions
        topic = topics[0].topic.name if topics else ""

        session.on_close(lambda _: self._lite_offline(client_id, group, topic))

    def _lite_went(self, session: Session) -> None:
        """The client's Telemetry stream ended (its connection went: gRPC cancels the stream): a lite
        client's subscriptions go at once, as Java's proxy drops them (handleGrpcCancel)."""
        settings = session.settings
        if settings is not None and settings.client_type in LITE_CONSUMERS:
            topics = settings.subscription.subscriptions
            topic = topics[0].topic.name if topics else ""
            self._lite_offline(session.client_id_, settings.subscription.group.name, topic)

    def _lite_offline(self, client_id: str, group: str, topic: str) -> None:
        """The brokers drop a lite client's subscriptions (COMPLETE_REMOVE): it went."""
        if client_id not in self._lite_clients:
            return
        self._lite_clients.discard(client_id)
        entry = {"action": "COMPLETE_REMOVE", "clientId": client_id, "group": group, "topic": topic}
        task = asyncio.get_running_loop().create_task(self.backend.sync_lite(entry, self._notify_lite))
        task.add_done_callback(_log_failure)

    def _notify_lite(self, client_id: str, group: str, lite_topic: str) -> None:
        """A broker dropped a lite topic of the client's (an exclusive group's other client took it):
        the client is told over Telemetry (NotifyUnsubscribeLiteCommand)."""
        session = self.sessions.by_id.get(client_id)
        if session is not None:
            command = spb.NotifyUnsubscribeLiteCommand(lite_topic=lite_topic)
            session.send(spb.TelemetryCommand(notify_unsubscribe_lite_command=command))

    def _front_forgets(self, client_id: str) -> None:
        self._served_by_front.discard(client_id)
        if self.front is not None:
            self.front.forget_client(client_id)

    async def dead_letter_from_front(
        self, group: str, topic: str, receipt: str, commit_log_offset: int, message_id: str
    ) -> None:
        """A message the front popped past its consumer's retry policy: to the dead letter queue,
        as `_spent_to_dead_letters` does with the pops served here."""
        try:
            await self._dead_letter(group, ExtraInfo.parse(receipt), commit_log_offset, topic)
        except Exception as e:  # it comes back after its invisible time, and is filtered again
            logger.warning("the dead letter of %s failed: %s", message_id, e)

    # -- send ------------------------------------------------------------------------------------

    async def SendMessage(self, request: spb.SendMessageRequest, context: Any) -> spb.SendMessageResponse:
        async def body() -> spb.SendMessageResponse:
            session = self._session(context, _topic_perm(request.messages, PUB), request)
            if not request.messages:
                raise ProxyError(Code.MESSAGE_CORRUPTED, "no message to send")
            topic = request.messages[0].topic.name
            convert.check_topic_name(topic, self.backend.reserved_topics)
            if any(m.topic.name != topic for m in request.messages):
                raise ProxyError(Code.MESSAGE_CORRUPTED, "topic in message is not same")
            now = _now_ms()
            # Every message checked before any is stored, as the front does (`crates/grpc`).
            outgoing = [convert.to_store(m, session.peer, now) for m in request.messages]
            entries = [
                await self._send_one(session, out, m)
                for out, m in zip(outgoing, request.messages, strict=True)
            ]
            return spb.SendMessageResponse(
                status=_entries_status([e.status.code for e in entries]), entries=entries
            )

        return await self._unary(spb.SendMessageResponse, body)

    async def _send_one(self, session: Session, out: convert.Outgoing, m: pb.Message) -> spb.SendResultEntry:
        expected = await self.backend.message_type(out.topic)
        actual = out.message_type
        if expected not in (actual, "MIXED"):
            raise ProxyError(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "org.apache.rocketmq.proxy.common.ProxyException: TopicMessageType validate failed, "
                f"the expected type is {expected}, but actual type is {actual}",
            )
        broker_name, queue_id = self._send_queue(
            await self.backend.queues(out.topic) or [], out.message_group
        )
        h = SendMessageRequestHeader(
            producer_group=out.topic,
            topic=out.topic,
            queue_id=queue_id,
            sys_flag=out.sys_flag,
            born_timestamp=out.born_timestamp or _now_ms(),
            properties=out.properties_string,
        )
        sent = await self.backend.send(session, broker_name, h, out.body)
        code, fields = sent.code, sent.fields
        message_id = m.system_properties.message_id
        if code != ResponseCode.SUCCESS:
            name = ResponseCode(code).name if code in ResponseCode._value2member_map_ else str(code)
            entry_code, text = convert.send_failure(code, name)
            return spb.SendResultEntry(
                status=status(entry_code, text),
                message_id=message_id,
            )
        queue_offset = int(fields.get("queueOffset", "0"))
        if actual == "TRANSACTION":
            commit_log_offset = _commit_log_offset(fields.get("msgId", ""))
            session.remember_transaction(message_id, (queue_offset, commit_log_offset, broker_name))
        return spb.SendResultEntry(
            status=ok(),
            message_id=message_id,
            transaction_id=message_id,
            offset=queue_offset,
            recall_handle=fields.get("recallHandle", ""),
        )

    def _send_queue(self, brokers: list[BrokerQueues], message_group: str | None) -> tuple[str, int]:
        """The queue of a send, as the proxy's SendMessageQueueSelector picks it among the writable
        queues of every broker: a FIFO message group's by its hash, others in turn. With none
        writable, the first broker's (which refuses the send with its own answer)."""
        queues = [(b.broker_name, q) for b in brokers if b.writable for q in range(b.write_queue_nums)]
        if not queues:
            return (brokers[0].broker_name if brokers else "", 0)
        if message_group:
            return queues[convert.fifo_queue(message_group, len(queues))]
        return queues[next(self._round_robin) % len(queues)]

    # -- receive, ack, change of invisible time ---------------------------------------------------

    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        try:
            result, req, max_attempts = await self._receive(request, context)
        except Exception as e:
            yield spb.ReceiveMessageResponse(status=status_of(e))
        else:
            found = result.found
            messages = self._received(result, req) if found else []
            if messages and max_attempts:
                messages = await self._spent_to_dead_letters(messages, req, max_attempts)
            if not found:
                yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
            elif not messages:
                yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no match message"))
            else:
                yield spb.ReceiveMessageResponse(status=ok())
                client_id = _metadata(context).get("x-mq-client-id", "")
                for message in messages:
                    if request.auto_renew:
                        self._hold(client_id, req, message)
                    yield spb.ReceiveMessageResponse(message=message)
        now = _now_ms()
        yield spb.ReceiveMessageResponse(
            delivery_timestamp=timestamp_pb2.Timestamp(seconds=now // 1000, nanos=(now % 1000) * 1_000_000)
        )

    async def _receive(
        self, request: spb.ReceiveMessageRequest, context: Any
    ) -> tuple[Popped, PopRequest, int]:
        """The pop, what it found, and the delivery attempts the consumer's retry policy allows (0:
        no policy known)."""
        session = self._session(
            context, _consume_perm(request.message_queue.topic.name, request.group.name), request
        )
        settings = session.settings
        fifo = bool(settings is not None and settings.subscription.fifo)
        max_attempts = settings.backoff_policy.max_attempts if settings is not None else 0
        remaining = context.time_remaining()
        timeout = settings.request_timeout if settings is not None else None
        polling = convert.polling_time(
            _duration_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else None,
            _duration_ms(timeout) if timeout is not None else None,
            int(remaining * 1000) if remaining is not None else None,
        )
        topic, group = request.message_queue.topic.name, request.group.name
        convert.check_topic_name(topic, self.backend.reserved_topics)
        convert.check_group_name(group)
        if request.auto_renew:
            invisible = self.backend.config.default_invisible_time_mills
        else:
            invisible = (
                _duration_ms(request.invisible_duration) if request.HasField("invisible_duration") else 0
            )
            convert.check_invisible(invisible, receive=True)
        if settings is not None and settings.client_type in LITE_CONSUMERS:
            return await self._receive_lite(request, session, invisible, polling, max_attempts)
        expression = request.filter_expression
        sql = None
        try:
            if expression.type == pb.SQL:
                subscription = parse_subscription(topic, expression.expression, "SQL92", 0)
                sql = compile_sql92(expression.expression)
            else:
                subscription = parse_subscription(topic, expression.expression or "*", "TAG", 0)
        except SubscriptionParseError as e:
            raise ProxyError(Code.ILLEGAL_FILTER_EXPRESSION, str(e)) from None
        req = _pop_request(request, invisible, polling, subscription, fifo, sql)
        # The broker the client's assignment names (in local mode: the one broker there is).
        result = await self.backend.pop(request.message_queue.broker.name, req)
        return result, req, max_attempts

    async def _receive_lite(
        self,
        request: spb.ReceiveMessageRequest,
        session: Session,
        invisible: int,
        polling: int,
        max_attempts: int,
    ) -> tuple[Popped, PopRequest, int]:
        """A lite push consumer's receive: a lite pop of its lite topics with messages (popLiteMessage)."""
        topic, group = request.message_queue.topic.name, request.group.name
        req = _pop_request(request, invisible, polling, parse_subscription(topic, "*", "TAG", 0), True, None)
        result = await self.backend.pop_lite(
            request.message_queue.broker.name,
            session.client_id_,
            group,
            topic,
            req.max_msgs,
            invisible,
            polling,
            req.attempt_id,
        )
        return result, req, max_attempts

    async def _spent_to_dead_letters(
        self, messages: list[pb.Message], req: PopRequest, max_attempts: int
    ) -> list[pb.Message]:
        """The messages still to deliver: one past its retry policy's attempts goes to the group's dead
        letter queue instead (and its receipt is acked), as Java's proxy filters a pop's result."""
        live = []
        for message in messages:
            if message.system_properties.delivery_attempt <= max_attempts:
                live.append(message)
                continue
            receipt, commit_log_offset = _decode_handle(message.system_properties.receipt_handle)
            lite_topic = _lite_topic_of(message)
            try:
                await self._dead_letter(
                    req.group,
                    receipt,
                    commit_log_offset,
                    real_topic(req.topic, req.group, receipt.mark),
                    lite_topic,
                )
            except Exception as e:  # it comes back after its invisible time, and is filtered again
                logger.warning("the dead letter of %s failed: %s", message.system_properties.message_id, e)
        return live

    def _hold(self, client_id: str, req: PopRequest, message: pb.Message) -> None:
        """A push consumer's message, kept invisible while it consumes (see `renew`)."""
        receipt, commit_log_offset = _decode_handle(message.system_properties.receipt_handle)
        held = Held(
            req.group,
            real_topic(req.topic, req.group, receipt.mark),
            str(receipt),
            commit_log_offset,
            _now_ms(),
            lite_topic=_lite_topic_of(message),
        )
        self.renewals.hold(client_id, message.system_properties.message_id, held)

    def _received(self, popped: Popped, req: PopRequest) -> list[pb.Message]:
        """The popped records as 5.x messages, each with its receipt handle."""
        return convert.popped_to_v2(popped, req.topic)

    async def AckMessage(self, request: spb.AckMessageRequest, context: Any) -> spb.AckMessageResponse:
        async def body() -> spb.AckMessageResponse:
            session = self._session(context, _consume_perm(request.topic.name, request.group.name), request)
            topic, group = request.topic.name, request.group.name
            convert.check_topic_name(topic, self.backend.reserved_topics)
            convert.check_group_name(group)
            entries = []
            for entry in request.entries:
                try:
                    handle = self.renewals.release(
                        session.client_id_, group, entry.message_id, entry.receipt_handle
                    )
                    receipt, _ = _decode_handle(handle)
                    _check_unexpired(receipt)
                    where = real_topic(topic, group, receipt.mark)
                    lite_topic = entry.lite_topic if entry.HasField("lite_topic") else None
                    await self.backend.ack(group, where, receipt, lite_topic or None)
                    result = ok()
                except Exception as e:
                    result = status_of(e)
                entries.append(
                    spb.AckMessageResultEntry(
                        message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=result
                    )
                )
            if not entries:
                return spb.AckMessageResponse(
                    status=status(Code.INTERNAL_SERVER_ERROR, "ack message result is empty")
                )
            return spb.AckMessageResponse(
                status=_entries_status([e.status.code for e in entries]), entries=entries
            )

        return await self._unary(spb.AckMessageResponse, body)

    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: Any
    ) -> spb.ChangeInvisibleDurationResponse:
        async def body() -> spb.ChangeInvisibleDurationResponse:
            group = request.group.name
            receipt, commit_log_offset, where = self._held_message(context, request)
            invisible = _duration_ms(request.invisible_duration)
            pop_time, invisible_time, revive_qid = await self.backend.change_invisible(
                group, where, receipt, invisible, request.lite_topic or None, request.suspend
            )
            changed = receipt.changed(pop_time, invisible_time, revive_qid)
            return spb.ChangeInvisibleDurationResponse(
                status=ok(), receipt_handle=f"{changed} {commit_log_offset}"
            )

        return await self._unary(spb.ChangeInvisibleDurationResponse, body)

    def _held_message(
        self,
        context: Any,
        request: spb.ChangeInvisibleDurationRequest | spb.ForwardMessageToDeadLetterQueueRequest,
    ) -> tuple[ExtraInfo, int, str]:
        """The message a consumer's call names: its newest receipt (renewed ones swapped in), its
        CommitLog offset and the topic it lies in (a retry topic for a retried message)."""
        topic, group = request.topic.name, request.group.name
        session = self._session(context, _consume_perm(topic, group), request)
        convert.check_topic_name(topic, self.backend.reserved_topics)
        convert.check_group_name(group)
        if isinstance(request, spb.ChangeInvisibleDurationRequest):
            # The proxy checks the duration before it reads the receipt.
            convert.check_invisible(_duration_ms(request.invisible_duration), receive=False)
        handle = self.renewals.release(session.client_id_, group, request.message_id, request.receipt_handle)
        receipt, commit_log_offset = _decode_handle(handle)
        if isinstance(request, spb.ChangeInvisibleDurationRequest):
            _check_unexpired(receipt)
        return receipt, commit_log_offset, real_topic(topic, group, receipt.mark)

    # -- dead letters, transactions, recalls --------------------------------------------------------

    async def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        async def body() -> spb.ForwardMessageToDeadLetterQueueResponse:
            group = request.group.name
            receipt, commit_log_offset, where = self._held_message(context, request)
            if commit_log_offset < 0:
                raise ProxyError(Code.INVALID_RECEIPT_HANDLE, PROXY_EXCEPTION + "commit log offset is empty")
            await self._dead_letter(group, receipt, commit_log_offset, where, request.lite_topic or None)
            return spb.ForwardMessageToDeadLetterQueueResponse(status=ok())

        return await self._unary(spb.ForwardMessageToDeadLetterQueueResponse, body)

    async def _dead_letter(
        self,
        group: str,
        receipt: ExtraInfo,
        commit_log_offset: int,
        where: str,
        lite_topic: str | None = None,
    ) -> None:
        """A received message straight to the group's dead letter queue (a negative delay level), then
        its receipt acked (a lite message's in its lite topic), as the proxy does."""
        await self.backend.dead_letter(group, receipt, commit_log_offset)
        try:
            await self.backend.ack(group, where, receipt, lite_topic)
        except Exception as e:
            logger.debug("the ack after a dead letter at %d failed: %s", commit_log_offset, e)

    async def SyncLiteSubscription(
        self, request: spb.SyncLiteSubscriptionRequest, context: Any
    ) -> spb.SyncLiteSubscriptionResponse:
        """A lite push consumer's subscription change, to every broker of its topic (RocketMQ 5.5's
        ClientActivity.syncLiteSubscription)."""

        async def body() -> spb.SyncLiteSubscriptionResponse:
            topic, group = request.topic.name, request.group.name
            session = self._session(context, _consume_perm(topic, group), request)
            convert.check_topic_name(topic, self.backend.reserved_topics)
            convert.check_group_name(group)
            action = pb.LiteSubscriptionAction.Name(request.action)
            lites = list(dict.fromkeys(request.lite_topic_set))
            entry: dict[str, Any] = {
                "action": action,
                "clientId": session.client_id_,
                "group": group,
                "topic": topic,
                "liteTopicSet": lites,
                "version": request.version,
            }
            cfg = await self._lite_group(group)
            self._check_bind_topic(group, cfg.lite_bind_topic, topic)
            # A client past its quota by more than a buffer is refused here (validateLiteSubscriptionQuota).
            if len(lites) > cfg.lite_sub_client_quota + LITE_QUOTA_BUFFER:
                raise ProxyError(
                    Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
                    f"lite subscription quota exceeded: {cfg.lite_sub_client_quota}",
                )
            if action == "PARTIAL_ADD":
                for lite in lites:
                    convert.check_lite_topic(lite)
                if request.HasField("offset_option"):
                    entry["offsetOption"] = _offset_option(request.offset_option)
            await self.backend.sync_lite(entry, self._notify_lite)
            return spb.SyncLiteSubscriptionResponse(status=ok())

        return await self._unary(spb.SyncLiteSubscriptionResponse, body)

    async def EndTransaction(
        self, request: spb.EndTransactionRequest, context: Any
    ) -> spb.EndTransactionResponse:
        async def body() -> spb.EndTransactionResponse:
            session = self._session(context, {request.topic.name: PUB}, request)
            topic = request.topic.name
            convert.check_topic_name(topic, self.backend.reserved_topics)
            if not request.transaction_id.strip():
                raise ProxyError(Code.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
            known = self._transaction(session, request.transaction_id)
            if known is None:
                raise ProxyError(
                    Code.INTERNAL_SERVER_ERROR, PROXY_EXCEPTION + "cannot found transaction data"
                )
            queue_offset, commit_log_offset, broker_name = known
            kind = {
                pb.COMMIT: TRANSACTION_COMMIT_TYPE,
                pb.ROLLBACK: TRANSACTION_ROLLBACK_TYPE,
            }.get(request.resolution, TRANSACTION_NOT_TYPE)
            h = EndTransactionRequestHeader(
                producer_group=topic,
                tran_state_table_offset=queue_offset,
                commit_log_offset=commit_log_offset,
                commit_or_rollback=kind,
                from_transaction_check=request.source == pb.SOURCE_SERVER_CHECK,
                msg_id=request.message_id,
                transaction_id=request.transaction_id,
            )
            await self.backend.end_transaction(session, broker_name, h)
            if kind != TRANSACTION_NOT_TYPE:
                session.transactions.pop(request.transaction_id, None)
            return spb.EndTransactionResponse(status=ok())

        return await self._unary(spb.EndTransactionResponse, body)

    def _transaction(self, session: Session, transaction_id: str) -> tuple[int, int, str] | None:
        """Where a transaction's half message is: as this client's send or check learnt it (or
        another client of the producer's, after a check went to it)."""
        known = session.transactions.get(transaction_id)
        if known is not None:
            return known
        for other in self.sessions.by_id.values():
            if transaction_id in other.transactions:
                return other.transactions[transaction_id]
        return None

    async def RecallMessage(
        self, request: spb.RecallMessageRequest, context: Any
    ) -> spb.RecallMessageResponse:
        async def body() -> spb.RecallMessageResponse:
            session = self._session(context, {request.topic.name: PUB}, request)
            topic = request.topic.name
            convert.check_topic_name(topic, self.backend.reserved_topics)
            message_type = await self.backend.message_type(topic)
            if message_type not in ("DELAY", "MIXED"):
                raise ProxyError(
                    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    PROXY_EXCEPTION + "TopicMessageType validate failed, the expected type is "
                    f"{message_type}, but actual type is DELAY",
                )
            message_id = await self.backend.recall(session, topic, request.recall_handle)
            return spb.RecallMessageResponse(status=ok(), message_id=message_id)

        return await self._unary(spb.RecallMessageResponse, body)


# A send the broker stored but whose wait failed: the entry's code (SendMessageActivity).
def _topic_perm(messages: Sequence[pb.Message], needed: int) -> dict[str, int]:
    return {m.topic.name: needed for m in messages}


_TELEMETRY = spb.TelemetryCommand()


def _consume_perm(topic: str, group: str) -> dict[str, int]:
    """A consumer's call: SUB on the topic and on the group (its retry topic, as the ACL names it)."""
    return {topic: SUB, RETRY_PREFIX + group: SUB}


def _permissions(perm: int, read: int, write: int) -> Sequence[int]:
    """The route's queues of a topic by its perm bits (genMessageQueueFromQueueData): read-only,
    then write-only, then read-write ones; NONE ones when neither."""
    readable, writable = bool(perm & 4), bool(perm & 2)
    if readable and writable:
        both = min(read, write)
        return [pb.READ] * (read - both) + [pb.WRITE] * (write - both) + [pb.READ_WRITE] * both
    if writable:
        return [pb.WRITE] * write
    if readable:
        return [pb.READ] * read
    return [pb.NONE] * max(1, read, write)


def _commit_log_offset(offset_msg_id: str) -> int:
    from ferromq import _store

    try:
        return int(_store.decode_offset_msg_id(offset_msg_id)[1])
    except (ValueError, IndexError):
        return -1


def _pop_request(
    request: spb.ReceiveMessageRequest,
    invisible: int,
    polling: int,
    subscription: Subscription,
    order: bool,
    sql: Callable[[dict[str, str]], bool] | None,
) -> PopRequest:
    """The pop a receive asks for, of every queue of its topic (the broker picks), at most MAX_POP_NUMS."""
    return PopRequest(
        group=request.group.name,
        topic=request.message_queue.topic.name,
        queue_id=-1,
        max_msgs=max(1, min(request.batch_size or 1, MAX_POP_NUMS)),
        invisible_time=invisible,
        poll_time=polling,
        born_time=_now_ms(),
        init_mode=1,
        subscription=subscription,
        order=order,
        attempt_id=request.attempt_id or None,
        sql=sql,
    )


def _lite_topic_of(message: pb.Message) -> str | None:
    sp = message.system_properties
    return sp.lite_topic if sp.HasField("lite_topic") and sp.lite_topic else None


def _offset_option(option: pb.OffsetOption) -> dict[str, Any]:
    """An OffsetOption as 5.5.0's proxy hands it to the brokers (ClientActivity.toOffsetOption)."""
    kind = option.WhichOneof("offset_type")
    if kind == "policy":
        return {"type": "POLICY", "value": int(option.policy)}
    if kind == "offset":
        return {"type": "OFFSET", "value": option.offset}
    if kind == "tail_n":
        return {"type": "TAIL_N", "value": option.tail_n}
    if kind == "timestamp":
        return {"type": "TIMESTAMP", "value": option.timestamp}
    raise ProxyError(Code.BAD_REQUEST, "unknown offset option")


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("dropping a lite client's subscriptions failed: %s", task.exception())
