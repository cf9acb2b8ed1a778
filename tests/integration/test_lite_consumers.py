"""Lite consumers (RocketMQ 5.5) over remoting, as 5.5.0's proxy in cluster mode calls a broker:
LITE_SUBSCRIPTION_CTL subscribes a client of a lite group (`lite.bind.topic`) to lite topics,
POP_LITE_MESSAGE hands it their messages, each lite topic in order (one batch in flight per lite topic
and group), ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME with `liteTopic` move it on or hand a message
out again. Served by both paths a send takes (the data plane, Python). The Java client 5.2.0 over gRPC,
side by side with Apache RocketMQ 5.5.0, is in tests/interop/test_lite_consumers_rocketmq55.py."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson
import pytest

from ferromq.broker.topics import TopicConfig
from ferromq.message import StoredMessage, decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.command import RemotingCommand
from ferromq.testing import Broker
from tests.integration.brokerkit import Client
from tests.integration.test_lite_topics import LITE_TYPE, LMQ_ON, send_lite
from tests.integration.test_priority_messages import PATHS, create_group

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


@pytest.mark.parametrize("path", list(PATHS))
def test_a_client_gets_its_lite_topics_in_order(path: str) -> None:
    async def main() -> None:
        async with Broker(config=LMQ_ON, settings=PATHS[path]) as b:
            parent, group = f"LitePop{RUN}", f"LiteGrp{RUN}"
            b.broker.topics.update(TopicConfig(parent, 2, 2, attributes=LITE_TYPE))
            c = await Client().connect(b.broker.port)
            await lite_group(c, group, parent)
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
            await c.close()

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


def test_a_message_not_acked_comes_again_counted() -> None:
    async def main() -> None:
        async with Broker(config=LMQ_ON) as b:
            parent, group = f"LiteAgain{RUN}", f"LiteAgainG{RUN}"
            b.broker.topics.update(TopicConfig(parent, 1, 1, attributes=LITE_TYPE))
            c = await Client().connect(b.broker.port)
            await lite_group(c, group, parent)
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
            await c.close()

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
