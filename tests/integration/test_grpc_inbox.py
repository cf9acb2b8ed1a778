"""The calls the gRPC front hands to Python directly, without grpcio (crates/grpc `inbox.rs`,
ferromq.proxy.inbox): answered by the service as grpcio's calls were, a request that does not parse
refused as Java's proxy refuses it, a compressed call still served (by grpcio), and a waiting receive
whose client goes stops waiting, so a message stored after it is not popped for nobody."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest

from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2 as spb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2_grpc as rpc
from ferromq.proxy.unparsable import INVALID_PROTOBUF
from ferromq.testing import Broker
from ferromq.testing.waiting import until
from tests.integration.test_grpc_front import (
    CALL_TIMEOUT,
    INVISIBLE,
    ack,
    front,
    make_topics,
    message,
    query_route,
    receive,
    send,
    settle_as_simple_consumer,
    status,
    status_of_stream,
    waiting,
)

pytestmark = [pytest.mark.timeout(180)]

RUN = uuid.uuid4().hex[:6]
# Every call reaches Python: the data plane serves none of them.
PYTHON_PLANE = {"data_plane": "python"}


def raw_route(endpoint: str, payload: bytes) -> tuple[grpc.StatusCode, str]:
    with grpc.insecure_channel(endpoint) as ch:
        call = ch.unary_unary(
            "/apache.rocketmq.v2.MessagingService/QueryRoute",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            call(payload, metadata=[("x-mq-client-id", f"raw-{RUN}")], timeout=CALL_TIMEOUT)
        except grpc.RpcError as e:
            return e.code(), e.details()
        return grpc.StatusCode.OK, ""


def test_the_calls_python_serves_come_without_grpcio() -> None:
    """With no data plane serving them, sends, receives, acks and routes are answered by the
    service through the inbox, one count each, with the service's answers."""

    async def main() -> None:
        async with Broker(settings=PYTHON_PLANE) as b:
            normal, _ = make_topics(b)
            group, client_id = f"InboxG{RUN}", f"inbox-{RUN}"
            await asyncio.to_thread(settle_as_simple_consumer, b.grpc_endpoint, client_id, normal, group)
            before = front(b).inbox_answered
            routed = await asyncio.to_thread(query_route, b.grpc_endpoint, normal)
            assert routed.status.code == pb.OK and len(routed.message_queues) == 4
            sent = await asyncio.to_thread(send, b.grpc_endpoint, message(normal, b"through the inbox"))
            assert status(sent) == (pb.OK, "OK")
            stream = await asyncio.to_thread(receive, b.grpc_endpoint, client_id, normal, group, 4)
            assert status_of_stream(stream) == (pb.OK, "OK")
            got = [r.message for r in stream if r.HasField("message")]
            assert [m.body for m in got] == [b"through the inbox"]
            acked = await asyncio.to_thread(ack, b.grpc_endpoint, client_id, normal, group, got)
            assert acked.status.code == pb.OK
            assert front(b).inbox_answered - before == 4
            assert front(b).sends_answered == front(b).receives_answered == 0

    asyncio.run(main())


def test_a_request_that_does_not_parse_is_refused_as_java_refuses_it() -> None:
    """Garbage for a QueryRouteRequest: INTERNAL "Invalid protobuf byte sequence" (grpc-java's text),
    and the port serves on; a gzip-compressed call (grpcio's to read) is answered too."""

    async def main() -> None:
        async with Broker() as b:
            normal, _ = make_topics(b)
            code, details = await asyncio.to_thread(raw_route, b.grpc_endpoint, b"\xff\x00garbage" * 10)
            assert (code, details) == (grpc.StatusCode.INTERNAL, INVALID_PROTOBUF)
            before = front(b).inbox_answered
            zipped = await asyncio.to_thread(query_route, b.grpc_endpoint, normal, grpc.Compression.Gzip)
            assert zipped.status.code == pb.OK and len(zipped.message_queues) == 4
            assert front(b).inbox_answered == before, "a compressed call is grpcio's"
            plain = await asyncio.to_thread(query_route, b.grpc_endpoint, normal)
            assert plain == zipped and front(b).inbox_answered == before + 1

    asyncio.run(main())


def test_a_waiting_receive_whose_client_goes_stops_waiting() -> None:
    """A long-polling receive served by Python, cancelled by its client: the service stops waiting
    (grpcio cancelled its task too), so a message sent after it is not popped for the gone client
    and made invisible, but taken at once by the next receive."""

    async def main() -> None:
        async with Broker(settings=PYTHON_PLANE) as b:
            normal, _ = make_topics(b)
            group, client_id = f"GoneG{RUN}", f"gone-{RUN}"
            await asyncio.to_thread(settle_as_simple_consumer, b.grpc_endpoint, client_id, normal, group)
            channel = grpc.aio.insecure_channel(b.grpc_endpoint)
            try:
                request = spb.ReceiveMessageRequest(
                    group=pb.Resource(name=group),
                    message_queue=pb.MessageQueue(topic=pb.Resource(name=normal), id=-1),
                    filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                    batch_size=4,
                    invisible_duration=INVISIBLE,
                    long_polling_timeout={"seconds": 20},
                )
                call = rpc.MessagingServiceStub(channel).ReceiveMessage(
                    request, metadata=[("x-mq-client-id", client_id)], timeout=30
                )
                await until(lambda: waiting(b) > 0, "the receive waits in Python")
                call.cancel()
                # Well before its polling time ends (it would, uncancelled, after 20 s).
                await until(lambda: waiting(b) == 0, "the cancelled receive stops waiting", timeout=10)
            finally:
                await channel.close()
            sent = await asyncio.to_thread(send, b.grpc_endpoint, message(normal, b"after the cancel"))
            assert status(sent) == (pb.OK, "OK")
            stream = await asyncio.to_thread(receive, b.grpc_endpoint, client_id, normal, group, 4)
            assert [r.message.body for r in stream if r.HasField("message")] == [b"after the cancel"]

    asyncio.run(main())
