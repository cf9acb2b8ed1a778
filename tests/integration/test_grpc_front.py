"""SendMessage, ReceiveMessage and AckMessage served by the gRPC front on the data plane (crates/grpc
`sends`, `receives`), against the same broker's Python service (`dataPlane=python`: every call reaches
grpcio): the same answers, refusals included, the same stored messages, the same messages received.
Calls that are Python's to decide (a transaction, a topic the plane does not serve, a client whose
settings are not a simple consumer's) reach the service and are answered by it,
and so do requests the front cannot or will not read (garbage, larger than it reads)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from ferromq import _store
from ferromq.broker.pop.formats import retry_topic
from ferromq.broker.subscriptions import SubscriptionGroupConfig
from ferromq.broker.topics import TopicConfig
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2 as spb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2_grpc as rpc
from ferromq.testing import Broker
from ferromq.testing.waiting import until

pytestmark = [pytest.mark.timeout(180)]

CALL_TIMEOUT = 10.0
QUEUES = 4
RUN = uuid.uuid4().hex[:6]


def message(topic: str, body: bytes = b"hello", **system: Any) -> pb.Message:
    user = system.pop("user", {})
    sp = pb.SystemProperties(message_id=uuid.uuid4().hex.upper(), body_encoding=pb.IDENTITY, **system)
    return pb.Message(topic=pb.Resource(name=topic), body=body, user_properties=user, system_properties=sp)


def send(endpoint: str, *messages: pb.Message, client_id: str = f"sends-{RUN}") -> spb.SendMessageResponse:
    with grpc.insecure_channel(endpoint) as ch:
        reply: spb.SendMessageResponse = rpc.MessagingServiceStub(ch).SendMessage(
            spb.SendMessageRequest(messages=list(messages)),
            metadata=[("x-mq-client-id", client_id)],
            timeout=CALL_TIMEOUT,
        )
        return reply


def query_route(
    endpoint: str, topic: str, compression: grpc.Compression | None = None
) -> spb.QueryRouteResponse:
    with grpc.insecure_channel(endpoint, compression=compression) as ch:
        reply: spb.QueryRouteResponse = rpc.MessagingServiceStub(ch).QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
            metadata=[("x-mq-client-id", f"route-{RUN}")],
            timeout=CALL_TIMEOUT,
        )
        return reply


def front(b: Broker) -> _store.GrpcFront:
    grpc_server = b.broker.grpc
    assert grpc_server is not None and grpc_server._front is not None
    return grpc_server._front


def answered(b: Broker) -> int:
    """SendMessage calls the broker's front answered itself."""
    return front(b).sends_answered


def make_topics(b: Broker) -> tuple[str, str]:
    normal, fifo = f"SendN{RUN}", f"SendF{RUN}"
    b.broker.topics.update(TopicConfig(normal, QUEUES, QUEUES))
    b.broker.topics.update(TopicConfig(fifo, QUEUES, QUEUES, attributes={"message.type": "FIFO"}))
    return normal, fifo


def bad_requests(normal: str, fifo: str) -> Iterator[tuple[str, list[pb.Message]]]:
    """Requests the proxy's checks refuse, each with what is wrong."""
    yield "empty body", [message(normal, b"")]
    yield "system property", [message(normal, user={"KEYS": "k"})]
    yield "control character", [message(normal, user={"a": "b\x01c"})]
    yield "tag with a bar", [message(normal, tag="a|b")]
    yield "blank key", [message(normal, keys=[" "])]
    yield "long group", [message(fifo, message_group="g" * 64)]
    yield "no message id", [pb.Message(topic=pb.Resource(name=normal), body=b"x")]
    yield "type not the topic's", [message(fifo)]
    yield "group on a normal topic", [message(normal, message_group="g1")]
    yield "topics not the same", [message(normal), message(fifo, message_group="g")]
    yield "illegal topic", [message("bad.topic")]
    yield "far delivery", [message(normal, delivery_timestamp={"seconds": 4_000_000_000})]


def status(reply: spb.SendMessageResponse) -> tuple[int, str]:
    return reply.status.code, reply.status.message


