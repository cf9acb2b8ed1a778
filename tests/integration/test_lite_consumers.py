"""Lite consumers (RocketMQ 5.5) over remoting, as 5.5.0's proxy in cluster mode calls a broker:
LITE_SUBSCRIPTION_CTL subscribes a client of a lite group (`lite.bind.topic`) to lite topics,
POP_LITE_MESSAGE hands it their messages, each lite topic in order (one batch in flight per lite topic
and group), ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME with `liteTopic` move it on or hand a message
out again. Served by both paths a send takes (the data plane, Python). The Java client 5.2.0 over gRPC,
side by side with Apache RocketMQ 5.5.0, is in tests/interop/test_lite_consumers_rocketmq55.py."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from ferromq.broker.topics import TopicConfig
from ferromq.message import StoredMessage, decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import PROPERTY_LITE_TOPIC
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2 as spb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2_grpc as rpc
from ferromq.testing import Broker, BrokerProcess
from ferromq.testing.waiting import until, wait_until
from tests.integration.brokerkit import Client, properties, send_ext
from tests.integration.test_grpc_front import (
    CALL_TIMEOUT,
    ack,
    message,
    receive,
    send,
    settle_as_simple_consumer,
)
from tests.integration.test_lite_topics import LITE_TYPE, LMQ_ON, send_lite, topic_ext
from tests.integration.test_metrics import http_get, samples, value
from tests.integration.test_priority_messages import PATHS, create_group
from tests.integration.test_transactions import end_ext, half_ext

pytestmark = [pytest.mark.timeout(120)]

RUN = uuid.uuid4().hex[:6]
INVISIBLE = 30_000


def lmq(parent: str, lite: str) -> str:
    return f"%LMQ%${parent}${lite}"


async def sync(
    c: Client, action: str, client_id: str, group: str, topic: str, lites: list[str], **extra: Any
) -> RemotingCommand:
    entry = {
        "action": action,
        "clientId": client_id,
        "group": group,
        "topic": topic,
        "liteTopicSet": lites,
        **extra,
    }
    return await c.call(RC.LITE_SUBSCRIPTION_CTL, body=orjson.dumps({"subscriptionSet": [entry]}))


async def pop_lite(
    c: Client,
    client_id: str,
    group: str,
    topic: str,
    *,
    poll: int = 0,
    num: int = 32,
    invisible: int = INVISIBLE,
) -> tuple[RemotingCommand, list[StoredMessage]]:
    ext = {
        "clientId": client_id,
        "consumerGroup": group,
        "topic": topic,
        "maxMsgNum": num,
        "invisibleTime": invisible,
        "pollTime": poll,
        "bornTime": 0,
        "attemptId": uuid.uuid4().hex,
    }
    r = await c.call(RC.POP_LITE_MESSAGE, ext, timeout=poll / 1000 + 10)
    return r, decode_messages(r.body) if r.code == R.SUCCESS else []


def receipt(r: RemotingCommand, m: StoredMessage) -> str:
    """The receipt 5.5.0's client API makes of a POP_LITE reply (processPopLiteResponse)."""
    f = r.ext
    offset = m.properties["INNER_MULTI_QUEUE_OFFSET"]
    return f"0 {f['popTime']} {f['invisibleTime']} {f['reviveQid']} 0 broker-a 0 {offset}"


async def ack_lite(
    c: Client, group: str, topic: str, r: RemotingCommand, m: StoredMessage
) -> RemotingCommand:
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": 0,
        "extraInfo": receipt(r, m),
        "offset": m.properties["INNER_MULTI_QUEUE_OFFSET"],
        "liteTopic": m.properties["__LITE_TOPIC"],
    }
    return await c.call(RC.ACK_MESSAGE, ext)


async def lite_group(c: Client, group: str, parent: str, **attributes: str) -> None:
    code, remark = await create_group(c, group, {"+lite.bind.topic": parent, **attributes})
    assert code == R.SUCCESS, remark


@contextlib.asynccontextmanager
async def lite_broker(
    topic: str,
    group: str,
    *,
    config: dict[str, str] | None = None,
    settings: dict[str, Any] | None = None,
    queues: int = 1,
    **attributes: str,
) -> AsyncIterator[tuple[Broker, Client, str, str]]:
    """A broker with lite topics on, a LITE topic `topic`+RUN of `queues` queues, a lite group `group`+RUN
    bound to it (with group `attributes`), and a client connected: (broker, client, topic, group)."""
    async with Broker(config={**LMQ_ON, **(config or {})}, settings=settings or {}) as b:
        parent, group = f"{topic}{RUN}", f"{group}{RUN}"
        b.broker.topics.update(TopicConfig(parent, queues, queues, attributes=LITE_TYPE))
        c = await Client().connect(b.broker.port)
        try:
            await lite_group(c, group, parent, **attributes)
            yield b, c, parent, group
        finally:
            await c.close()


