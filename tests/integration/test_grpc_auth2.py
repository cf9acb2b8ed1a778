"""With ACL 2.0 on in broker.conf, nothing on the gRPC port serves an unsigned call: SendMessage,
ReceiveMessage and AckMessage without an `authorization` header, sent raw through the real front
(crates/grpc), are left by the front to Python (its counters do not move) and refused there with
Java's UNAUTHORIZED 40100 and 5.3.3's text."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from ferromq.broker.topics import TopicConfig
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2 as spb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2_grpc as rpc
from ferromq.testing import Broker
from tests.integration.test_grpc_front import CALL_TIMEOUT, front, message, receive

pytestmark = [pytest.mark.timeout(180)]

TOPIC, GROUP = "UnsignedTopic", "UnsignedGroup"
ACL2 = {
    "authentication_enabled": True,
    "authorization_enabled": True,
    "init_authentication_user": '{"username": "rocketmq", "password": "12345678"}',
}
UNAUTHORIZED = 40100


def unsigned_calls(endpoint: str) -> list[tuple[str, int, str]]:
    with grpc.insecure_channel(endpoint) as ch:
        stub = rpc.MessagingServiceStub(ch)
        meta = [("x-mq-client-id", "unsigned-1")]
        sent = stub.SendMessage(
            spb.SendMessageRequest(messages=[message(TOPIC)]), metadata=meta, timeout=CALL_TIMEOUT
        )
        acked = stub.AckMessage(
            spb.AckMessageRequest(
                group=pb.Resource(name=GROUP),
                topic=pb.Resource(name=TOPIC),
                entries=[spb.AckMessageEntry(message_id="00", receipt_handle="not-a-handle")],
            ),
            metadata=meta,
            timeout=CALL_TIMEOUT,
        )
    received = [r for r in receive(endpoint, "unsigned-1", TOPIC, GROUP, 4) if r.HasField("status")]
    return [
        ("send", sent.status.code, sent.status.message),
        ("receive", received[0].status.code, received[0].status.message),
        ("ack", acked.status.code, acked.status.message),
    ]


def test_unsigned_send_receive_ack_are_refused_through_the_front(tmp_path: Path) -> None:
    async def main() -> None:
        async with Broker(store_dir=tmp_path / "broker", settings=ACL2) as b:
            b.broker.topics.update(TopicConfig(TOPIC, 4, 4))
            sends, receives = front(b).sends_answered, front(b).receives_answered
            answers = await asyncio.to_thread(unsigned_calls, b.grpc_endpoint)
            for call, code, text in answers:
                assert code == UNAUTHORIZED, (call, code, text)
                assert "username cannot be null." in text, (call, text)
            assert front(b).sends_answered == sends
            assert front(b).receives_answered == receives

    asyncio.run(asyncio.wait_for(main(), 120))
