"""Topic names and answer codes as Apache RocketMQ 5.3.3 gives them (issue 39, items 6-8), on a real
broker: system topics are the broker's own (an admin may not create them, a 5.x client may not name
them, a producer may not send to those TopicValidator forbids); a name is the whole name (a final
newline is refused); the gRPC codes are the vendored proto's; a receive's fault is logged, and a
hold released twice is not one."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from ferromq.broker.topics import TopicConfig
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2 as spb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2_grpc as rpc
from ferromq.testing import Broker

from .brokerkit import Client, running, send_ext

pytestmark = [pytest.mark.timeout(120)]

CALL_TIMEOUT = 10.0
RUN = uuid.uuid4().hex[:6]
CLIENT = [("x-mq-client-id", f"names-{RUN}")]

# TopicValidator's system topics every broker has, one with its prefix, and TBW102 (a system
# topic that producers may still name as their default topic).
SYSTEM = [
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC",
    "BenchmarkTest",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "CHECKPOINT_TOPIC",
    "rmq_sys_wheel_timer",
    "rmq_sys_anything",
]
NOT_ALLOWED_SEND = [
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
]


def create(topic: str) -> dict[str, Any]:
    return {"topic": topic, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}


# -- remoting: UPDATE_AND_CREATE_TOPIC and SEND_MESSAGE --------------------------------------------


def test_an_admin_may_not_create_a_system_topic(tmp_path: Path) -> None:
    """UPDATE_AND_CREATE_TOPIC of a system topic, the broker's own names included, is answered
    INVALID_PARAMETER (29) with Java's remark, and the topic's config is left as it was."""

    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            cfg = broker.config
            own = [cfg.broker_cluster_name, cfg.broker_name, f"{cfg.broker_cluster_name}_REPLY_TOPIC"]
            before = {t: broker.topics.get(t) for t in SYSTEM + own}
            c = await Client().connect(broker.port)
            for topic in SYSTEM + own:
                r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create(topic))
                assert (r.code, r.remark) == (
                    R.INVALID_PARAMETER,
                    f"The topic[{topic}] is conflict with system topic.",
                ), topic
                assert broker.topics.get(topic) == before[topic], topic
            r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create(f"Mine{RUN}"))
            assert r.code == R.SUCCESS, r.remark
            await c.close()

    asyncio.run(main())


def test_a_topic_name_is_the_whole_name(tmp_path: Path) -> None:
    """A final newline (which `^...$` lets through) and the other names TopicValidator refuses are
    INVALID_PARAMETER (29), with its texts, in its order; nothing is created."""

    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            illegal = "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
            for topic, remark in (
                ("X\n", illegal),
                ("X\nY", illegal),
                ("\nX", illegal),
                ("X.Y", illegal),
                (" ", "The specified topic is blank."),
                ("T" * 128, "The specified topic is longer than topic max length."),
                # Illegal characters are found before the length.
                ("é" * 128, illegal),
            ):
                r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create(topic))
                assert (r.code, r.remark) == (R.INVALID_PARAMETER, remark), repr(topic)
                assert broker.topics.get(topic) is None, repr(topic)
            assert (await c.call(RC.UPDATE_AND_CREATE_TOPIC, create("X"))).code == R.SUCCESS
            # A send auto-creating "X\n" is refused too (by the same rule).
            r = await c.call(RC.SEND_MESSAGE, send_ext("Y\n", 0), b"m")
            assert r.code == R.SYSTEM_ERROR and "illegal characters" in (r.remark or "")
            assert broker.topics.get("Y\n") is None
            await c.close()

    asyncio.run(main())


@pytest.mark.parametrize("plane", ["rust", "python"])
def test_sends_to_topics_java_forbids_are_refused(tmp_path: Path, plane: str) -> None:
    """SEND_MESSAGE to a topic of TopicValidator's NOT_ALLOWED_SEND set: NO_PERMISSION, whether the
    data plane or Python serves sends; other system topics take sends, as Java's broker does."""

    async def main() -> None:
        async with running(tmp_path, data_plane=plane) as (_, broker):
            c = await Client().connect(broker.port)
            for topic in NOT_ALLOWED_SEND:
                r = await c.call(RC.SEND_MESSAGE, send_ext(topic, 0), b"m")
                assert (r.code, r.remark) == (
                    R.NO_PERMISSION,
                    f"Sending message to topic[{topic}] is forbidden.",
                ), topic
            r = await c.call(RC.SEND_MESSAGE, send_ext("TBW102", 0), b"m")
            assert r.code == R.SUCCESS, r.remark
            await c.close()

    asyncio.run(main())