def bodies(messages: list[StoredMessage]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for m in messages:
        out.setdefault(m.properties["__LITE_TOPIC"], []).append(m.body.decode())
    return out


async def pop_until(
    c: Client, client_id: str, group: str, topic: str, want: int
) -> list[tuple[RemotingCommand, StoredMessage]]:
    """Pops (long polling) until `want` messages came, or 20 pops."""
    got: list[tuple[RemotingCommand, StoredMessage]] = []
    for _ in range(20):
        r, messages = await pop_lite(c, client_id, group, topic, poll=2000)
        got += [(r, m) for m in messages]
        if len(got) >= want:
            break
    return got


async def subscribe_and_send(
    c: Client, client_id: str, group: str, parent: str, lites: list[str]
) -> list[str]:
    """`client_id` subscribes `lites`, then each gets one message, its name as body; returns `lites`."""
    assert (await sync(c, "PARTIAL_ADD", client_id, group, parent, lites)).code == R.SUCCESS
    for lite in lites:
        assert (await send_lite(c, parent, lite.encode(), lite))[0] == R.SUCCESS
    return lites


@pytest.mark.parametrize("path", list(PATHS))
def test_a_client_gets_its_lite_topics_in_order(path: str) -> None:
    async def main() -> None:
        async with lite_broker("LitePop", "LiteGrp", settings=PATHS[path], queues=2) as (b, c, parent, group):
            r = await sync(c, "PARTIAL_ADD", "c1", group, parent, ["a", "b"])
            assert r.code == R.SUCCESS, r.remark
            for i in range(3):
                for lite in ("a", "b", "d"):
                    code, remark = await send_lite(c, parent, f"{lite}-{i}".encode(), lite, queue_id=i % 2)
                    assert code == R.SUCCESS, remark
            got = await pop_until(c, "c1", group, parent, 6)
            assert bodies([m for _, m in got]) == {"a": ["a-0", "a-1", "a-2"], "b": ["b-0", "b-1", "b-2"]}
            for r, _m in got:  # each message's consume count, 0 the first time
                assert r.ext["reviveQid"] == "999"
                assert r.ext["orderCountInfo"].split(";") == ["0"] * len(decode_messages(r.body))
            # In flight, a lite topic gives nothing more; acked, it goes on.
            code, remark = await send_lite(c, parent, b"a-3", "a")
            assert code == R.SUCCESS, remark
            r, none = await pop_lite(c, "c1", group, parent)
            assert r.code == R.POLLING_TIMEOUT and none == []
            for r, m in got:
                acked = await ack_lite(c, group, parent, r, m)
                assert acked.code == R.SUCCESS, acked.remark
            more = await pop_until(c, "c1", group, parent, 1)
            assert bodies([m for _, m in more]) == {"a": ["a-3"]}
            assert b.broker.offsets.query(group, lmq(parent, "a"), 0) == 3
            assert b.broker.offsets.query(group, lmq(parent, "b"), 0) == 3

    asyncio.run(main())


@pytest.mark.parametrize("path", list(PATHS))
def test_a_waiting_pop_is_woken_by_a_lite_message(path: str) -> None:
    async def main() -> None:
        async with Broker(config=LMQ_ON, settings=PATHS[path]) as b:
            parent, group = f"LiteWake{RUN}", f"LiteWakeG{RUN}"
            b.broker.topics.update(TopicConfig(parent, 1, 1, attributes=LITE_TYPE))
            c = await Client().connect(b.broker.port)
            producer = await Client().connect(b.broker.port)
            await lite_group(c, group, parent)
            assert (await sync(c, "PARTIAL_ADD", "c1", group, parent, ["s1"])).code == R.SUCCESS
            waiting = asyncio.ensure_future(pop_lite(c, "c1", group, parent, poll=20_000))
            for _ in range(100):  # until the pop waits
                if b.broker.lite_consumers.events.get("c1") is not None:
                    break
                await asyncio.sleep(0.02)
            code, remark = await send_lite(producer, parent, b"hello", "s1")
            assert code == R.SUCCESS, remark
            r, messages = await asyncio.wait_for(waiting, 15)
            assert r.code == R.SUCCESS and [m.body for m in messages] == [b"hello"]
            await c.close()
            await producer.close()

    asyncio.run(main())


@pytest.mark.parametrize("path", list(PATHS))
def test_the_watch_lingers_between_pops_and_nothing_sent_after_it_is_missed(path: str) -> None:
    """Consumers pop again right after each answer: arrivals stay watched for a while after the last
    pop stopped waiting (no new watch, so no client looks at all its lite topics again), and a message
    sent once the watch ended is still found by the next pop."""

    async def main() -> None:
        async with lite_broker("LiteLinger", "LiteLingerG", settings=PATHS[path]) as (b, c, parent, group):
            lite = b.broker.lite_consumers
            lite.watch_linger_s = 60  # longer than a loaded machine could stall between two pops
            assert (await sync(c, "PARTIAL_ADD", "c1", group, parent, ["s1"])).code == R.SUCCESS
            r, none = await pop_lite(c, "c1", group, parent, poll=100)
            assert r.code == R.POLLING_TIMEOUT and none == []
            starts = lite.watch_starts
            assert lite.watching  # lingering: nobody waits
            for i in range(3):
                assert (await send_lite(c, parent, f"m{i}".encode(), "s1"))[0] == R.SUCCESS
                got = await pop_until(c, "c1", group, parent, 1)
                assert [m.body for _, m in got] == [f"m{i}".encode()]
                assert (await ack_lite(c, group, parent, *got[0])).code == R.SUCCESS
            assert lite.watch_starts == starts

            lite.watch_linger_s = 0.1
            await until(lambda: not lite.watching, "the watch ends", timeout=10)
            assert (await send_lite(c, parent, b"late", "s1"))[0] == R.SUCCESS  # nobody watches
            got = await pop_until(c, "c1", group, parent, 1)
            assert [m.body for _, m in got] == [b"late"]
            assert lite.watch_starts - starts <= 1  # one new watch at most (Python's sends tell anyway)

    asyncio.run(main())


def test_a_message_not_acked_comes_again_counted() -> None:
    async def main() -> None:
        async with lite_broker("LiteAgain", "LiteAgainG") as (b, c, parent, group):
            assert (await sync(c, "PARTIAL_ADD", "c1", group, parent, ["x"])).code == R.SUCCESS
            assert (await send_lite(c, parent, b"once", "x"))[0] == R.SUCCESS
            r, first = await pop_lite(c, "c1", group, parent, poll=2000)
            assert [m.body for m in first] == [b"once"] and r.ext["orderCountInfo"] == "0"
            # Handed back at once (the consumer failed it): it comes again, counted once more.
            ext = {
                "consumerGroup": group,
                "topic": parent,
                "queueId": 0,
                "extraInfo": receipt(r, first[0]),
                "offset": 0,
                "invisibleTime": 0,
                "liteTopic": "x",
            }
            changed = await c.call(RC.CHANGE_MESSAGE_INVISIBLETIME, ext)
            assert changed.code == R.SUCCESS, changed.remark
            again: list[tuple[RemotingCommand, StoredMessage]] = []
            for _ in range(20):
                r2, messages = await pop_lite(c, "c1", group, parent, poll=1000)
                again += [(r2, m) for m in messages]
                if again:
                    break
            assert [m.body for _, m in again] == [b"once"]
            assert again[0][0].ext["orderCountInfo"] == "1"
            assert (await ack_lite(c, group, parent, *again[0])).code == R.SUCCESS
            assert b.broker.offsets.query(group, lmq(parent, "x"), 0) == 1

    asyncio.run(main())


def test_unsubscribe_and_exclusive_groups() -> None:
    async def main() -> None:
        async with Broker(config=LMQ_ON) as b:
            parent, group = f"LiteEx{RUN}", f"LiteExG{RUN}"
            b.broker.topics.update(TopicConfig(parent, 1, 1, attributes=LITE_TYPE))
            c1 = await Client().connect(b.broker.port)
            c2 = await Client().connect(b.broker.port)
            await lite_group(c1, group, parent, **{"+lite.sub.model": "Exclusive"})
            assert (await sync(c1, "PARTIAL_ADD", "c1", group, parent, ["x", "y"])).code == R.SUCCESS
            # Another client of the exclusive group takes "x": the first is told to forget it.
            assert (await sync(c2, "PARTIAL_ADD", "c2", group, parent, ["x"])).code == R.SUCCESS
            for _ in range(100):
                if c1.server_requests:
                    break
                await asyncio.sleep(0.02)
            notice = c1.server_requests[0]
            assert notice.code == RC.NOTIFY_UNSUBSCRIBE_LITE
            assert notice.ext == {"liteTopic": "x", "consumerGroup": group, "clientId": "c1"}
            lite = b.broker.lite_consumers
            assert lite.subscribers_of(lmq(parent, "x")) == [("c2", group)]
            # "y" unsubscribed: its messages go to nobody.
            assert (await sync(c1, "PARTIAL_REMOVE", "c1", group, parent, ["y"])).code == R.SUCCESS
            assert (await send_lite(c1, parent, b"to-y", "y"))[0] == R.SUCCESS
            assert (await send_lite(c1, parent, b"to-x", "x"))[0] == R.SUCCESS
            _r, messages = await pop_lite(c1, "c1", group, parent, poll=500)
            assert messages == []
            got = await pop_until(c2, "c2", group, parent, 1)
            assert [m.body for _, m in got] == [b"to-x"]
            # A complete remove (the client went) drops all it held.
            assert (await sync(c2, "COMPLETE_REMOVE", "c2", group, parent, [])).code == R.SUCCESS
            assert lite.subscribers_of(lmq(parent, "x")) == [] and lite.active == 0
            await c1.close()
            await c2.close()

    asyncio.run(main())


def test_what_5_5_refuses() -> None:
    async def main() -> None:
        async with Broker(config={**LMQ_ON, "maxLiteSubscriptionCount": "2"}) as b:
            parent, group, plain = f"LiteNo{RUN}", f"LiteNoG{RUN}", f"Plain{RUN}"
            b.broker.topics.update(TopicConfig(parent, 1, 1, attributes=LITE_TYPE))
            b.broker.topics.update(TopicConfig(plain, 1, 1))
            c = await Client().connect(b.broker.port)
            await lite_group(c, group, parent)
            assert (await create_group(c, f"{group}N"))[0] == R.SUCCESS
            r = await c.call(RC.LITE_SUBSCRIPTION_CTL)
            assert (r.code, r.remark) == (R.ILLEGAL_OPERATION, "Request body is null.")
            r = await c.call(RC.LITE_SUBSCRIPTION_CTL, body=b'{"subscriptionSet":[]}')
            assert (r.code, r.remark) == (R.ILLEGAL_OPERATION, "LiteSubscriptionCtlRequestBody is empty.")
            assert (await sync(c, "PARTIAL_ADD", "c1", group, parent, ["a", "b"])).code == R.SUCCESS
            r = await sync(c, "PARTIAL_ADD", "c1", group, parent, ["c"])
            assert r.code == R.LITE_SUBSCRIPTION_QUOTA_EXCEEDED and "quota exceeded 2" in (r.remark or "")
            r, _ = await pop_lite(c, "c1", group, plain)
            assert (r.code, r.remark) == (R.INVALID_PARAMETER, f"the topic [{plain}] message type not match")
            r, _ = await pop_lite(c, "c1", f"{group}N", parent)
            assert (r.code, r.remark) == (R.INVALID_PARAMETER, f"subscription bind topic not match, {group}N")
            r, _ = await pop_lite(c, "c1", group, parent, num=33)
            assert r.code == R.INVALID_PARAMETER and "greater than 32" in (r.remark or "")
            r, _ = await pop_lite(c, "c1", f"NoSuch{RUN}", parent)
            assert r.code == R.SUBSCRIPTION_GROUP_NOT_EXIST
            bad = await create_group(c, f"{group}B", {"+lite.sub.model": "Solo"})
            assert bad[0] != R.SUCCESS and "value is not in set" in bad[1]
            await c.close()

    asyncio.run(main())


# -- over gRPC, as the 5.x lite push consumer calls the proxy ------------------------------------------


def sync_grpc(
    endpoint: str, client_id: str, topic: str, group: str, action: int, lites: list[str]
) -> spb.SyncLiteSubscriptionResponse:
    request = spb.SyncLiteSubscriptionRequest(
        action=action,  # type: ignore[arg-type]
        topic=pb.Resource(name=topic),
        group=pb.Resource(name=group),
        lite_topic_set=lites,
    )
    with grpc.insecure_channel(endpoint) as ch:
        reply: spb.SyncLiteSubscriptionResponse = rpc.MessagingServiceStub(ch).SyncLiteSubscription(
            request, metadata=[("x-mq-client-id", client_id)], timeout=CALL_TIMEOUT
        )
        return reply


@pytest.mark.parametrize("path", list(PATHS))
def test_a_lite_push_consumer_over_grpc(path: str) -> None:
    async def main() -> None:
        async with lite_broker(
            "LiteGrpc", "LiteGrpcG", settings=PATHS[path], queues=2, **{"+lite.sub.client.quota": "5"}
        ) as (b, _c, parent, group):
            endpoint, client_id = b.grpc_endpoint, f"lite-{RUN}"
            settings = await asyncio.to_thread(
                settle_as_simple_consumer, endpoint, client_id, parent, group, pb.LITE_PUSH_CONSUMER
            )
            assert settings.subscription.lite_subscription_quota == 5
            assert settings.subscription.max_lite_topic_size == 64
            bad = await asyncio.to_thread(
                sync_grpc, endpoint, client_id, parent, group, pb.PARTIAL_ADD, ["a,b"]
            )
            assert (bad.status.code, bad.status.message) == (
                pb.ILLEGAL_LITE_TOPIC,
                "lite topic can only contain alphanumeric characters, hyphens(-), and underscores(_)",
            )
            ok = await asyncio.to_thread(
                sync_grpc, endpoint, client_id, parent, group, pb.PARTIAL_ADD, ["a", "b"]
            )
            assert ok.status.code == pb.OK, ok.status
            for i in range(3):
                for lite in ("a", "b", "z"):
                    m = message(parent, f"{lite}-{i}".encode(), lite_topic=lite, message_type=pb.LITE)
                    sent = await asyncio.to_thread(send, endpoint, m)
                    assert sent.status.code == pb.OK, sent.status
            got: list[pb.Message] = []
            for _ in range(10):
                stream = await asyncio.to_thread(receive, endpoint, client_id, parent, group, 32)
                got += [r.message for r in stream if r.HasField("message")]
                if len(got) >= 6:
                    break
            seen: dict[str, list[str]] = {}
            for m in got:
                seen.setdefault(m.system_properties.lite_topic, []).append(m.body.decode())
                assert m.system_properties.message_type == pb.LITE
                assert m.system_properties.delivery_attempt == 1
            assert seen == {"a": ["a-0", "a-1", "a-2"], "b": ["b-0", "b-1", "b-2"]}
            acked = await asyncio.to_thread(ack, endpoint, client_id, parent, group, got)
            assert acked.status.code == pb.OK, acked.status
            assert b.broker.offsets.query(group, lmq(parent, "a"), 0) == 3
            # Unsubscribed, "b" gives nothing more; "a" goes on.
            gone = await asyncio.to_thread(
                sync_grpc, endpoint, client_id, parent, group, pb.PARTIAL_REMOVE, ["b"]
            )
            assert gone.status.code == pb.OK
            for lite in ("b", "a"):
                m = message(parent, f"{lite}-late".encode(), lite_topic=lite, message_type=pb.LITE)
                assert (await asyncio.to_thread(send, endpoint, m)).status.code == pb.OK
            late: list[pb.Message] = []
            for _ in range(10):
                stream = await asyncio.to_thread(receive, endpoint, client_id, parent, group, 32)
                late += [r.message for r in stream if r.HasField("message")]
                if late:
                    break
            assert [m.body for m in late] == [b"a-late"]

    asyncio.run(main())


def test_a_wildcard_group_takes_every_lite_topic() -> None:
    async def main() -> None:
        async with lite_broker("LiteWild", "LiteWildG", **{"+lite.sub.wildcard": "*"}) as (
            b,
            c,
            parent,
            group,
        ):
            # Sent before any client: the first client's registration gives them.
            for lite in ("w1", "w2"):
                assert (await send_lite(c, parent, f"{lite}-early".encode(), lite))[0] == R.SUCCESS
            r = await sync(c, "PARTIAL_ADD", "c1", group, parent, ["w1"])
            assert r.code == R.ILLEGAL_OPERATION and "not supported for this group" in (r.remark or "")
            assert (await sync(c, "COMPLETE_ADD", "c1", group, parent, [])).code == R.SUCCESS
            got = await pop_until(c, "c1", group, parent, 2)
            for r, m in got:
                assert (await ack_lite(c, group, parent, r, m)).code == R.SUCCESS
            # Later ones, of lite topics nobody named, too.
            for lite in ("w2", "w3"):
                assert (await send_lite(c, parent, f"{lite}-late".encode(), lite))[0] == R.SUCCESS
            got += await pop_until(c, "c1", group, parent, 2)
            assert bodies([m for _, m in got]) == {
                "w1": ["w1-early"],
                "w2": ["w2-early", "w2-late"],
                "w3": ["w3-late"],
            }
            assert b.broker.lite_consumers.active == 1
            assert (await sync(c, "COMPLETE_REMOVE", "c1", group, parent, [])).code == R.SUCCESS
            assert b.broker.lite_consumers.active == 0 and not b.broker.lite_consumers.wildcards

    asyncio.run(main())


def test_a_suspended_lite_topic_waits_whole() -> None:
    async def main() -> None:
        async with lite_broker("LiteSus", "LiteSusG") as (_b, c, parent, group):
            assert (await sync(c, "PARTIAL_ADD", "c1", group, parent, ["s"])).code == R.SUCCESS
            for i in range(3):
                assert (await send_lite(c, parent, f"s-{i}".encode(), "s"))[0] == R.SUCCESS
            first = await pop_until(c, "c1", group, parent, 3)
            assert [m.body for _, m in first] == [b"s-0", b"s-1", b"s-2"]
            r, m = first[0]
            # The first message acked, the second changed with suspend for 1 s: the whole lite topic
            # (the third message too) comes again after it, from the second.
            assert (await ack_lite(c, group, parent, r, m)).code == R.SUCCESS
            ext = {
                "consumerGroup": group,
                "topic": parent,
                "queueId": 0,
                "extraInfo": receipt(r, first[1][1]),
                "offset": 1,
                "invisibleTime": 1000,
                "liteTopic": "s",
                "suspend": "true",
            }
            assert (await c.call(RC.CHANGE_MESSAGE_INVISIBLETIME, ext)).code == R.SUCCESS
            again = await pop_until(c, "c1", group, parent, 2)
            assert [m.body for _, m in again] == [b"s-1", b"s-2"]
            assert again[0][0].ext["orderCountInfo"] == "1;1"

    asyncio.run(main())


def test_lite_lag_counts_under_the_parent_topic() -> None:
    """rocketmq_consumer_lag_messages of a lite group: one series per parent topic and group (5.5.0's
    LiteConsumerLagCalculator), however many lite topics; how many lite topics and subscriptions."""

    async def main() -> None:
        metrics = {
            "metricsExporterType": "PROM",
            "metricsPromExporterHost": "127.0.0.1",
            "metricsPromExporterPort": "0",
        }
        async with Broker(config={**LMQ_ON, **metrics}) as b:
            assert b.broker.metrics is not None
            parent, group = f"LiteLag{RUN}", f"LiteLagG{RUN}"
            b.broker.topics.update(TopicConfig(parent, 1, 1, attributes=LITE_TYPE))
            c = await Client().connect(b.broker.port)
            await lite_group(c, group, parent)
            assert (await sync(c, "PARTIAL_ADD", "c1", group, parent, ["l1", "l2", "l3"])).code == R.SUCCESS
            for lite, n in (("l1", 2), ("l2", 3), ("l3", 1)):
                for i in range(n):
                    assert (await send_lite(c, parent, f"{lite}-{i}".encode(), lite))[0] == R.SUCCESS
            got = await pop_until(c, "c1", group, parent, 6)
            for r, m in got:
                if m.properties["__LITE_TOPIC"] == "l3":
                    assert (await ack_lite(c, group, parent, r, m)).code == R.SUCCESS
            status, body = await http_get(b.broker.metrics.port, "/metrics")
            assert status.startswith("HTTP/1.1 200"), status
            found = samples(body.decode())
            assert value(found, "rocketmq_consumer_lag_messages", topic=parent, consumer_group=group) == 5
            assert not [labels for (name, labels) in found if ("topic", lmq(parent, "l1")) in labels]
            assert value(found, "ferromq_lite_queues") == 3
            assert value(found, "ferromq_lite_subscriptions") == 3
            await c.close()

    asyncio.run(main())


def test_what_a_peer_sends_stays_bounded() -> None:
    """Made-up client ids, syncs past the bound and changes of one message over and over take no more
    room than the subscriptions allowed."""

    async def main() -> None:
        async with lite_broker("LiteBound", "LiteBoundG", config={"maxLiteSubscriptionCount": "3"}) as (
            b,
            c,
            parent,
            group,
        ):
            lite = b.broker.lite_consumers
            for i in range(3):
                assert (await sync(c, "COMPLETE_ADD", f"k{i}", group, parent, [])).code == R.SUCCESS
            r = await sync(c, "COMPLETE_ADD", "k3", group, parent, [])
            assert r.code == R.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
            assert len(lite.clients) == 3
            r, none = await pop_lite(c, "ghost", group, parent, poll=200)
            assert r.code == R.POLLING_TIMEOUT and none == [] and "ghost" not in lite.events
            assert (await sync(c, "PARTIAL_ADD", "k0", group, parent, ["x"])).code == R.SUCCESS
            assert (await send_lite(c, parent, b"x", "x"))[0] == R.SUCCESS
            got = await pop_until(c, "k0", group, parent, 1)
            r, m = got[0]
            for i in range(200):
                ext = {
                    "consumerGroup": group,
                    "topic": parent,
                    "queueId": 0,
                    "extraInfo": receipt(r, m),
                    "offset": 0,
                    "invisibleTime": 60_000 - i,
                    "liteTopic": "x",
                }
                assert (await c.call(RC.CHANGE_MESSAGE_INVISIBLETIME, ext)).code == R.SUCCESS
            assert lite.rechecks == 1
            # A complete set past the bound is cut at it.
            r = await sync(c, "COMPLETE_ADD", "k1", group, parent, ["p", "q", "r", "s"])
            assert r.code == R.LITE_SUBSCRIPTION_QUOTA_EXCEEDED and lite.active == 3

    asyncio.run(main())


def test_a_group_config_as_a_proxy_reads_it() -> None:
    """GET_SUBSCRIPTIONGROUP_CONFIG: what Apache RocketMQ's proxy in cluster mode reads of a group (here a
    lite group's binding) from a broker, and its refusal of a group the broker lacks."""

    async def main() -> None:
        async with Broker(config=LMQ_ON) as b:
            parent, group = f"LiteCfg{RUN}", f"LiteCfgG{RUN}"
            c = await Client().connect(b.broker.port)
            await lite_group(c, group, parent)
            r = await c.call(RC.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group})
            assert r.code == R.SUCCESS, r.remark
            got = orjson.loads(r.body)
            assert got["groupName"] == group and got["attributes"] == {"lite.bind.topic": parent}
            r = await c.call(RC.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": f"NoSuch{RUN}"})
            assert (r.code, r.remark) == (R.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")
            await c.close()

    asyncio.run(main())


def test_a_client_that_stops_popping_is_passed_over() -> None:
    """A client gone without a word (or stuck) holds no lite topic for long: once it has not popped for
    10 s with lite topics waiting for it, they go to the group's other client (5.5.0's scan)."""

    async def main() -> None:
        async with lite_broker("LiteIdle", "LiteIdleG") as (b, c, parent, group):
            lite = b.broker.lite_consumers
            for client_id in ("k1", "k2"):
                assert (await sync(c, "PARTIAL_ADD", client_id, group, parent, ["x"])).code == R.SUCCESS
            assert (await send_lite(c, parent, b"x-0", "x"))[0] == R.SUCCESS
            # k1 is given "x" (an admin's dispatch to it), then pops no more.
            r = await c.call(RC.TRIGGER_LITE_DISPATCH, {"group": group, "clientId": "k1"})
            assert r.code == R.SUCCESS and list(lite.events["k1"].queues) == [lmq(parent, "x")]
            assert lite.pass_over_inactive(int(time.time() * 1000) + 11_000) == ["k1"]
            _, got = await pop_lite(c, "k2", group, parent, poll=2000)
            assert [m.body for m in got] == [b"x-0"]

    asyncio.run(main())


def test_a_lite_client_whose_connection_goes_loses_its_subscriptions() -> None:
    """Its Telemetry stream cancelled (the client's connection went), a lite consumer's subscriptions go
    from the broker at once, as Java's proxy drops them (handleGrpcCancel)."""

    async def main() -> None:
        async with lite_broker("LiteGone", "LiteGoneG") as (b, _c, parent, group):
            endpoint, client_id = b.grpc_endpoint, f"gone-{RUN}"
            lite = b.broker.lite_consumers
            settings = pb.Settings(
                client_type=pb.LITE_PUSH_CONSUMER,
                subscription=pb.Subscription(
                    group=pb.Resource(name=group),
                    subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name=parent))],
                ),
            )
            channel = grpc.aio.insecure_channel(endpoint)
            stream = rpc.MessagingServiceStub(channel).Telemetry(
                metadata=[("x-mq-client-id", client_id)], timeout=CALL_TIMEOUT
            )
            await stream.write(spb.TelemetryCommand(settings=settings))
            assert (await stream.read()).status.code == pb.OK
            synced = await asyncio.to_thread(
                sync_grpc, endpoint, client_id, parent, group, pb.PARTIAL_ADD, ["y"]
            )
            assert synced.status.code == pb.OK and client_id in lite.clients
            await channel.close()  # the connection goes: the stream is cancelled on the server
            # Bounded, with room for a loaded machine: the cancel crosses the front and grpcio first.
            deadline = time.monotonic() + 30
            while client_id in lite.clients and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert client_id not in lite.clients and lite.active == 0

    asyncio.run(main())