async def refusals(settings: dict[str, Any]) -> tuple[list[tuple[int, str]], int]:
    async with Broker(settings=settings) as b:
        normal, fifo = make_topics(b)
        out = []
        for _, request in bad_requests(normal, fifo):
            reply = await asyncio.to_thread(send, b.grpc_endpoint, *request)
            assert not reply.entries
            out.append(status(reply))
        return out, answered(b)


def test_refusals_are_the_services_own() -> None:
    """Each refusal the front answers is the one the Python service answers, code and text."""
    front, by_front = asyncio.run(refusals({}))
    service, by_service = asyncio.run(refusals({"data_plane": "python"}))
    names = [name for name, _ in bad_requests("N", "F")]
    assert dict(zip(names, front, strict=True)) == dict(zip(names, service, strict=True))
    assert all(code != pb.OK for code, _ in front)
    assert front[names.index("type not the topic's")] == (
        pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        "org.apache.rocketmq.proxy.common.ProxyException: TopicMessageType validate failed, "
        "the expected type is FIFO, but actual type is NORMAL",
    )
    assert by_front == len(names) and by_service == 0


def stored_view(b: Broker, topic: str, count: int) -> list[tuple[Any, ...]]:
    messages = b.wait_for_messages(topic, count)
    shown = []
    for m in sorted(messages, key=lambda m: m.properties["UNIQ_KEY"]):
        props = {k: v for k, v in m.properties.items() if k not in ("__BORNHOST", "CLUSTER")}
        shown.append((m.queue_id, m.body, m.sys_flag, props))
    return shown


async def sends(settings: dict[str, Any]) -> tuple[list[Any], int]:
    async with Broker(settings=settings) as b:
        normal, fifo = make_topics(b)
        fixed = [
            message(normal, b"n1", tag="TagA", keys=["k1", "k2"], user={"color": "red"}),
            message(normal, b"n2", trace_context="00-abc", delivery_attempt=2),
        ]
        grouped = [message(fifo, f"f{i}".encode(), message_group=f"group{i % 3}") for i in range(6)]
        # Fixed message ids: the stored messages compare across the two brokers.
        for i, m in enumerate(fixed + grouped):
            m.system_properties.message_id = f"ID{i:04d}{RUN}"
        replies = [await asyncio.to_thread(send, b.grpc_endpoint, *fixed)]
        replies.append(await asyncio.to_thread(send, b.grpc_endpoint, *grouped))
        for reply in replies:
            assert status(reply) == (pb.OK, "OK")
            assert all(e.status.code == pb.OK and e.transaction_id == e.message_id for e in reply.entries)
        ids = [e.message_id for r in replies for e in r.entries]
        assert ids == [m.system_properties.message_id for m in fixed + grouped]
        fifo_stored = stored_view(b, fifo, len(grouped))
        for queue_id, body, _, props in fifo_stored:
            assert queue_id == _store.fifo_queue(props["__SHARDINGKEY"], QUEUES), body
        normal_stored = stored_view(b, normal, len(fixed))
        born = {m.born_host.rsplit(":", 1)[0] for m in b.messages(normal)}
        assert born == {"127.0.0.1"}
        # Round robin (the counters differ between fronts): the queues, not their order.
        return [(body, flag, props) for _, body, flag, props in normal_stored] + fifo_stored, answered(b)


def test_sends_store_what_the_service_stores() -> None:
    """Normal and FIFO sends, answered by the front, store the messages the service stores."""
    front, by_front = asyncio.run(sends({}))
    service, by_service = asyncio.run(sends({"data_plane": "python"}))
    assert front == service
    assert by_front == 2 and by_service == 0
    assert front[0][2]["TAGS"] == "TagA" and front[0][2]["KEYS"] == "k1 k2"
    assert front[0][2]["color"] == "red" and front[1][2]["RECONSUME_TIME"] == "2"


def test_python_decides_transactions_and_unknown_topics() -> None:
    """A half message (its check-back needs the client's session) and a topic the plane does not
    serve reach the service, which answers them."""

    async def main() -> None:
        async with Broker() as b:
            normal, _ = make_topics(b)
            transactional = f"SendT{RUN}"
            b.broker.topics.update(
                TopicConfig(transactional, 1, 1, attributes={"message.type": "TRANSACTION"})
            )
            half = message(transactional, message_type=pb.TRANSACTION)
            reply = await asyncio.to_thread(send, b.grpc_endpoint, half)
            assert status(reply) == (pb.OK, "OK")
            missing = await asyncio.to_thread(send, b.grpc_endpoint, message(f"NoSuch{RUN}"))
            # As Java's proxy answers: a topic no broker has is of type UNSPECIFIED.
            assert missing.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
            assert "expected type is UNSPECIFIED" in missing.status.message
            assert answered(b) == 0
            served = await asyncio.to_thread(send, b.grpc_endpoint, message(normal))
            assert status(served) == (pb.OK, "OK") and answered(b) == 1

    asyncio.run(main())