# -- gRPC: the proxy's answers ---------------------------------------------------------------------


def message(topic: str) -> pb.Message:
    sp = pb.SystemProperties(message_id=uuid.uuid4().hex.upper(), body_encoding=pb.IDENTITY)
    return pb.Message(topic=pb.Resource(name=topic), body=b"x", system_properties=sp)


def grpc_calls(endpoint: str, topic: str, group: str = f"G{RUN}") -> Iterator[tuple[str, pb.Status]]:
    """The status of each call naming `topic`: SendMessage, QueryRoute, ReceiveMessage."""
    with grpc.insecure_channel(endpoint) as ch:
        stub = rpc.MessagingServiceStub(ch)
        sent = stub.SendMessage(
            spb.SendMessageRequest(messages=[message(topic)]), metadata=CLIENT, timeout=CALL_TIMEOUT
        )
        yield "send", sent.status
        route = stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=CLIENT, timeout=CALL_TIMEOUT
        )
        yield "route", route.status
        received = list(
            stub.ReceiveMessage(receive_request(topic, group), metadata=CLIENT, timeout=CALL_TIMEOUT)
        )
        yield "receive", received[0].status


def receive_request(topic: str, group: str, invisible_s: int = 30) -> spb.ReceiveMessageRequest:
    return spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=1,
        invisible_duration={"seconds": invisible_s},
        long_polling_timeout={"seconds": 5},
    )


@pytest.mark.parametrize("plane", ["rust", "python"])
def test_a_5x_client_may_not_name_a_system_topic(plane: str) -> None:
    """SendMessage, QueryRoute and ReceiveMessage on a system topic: ILLEGAL_TOPIC (40002) "cannot
    access system topic", as the proxy's GrpcValidator answers, whether the front or the service
    answers; a user topic is still served."""

    async def main() -> None:
        async with Broker(settings={"data_plane": plane}) as b:
            # The broker's own (its cluster, its name, its reply topic) too, as Java's proxy
            # refuses them when its broker runs in the same process.
            own = sorted(b.broker.topics.reserved)
            for topic in [*SYSTEM, *own]:
                statuses = await asyncio.to_thread(lambda t=topic: list(grpc_calls(b.grpc_endpoint, t)))
                for call, st in statuses:
                    assert (st.code, st.message) == (pb.ILLEGAL_TOPIC, "cannot access system topic"), (
                        topic,
                        call,
                    )
            # Over remoting the cluster's topic takes sends, as Java's broker's does.
            c = await Client().connect(b.broker.port)
            r = await c.call(RC.SEND_MESSAGE, send_ext(b.broker.config.broker_cluster_name, 0), b"m")
            assert r.code == R.SUCCESS, r.remark
            await c.close()
            mine = f"Mine{RUN}"
            b.broker.topics.update(TopicConfig(mine, 1, 1))
            statuses = dict(await asyncio.to_thread(lambda: list(grpc_calls(b.grpc_endpoint, mine))))
            assert statuses["send"].code == pb.OK and statuses["route"].code == pb.OK
            assert statuses["receive"].code == pb.OK

    asyncio.run(main())