def test_a_lite_consumer_after_kill_9(tmp_path: Path) -> None:
    """kill -9 with lite topics consumed, in flight and waiting: after the restart the client (subscribing
    again, as a 5.x client resyncs) gets every message not acked, in order, and none acked before the
    offsets were flushed (SYNC_FLUSH: every acked send is on disk)."""
    conf = {**LMQ_ON, "flushDiskType": "SYNC_FLUSH", "flushConsumerOffsetInterval": "200"}
    parent, group = f"LiteK9{RUN}", f"LiteK9G{RUN}"
    lites = [f"t{k}" for k in range(5)]
    each = 4

    async def before(port: int) -> None:
        c = await Client().connect(port)
        r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, topic_ext(parent))
        assert r.code == R.SUCCESS, r.remark
        await lite_group(c, group, parent)
        assert (await sync(c, "PARTIAL_ADD", "c1", group, parent, lites)).code == R.SUCCESS
        for i in range(each):
            for lite in lites:
                assert (await send_lite(c, parent, f"{lite}-{i}".encode(), lite))[0] == R.SUCCESS
        got = await pop_until(c, "c1", group, parent, len(lites) * each)
        assert len(got) == len(lites) * each
        for r, m in got:  # t0 and t1 acked; t2, t3, t4 in flight at the kill
            if m.properties["__LITE_TOPIC"] in ("t0", "t1"):
                assert (await ack_lite(c, group, parent, r, m)).code == R.SUCCESS
        await c.close()

    server = BrokerProcess(tmp_path, conf).start()
    offsets_file = server.store / "config" / "consumerOffset.json"
    try:
        asyncio.run(asyncio.wait_for(before(server.port), 60))
        # The acked offsets reach the disk (every 200 ms here) before the kill.
        wait_until(
            lambda: offsets_file.exists() and f"{lmq(parent, 't1')}@{group}" in offsets_file.read_text(),
            "the lite offsets flushed",
            10,
        )
    finally:
        server.stop(kill=True)
    again = BrokerProcess(tmp_path, conf, store=server.store).start()
    try:

        async def after() -> dict[str, list[str]]:
            c = await Client().connect(again.port)
            assert (await sync(c, "PARTIAL_ADD", "c1", group, parent, lites)).code == R.SUCCESS
            got = await pop_until(c, "c1", group, parent, 3 * each)
            await c.close()
            return bodies([m for _, m in got])

        seen = asyncio.run(asyncio.wait_for(after(), 60))
        assert seen == {lite: [f"{lite}-{i}" for i in range(each)] for lite in ("t2", "t3", "t4")}
    finally:
        again.stop()