# -- receive and ack ---------------------------------------------------------------------------------

INVISIBLE = {"seconds": 30}


def settle_as_simple_consumer(
    endpoint: str, client_id: str, topic: str, group: str, client_type: int = pb.SIMPLE_CONSUMER
) -> pb.Settings:
    """The client's settings over Telemetry, as the 5.x SimpleConsumer sends them first (or a consumer
    of `client_type`, its one subscription `topic`); the settings the server answers with."""
    settings = pb.Settings(
        client_type=client_type,  # type: ignore[arg-type]
        backoff_policy=pb.RetryPolicy(max_attempts=3),
        subscription=pb.Subscription(
            group=pb.Resource(name=group),
            subscriptions=[
                pb.SubscriptionEntry(
                    topic=pb.Resource(name=topic), expression=pb.FilterExpression(type=pb.TAG, expression="*")
                )
            ],
        ),
    )
    with grpc.insecure_channel(endpoint) as ch:
        replies = rpc.MessagingServiceStub(ch).Telemetry(
            iter([spb.TelemetryCommand(settings=settings)]),
            metadata=[("x-mq-client-id", client_id)],
            timeout=CALL_TIMEOUT,
        )
        first = next(replies)
        assert first.status.code == pb.OK, first
        return first.settings


def receive(
    endpoint: str, client_id: str, topic: str, group: str, batch: int
) -> list[spb.ReceiveMessageResponse]:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=batch,
        invisible_duration=INVISIBLE,
        long_polling_timeout={"seconds": 5},
    )
    with grpc.insecure_channel(endpoint) as ch:
        return list(
            rpc.MessagingServiceStub(ch).ReceiveMessage(
                request, metadata=[("x-mq-client-id", client_id)], timeout=CALL_TIMEOUT
            )
        )


def ack(
    endpoint: str, client_id: str, topic: str, group: str, messages: list[pb.Message]
) -> spb.AckMessageResponse:
    entries = [
        spb.AckMessageEntry(
            message_id=m.system_properties.message_id,
            receipt_handle=m.system_properties.receipt_handle,
            # A lite message's ack names its lite topic (RocketMQ 5.5).
            lite_topic=m.system_properties.lite_topic if m.system_properties.HasField("lite_topic") else None,
        )
        for m in messages
    ]
    with grpc.insecure_channel(endpoint) as ch:
        reply: spb.AckMessageResponse = rpc.MessagingServiceStub(ch).AckMessage(
            spb.AckMessageRequest(
                group=pb.Resource(name=group), topic=pb.Resource(name=topic), entries=entries
            ),
            metadata=[("x-mq-client-id", client_id)],
            timeout=CALL_TIMEOUT,
        )
        return reply


def shown(m: pb.Message) -> tuple[Any, ...]:
    """What a received message shows, but for what differs between two brokers' stores (times,
    hosts, receipts)."""
    sp = m.system_properties
    return (
        m.topic.name,
        m.body,
        dict(m.user_properties),
        sp.message_id,
        sp.tag,
        list(sp.keys),
        sp.body_digest.checksum,
        sp.body_encoding,
        sp.message_type,
        sp.delivery_attempt,
        sp.message_group,
    )


