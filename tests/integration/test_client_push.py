"""PushConsumer against the in-process name server and broker: filtering, rebalancing, broadcasting,
orderly consumption, retries and dead letters, start positions, offsets across restarts."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import orjson
import pytest

from ferromq.broker import Broker
from ferromq.broker.processors import consumer_manage
from ferromq.client import ClientInstance, Message, MessageQueue, Producer, ReceivedMessage
from ferromq.client.push_consumer import (
    ConsumeOrderlyStatus,
    ConsumeStatus,
    PushConsumer,
)
from ferromq.client.rebalance import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
)
from ferromq.namesrv import NameServer
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.testing.waiting import until

from .brokerkit import Client, running

# Retries come back after ~1 s whatever their level.
FAST_DELAYS: dict[str, Any] = {"message_delay_level": "1s 1s 1s 1s 1s 1s"}
# Consumer timings small enough for tests.
FAST: dict[str, Any] = {
    "rebalance_interval": 0.5,
    "persist_interval": 0.3,
    "suspend_timeout_ms": 1000,
    "shutdown_timeout": 5.0,
}


def run(coro: Coroutine[Any, Any, None], timeout: float = 40.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


async def create_topic(ns: NameServer, broker: Broker, topic: str, queues: int = 4) -> None:
    c = await Client().connect(broker.port)
    try:
        r = await c.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6},
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        await c.close()
    await until(lambda: ns.routes.route(topic) is not None, f"route of {topic}")


def namesrv(ns: NameServer) -> str:
    return f"127.0.0.1:{ns.port}"


class Collector:
    """An async listener that records what it gets and succeeds."""

    def __init__(self) -> None:
        self.msgs: list[ReceivedMessage] = []

    async def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeStatus:
        self.msgs.extend(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    def bodies(self) -> list[bytes]:
        return [m.body for m in self.msgs]


def topic_queues(consumer: PushConsumer, topic: str) -> set[MessageQueue]:
    return {mq for mq in consumer.assigned_queues() if mq.topic == topic}


# -- allocation (pure) -----------------------------------------------------------------------------


def test_allocation_strategies_match_rocketmq() -> None:
    mqs = [MessageQueue("T", "b", i) for i in range(8)]
    cids = ["c0", "c1", "c2"]
    avg = AllocateMessageQueueAveragely()
    circle = AllocateMessageQueueAveragelyByCircle()
    assert [[q.queue_id for q in avg("G", c, mqs, cids)] for c in cids] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [[q.queue_id for q in circle("G", c, mqs, cids)] for c in cids] == [[0, 3, 6], [1, 4, 7], [2, 5]]
    # Fewer queues than clients: the last clients get nothing.
    two = mqs[:2]
    assert [[q.queue_id for q in avg("G", c, two, cids)] for c in cids] == [[0], [1], []]
    assert avg("G", "stranger", mqs, cids) == []
    for n_mq in range(1, 12):
        for n_cid in range(1, 6):
            qs = [MessageQueue("T", "b", i) for i in range(n_mq)]
            ids = [f"c{i}" for i in range(n_cid)]
            for strategy in (avg, circle):
                shares = [strategy("G", c, qs, ids) for c in ids]
                flat = [q for share in shares for q in share]
                assert sorted(flat) == qs, (strategy.name, n_mq, n_cid)


# -- tag filtering and heartbeat ---------------------------------------------------------------------


def test_tag_filter_delivers_exactly_the_matching_messages(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            await create_topic(ns, broker, "Tagged")
            got = Collector()
            consumer = PushConsumer(
                "TagGroup", namesrv(ns), consume_from_where="CONSUME_FROM_FIRST_OFFSET", **FAST
            )
            consumer.subscribe("Tagged", "TagA || TagB")
            consumer.register_listener(got)
            expected: list[bytes] = []
            async with Producer("PG", namesrv(ns)) as producer:
                for i in range(10):  # half of them before the consumer starts
                    for tag in ("TagA", "TagB", "TagC", None):
                        body = f"{tag}-{i}".encode()
                        await producer.send(Message("Tagged", body, tags=tag))
                        if tag in ("TagA", "TagB"):
                            expected.append(body)
                    if i == 4:
                        await consumer.start()
                await until(lambda: len(got.msgs) >= len(expected), "tagged messages")
                await asyncio.sleep(0.5)  # nothing else arrives
                await consumer.stop()
            assert sorted(got.bodies()) == sorted(expected)
            assert {m.tags for m in got.msgs} == {"TagA", "TagB"}
            assert all(m.topic == "Tagged" and m.reconsume_times == 0 for m in got.msgs)

    run(main())


def test_heartbeat_registers_group_with_java_names(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            await create_topic(ns, broker, "Beat")
            consumer = PushConsumer("BeatGroup", namesrv(ns), **FAST)
            consumer.subscribe("Beat", "TagA || TagB")
            consumer.register_listener(Collector())
            body = orjson.loads(orjson.dumps(consumer.heartbeat_data()))
            assert body["consumeType"] == "CONSUME_PASSIVELY"
            assert body["messageModel"] == "CLUSTERING"
            assert body["consumeFromWhere"] == "CONSUME_FROM_LAST_OFFSET"
            (sub,) = body["subscriptionDataSet"]
            assert sub["tagsSet"] == ["TagA", "TagB"] and sub["codeSet"] == [2598919, 2598920]
            assert sub["expressionType"] == "TAG" and sub["classFilterMode"] is False
            async with consumer:
                info = broker.clients.consumers["BeatGroup"]
                assert info.message_model == "CLUSTERING" and info.consume_type == "CONSUME_PASSIVELY"
                assert set(info.subscriptions) == {"Beat", "%RETRY%BeatGroup"}
                assert info.subscriptions["Beat"].tags == {"TagA", "TagB"}
                assert info.subscriptions["%RETRY%BeatGroup"].sub_string == "*"
                assert list(info.channels) == [consumer.client_id]
                await until(lambda: len(consumer.assigned_queues()) == 5, "queues incl. retry")
            assert "BeatGroup" not in broker.clients.consumers  # unregistered at stop

    run(main())


# -- clustering: sharing and taking over ------------------------------------------------------------


def test_two_consumers_split_queues_and_one_takes_over(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            await create_topic(ns, broker, "Shared")
            got_a, got_b = Collector(), Collector()
            a = PushConsumer("SplitGroup", namesrv(ns), instance_name="a", **FAST)
            b = PushConsumer(
                "SplitGroup",
                namesrv(ns),
                instance_name="b",
                allocate=AllocateMessageQueueAveragely(),
                **FAST,
            )
            for c, got in ((a, got_a), (b, got_b)):
                c.subscribe("Shared", "*")
                c.register_listener(got)
            await a.start()
            await b.start()

            def split() -> bool:
                qa, qb = topic_queues(a, "Shared"), topic_queues(b, "Shared")
                return len(qa) == 2 and len(qb) == 2 and not qa & qb

            await until(split, "a 2 + 2 split")
            async with Producer("PG", namesrv(ns)) as producer:
                sent = {(await producer.send(Message("Shared", b"m%d" % i))).msg_id for i in range(40)}
                await until(lambda: len(got_a.msgs) + len(got_b.msgs) >= 40, "40 messages")
                await asyncio.sleep(0.3)  # the observation: no duplicate arrives after the 40
                ids = [m.msg_id for m in got_a.msgs + got_b.msgs]
                assert got_a.msgs and got_b.msgs
                assert sorted(ids) == sorted(sent)  # everything, exactly once
                assert {m.queue for m in got_a.msgs}.isdisjoint({m.queue for m in got_b.msgs})

                await a.stop()
                await until(lambda: len(topic_queues(b, "Shared")) == 4, "b taking every queue")
                later = {(await producer.send(Message("Shared", b"late%d" % i))).msg_id for i in range(20)}
                await until(lambda: later <= {m.msg_id for m in got_b.msgs}, "later messages at b")
            await b.stop()
            # What a consumed was committed before it left: b did not get those again.
            assert not {m.msg_id for m in got_a.msgs} & {m.msg_id for m in got_b.msgs}

    run(main())


# -- broadcasting ---------------------------------------------------------------------------------------


def test_broadcasting_delivers_everything_to_every_consumer(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            await create_topic(ns, broker, "News")
            seen: dict[str, list[bytes]] = {"x": [], "y": []}

            def listener_for(name: str) -> Callable[[list[ReceivedMessage]], ConsumeStatus]:
                def listener(msgs: list[ReceivedMessage]) -> ConsumeStatus:  # sync: runs in a thread
                    seen[name].extend(m.body for m in msgs)
                    return ConsumeStatus.CONSUME_SUCCESS

                return listener

            consumers = []
            for name in ("x", "y"):
                c = PushConsumer(
                    "RadioGroup",
                    namesrv(ns),
                    instance_name=name,
                    message_model="BROADCASTING",
                    offset_store_dir=tmp_path / "offsets",
                    **FAST,
                )
                c.subscribe("News")
                c.register_listener(listener_for(name))
                await c.start()
                consumers.append(c)
            for c in consumers:  # every queue, and no retry topic
                await until(lambda c=c: len(c.assigned_queues()) == 4, "all queues")  # type: ignore[misc]
                assert {mq.topic for mq in c.assigned_queues()} == {"News"}
            async with Producer("PG", namesrv(ns)) as producer:
                for i in range(20):
                    await producer.send(Message("News", b"n%d" % i))
            expected = sorted(b"n%d" % i for i in range(20))
            await until(lambda: all(len(v) >= 20 for v in seen.values()), "both consumers")
            for c in consumers:
                await c.stop()
            assert sorted(seen["x"]) == expected and sorted(seen["y"]) == expected
            # Broadcasting offsets live in a local file per client, not on the broker.
            assert broker.offsets.offsets_of_group("RadioGroup") == {}
            for c in consumers:
                path = tmp_path / "offsets" / c.client_id / "RadioGroup.json"
                table = orjson.loads(path.read_bytes())["offsetTable"]
                assert sum(e["offset"] for e in table) == 20

    run(main())


# -- orderly -------------------------------------------------------------------------------------------


def test_orderly_keeps_per_key_order_with_a_slow_listener(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            await create_topic(ns, broker, "Ordered")
            got: dict[str, list[int]] = collections.defaultdict(list)
            busy: set[MessageQueue] = set()
            overlaps: list[MessageQueue] = []

            async def listener(msgs: list[ReceivedMessage]) -> ConsumeOrderlyStatus:
                mq = msgs[0].queue
                if mq in busy:
                    overlaps.append(mq)
                busy.add(mq)
                await asyncio.sleep(0.005)  # the work under test: a second batch of mq must not overlap it
                for m in msgs:
                    key, seq = m.body.decode().split(":")
                    got[key].append(int(seq))
                busy.discard(mq)
                return ConsumeOrderlyStatus.SUCCESS

            consumer = PushConsumer(
                "OrderGroup", namesrv(ns), consume_batch_size=2, max_concurrency=4, pull_batch_size=8, **FAST
            )
            consumer.subscribe("Ordered")
            consumer.register_listener(listener, orderly=True)
            keys = [f"k{i}" for i in range(6)]
            async with consumer, Producer("PG", namesrv(ns)) as producer:
                await until(lambda: len(topic_queues(consumer, "Ordered")) == 4, "locked queues")
                now = time.monotonic()
                for mq in topic_queues(consumer, "Ordered"):
                    owner = broker.locks.owner("OrderGroup", (mq.topic, mq.broker_name, mq.queue_id), now)
                    assert owner == consumer.client_id
                for i in range(15):
                    for key in keys:
                        await producer.send_orderly(Message("Ordered", f"{key}:{i}".encode()), key)
                await until(lambda: sum(map(len, got.values())) >= 90, "90 orderly messages")
            assert {k: got[k] for k in keys} == {k: list(range(15)) for k in keys}
            assert not overlaps  # one batch at a time per queue
            # Unlocked at stop.
            mq = MessageQueue("Ordered", "broker-a", 0)
            assert broker.locks.owner("OrderGroup", (mq.topic, mq.broker_name, 0), time.monotonic()) is None

    run(main())


def test_orderly_queues_change_hands_without_breaking_order(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            await create_topic(ns, broker, "Handoff")
            got: dict[str, list[int]] = collections.defaultdict(list)
            by_consumer: dict[str, set[MessageQueue]] = collections.defaultdict(set)

            def listener_for(name: str) -> Callable[[list[ReceivedMessage]], Any]:
                async def listener(msgs: list[ReceivedMessage]) -> ConsumeOrderlyStatus:
                    await asyncio.sleep(0.002)  # work that lasts, so the handoff happens mid-batch
                    for m in msgs:
                        key, seq = m.body.decode().split(":")
                        got[key].append(int(seq))
                        by_consumer[name].add(m.queue)
                    return ConsumeOrderlyStatus.SUCCESS

                return listener

            def consumer(name: str) -> PushConsumer:
                c = PushConsumer("HandoffGroup", namesrv(ns), instance_name=name, **FAST)
                c.subscribe("Handoff")
                c.register_listener(listener_for(name), orderly=True)
                return c

            keys = [f"k{i}" for i in range(8)]
            a, b = consumer("a"), consumer("b")
            await a.start()
            async with Producer("PG", namesrv(ns)) as producer:

                async def send(rounds: range) -> None:
                    for i in rounds:
                        for key in keys:
                            await producer.send_orderly(Message("Handoff", f"{key}:{i}".encode()), key)

                await send(range(10))
                await b.start()  # b joins while a consumes: a gives two queues up, b locks them
                await send(range(10, 20))
                await until(
                    lambda: len(topic_queues(a, "Handoff")) == 2 and len(topic_queues(b, "Handoff")) == 2,
                    "a 2 + 2 split",
                )
                await send(range(20, 30))
                await until(lambda: sum(map(len, got.values())) >= 240, "every message")
                await asyncio.sleep(0.3)  # the observation: no message arrives twice after all 240
                await a.stop()
                await b.stop()
            assert {k: got[k] for k in keys} == {k: list(range(30)) for k in keys}
            assert by_consumer["a"] and by_consumer["b"]

    run(main())


def test_flow_control_pauses_pulling_a_busy_queue(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            await create_topic(ns, broker, "Flood", queues=1)
            gate = asyncio.Event()
            done: list[bytes] = []

            async def listener(msgs: list[ReceivedMessage]) -> ConsumeStatus:
                await gate.wait()
                done.extend(m.body for m in msgs)
                return ConsumeStatus.CONSUME_SUCCESS

            consumer = PushConsumer(
                "FloodGroup",
                namesrv(ns),
                pull_threshold_for_queue=10,
                pull_batch_size=4,
                max_concurrency=2,
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                **FAST,
            )
            consumer.subscribe("Flood")
            consumer.register_listener(listener)
            mq = MessageQueue("Flood", "broker-a", 0)
            async with Producer("PG", namesrv(ns)) as producer:
                for i in range(60):
                    await producer.send(Message("Flood", b"f%d" % i), queue=mq)
                async with consumer:
                    await until(lambda: consumer.cached_messages().get(mq, 0) > 10, "a full queue")
                    await asyncio.sleep(0.5)  # the observation: the held-back pulls add nothing more
                    assert 10 < consumer.cached_messages()[mq] <= 14  # threshold + one pull
                    gate.set()
                    await until(lambda: len(done) >= 60, "everything after the gate opens")
            assert sorted(done) == sorted(b"f%d" % i for i in range(60))

    run(main())


def test_orderly_suspend_retries_in_place_then_dead_letters(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **FAST_DELAYS) as (ns, broker):
            await create_topic(ns, broker, "OrderedRetry", queues=1)
            seen: list[tuple[str, int]] = []

            def listener(msgs: list[ReceivedMessage]) -> ConsumeOrderlyStatus:  # sync orderly listener
                (m,) = msgs
                seen.append((m.body.decode(), m.reconsume_times))
                if m.body == b"s2" and m.reconsume_times == 0:
                    raise RuntimeError("first attempt fails")
                if m.body == b"s4":
                    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                return ConsumeOrderlyStatus.SUCCESS

            consumer = PushConsumer(
                "OrderRetryGroup",
                namesrv(ns),
                max_reconsume_times=2,
                suspend_current_queue_ms=200,
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                **FAST,
            )
            consumer.subscribe("OrderedRetry")
            consumer.register_orderly_listener(listener)
            async with Producer("PG", namesrv(ns)) as producer:
                for i in range(7):
                    await producer.send(Message("OrderedRetry", b"s%d" % i))
                async with consumer:
                    await until(lambda: ("s6", 0) in seen, "the last message")
            assert seen == [
                ("s0", 0),
                ("s1", 0),
                ("s2", 0),
                ("s2", 1),
                ("s3", 0),
                ("s4", 0),
                ("s4", 1),
                ("s4", 2),
                ("s5", 0),
                ("s6", 0),
            ]
            dlq = broker.store.get_messages("%DLQ%OrderRetryGroup", 0, 0, 10)
            assert [m.body for m in dlq] == [b"s4"]
            assert dlq[0].properties["RETRY_TOPIC"] == "OrderedRetry"
            assert broker.offsets.query("OrderRetryGroup", "OrderedRetry", 0) == 7

    run(main())


# -- retries and dead letters --------------------------------------------------------------------------


def test_failed_message_comes_back_through_the_retry_topic(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **FAST_DELAYS) as (ns, broker):
            await create_topic(ns, broker, "Jobs")
            instance = ClientInstance(namesrv(ns), instance_name="shared")
            calls: list[ReceivedMessage] = []

            async def listener(msgs: list[ReceivedMessage]) -> ConsumeStatus:
                calls.extend(msgs)
                for m in msgs:
                    if m.body == b"fail-me" and m.reconsume_times == 0:
                        return ConsumeStatus.RECONSUME_LATER
                    if m.body == b"raise-me" and m.reconsume_times == 0:
                        raise ValueError("boom")
                return ConsumeStatus.CONSUME_SUCCESS

            consumer = PushConsumer("JobGroup", namesrv(ns), instance=instance, **FAST)
            consumer.subscribe("Jobs", "*")
            consumer.register_listener(listener)
            producer = Producer("PG", namesrv(ns), instance=instance)
            await producer.start()
            await consumer.start()
            try:
                ids = {}
                for body in (b"ok", b"fail-me", b"raise-me"):
                    ids[body] = (await producer.send(Message("Jobs", body, tags="T", keys="k1"))).msg_id

                def attempts(body: bytes) -> list[ReceivedMessage]:
                    return [m for m in calls if m.body == body]

                await until(
                    lambda: len(attempts(b"fail-me")) == 2 and len(attempts(b"raise-me")) == 2,
                    "both retries",
                    timeout=15,
                )
                await asyncio.sleep(0.3)  # the observation: no third attempt comes
            finally:
                await consumer.stop()
                await producer.stop()
                await instance.stop()
            assert len(attempts(b"ok")) == 1
            for body in (b"fail-me", b"raise-me"):
                first, retry = attempts(body)
                assert (first.reconsume_times, retry.reconsume_times) == (0, 1)
                assert first.queue.topic == "Jobs" and retry.queue.topic == "%RETRY%JobGroup"
                assert retry.topic == "Jobs"  # the original topic, restored
                assert retry.msg_id == first.msg_id == ids[body]
                assert retry.tags == "T" and retry.keys == ["k1"]
                assert retry.properties["ORIGIN_MESSAGE_ID"] == first.offset_msg_id
            # Unregistered from the broker although the instance stays up until the end.
            assert "JobGroup" not in broker.clients.consumers

    run(main())


def test_message_lands_in_dlq_after_max_reconsume_times(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **FAST_DELAYS) as (ns, broker):
            await create_topic(ns, broker, "Poison")
            attempts: list[int] = []

            async def listener(msgs: list[ReceivedMessage]) -> ConsumeStatus:
                for m in msgs:
                    if m.body == b"poison":
                        attempts.append(m.reconsume_times)
                        return ConsumeStatus.RECONSUME_LATER
                return ConsumeStatus.CONSUME_SUCCESS

            consumer = PushConsumer("PoisonGroup", namesrv(ns), max_reconsume_times=2, **FAST)
            consumer.subscribe("Poison")
            consumer.register_listener(listener)
            async with consumer, Producer("PG", namesrv(ns)) as producer:
                sent = await producer.send(Message("Poison", b"poison", tags="bad"))

                def dead() -> list[Any]:
                    return broker.store.get_messages("%DLQ%PoisonGroup", 0, 0, 10)

                await until(lambda: len(dead()) == 1, "the DLQ message", timeout=20)
                await asyncio.sleep(1.5)  # no further delivery
            assert attempts == [0, 1, 2]
            (m,) = dead()
            assert m.body == b"poison" and m.reconsume_times == 3
            assert m.properties["RETRY_TOPIC"] == "Poison" and m.uniq_key == sent.msg_id

    run(main())


# -- where a new group starts ----------------------------------------------------------------------------


def test_consume_from_first_last_and_timestamp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A Java broker gives a new group offset 0 while the queue's first message is in memory;
    # make it say "no offset" (22), as for a large store, so the client's choice shows.
    monkeypatch.setattr(consumer_manage, "IN_MEMORY_RATIO", 0.0)

    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            await create_topic(ns, broker, "Timeline", queues=2)
            queues = [MessageQueue("Timeline", "broker-a", i) for i in range(2)]
            async with Producer("PG", namesrv(ns)) as producer:

                async def batch(name: str) -> list[bytes]:
                    bodies = []
                    for i in range(3):
                        for mq in queues:
                            body = f"{name}-{mq.queue_id}-{i}".encode()
                            await producer.send(Message("Timeline", body), queue=mq)
                            bodies.append(body)
                    return bodies

                old = await batch("old")
                await asyncio.sleep(1.0)  # the gap under test: "old" is stored before `since`, "recent" after
                since = int(time.time() * 1000)
                recent = await batch("recent")

                got = {w: Collector() for w in ("FIRST", "LAST", "TIMESTAMP")}
                consumers = []
                for where, listener in got.items():
                    c = PushConsumer(
                        f"From{where}",
                        namesrv(ns),
                        consume_from_where=f"CONSUME_FROM_{where}_OFFSET"
                        if where != "TIMESTAMP"
                        else "CONSUME_FROM_TIMESTAMP",
                        consume_timestamp=since,
                        **FAST,
                    )
                    c.subscribe("Timeline")
                    c.register_listener(listener)
                    await c.start()
                    consumers.append(c)
                for c in consumers:
                    await until(lambda c=c: len(topic_queues(c, "Timeline")) == 2, "queues")  # type: ignore[misc]
                new = await batch("new")
                await until(lambda: len(got["LAST"].msgs) >= len(new), "new messages")
                await until(lambda: len(got["FIRST"].msgs) >= 18, "every message")
                await until(lambda: len(got["TIMESTAMP"].msgs) >= 12, "messages since")
                await asyncio.sleep(0.3)  # the observation: no consumer gets more than its start point allows
                for c in consumers:
                    await c.stop()
            assert sorted(got["FIRST"].bodies()) == sorted(old + recent + new)
            assert sorted(got["LAST"].bodies()) == sorted(new)
            assert sorted(got["TIMESTAMP"].bodies()) == sorted(recent + new)

    run(main())


# -- offsets across restarts ------------------------------------------------------------------------------


def test_offsets_survive_a_consumer_restart(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            await create_topic(ns, broker, "Ledger")
            async with Producer("PG", namesrv(ns)) as producer:
                for i in range(20):
                    await producer.send(Message("Ledger", b"a%d" % i))
                first = Collector()
                c1 = PushConsumer("LedgerGroup", namesrv(ns), instance_name="run1", **FAST)
                c1.subscribe("Ledger")
                c1.register_listener(first)
                async with c1:
                    await until(lambda: len(first.msgs) >= 20, "first run")
                committed = sum(broker.offsets.query("LedgerGroup", "Ledger", q) for q in range(4))
                assert committed == 20
                for i in range(10):
                    await producer.send(Message("Ledger", b"b%d" % i))
                second = Collector()
                c2 = PushConsumer("LedgerGroup", namesrv(ns), instance_name="run2", **FAST)
                c2.subscribe("Ledger")
                c2.register_listener(second)
                async with c2:
                    await until(lambda: len(second.msgs) >= 10, "second run")
                    await asyncio.sleep(0.3)  # the observation: the first run's messages do not come again
            assert sorted(first.bodies()) == sorted(b"a%d" % i for i in range(20))
            assert sorted(second.bodies()) == sorted(b"b%d" % i for i in range(10))

    run(main())