def test_a_committed_lite_message_wakes_its_consumer() -> None:
    """A transactional lite message reaches its lite topic's queue when committed: a lite pop waiting then
    gets it at once."""

    async def main() -> None:
        async with lite_broker("LiteTx", "LiteTxG") as (b, c, parent, group):
            assert (await sync(c, "PARTIAL_ADD", "c1", group, parent, ["tx"])).code == R.SUCCESS
            half = await c.call(RC.SEND_MESSAGE, half_ext(parent, 0, **{PROPERTY_LITE_TOPIC: "tx"}), b"held")
            assert half.code == R.SUCCESS, half.remark
            waiting = asyncio.ensure_future(pop_lite(c, "c1", group, parent, poll=20_000))
            for _ in range(100):  # until the pop waits
                if "c1" in b.broker.lite_consumers.events:
                    break
                await asyncio.sleep(0.02)
            started = time.monotonic()
            await c.conn.oneway(
                RemotingCommand(code=RC.END_TRANSACTION, ext={k: str(v) for k, v in end_ext(half, 8).items()})
            )
            r, got = await asyncio.wait_for(waiting, 15)
            assert r.code == R.SUCCESS and [m.body for m in got] == [b"held"]
            assert time.monotonic() - started < 10, "woken by the commit, not by the poll's end"

    asyncio.run(main())