async def drain(settings: dict[str, Any], count: int) -> tuple[list[Any], list[tuple[int, str]], int]:
    """`count` messages sent, then received and acked by one simple consumer until none is left:
    what it received, the statuses of its receives and acks, and the calls the front answered."""
    async with Broker(settings=settings) as b:
        normal, _ = make_topics(b)
        group, client_id = f"RecvG{RUN}", f"recv-{RUN}"
        sent = [
            message(normal, f"r{i}".encode(), tag="TagA", keys=[f"k{i}"], user={"i": str(i)})
            for i in range(count)
        ]
        for i, m in enumerate(sent):
            m.system_properties.message_id = f"RID{i:04d}{RUN}"
        assert status(await asyncio.to_thread(send, b.grpc_endpoint, *sent)) == (pb.OK, "OK")
        await asyncio.to_thread(settle_as_simple_consumer, b.grpc_endpoint, client_id, normal, group)
        received: list[pb.Message] = []
        statuses = []
        before = front(b).receives_answered
        for _ in range(40):
            stream = await asyncio.to_thread(receive, b.grpc_endpoint, client_id, normal, group, 4)
            statuses.append(status_of_stream(stream))
            messages = [r.message for r in stream if r.HasField("message")]
            assert stream[-1].HasField("delivery_timestamp")
            if not messages:
                break
            received += messages
            acked = await asyncio.to_thread(ack, b.grpc_endpoint, client_id, normal, group, messages)
            statuses.append(status(acked))
            assert [e.status.code for e in acked.entries] == [pb.OK] * len(messages)
        # None comes back: every one was acked.
        return sorted(shown(m) for m in received), statuses, front(b).receives_answered - before


def status_of_stream(stream: list[spb.ReceiveMessageResponse]) -> tuple[int, str]:
    first = stream[0]
    assert first.HasField("status"), stream
    return first.status.code, first.status.message


def test_receives_and_acks_show_what_the_service_shows() -> None:
    """A simple consumer drains a topic: the front's receives and acks give what the service's give."""
    count = 10
    by_front, front_statuses, front_calls = asyncio.run(drain({}, count))
    by_service, service_statuses, service_calls = asyncio.run(drain({"data_plane": "python"}, count))
    assert by_front == by_service
    assert [m[1] for m in by_front] == sorted(f"r{i}".encode() for i in range(count))
    assert by_front[0][4] == "TagA" and by_front[0][8] == pb.NORMAL and by_front[0][9] == 1
    assert front_statuses == service_statuses
    assert front_statuses[-1] == (pb.MESSAGE_NOT_FOUND, "no new message")
    # The front answered every receive (the group's first pop, made by Python, aside) and every
    # ack; the last receive found nothing and waited on the front.
    assert front_calls >= len(front_statuses) - 1 and service_calls == 0


def waiting(b: Broker) -> int:
    """Receives waiting for a message on the front (the plane's waiting pops), and the queues
    Python's wait on."""
    return b.broker.planes.waiting_pops + b.broker.hold.held_count


async def wait_for_messages(settings: dict[str, Any]) -> tuple[list[Any], list[tuple[int, str]], int]:
    """A receive that finds nothing waits its polling time and answers "no new message"; one that
    waits takes a message sent meanwhile. What it received, the statuses of its receives, and the
    calls the front answered."""
    async with Broker(settings=settings) as b:
        normal, _ = make_topics(b)
        group, client_id = f"WaitG{RUN}", f"wait-{RUN}"
        await asyncio.to_thread(settle_as_simple_consumer, b.grpc_endpoint, client_id, normal, group)
        before = front(b).receives_answered
        empty = await asyncio.to_thread(receive, b.grpc_endpoint, client_id, normal, group, 4)
        taking = asyncio.create_task(asyncio.to_thread(receive, b.grpc_endpoint, client_id, normal, group, 4))
        await until(lambda: waiting(b) > 0 or taking.done(), "the receive waits")
        late = message(normal, b"late", tag="TagW")
        late.system_properties.message_id = f"WID{RUN}"
        assert status(await asyncio.to_thread(send, b.grpc_endpoint, late)) == (pb.OK, "OK")
        took = await taking
        assert waiting(b) == 0
        received = [shown(r.message) for r in took if r.HasField("message")]
        statuses = [status_of_stream(empty), status_of_stream(took)]
        return received, statuses, front(b).receives_answered - before


def test_a_receive_that_finds_nothing_waits_on_the_front() -> None:
    """Long polling: the front's receives wait for a message as the service's do, and answer the
    same; a message stored while one waits is what it takes."""
    by_front, front_statuses, front_calls = asyncio.run(wait_for_messages({}))
    by_service, service_statuses, service_calls = asyncio.run(wait_for_messages({"data_plane": "python"}))
    assert by_front == by_service and [m[1] for m in by_front] == [b"late"]
    assert front_statuses == service_statuses == [(pb.MESSAGE_NOT_FOUND, "no new message"), (pb.OK, "OK")]
    # The first receive created the group in Python; the second waited on the front.
    assert front_calls == 1 and service_calls == 0


