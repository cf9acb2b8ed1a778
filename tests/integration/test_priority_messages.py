"""Priority messages as RocketMQ 5.4 and 5.5 deliver them (RIP-80), over remoting and over gRPC:

- a single message whose properties make it a PRIORITY one (`_SYS_MSG_PRIORITY_` >= 0 and no
  transaction, delay or message group before it) goes to queue min(priority, writeQueueNums - 1),
  whatever its topic's type, and the send's reply names that queue; any other message loses the
  property (SendMessageProcessor);
- a pop on a PRIORITY topic reads its queues from the highest down, the retry topic after them, for the
  share of pops the group's `priority.factor` (0-100, default 100) says, FIFO within a queue; an orderly
  pop does not (PopMessageProcessor);
- over gRPC the route of a PRIORITY topic accepts PRIORITY messages only, a message's
  `system_properties.priority` is stored as the property and shown again on receive.

Both of the broker's paths run it: the data plane (Rust) and `dataPlane=python`, which reach the same
rules (crates/broker `sender`, `popper`) through the binding. What Apache RocketMQ 5.5.0 answers to the
same is in tests/interop/test_priority_rocketmq55.py."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson
import pytest

from ferromq.broker.topics import TopicConfig
from ferromq.client import Message, Producer
from ferromq.message import StoredMessage, decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.constants import PROPERTY_PRIORITY, PROPERTY_SHARDING_KEY
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.testing import Broker
from tests.integration.brokerkit import Client, pop_request, properties, send_ext
from tests.integration.test_grpc_front import (
    ack,
    message,
    query_route,
    receive,
    send,
    settle_as_simple_consumer,
)

pytestmark = [pytest.mark.timeout(180)]

RUN = uuid.uuid4().hex[:6]
PRIORITY_TOPIC, NORMAL_TOPIC, GROUP = f"PrioT{RUN}", f"PrioN{RUN}", f"PrioG{RUN}"
PRIORITY_TYPE = {"message.type": "PRIORITY"}
# Ten priorities, three messages each, sent lowest first: the order 5.5.0 receives them in (checked
# side by side) is the highest priority first, the send order within one.
LEVELS, EACH = 10, 3
SENT = [f"p{p}-{k}" for p in range(LEVELS) for k in range(EACH)]
BY_PRIORITY = [f"p{p}-{k}" for p in reversed(range(LEVELS)) for k in range(EACH)]
PATHS = {"data plane": {}, "python": {"data_plane": "python"}}


def priority_of(body: bytes) -> int:
    return int(body.decode().split("-")[0][1:])


async def send_one(c: Client, topic: str, queue_id: int, body: bytes, **props: str) -> dict[str, str]:
    ext = send_ext(topic, queue_id, properties(UNIQ_KEY=uuid.uuid4().hex, **props))
    r = await c.call(RC.SEND_MESSAGE, ext, body)
    assert r.code == R.SUCCESS, r.remark
    return r.ext


async def send_levels(c: Client, topic: str) -> None:
    """SENT to `topic`, each asking for queue 0 (its priority decides)."""
    for body in SENT:
        await send_one(c, topic, 0, body.encode(), **{PROPERTY_PRIORITY: str(priority_of(body.encode()))})


async def pop(c: Client, group: str = GROUP, **extra: Any) -> list[StoredMessage]:
    r = await c.call(RC.POP_MESSAGE, pop_request(PRIORITY_TOPIC, group, **extra))
    assert r.code in (R.SUCCESS, R.POLLING_TIMEOUT), r.remark
    return decode_messages(r.body) if r.code == R.SUCCESS else []


async def create_group(c: Client, group: str, attributes: dict[str, str] | None = None) -> tuple[int, str]:
    body = {"groupName": group, "consumeEnable": True, "attributes": attributes or {}}
    r = await c.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(body))
    return r.code, r.remark or ""


@pytest.mark.parametrize("path", list(PATHS))
def test_a_priority_picks_the_queue_of_a_single_message(path: str) -> None:
    async def main() -> None:
        async with Broker(settings=PATHS[path]) as b:
            b.broker.topics.update(TopicConfig(PRIORITY_TOPIC, 4, 4, attributes=PRIORITY_TYPE))
            b.broker.topics.update(TopicConfig(NORMAL_TOPIC, 4, 4))
            c = await Client().connect(b.broker.port)
            # (topic, asked queue, properties, the queue it lands in, whether the priority stays)
            cases: list[tuple[str, int, dict[str, str], int, bool]] = [
                (PRIORITY_TOPIC, 3, {PROPERTY_PRIORITY: "0"}, 0, True),
                (PRIORITY_TOPIC, 0, {PROPERTY_PRIORITY: "2"}, 2, True),
                # Above the highest queue: the highest.
                (PRIORITY_TOPIC, 0, {PROPERTY_PRIORITY: "9"}, 3, True),
                # The message's type decides, not its topic's.
                (NORMAL_TOPIC, 3, {PROPERTY_PRIORITY: "1"}, 1, True),
                # A message group makes it a FIFO message: the priority goes, the queue stays.
                (PRIORITY_TOPIC, 1, {PROPERTY_PRIORITY: "3", PROPERTY_SHARDING_KEY: "g"}, 1, False),
                # Not a priority (Message.getPriority is -1): nothing changes.
                (PRIORITY_TOPIC, 1, {PROPERTY_PRIORITY: "high"}, 1, True),
                (PRIORITY_TOPIC, 2, {PROPERTY_PRIORITY: "-1"}, 2, True),
            ]
            for i, (topic, asked, props, queue, _) in enumerate(cases):
                ext = await send_one(c, topic, asked, f"case{i}".encode(), **props)
                assert int(ext["queueId"]) == queue, (i, ext)
            stored = {m.body: m for t in (PRIORITY_TOPIC, NORMAL_TOPIC) for m in b.wait_for_messages(t, 0)}
            for i, (_, _, props, queue, kept) in enumerate(cases):
                m = stored[f"case{i}".encode()]
                assert m.queue_id == queue, i
                assert m.properties.get(PROPERTY_PRIORITY) == (props[PROPERTY_PRIORITY] if kept else None), i
            await c.close()

    asyncio.run(main())


@pytest.mark.parametrize("path", list(PATHS))
def test_pops_read_the_highest_priority_first(path: str) -> None:
    async def main() -> None:
        async with Broker(settings=PATHS[path]) as b:
            b.broker.topics.update(TopicConfig(PRIORITY_TOPIC, LEVELS, LEVELS, attributes=PRIORITY_TYPE))
            c = await Client().connect(b.broker.port)
            assert await create_group(c, GROUP) == (R.SUCCESS, "")
            await send_levels(c, PRIORITY_TOPIC)
            got = [m.body.decode() for m in await pop(c, maxMsgNums=len(SENT) + 2)]
            assert got == BY_PRIORITY
            await c.close()

    asyncio.run(main())


def test_the_python_client_sends_priorities() -> None:
    async def main() -> None:
        async with Broker() as b:
            b.broker.topics.update(TopicConfig(PRIORITY_TOPIC, 4, 4, attributes=PRIORITY_TYPE))
            async with Producer(f"PrioP{RUN}", b.namesrv) as producer:
                for p in (0, 2, 7):
                    r = await producer.send(Message(PRIORITY_TOPIC, f"p{p}".encode(), priority=p))
                    assert r.message_queue.queue_id == min(p, 3)
            stored = b.wait_for_messages(PRIORITY_TOPIC, 3)
            assert {(m.body, m.queue_id, m.properties[PROPERTY_PRIORITY]) for m in stored} == {
                (b"p0", 0, "0"),
                (b"p2", 2, "2"),
                (b"p7", 3, "7"),
            }
        with pytest.raises(ValueError, match="priority is 0 or more"):
            Message(PRIORITY_TOPIC, b"x", priority=-1)

    asyncio.run(main())


def test_a_priority_factor_of_0_turns_priority_order_off() -> None:
    async def main() -> None:
        async with Broker() as b:
            b.broker.topics.update(TopicConfig(PRIORITY_TOPIC, LEVELS, LEVELS, attributes=PRIORITY_TYPE))
            c = await Client().connect(b.broker.port)
            # 5.4's group attribute, in its range only.
            code, remark = await create_group(c, GROUP, {"+priority.factor": "101"})
            assert code == R.SYSTEM_ERROR and "value is not in range(0, 100)" in remark
            assert await create_group(c, GROUP, {"+priority.factor": "0"}) == (R.SUCCESS, "")
            assert b.broker.groups.groups[GROUP].priority_factor == 0
            await send_levels(c, PRIORITY_TOPIC)
            # One message a pop: in priority order they would be the highest ten, highest first; from
            # a random queue on, the chance of that is 10^-10.
            got = [m.body.decode() for _ in range(10) for m in await pop(c, maxMsgNums=1)]
            assert len(got) == 10 and got != BY_PRIORITY[:10]
            # Back to the default: the rest come highest first.
            assert await create_group(c, GROUP, {"-priority.factor": ""}) == (R.SUCCESS, "")
            rest = [m.body.decode() for m in await pop(c, maxMsgNums=len(SENT))]
            assert rest == [body for body in BY_PRIORITY if body not in got]
            await c.close()

    asyncio.run(main())


@pytest.mark.parametrize("path", list(PATHS))
def test_grpc_priority_messages(path: str) -> None:
    async def main() -> None:
        async with Broker(settings=PATHS[path]) as b:
            b.broker.topics.update(TopicConfig(PRIORITY_TOPIC, LEVELS, LEVELS, attributes=PRIORITY_TYPE))
            b.broker.topics.update(TopicConfig(NORMAL_TOPIC, 4, 4))
            endpoint = b.grpc_endpoint
            route = await asyncio.to_thread(query_route, endpoint, PRIORITY_TOPIC)
            assert route.status.code == pb.OK
            assert {tuple(q.accept_message_types) for q in route.message_queues} == {(pb.PRIORITY,)}
            # The message's type is PRIORITY: a NORMAL topic refuses it, and a negative priority is
            # Message.setPriority's exception, as the Java proxy answers it.
            refused = await asyncio.to_thread(send, endpoint, message(NORMAL_TOPIC, priority=1))
            assert (refused.status.code, refused.status.message) == (
                pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "org.apache.rocketmq.proxy.common.ProxyException: TopicMessageType validate failed, "
                "the expected type is NORMAL, but actual type is PRIORITY",
            )
            negative = await asyncio.to_thread(send, endpoint, message(PRIORITY_TOPIC, priority=-1))
            assert negative.status.code == pb.INTERNAL_SERVER_ERROR
            assert negative.status.message.startswith("The priority must be greater than or equal to 0")
            for body in SENT:
                m = message(PRIORITY_TOPIC, body.encode(), priority=priority_of(body.encode()))
                sent = await asyncio.to_thread(send, endpoint, m)
                assert sent.status.code == pb.OK, sent.status
            stored = b.wait_for_messages(PRIORITY_TOPIC, len(SENT))
            assert all(m.queue_id == priority_of(m.body) for m in stored)
            client_id = f"prio-{RUN}"
            await asyncio.to_thread(settle_as_simple_consumer, endpoint, client_id, PRIORITY_TOPIC, GROUP)
            stream = await asyncio.to_thread(receive, endpoint, client_id, PRIORITY_TOPIC, GROUP, 32)
            got = [r.message for r in stream if r.HasField("message")]
            assert [m.body.decode() for m in got] == BY_PRIORITY
            for m in got:
                assert m.system_properties.message_type == pb.PRIORITY
                assert m.system_properties.priority == priority_of(m.body)
                assert PROPERTY_PRIORITY not in m.user_properties
            acked = await asyncio.to_thread(ack, endpoint, client_id, PRIORITY_TOPIC, GROUP, got)
            assert acked.status.code == pb.OK

    asyncio.run(main())