@pytest.mark.parametrize("delay", ["level", "timer"])
def test_a_delayed_lite_message_wakes_its_consumer_when_due(delay: str) -> None:
    """A lite message with a delay level or a deliver time joins its lite topic when it is due (not
    before): a lite pop waiting then gets it at once (the delivery tells the lite consumers)."""

    async def main() -> None:
        fast = {"timer_precision_ms": 100}
        async with lite_broker("LiteDelay", "LiteDelayG", settings=fast) as (_, c, parent, group):
            assert (await sync(c, "PARTIAL_ADD", "c1", group, parent, ["d"])).code == R.SUCCESS
            due = (
                {"DELAY": "1"}
                if delay == "level"
                else {"TIMER_DELIVER_MS": str(int(time.time() * 1000) + 1500)}
            )
            props = properties(UNIQ_KEY=uuid.uuid4().hex, **{PROPERTY_LITE_TOPIC: "d"}, **due)
            r = await c.call(RC.SEND_MESSAGE, send_ext(parent, 0, props), b"later")
            assert r.code == R.SUCCESS, r.remark
            sent = time.monotonic()
            r, early = await pop_lite(c, "c1", group, parent, poll=200)
            assert early == [], "not before it is due"
            waiting = asyncio.ensure_future(pop_lite(c, "c1", group, parent, poll=30_000))
            r, got = await asyncio.wait_for(waiting, 40)
            assert r.code == R.SUCCESS and [m.body for m in got] == [b"later"]
            assert time.monotonic() - sent < 20, "woken by the delivery, not by the poll's end"

    asyncio.run(main())