def change_invisible(
    endpoint: str, client_id: str, topic: str, group: str, m: pb.Message
) -> spb.ChangeInvisibleDurationResponse:
    """Makes `m` visible again at once (ChangeInvisibleDuration 0)."""
    with grpc.insecure_channel(endpoint) as ch:
        reply = rpc.MessagingServiceStub(ch).ChangeInvisibleDuration(
            spb.ChangeInvisibleDurationRequest(
                group=pb.Resource(name=group),
                topic=pb.Resource(name=topic),
                receipt_handle=m.system_properties.receipt_handle,
                invisible_duration={"seconds": 0},
                message_id=m.system_properties.message_id,
            ),
            metadata=[("x-mq-client-id", client_id)],
            timeout=CALL_TIMEOUT,
        )
        return reply


async def past_retries(settings: dict[str, Any]) -> tuple[list[tuple[int, str]], list[bytes], int]:
    """A message of a group that allows one delivery (retryMaxTimes 0), made visible again after it:
    the next receives' statuses, what reached the group's dead letter queue, the front's calls."""
    async with Broker(settings=settings) as b:
        normal, _ = make_topics(b)
        group, client_id = f"DlqG{RUN}", f"dlq-{RUN}"
        b.broker.groups.update(SubscriptionGroupConfig(group, retry_max_times=0))
        await asyncio.to_thread(send, b.grpc_endpoint, message(normal, b"once only"))
        await asyncio.to_thread(settle_as_simple_consumer, b.grpc_endpoint, client_id, normal, group)
        before = front(b).receives_answered
        first = await asyncio.to_thread(receive, b.grpc_endpoint, client_id, normal, group, 4)
        [m] = [r.message for r in first if r.HasField("message")]
        assert m.system_properties.delivery_attempt == 1
        changed = await asyncio.to_thread(change_invisible, b.grpc_endpoint, client_id, normal, group, m)
        assert changed.status.code == pb.OK
        # The revive service puts it in the group's retry topic; the next pop takes it there and,
        # past the policy, moves it to the dead letter queue instead of delivering it.
        retry = retry_topic(normal, group, b.broker.config.enable_retry_topic_v2)
        await b.await_messages(retry, 1)
        statuses = []
        for _ in range(20):
            stream = await asyncio.to_thread(receive, b.grpc_endpoint, client_id, normal, group, 4)
            assert not [r for r in stream if r.HasField("message")], stream
            statuses.append(status_of_stream(stream))
            if statuses[-1] == (pb.MESSAGE_NOT_FOUND, "no match message"):
                break
        dead = await b.await_messages(f"%DLQ%{group}", 1)
        return statuses[-1:], [d.body for d in dead], front(b).receives_answered - before


def test_a_message_past_its_retry_policy_goes_to_the_dead_letter_queue() -> None:
    """Popped past the consumer's retry policy, a message is not delivered: the front hands it to
    the service, which moves it to the group's dead letter queue, as the service does its own pops."""
    by_front = asyncio.run(past_retries({}))
    by_service = asyncio.run(past_retries({"data_plane": "python"}))
    assert by_front[:2] == by_service[:2] == ([(pb.MESSAGE_NOT_FOUND, "no match message")], [b"once only"])
    # The first pop (which makes the revive topic) is the service's; the one that found the retried
    # message, the front's.
    assert by_front[2] >= 1 and by_service[2] == 0