def test_invisible_durations_out_of_bounds_are_illegal_invisible_time() -> None:
    """A receive's invisible duration under 10 s or over 12 hours, and a change's below 0:
    ILLEGAL_INVISIBLE_TIME (40011, not UNRECOGNIZED_CLIENT_TYPE's 40015), with the proxy's texts."""

    async def main() -> None:
        async with Broker() as b:
            topic, group = f"Inv{RUN}", f"InvG{RUN}"
            b.broker.topics.update(TopicConfig(topic, 1, 1))

            def calls() -> list[pb.Status]:
                with grpc.insecure_channel(b.grpc_endpoint) as ch:
                    stub = rpc.MessagingServiceStub(ch)
                    out = []
                    for seconds in (1, 12 * 3600 + 1):
                        stream = stub.ReceiveMessage(
                            receive_request(topic, group, seconds), metadata=CLIENT, timeout=CALL_TIMEOUT
                        )
                        out.append(next(iter(stream)).status)
                    sent = stub.SendMessage(
                        spb.SendMessageRequest(messages=[message(topic)]),
                        metadata=CLIENT,
                        timeout=CALL_TIMEOUT,
                    )
                    assert sent.status.code == pb.OK, sent.status
                    stream = stub.ReceiveMessage(
                        receive_request(topic, group), metadata=CLIENT, timeout=CALL_TIMEOUT
                    )
                    received = [r.message for r in stream if r.HasField("message")]
                    assert len(received) == 1
                    changed = stub.ChangeInvisibleDuration(
                        spb.ChangeInvisibleDurationRequest(
                            group=pb.Resource(name=group),
                            topic=pb.Resource(name=topic),
                            receipt_handle=received[0].system_properties.receipt_handle,
                            invisible_duration={"seconds": -1},
                            message_id=received[0].system_properties.message_id,
                        ),
                        metadata=CLIENT,
                        timeout=CALL_TIMEOUT,
                    )
                    out.append(changed.status)
                    return out

            small, large, change = await asyncio.to_thread(calls)
            assert pb.ILLEGAL_INVISIBLE_TIME == 40011
            assert (small.code, small.message) == (40011, "the invisibleTime is too small. min is 10000")
            assert (large.code, large.message) == (40011, "the invisibleTime is too large. max is 43200000")
            assert (change.code, change.message) == (40011, "the invisibleTime is too small. min is 0")

    asyncio.run(main())


# -- faults: logged, and the hold released twice ---------------------------------------------------


def test_an_internal_error_is_logged_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """A fault inside a call is answered INTERNAL_SERVER_ERROR and logged, traceback and all."""

    async def main() -> None:
        async with Broker() as b:
            grpc_server = b.broker.grpc
            assert grpc_server is not None
            backend = grpc_server.service.backend

            async def broken(topic: str) -> Any:
                raise asyncio.InvalidStateError("invalid state")

            backend.queues = broken  # type: ignore[method-assign]

            def route() -> pb.Status:
                with grpc.insecure_channel(b.grpc_endpoint) as ch:
                    reply = rpc.MessagingServiceStub(ch).QueryRoute(
                        spb.QueryRouteRequest(topic=pb.Resource(name=f"T{RUN}")),
                        metadata=CLIENT,
                        timeout=CALL_TIMEOUT,
                    )
                    return reply.status

            with caplog.at_level(logging.ERROR, logger="ferromq"):
                st = await asyncio.to_thread(route)
            assert (st.code, st.message) == (pb.INTERNAL_SERVER_ERROR, "invalid state. InvalidStateError")
            logged = [r for r in caplog.records if r.levelno == logging.ERROR and r.exc_info]
            assert logged, caplog.text
            assert "InvalidStateError" in caplog.text and "in broken" in caplog.text

    asyncio.run(main())


def test_a_hold_woken_by_an_arrival_and_its_own_look_at_once(tmp_path: Path) -> None:
    """The first hold of the broker takes the arrivals the data plane stored meanwhile (one wakes
    it) and then looks at its queues (which wake it too): the hold ends once, no InvalidStateError
    (the fault behind a receive answered "invalid state. InvalidStateError" under load)."""

    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            topic = f"Hold{RUN}"
            broker.topics.update(TopicConfig(topic, 1, 1))
            c = await Client().connect(broker.port)
            r = await c.call(RC.SEND_MESSAGE, send_ext(topic, 0), b"m")
            assert r.code == R.SUCCESS, r.remark
            assert broker.hold.held_count == 0
            # Held from offset 0: a message is past it, and its arrival is still the plane's.
            async with asyncio.timeout(5):
                await broker.hold.hold_any([(topic, 0, 0)], 3.0, lambda _: True)
            assert broker.hold.held_count == 0
            await c.close()

    asyncio.run(main())