def test_a_clients_lite_topics_with_messages_are_bounded() -> None:
    """lite.sub.client.max.event.cnt (10 here; maxClientEventCount without it): a client holds at most
    that many lite topics with messages; the others go to another client of the group with room, or,
    none having any, are given again after liteEventFullDispatchDelayTime (5.5.0's ClientEventSet)."""

    async def trigger(c: Client, group: str) -> None:  # TRIGGER_LITE_DISPATCH: the full dispatch
        r = await c.call(RC.TRIGGER_LITE_DISPATCH, {"group": group})
        assert r.code == R.SUCCESS, r.remark

    async def main() -> None:
        cap = {"+lite.sub.client.max.event.cnt": "10"}
        fast = {"lite_event_full_dispatch_delay_time": 200}
        async with lite_broker("LiteCap", "LiteCapG", settings=fast, **cap) as (b, c, parent, group):
            events = b.broker.lite_consumers.events
            lites = await subscribe_and_send(c, "c1", group, parent, [f"s{i}" for i in range(15)])
            await trigger(c, group)
            assert len(events["c1"].queues) == 10
            # Popped and acked, the client gets all 15: the 5 it had no room for come again.
            got: list[str] = []
            for _ in range(40):
                for r, m in await pop_until(c, "c1", group, parent, 1):
                    got.append(m.body.decode())
                    assert (await ack_lite(c, group, parent, r, m)).code == R.SUCCESS
                if len(got) >= 15:
                    break
            assert sorted(got) == sorted(lites)

            # Two more clients of the group: what one has no room for goes to the other.
            more = [f"t{i}" for i in range(15)]
            for client in ("c2", "c3"):
                assert (await sync(c, "PARTIAL_ADD", client, group, parent, more)).code == R.SUCCESS
            for lite in more:
                assert (await send_lite(c, parent, lite.encode(), lite))[0] == R.SUCCESS
            await trigger(c, group)
            held = [set(events[cid].queues) for cid in ("c2", "c3")]
            assert [len(h) <= 10 for h in held] == [True, True]
            assert held[0] | held[1] == {lmq(parent, lite) for lite in more}

    asyncio.run(main())


@pytest.mark.parametrize("path", list(PATHS))
def test_lite_topics_a_client_had_no_room_for_come_as_soon_as_it_has(path: str) -> None:
    """A client with room for 10 lite topics with messages and 15 waiting: once its pops made room, the 5
    it had none for are given to it at once, not after liteEventFullDispatchDelayTime (60 s here)."""

    async def main() -> None:
        settings = {**PATHS[path], "lite_event_full_dispatch_delay_time": 60_000}
        cap = {"+lite.sub.client.max.event.cnt": "10"}
        async with lite_broker("LiteRoom", "LiteRoomG", settings=settings, **cap) as (b, c, parent, group):
            events = b.broker.lite_consumers.events
            lites = await subscribe_and_send(c, "c1", group, parent, [f"r{i}" for i in range(15)])
            r, first = await pop_lite(c, "c1", group, parent, poll=5000)
            assert r.code == R.SUCCESS and len(first) == 10
            assert len(events["c1"].queues) == 5  # given as soon as the pop made room
            r, rest = await pop_lite(c, "c1", group, parent, poll=5000)
            assert r.code == R.SUCCESS
            assert sorted(m.body.decode() for m in first + rest) == sorted(lites)

    asyncio.run(main())