async def late_ack(settings: dict[str, Any]) -> tuple[list[tuple[int, str]], int]:
    """A message made visible again (ChangeInvisibleDuration 0: its new receipt expires at once),
    then acked with that receipt: the ack's entry status, and the front's calls."""
    async with Broker(settings=settings) as b:
        normal, _ = make_topics(b)
        group, client_id = f"LateG{RUN}", f"late-{RUN}"
        b.broker.groups.update(SubscriptionGroupConfig(group))
        await asyncio.to_thread(send, b.grpc_endpoint, message(normal, b"too late"))
        await asyncio.to_thread(settle_as_simple_consumer, b.grpc_endpoint, client_id, normal, group)
        # The group's first pop makes the revive topic (so it is the service's); the ack is the front's.
        stream = await asyncio.to_thread(receive, b.grpc_endpoint, client_id, normal, group, 4)
        before = front(b).receives_answered
        [m] = [r.message for r in stream if r.HasField("message")]
        changed = await asyncio.to_thread(change_invisible, b.grpc_endpoint, client_id, normal, group, m)
        assert changed.status.code == pb.OK
        m.system_properties.receipt_handle = changed.receipt_handle
        acked = await asyncio.to_thread(ack, b.grpc_endpoint, client_id, normal, group, [m])
        return [(e.status.code, e.status.message) for e in acked.entries], front(b).receives_answered - before


def test_a_receipt_of_a_visible_message_is_refused() -> None:
    """An ack with a receipt whose invisible time is over is refused, as Java's proxy refuses it
    (AbstractProcessor.validateReceiptHandle), by the front and by the service alike."""
    by_front, front_calls = asyncio.run(late_ack({}))
    by_service, service_calls = asyncio.run(late_ack({"data_plane": "python"}))
    assert by_front == by_service == [(pb.INVALID_RECEIPT_HANDLE, "receipt handle is expired")]
    assert front_calls == 1 and service_calls == 0


# -- what the front does not read itself ---------------------------------------------------------


def raw_send(endpoint: str, payload: bytes) -> tuple[grpc.StatusCode, bytes | None]:
    """A SendMessage call whose request is `payload` as it is: the gRPC status, and the reply."""
    with grpc.insecure_channel(endpoint, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        call = ch.unary_unary(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            reply = call(payload, metadata=[("x-mq-client-id", f"raw-{RUN}")], timeout=CALL_TIMEOUT)
        except grpc.RpcError as e:
            return e.code(), None
        return grpc.StatusCode.OK, reply


def test_garbage_and_oversized_requests_are_answered_and_the_port_serves_on() -> None:
    """A request that is not a SendMessageRequest, and one larger than the front reads itself, go on
    to grpcio and get its answers (an error status; the proxy's refusal of a body over 4 MiB);
    the port then serves a good send as before."""

    async def main() -> None:
        async with Broker() as b:
            normal, _ = make_topics(b)
            code, _ = await asyncio.to_thread(raw_send, b.grpc_endpoint, b"\xff\x00garbage" * 100)
            assert code != grpc.StatusCode.OK
            big = spb.SendMessageRequest(messages=[message(normal, b"x" * (9 << 20))]).SerializeToString()
            code, reply = await asyncio.to_thread(raw_send, b.grpc_endpoint, big)
            assert code == grpc.StatusCode.OK and reply is not None
            assert spb.SendMessageResponse.FromString(reply).status.code == pb.MESSAGE_BODY_TOO_LARGE
            assert answered(b) == 0
            served = await asyncio.to_thread(send, b.grpc_endpoint, message(normal))
            assert status(served) == (pb.OK, "OK") and answered(b) == 1

    asyncio.run(main())


def test_the_calls_the_front_answers_are_counted_in_the_metrics() -> None:
    """/metrics counts the calls the front answered itself, by kind."""
    from tests.integration.test_metrics import http_get, samples, value

    async def main() -> None:
        metrics = {"metrics_exporter_type": "PROM", "metrics_prom_exporter_host": "127.0.0.1"}
        async with Broker(settings={**metrics, "metrics_prom_exporter_port": 0}) as b:
            normal, _ = make_topics(b)
            for _ in range(3):
                await asyncio.to_thread(send, b.grpc_endpoint, message(normal))
            await asyncio.to_thread(query_route, b.grpc_endpoint, normal)
            assert b.broker.metrics is not None
            status_line, body = await http_get(b.broker.metrics.port, "/metrics")
            assert status_line == "HTTP/1.1 200 OK"
            found = samples(body.decode())
            assert value(found, "ferromq_grpc_front_calls_total", call="send") == 3
            assert value(found, "ferromq_grpc_front_calls_total", call="receive") == 0
            # The topic's route came to Python through the front's inbox.
            assert value(found, "ferromq_grpc_python_calls_total") == front(b).inbox_answered == 1

    asyncio.run(main())
