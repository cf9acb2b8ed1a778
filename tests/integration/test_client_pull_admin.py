"""PullConsumer and Admin against the in-process name server and broker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from ferromq.broker import Broker
from ferromq.broker.processors import consumer_manage
from ferromq.client.admin import Admin, decode_offset_msg_id, parse_consume_stats
from ferromq.client.admin_results import GroupConfig
from ferromq.client.message import Message, MessageQueue, ReceivedMessage
from ferromq.client.producer import Producer
from ferromq.client.pull_consumer import PullConsumer
from ferromq.errors import QueryNotFoundError, TopicNotExistError
from ferromq.testing.waiting import until

from .brokerkit import running


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 30))


async def create_topic(admin: Admin, topic: str, queue_nums: int = 4) -> list[MessageQueue]:
    await admin.create_topic(topic, queue_nums=queue_nums)
    return await wait_route(admin, topic, queue_nums)


async def wait_route(admin: Admin, topic: str, queue_nums: int) -> list[MessageQueue]:
    async def routed() -> bool:
        try:
            route = await admin.topic_route(topic)
        except TopicNotExistError:
            return False
        return len(route.subscribe_queues()) == queue_nums

    await until(routed, f"route of {topic}")
    return [MessageQueue(topic, "broker-a", i) for i in range(queue_nums)]


async def poll_until(consumer: PullConsumer, count: int, timeout: float = 5.0) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"got {len(got)} of {count} messages"
        got += await consumer.poll(min(left, 1.0))
    return got


async def send(
    producer: Producer, topic: str, n: int, queue: MessageQueue | None = None, **kw: Any
) -> list[str]:
    bodies = []
    for i in range(n):
        body = f"{topic}-{queue.queue_id if queue else 'rr'}-{i}-{time.monotonic_ns()}"
        await producer.send(Message(topic, body.encode(), **kw), queue=queue)
        bodies.append(body)
    return bodies


def bodies(msgs: list[ReceivedMessage]) -> list[str]:
    return [m.body.decode() for m in msgs]


# -- pure helpers ------------------------------------------------------------------------------


def test_offset_msg_id_and_java_consume_stats_body() -> None:
    assert decode_offset_msg_id("7F00000100002A9F00000000000004D2") == ("127.0.0.1:10911", 1234)
    with pytest.raises(ValueError):
        decode_offset_msg_id("7F00")
    # A Java broker's ConsumeStats: fastjson writes the MessageQueue keys as objects.
    body = (
        b'{"consumeTps":1.5,"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:'
        b'{"brokerOffset":10,"consumerOffset":4,"lastTimestamp":1700000000000},'
        b'{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"brokerOffset":3,"consumerOffset":3,"lastTimestamp":0}}}'
    )
    queues, tps = parse_consume_stats(body, "G")
    assert tps == 1.5
    assert sorted((q.queue.queue_id, q.broker_offset, q.consumer_offset, q.lag) for q in queues) == [
        (0, 3, 3, 0),
        (1, 10, 4, 6),
    ]


# -- PullConsumer ------------------------------------------------------------------------------


def polling(consumer: PullConsumer, broker: Broker) -> bool:
    """Whether a poll is waiting (it holds the poll lock) while the broker holds its pulls."""
    return consumer._poll_lock.locked() and broker.held_pulls > 0


def test_assign_poll_long_poll_and_seek(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            addr = f"127.0.0.1:{ns.port}"
            async with Admin(addr) as admin, Producer("PG", addr) as producer:
                qs = await create_topic(admin, "PullT")
                sent = {q: await send(producer, "PullT", 5, q) for q in qs}
                async with PullConsumer("G-assign", addr, auto_commit=False) as consumer:
                    assert sorted(await consumer.fetch_queues("PullT")) == qs
                    consumer.assign(qs)
                    got = await poll_until(consumer, 20)
                    assert len(got) == 20
                    for q in qs:
                        mine = [m for m in got if m.queue == q]
                        assert [m.queue_offset for m in mine] == [0, 1, 2, 3, 4]
                        assert bodies(mine) == sent[q]
                        assert consumer.position(q) == 5
                    # Nothing left: poll returns empty after its timeout, not before, not much later.
                    started = time.monotonic()
                    assert await consumer.poll(0.3) == []
                    assert 0.25 <= time.monotonic() - started < 1.5

                    # A held (long) poll returns as soon as a message arrives.
                    waiting = asyncio.ensure_future(consumer.poll(10.0))
                    await until(lambda: polling(consumer, broker), "the poll to wait on held pulls")
                    assert not waiting.done()
                    started = time.monotonic()
                    late = await send(producer, "PullT", 1, qs[3])
                    msgs = await asyncio.wait_for(waiting, 3.0)
                    assert bodies(msgs) == late and msgs[0].queue_offset == 5
                    assert time.monotonic() - started < 2.0

                    # seek, seek_to_begin, seek_to_end
                    await consumer.seek(qs[0], 2)
                    msgs = await consumer.poll(1.0)
                    assert [(m.queue, m.queue_offset) for m in msgs] == [(qs[0], 2), (qs[0], 3), (qs[0], 4)]
                    await consumer.seek_to_begin(qs[1])
                    msgs = await consumer.poll(1.0)
                    assert bodies(msgs) == sent[qs[1]]
                    await consumer.seek(qs[2], 0)
                    await consumer.seek_to_end(qs[2])
                    assert consumer.position(qs[2]) == 5
                    assert await consumer.poll(0.2) == []
                    # A seek wakes a poll that waits.
                    waiting = asyncio.ensure_future(consumer.poll(10.0))
                    await until(lambda: polling(consumer, broker), "the poll to wait on held pulls")
                    await consumer.seek(qs[2], 4)
                    msgs = await asyncio.wait_for(waiting, 3.0)
                    assert bodies(msgs) == sent[qs[2]][4:]
                    with pytest.raises(ValueError):
                        await consumer.seek(qs[0], 6)
                    with pytest.raises(ValueError):
                        await consumer.seek(MessageQueue("PullT", "broker-a", 9), 0)

                    # One held pull per queue, however many polls come and go (the pulls seeks
                    # abandoned are held until their suspend time ends).
                    assert await consumer.poll(0.05) == []
                    held = broker.hold.held_count
                    for _ in range(5):
                        assert await consumer.poll(0.05) == []
                    assert broker.hold.held_count == held
                    # A cancelled poll loses nothing; what arrives between polls waits for the next.
                    with pytest.raises(TimeoutError):
                        await asyncio.wait_for(consumer.poll(5.0), 0.1)
                    between = ["between-1", "between-2"]
                    await producer.send_batch([Message("PullT", b.encode()) for b in between], queue=qs[1])

                    async def arrived() -> bool:
                        task = consumer._queues[qs[1]].task
                        return task is not None and task.done()

                    await until(arrived, "the held pull to answer")
                    assert bodies(await consumer.poll(0)) == between
                    # stop() ends a waiting poll at once.
                    waiting = asyncio.ensure_future(consumer.poll(10.0))
                    await until(lambda: polling(consumer, broker), "the poll to wait on held pulls")
                started = time.monotonic()
                assert await asyncio.wait_for(waiting, 2.0) == []
                assert time.monotonic() - started < 1.0
                with pytest.raises(RuntimeError):
                    await consumer.poll(0)

    run(main())


def test_commit_resume_and_auto_commit(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, _):
            addr = f"127.0.0.1:{ns.port}"
            async with Admin(addr) as admin, Producer("PG", addr) as producer:
                qs = await create_topic(admin, "CommitT")
                first = await send(producer, "CommitT", 12)
                async with PullConsumer("G-commit", addr, auto_commit=False) as c1:
                    c1.assign(qs)
                    assert sorted(bodies(await poll_until(c1, 12))) == sorted(first)
                    await c1.commit()
                    assert [await c1.committed(q) for q in qs] == [await admin.max_offset(q) for q in qs]
                    await c1.commit({qs[0]: 1})
                    assert await c1.committed(qs[0]) == 1
                    await c1.commit({qs[0]: await admin.max_offset(qs[0])})
                    more = await send(producer, "CommitT", 4)
                    assert len(await poll_until(c1, 4)) == 4  # read but not committed
                # A new consumer of the group resumes from the committed offsets.
                async with PullConsumer("G-commit", addr, auto_commit=False) as c2:
                    c2.assign(qs)
                    got = await poll_until(c2, 4)
                    assert sorted(bodies(got)) == sorted(more)
                    assert await c2.poll(0.2) == []

                # Auto-commit: periodically, and at stop.
                async with PullConsumer("G-auto", addr, auto_commit_interval=0.2) as c3:
                    c3.assign(qs)
                    await poll_until(c3, 16)
                    ends = [await admin.max_offset(q) for q in qs]

                    async def committed_all() -> bool:
                        return [await c3.committed(q) for q in qs] == ends

                    await until(committed_all, "auto-commit")
                async with PullConsumer("G-stop", addr, auto_commit_interval=3600) as c4:
                    c4.assign(qs)
                    await poll_until(c4, 16)
                    await c4.seek(qs[1], 1)
                progress = await admin.consumer_progress("G-stop", "CommitT")
                assert [(p.queue, p.consumer_offset) for p in progress.queues] == [
                    (q, 1 if q == qs[1] else end) for q, end in zip(qs, ends, strict=True)
                ]

    run(main())


def test_subscribe_two_consumers_split_queues(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, _):
            addr = f"127.0.0.1:{ns.port}"
            async with Admin(addr) as admin, Producer("PG", addr) as producer:
                qs = await create_topic(admin, "SubT")
                c1 = PullConsumer("G-sub", addr)
                c1.subscribe("SubT")
                async with c1:
                    assert c1.assignment() == qs
                    async with PullConsumer("G-sub", addr) as c2:
                        c2.subscribe("SubT")

                        async def split() -> bool:
                            a, b = c1.assignment(), c2.assignment()
                            return len(a) == 2 and len(b) == 2 and sorted(a + b) == qs

                        await until(split, "the queues to be split")
                        sent = await send(producer, "SubT", 20)
                        got: list[ReceivedMessage] = []
                        deadline = time.monotonic() + 5
                        while len(got) < 20 and time.monotonic() < deadline:
                            r1, r2 = await asyncio.gather(c1.poll(0.5), c2.poll(0.5))
                            assert all(m.queue in c1.assignment() for m in r1)
                            assert all(m.queue in c2.assignment() for m in r2)
                            got += r1 + r2
                        assert sorted(bodies(got)) == sorted(sent)

                    # c2 left: c1 gets every queue back.
                    async def all_back() -> bool:
                        return c1.assignment() == qs

                    await until(all_back, "c1 to get all queues back")
                    assert await c1.poll(0.2) == []

    run(main())


def test_tag_filter(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, _):
            addr = f"127.0.0.1:{ns.port}"
            async with Admin(addr) as admin, Producer("PG", addr) as producer:
                qs = await create_topic(admin, "TagT", queue_nums=2)
                wanted: list[str] = []
                # "Aa" and "BB" have the same Java hash: the broker lets both through, the client
                # keeps only the exact tag.
                for i, tag in enumerate(["A", "B", "C", None, "Aa", "BB", "A", "C", "BB"]):
                    body = f"{i}-{tag}"
                    await producer.send(Message("TagT", body.encode(), tags=tag), queue=qs[i % 2])
                    if tag in ("A", "C", "Aa"):
                        wanted.append(body)
                consumer = PullConsumer("G-tag", addr, auto_commit=False)
                consumer.subscribe("TagT", "A || C || Aa")
                async with consumer:
                    got = await poll_until(consumer, len(wanted))
                    assert sorted(bodies(got)) == sorted(wanted)
                    assert await consumer.poll(0.2) == []
                    # Positions move past the filtered messages too.
                    assert [consumer.position(q) for q in qs] == [5, 4]
                    # A filtered subscription still wakes on a matching message only.
                    waiting = asyncio.ensure_future(consumer.poll(5.0))
                    await producer.send(Message("TagT", b"skip", tags="B"), queue=qs[0])
                    await asyncio.sleep(0.3)  # the observation: the skipped tag does not wake the poll
                    assert not waiting.done()
                    await producer.send(Message("TagT", b"take", tags="C"), queue=qs[1])
                    assert bodies(await asyncio.wait_for(waiting, 3.0)) == ["take"]

    run(main())


def test_consume_from_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, _):
            addr = f"127.0.0.1:{ns.port}"
            async with Admin(addr) as admin, Producer("PG", addr) as producer:
                (q,) = await create_topic(admin, "FromT", queue_nums=1)
                old = await send(producer, "FromT", 3, q)
                # The gaps under test: "old" is stored before `middle`, "newer" after it.
                await asyncio.sleep(0.05)
                middle = int(time.time() * 1000)
                await asyncio.sleep(0.05)
                newer = await send(producer, "FromT", 2, q)

                # A group that never committed starts at 0 while the queue's first message is in
                # memory: the broker says so (as RocketMQ's does), whatever consume_from_where says.
                async with PullConsumer("G-new", addr, auto_commit=False) as c:
                    c.assign([q])
                    assert bodies(await poll_until(c, 5)) == old + newer

                # Make the broker judge the first message "on disk": it then reports no offset
                # and the client decides.
                monkeypatch.setattr(consumer_manage, "_ram_bytes", lambda: 0)

                async with PullConsumer("G-last", addr, auto_commit=False) as c:
                    assert await c.committed(q) is None
                    c.assign([q])
                    assert await c.poll(0.2) == []
                    assert c.position(q) == 5
                    late = await send(producer, "FromT", 1, q)
                    assert bodies(await poll_until(c, 1)) == late
                async with PullConsumer(
                    "G-first", addr, auto_commit=False, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
                ) as c:
                    c.assign([q])
                    assert bodies(await poll_until(c, 6)) == old + newer + late
                async with PullConsumer(
                    "G-time",
                    addr,
                    auto_commit=False,
                    consume_from_where="CONSUME_FROM_TIMESTAMP",
                    consume_timestamp=middle,
                ) as c:
                    c.assign([q])
                    assert bodies(await poll_until(c, 3)) == newer + late
                # A committed offset wins over consume_from_where.
                async with PullConsumer("G-time", addr, auto_commit=False) as c:
                    await c.commit({q: 4})
                    c.assign([q])
                    assert bodies(await poll_until(c, 2)) == newer[1:] + late

    run(main())


# -- Admin -------------------------------------------------------------------------------------


def test_admin_topics_and_cluster(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            addr = f"127.0.0.1:{ns.port}"
            async with Admin(addr) as admin:
                info = await admin.cluster_info()
                assert info.clusters == {"DefaultCluster": ["broker-a"]}
                assert info.brokers["broker-a"].master_addr == broker.config.broker_addr
                assert info.master_addrs("DefaultCluster") == {"broker-a": broker.config.broker_addr}

                assert await admin.create_topic("AdminT", queue_nums=3) == ["broker-a"]
                await wait_route(admin, "AdminT", 3)
                assert "AdminT" in await admin.list_topics()
                route = await admin.topic_route("AdminT")
                assert [
                    (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas
                ] == [("broker-a", 3, 3, 6)]
                assert route.master("broker-a") == broker.config.broker_addr

                assert await admin.update_topic("AdminT", write_queue_nums=2, perm=4) == ["broker-a"]
                cfg = (await admin.topic_config("AdminT"))["broker-a"]
                assert (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm) == (3, 2, 4)

                async def updated() -> bool:
                    q = (await admin.topic_route("AdminT")).queue_datas[0]
                    return (q.write_queue_nums, q.perm) == (2, 4)

                await until(updated, "the updated route")

                await admin.create_topic("OrderT", queue_nums=2, order=True)
                await wait_route(admin, "OrderT", 2)
                assert (await admin.topic_route("OrderT")).order_topic_conf == "broker-a:2"
                assert (await admin.topic_config("OrderT"))["broker-a"].order
                await admin.update_topic("OrderT", order=False)
                assert "OrderT" not in ns.kv.get("ORDER_TOPIC_CONFIG", {})
                assert not (await admin.topic_config("OrderT"))["broker-a"].order
                await admin.update_topic("OrderT", order=True)
                assert ns.kv["ORDER_TOPIC_CONFIG"]["OrderT"] == "broker-a:2"

                for topic in ("AdminT", "OrderT"):
                    await admin.delete_topic(topic)

                async def deleted() -> bool:
                    return not {"AdminT", "OrderT"} & set(await admin.list_topics())

                await until(deleted, "the topics to go")
                with pytest.raises(TopicNotExistError):
                    await admin.topic_route("AdminT")
                assert await admin.topic_config("AdminT") == {} and broker.topics.get("AdminT") is None
                assert ns.kv.get("ORDER_TOPIC_CONFIG", {}).get("OrderT") is None
                with pytest.raises(TopicNotExistError):
                    await admin.update_topic("AdminT", perm=6)

    run(main())


def test_admin_consumer_progress_and_lag(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, _):
            addr = f"127.0.0.1:{ns.port}"
            async with Admin(addr) as admin, Producer("PG", addr) as producer:
                qs = await create_topic(admin, "LagT")
                for q, n in zip(qs, (4, 3, 2, 1), strict=True):
                    await send(producer, "LagT", n, q)
                async with PullConsumer("G-lag", addr, auto_commit=False) as c:
                    c.assign(qs)
                    got = await poll_until(c, 10)
                    await c.commit({qs[0]: 4, qs[1]: 1, qs[2]: 0})
                stored = {(m.queue.queue_id, m.queue_offset): m.store_timestamp for m in got}
                progress = await admin.consumer_progress("G-lag", "LagT")
                assert progress.group == "G-lag"
                rows = {
                    p.queue.queue_id: (p.broker_offset, p.consumer_offset, p.lag, p.last_timestamp)
                    for p in progress.queues
                }
                assert rows[0] == (4, 4, 0, stored[(0, 3)])
                assert rows[1] == (3, 1, 2, stored[(1, 0)])
                assert rows[2] == (2, 0, 2, 0)
                # Never committed: ferromq lists no row; a Java broker lists it with offset 0.
                assert rows.get(3) in (None, (1, 0, 1, 0))
                assert progress.total_lag == 4 + (1 if 3 in rows else 0)
                assert (await admin.consumer_progress("G-lag")).queues == progress.queues
                assert (await admin.consumer_progress("G-none")).queues == []

    run(main())


def test_admin_queries_and_offsets(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, _):
            addr = f"127.0.0.1:{ns.port}"
            async with Admin(addr) as admin, Producer("PG", addr) as producer:
                qs = await create_topic(admin, "QueryT", queue_nums=2)
                before = int(time.time() * 1000)
                r1 = await producer.send(Message("QueryT", b"one", keys="order-1"), queue=qs[0])
                r2 = await producer.send(Message("QueryT", b"two", keys=["order-2", "x"]), queue=qs[1])
                r3 = await producer.send(Message("QueryT", b"three", keys="order-1 y", tags="T"), queue=qs[0])

                m = await admin.query_message_by_offset_msg_id(r3.offset_msg_id)
                assert (m.body, m.msg_id, m.tags, m.keys) == (b"three", r3.msg_id, "T", ["order-1", "y"])
                assert (m.queue, m.queue_offset, m.offset_msg_id) == (qs[0], 1, r3.offset_msg_id)

                async def indexed() -> bool:
                    return len(await admin.query_message_by_key("QueryT", "order-1")) == 2

                await until(indexed, "the index")
                assert bodies(await admin.query_message_by_key("QueryT", "order-1")) == ["one", "three"]
                assert bodies(await admin.query_message_by_key("QueryT", "x")) == ["two"]
                assert await admin.query_message_by_key("QueryT", "order-1", end=before - 1000) == []
                assert await admin.query_message_by_key("QueryT", "nope") == []

                for r, body in ((r1, b"one"), (r2, b"two")):
                    m = await admin.query_message_by_msg_id("QueryT", r.msg_id)
                    assert (m.body, m.msg_id, m.offset_msg_id) == (body, r.msg_id, r.offset_msg_id)
                with pytest.raises(QueryNotFoundError):
                    await admin.query_message_by_msg_id("QueryT", "00" * 16)

                assert (await admin.min_offset(qs[0]), await admin.max_offset(qs[0])) == (0, 2)
                assert await admin.search_offset(qs[0], before - 60_000) == 0
                assert await admin.search_offset(qs[0], m.store_timestamp + 60_000) == 2

    run(main())


def test_admin_groups(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, _):
            addr = f"127.0.0.1:{ns.port}"
            async with Admin(addr) as admin:
                assert await admin.create_group("G-plain") == ["broker-a"]
                custom = GroupConfig("G-custom", consume_broadcast_enable=False, retry_max_times=3)
                assert await admin.create_group(custom) == ["broker-a"]
                groups = await admin.list_groups()
                assert groups["G-plain"] == GroupConfig("G-plain")
                assert groups["G-custom"] == custom
                # Its retry topic exists once a consumer sent a message back; delete takes it too.
                qs = await create_topic(admin, "%RETRY%G-custom", queue_nums=1)
                assert qs
                assert await admin.delete_group("G-custom") == ["broker-a"]
                assert "G-custom" not in await admin.list_groups()

                async def retry_topic_gone() -> bool:
                    return "%RETRY%G-custom" not in await admin.list_topics()

                await until(retry_topic_gone, "the group's retry topic to go")
                with pytest.raises(ValueError):
                    await admin.create_group("")

    run(main())


def test_admin_message_at_and_offline_offset_reset(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, _):
            addr = f"127.0.0.1:{ns.port}"
            async with Admin(addr) as admin, Producer("PG", addr) as producer:
                qs = await create_topic(admin, "ResetT", queue_nums=2)
                first = await send(producer, "ResetT", 3, qs[0])
                await send(producer, "ResetT", 2, qs[1])
                m = await admin.message_at(qs[0], 1)
                assert (m.body.decode(), m.queue, m.queue_offset) == (first[1], qs[0], 1)
                with pytest.raises(QueryNotFoundError):
                    await admin.message_at(qs[0], 3)

                # No consumer online: the committed offsets are written directly.
                done = await admin.reset_offset_by_time("G-reset", "ResetT", -1)
                assert not done.clients_notified
                assert [(r.queue, r.offset) for r in done.queues] == [(qs[0], 3), (qs[1], 2)]
                progress = await admin.consumer_progress("G-reset", "ResetT")
                assert [(p.queue, p.consumer_offset, p.lag) for p in progress.queues] == [
                    (qs[0], 3, 0),
                    (qs[1], 2, 0),
                ]
                # Back to before the first message: everything is to be consumed again.
                back = await admin.reset_offset_by_time("G-reset", "ResetT", m.store_timestamp - 60_000)
                assert [(r.queue, r.previous, r.offset) for r in back.queues] == [
                    (qs[0], 3, 0),
                    (qs[1], 2, 0),
                ]
                assert (await admin.consumer_progress("G-reset", "ResetT")).total_lag == 5
                # Not forced: offsets only move back, never forward.
                kept = await admin.reset_offset_by_time("G-reset", "ResetT", -1, force=False)
                assert [r.offset for r in kept.queues] == [0, 0]
                assert (await admin.consumer_progress("G-reset", "ResetT")).total_lag == 5

    run(main())
