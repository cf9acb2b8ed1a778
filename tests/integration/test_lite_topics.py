"""Lite topics (RocketMQ 5.5, RIP-83): the store and the send.

A message with `__LITE_TOPIC` sent to a topic is stored in that topic's queue, as any, and, with
enableLmq and enableMultiDispatch, also in the light message queue of its lite topic,
`%LMQ%$<topic>$<lite topic>` (one ordered queue, made by its first message): the broker adds
INNER_MULTI_DISPATCH, the store INNER_MULTI_QUEUE_OFFSET. A 4.x pull reads a lite topic's queue by that
name, in send order; it takes no consume-queue directory; a `kill -9` loses none of it. The lite consumers
are tested in tests/integration/test_lite_consumers.py. What Apache RocketMQ 5.5.0 stores for the same
sends is compared in tests/interop/test_lite_rocketmq55.py."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from ferromq.broker import lite
from ferromq.broker.topics import LMQ_PREFIX, TopicConfig
from ferromq.message import StoredMessage, decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.constants import PROPERTY_LITE_TOPIC
from ferromq.store import MessageStore
from ferromq.testing import Broker, BrokerProcess
from tests.integration.brokerkit import Client, properties, pull_ext, send_ext

pytestmark = [pytest.mark.timeout(180)]

RUN = uuid.uuid4().hex[:6]
PARENT, GROUP = f"LiteP{RUN}", f"LiteG{RUN}"
LMQ_ON = {"enableLmq": "true", "enableMultiDispatch": "true"}
LITE_TYPE = {"message.type": "LITE"}
SESSIONS = ("s1", "s2", "s3")


def lmq(lite: str, parent: str = PARENT) -> str:
    return f"%LMQ%${parent}${lite}"


async def send_lite(c: Client, topic: str, body: bytes, lite: str, queue_id: int = 0) -> tuple[int, str]:
    props = properties(UNIQ_KEY=uuid.uuid4().hex, **{PROPERTY_LITE_TOPIC: lite})
    r = await c.call(RC.SEND_MESSAGE, send_ext(topic, queue_id, props), body)
    return r.code, r.remark or ""


async def pull_all(c: Client, topic: str, queue_id: int = 0) -> list[StoredMessage]:
    r = await c.call(RC.PULL_MESSAGE, pull_ext(GROUP, topic, queue_id, 0, suspendTimeoutMillis=0))
    return decode_messages(r.body) if r.code == R.SUCCESS else []


def test_lite_messages_join_their_lite_topic_queue() -> None:
    async def main() -> None:
        async with Broker(config=LMQ_ON) as b:
            b.broker.topics.update(TopicConfig(PARENT, 2, 2, attributes=LITE_TYPE))
            c = await Client().connect(b.broker.port)
            for i in range(9):
                code, remark = await send_lite(c, PARENT, f"m{i}".encode(), SESSIONS[i % 3], queue_id=i % 2)
                assert code == R.SUCCESS, remark
            # Each lite topic's queue: its messages in send order, at offsets 0, 1, 2.
            for k, lite in enumerate(SESSIONS):
                got = await pull_all(c, lmq(lite))
                assert [m.body for m in got] == [f"m{i}".encode() for i in range(k, 9, 3)]
                for offset, m in enumerate(got):
                    assert m.topic == PARENT and m.properties[PROPERTY_LITE_TOPIC] == lite
                    assert m.properties["INNER_MULTI_DISPATCH"] == lmq(lite)
                    assert m.properties["INNER_MULTI_QUEUE_OFFSET"] == str(offset)
            # The parent's queues hold them all, as any topic's.
            assert len(await pull_all(c, PARENT, 0)) + len(await pull_all(c, PARENT, 1)) == 9
            store = b.broker.store
            assert store.lmq_count() == 3
            assert [name for name, *_ in store.lmq_infos(lmq(""))] == [lmq(s) for s in SESSIONS]
            assert not any(name.startswith("%LMQ%") for name, *_ in store.queues())
            assert not list(Path(store.config.root, "consumequeue").glob("%LMQ%*"))
            # A lite topic that would name other queues is refused.
            code, remark = await send_lite(c, PARENT, b"bad", "a,b")
            assert code == R.MESSAGE_ILLEGAL and "lite topic" in remark
            await c.close()

    asyncio.run(main())


def test_without_enable_lmq_a_lite_message_is_stored_in_its_topic_only() -> None:
    async def main() -> None:
        async with Broker() as b:
            b.broker.topics.update(TopicConfig(PARENT, 1, 1, attributes=LITE_TYPE))
            c = await Client().connect(b.broker.port)
            assert (await send_lite(c, PARENT, b"m0", "s1"))[0] == R.SUCCESS
            (m,) = await pull_all(c, PARENT)
            # The broker names the queue, as 5.5.0 does; the store gives it no offset.
            assert m.properties["INNER_MULTI_DISPATCH"] == lmq("s1")
            assert "INNER_MULTI_QUEUE_OFFSET" not in m.properties
            assert b.broker.store.lmq_count() == 0
            r = await c.call(RC.PULL_MESSAGE, pull_ext(GROUP, lmq("s1"), 0, 0, suspendTimeoutMillis=0))
            assert r.code == R.TOPIC_NOT_EXIST
            await c.close()

    asyncio.run(main())


def test_idle_lite_topics_expire_and_go_with_their_topic() -> None:
    expiring, kept = PARENT, f"Kept{RUN}"

    async def main() -> None:
        async with Broker(config=LMQ_ON) as b:
            broker = b.broker
            broker.topics.update(
                TopicConfig(expiring, 1, 1, attributes={**LITE_TYPE, "lite.topic.expiration": "1"})
            )
            broker.topics.update(TopicConfig(kept, 1, 1, attributes=LITE_TYPE))
            c = await Client().connect(broker.port)
            for topic, name in ((expiring, "s1"), (expiring, "s2"), (kept, "s1")):
                assert (await send_lite(c, topic, b"m", name))[0] == R.SUCCESS
            broker.offsets.commit(GROUP, lmq("s1"), 0, 1)
            store, topics, offsets = broker.store, broker.topics, broker.offsets
            # A minute and a bit later: the expiring topic's lite topics are idle longer than its
            # lite.topic.expiration, but not longer than minLiteTTl (15 minutes by default).
            later = int(time.time() * 1000) + 61_000
            assert lite.clean_expired(store, topics, offsets, later, broker.config.min_lite_ttl) == 0
            # Found idle, then written before the delete: it stays (judged again under the put lock).
            idle = store.idle_lmqs(lite.lite_queue_prefix(expiring), int(time.time() * 1000))
            assert idle == [lmq("s1"), lmq("s2")]
            written_after = int(time.time() * 1000)
            assert (await send_lite(c, expiring, b"m2", "s2"))[0] == R.SUCCESS
            assert store.delete_lmqs([lmq("s2")], idle_until_ms=written_after - 1) == []
            assert store.lmq_infos(lmq("s2"))[0][2] == 2
            assert lite.clean_expired(store, topics, offsets, later, 0) == 2
            assert [name for name, *_ in store.lmq_infos(LMQ_PREFIX)] == [lmq("s1", kept)]
            assert offsets.query(GROUP, lmq("s1"), 0) == -1
            # Written to again, an expired lite topic starts over.
            assert (await send_lite(c, expiring, b"again", "s1"))[0] == R.SUCCESS
            (m,) = await pull_all(c, lmq("s1"))
            assert m.body == b"again" and m.properties["INNER_MULTI_QUEUE_OFFSET"] == "0"
            # Deleting a LITE topic deletes its lite topics.
            r = await c.call(RC.DELETE_TOPIC_IN_BROKER, {"topic": kept})
            assert r.code == R.SUCCESS, r.remark
            assert [name for name, *_ in store.lmq_infos(LMQ_PREFIX)] == [lmq("s1")]
            await c.close()

    asyncio.run(main())


def test_lite_topics_survive_kill_9(tmp_path: Path) -> None:
    conf = {**LMQ_ON, "flushDiskType": "SYNC_FLUSH"}
    count = 60

    async def send_all(port: int) -> None:
        c = await Client().connect(port)
        r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, topic_ext(PARENT))
        assert r.code == R.SUCCESS, r.remark
        for i in range(count):
            code, remark = await send_lite(c, PARENT, f"m{i}".encode(), f"t{i % 20}")
            assert code == R.SUCCESS, remark
        await c.close()

    server = BrokerProcess(tmp_path, conf).start()
    try:
        asyncio.run(asyncio.wait_for(send_all(server.port), 60))
    finally:
        server.stop(kill=True)
    with MessageStore.open_read_only(server.store) as store:
        infos = store.lmq_infos(lmq("", PARENT))
        assert [(name, lo, hi) for name, lo, hi, _ in infos] == sorted(
            (lmq(f"t{k}"), 0, count // 20) for k in range(20)
        )
    again = BrokerProcess(tmp_path, conf, store=server.store).start()
    try:

        async def check() -> None:
            c = await Client().connect(again.port)
            got = await pull_all(c, lmq("t7"))
            assert [m.body for m in got] == [f"m{i}".encode() for i in range(7, count, 20)]
            assert (await send_lite(c, PARENT, b"after", "t7"))[0] == R.SUCCESS
            assert (await pull_all(c, lmq("t7")))[-1].properties["INNER_MULTI_QUEUE_OFFSET"] == "3"
            await c.close()

        asyncio.run(asyncio.wait_for(check(), 60))
    finally:
        again.stop()


def topic_ext(topic: str) -> dict[str, str | int]:
    return {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": 2,
        "writeQueueNums": 2,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": "false",
        "attributes": "+message.type=LITE",
    }
