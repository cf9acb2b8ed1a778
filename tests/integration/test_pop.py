"""POP consumption over remoting, as RocketMQ 5.x's broker serves it: pop, ack, invisible time,
redelivery from the group's pop retry topic with the reconsume count, the dead letter queue, long
polling, and the requests that put a push consumer into POP mode."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson

from ferromq.broker.topics import TopicConfig
from ferromq.message import StoredMessage, decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.testing import BrokerProcess
from ferromq.testing.waiting import until, wait_until
from tests.integration.brokerkit import Client, pop_receipt, pop_request, properties, running, send_ext
from tests.integration.test_data_plane import count_python_requests

TOPIC, GROUP = "PopT", "PopG"
FAST = {"timer_precision_ms": 100}


def pop_ext(topic: str = TOPIC, group: str = GROUP, **extra: Any) -> dict[str, Any]:
    return pop_request(topic, group, **{"invisibleTime": 2000, **extra})


def receipts(
    ext: dict[str, str], msgs: list[StoredMessage], broker_name: str
) -> list[tuple[StoredMessage, str]]:
    return [(m, pop_receipt(ext, m, broker_name)) for m in msgs]


async def pop(c: Client, **extra: Any) -> tuple[int, dict[str, str], list[StoredMessage]]:
    r = await c.call(RC.POP_MESSAGE, pop_ext(**extra))
    return r.code, r.ext, decode_messages(r.body) if r.body else []


async def ack(c: Client, m: StoredMessage, ck: str, topic: str = TOPIC, group: str = GROUP) -> int:
    fields = ck.split(" ")
    real = topic if fields[4] == "0" else f"%RETRY%{group}_{topic}"
    r = await c.call(
        RC.ACK_MESSAGE,
        {
            "consumerGroup": group,
            "topic": real,
            "queueId": int(fields[6]),
            "offset": int(fields[7]),
            "extraInfo": ck,
        },
    )
    return r.code


async def send(c: Client, n: int, topic: str = TOPIC, queues: int = 4) -> None:
    for i in range(n):
        r = await c.call(
            RC.SEND_MESSAGE, send_ext(topic, i % queues, properties(TAGS="A", KEYS=f"k{i}")), f"m{i}".encode()
        )
        assert r.code == R.SUCCESS


async def pop_until(
    c: Client, count: int, timeout: float = 30, **extra: Any
) -> list[tuple[StoredMessage, str]]:
    """Pops (long polling) until `count` messages came."""
    got: list[tuple[StoredMessage, str]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        code, ext, msgs = await pop(c, pollTime=2000, **extra)
        assert code in (R.SUCCESS, R.POLLING_TIMEOUT), code
        if code == R.SUCCESS:
            got += receipts(ext, msgs, "broker-a")
    return got


def test_pop_ack_and_redelivery_of_what_was_not_acked(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **FAST) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 4, 4))
            c = await Client().connect(broker.port)
            await send(c, 6)
            code, ext, msgs = await pop(c)
            assert code == R.SUCCESS and len(msgs) == 6
            assert {
                "popTime",
                "invisibleTime",
                "reviveQid",
                "restNum",
                "startOffsetInfo",
                "msgOffsetInfo",
            } <= set(ext)
            assert ext["invisibleTime"] == "2000" and ext["restNum"] == "0"
            # The group's offsets moved past them at once; a second pop finds nothing.
            assert [broker.offsets.query(GROUP, TOPIC, q) for q in range(4)] == [2, 2, 1, 1]
            code, _, again = await pop(c)
            assert code == R.POLLING_TIMEOUT and not again
            taken = receipts(ext, msgs, broker.config.broker_name)
            acked = {m.body for m, _ in taken[:4]}
            for m, ck in taken[:4]:
                assert await ack(c, m, ck) == R.SUCCESS
            # The two not acked come back once invisible time is over, from the retry topic, as
            # the original topic's messages with their receipt and reconsume count.
            back = await pop_until(c, 2)
            assert sorted(m.body for m, _ in back) == sorted({m.body for m in msgs} - acked)
            for m, ck in back:
                assert m.topic == TOPIC and m.reconsume_times == 1
                assert ck == m.properties["POP_CK"] and ck.split(" ")[4] == "1"
                assert "1ST_POP_TIME" in m.properties
                # Put back by the broker: born at its address (PopReviveService.reviveRetry).
                assert m.born_host == broker.config.broker_addr
                assert await ack(c, m, ck) == R.SUCCESS
            assert broker.topics.get(f"%RETRY%{GROUP}_{TOPIC}") is not None
            # Acked, they stay acked: nothing comes back after the next invisible time.
            await until(lambda: broker.pop.revived == 2, "2 revived", 20)
            code, _, late = await pop(c, pollTime=4000)
            assert code == R.POLLING_TIMEOUT and not late
            # Checkpoints and acks are 5.x's messages in the revive topic.
            revive = f"rmq_sys_REVIVE_LOG_{broker.config.broker_cluster_name}"
            stored = [m for q in range(8) for m in broker.store.get_messages(revive, q, 0, 100)]
            tags = sorted({m.tags for m in stored if m.tags})
            assert tags == ["ack", "ck"]
            ck = next(orjson.loads(m.body) for m in stored if m.tags == "ck")
            assert set(ck) >= {"so", "pt", "it", "bm", "n", "q", "t", "c", "ro", "d", "bn"}
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 90))


def test_long_polling_change_of_invisible_time_and_dead_letters(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **FAST) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 2, 2))
            c = await Client().connect(broker.port)
            waiter = await Client().connect(broker.port)
            # A pop waits for the message sent while it waits.
            parked = asyncio.create_task(waiter.call(RC.POP_MESSAGE, pop_ext(pollTime=20_000), timeout=30))
            await until(lambda: broker.pop.polling_count(TOPIC, GROUP, -1) == 1, "the pop waiting", 10)
            r = await c.call(RC.POLLING_INFO, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": -1})
            assert r.code == R.SUCCESS and r.ext["pollingNum"] == "1"
            await send(c, 1)
            r = await parked
            assert r.code == R.SUCCESS and len(decode_messages(r.body)) == 1
            ((_m, ck),) = receipts(r.ext, decode_messages(r.body), broker.config.broker_name)
            # Nack: visible again in 500 ms (a checkpoint of its own), then again and again: past
            # the group's retryMaxTimes (1 here) too, as Java's broker does (the consumer sends a
            # message to the dead letter queue, never the revive service).
            broker.groups.update(broker.groups.find_or_create(GROUP).__class__(GROUP, retry_max_times=1))
            fields = ck.split(" ")
            r = await c.call(
                RC.CHANGE_MESSAGE_INVISIBLETIME,
                {
                    "consumerGroup": GROUP,
                    "topic": TOPIC,
                    "queueId": int(fields[6]),
                    "offset": int(fields[7]),
                    "extraInfo": ck,
                    "invisibleTime": 500,
                },
            )
            assert r.code == R.SUCCESS and r.ext["invisibleTime"] == "500"
            back = await pop_until(c, 1)
            assert back[0][0].body == b"m0" and back[0][0].reconsume_times == 1
            # Not acked again: back once more, past retryMaxTimes, and no dead letter.
            again = await pop_until(c, 1)
            assert again[0][0].body == b"m0" and again[0][0].reconsume_times == 2
            assert broker.topics.get(f"%DLQ%{GROUP}") is None
            await c.close()
            await waiter.close()

    asyncio.run(asyncio.wait_for(main(), 90))


def test_refusals_and_request_modes(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **FAST) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 2, 2))
            c = await Client().connect(broker.port)
            code, _, _ = await pop(c, maxMsgNums=33)
            assert code == R.INVALID_PARAMETER
            code, _, _ = await pop(c, topic="NoSuchTopic")
            assert code == R.TOPIC_NOT_EXIST
            code, _, _ = await pop(c, queueId=5)
            assert code == R.INVALID_PARAMETER
            r = await c.call(
                RC.ACK_MESSAGE,
                {
                    "consumerGroup": GROUP,
                    "topic": TOPIC,
                    "queueId": 0,
                    "offset": 99,
                    "extraInfo": "0 1 2 3 0 b 0 99",
                },
            )
            assert r.code == R.NO_MESSAGE
            # mqadmin setConsumeMode, then a push consumer's QUERY_ASSIGNMENT.
            broker.groups.find_or_create(GROUP)
            body = {"consumerGroup": GROUP, "mode": "POP", "popShareQueueNum": 0, "topic": TOPIC}
            r = await c.call(RC.SET_MESSAGE_REQUEST_MODE, body=orjson.dumps(body))
            assert r.code == R.SUCCESS
            assert (Path(broker.config.store_path_root_dir) / "config" / "messageRequestMode.json").exists()
            query = {"topic": TOPIC, "consumerGroup": GROUP, "clientId": "c1", "strategyName": "AVG"}
            r = await c.call(RC.QUERY_ASSIGNMENT, body=orjson.dumps({**query, "messageModel": "CLUSTERING"}))
            assignments = orjson.loads(r.body)["messageQueueAssignments"]
            assert assignments == [
                {
                    "messageQueue": {"brokerName": broker.config.broker_name, "queueId": -1, "topic": TOPIC},
                    "mode": "POP",
                }
            ]
            # Another group pulls: its share of the queues.
            r = await c.call(
                RC.QUERY_ASSIGNMENT,
                body=orjson.dumps({**query, "consumerGroup": "Other", "messageModel": "CLUSTERING"}),
            )
            assert {a["mode"] for a in orjson.loads(r.body)["messageQueueAssignments"]} == {"PULL"}
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_orderly_pop_hands_out_a_queue_in_order_one_pop_at_a_time(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **FAST) as (_, broker):
            broker.topics.update(TopicConfig("PopOrder", 1, 1))
            c = await Client().connect(broker.port)
            await send(c, 3, topic="PopOrder", queues=1)
            orderly = {"topic": "PopOrder", "order": "true", "maxMsgNums": 1, "invisibleTime": 1500}
            code, ext, msgs = await pop(c, **orderly)
            assert code == R.SUCCESS and [m.body for m in msgs] == [b"m0"]
            assert ext["reviveQid"] == "999" and ext["orderCountInfo"] == "0 0 0"
            # Blocked until m0 is acked (or visible again): the next pop finds nothing.
            code, _, none = await pop(c, **orderly)
            assert code == R.POLLING_TIMEOUT and not none
            ((m0, ck0),) = receipts(ext, msgs, broker.config.broker_name)
            assert await ack(c, m0, ck0, topic="PopOrder") == R.SUCCESS
            assert broker.offsets.query(GROUP, "PopOrder", 0) == 1
            code, ext, msgs = await pop(c, **orderly)
            assert [m.body for m in msgs] == [b"m1"]
            # Not acked: handed out again once visible, counted once more; a waiting pop gets it.
            code, ext, again = await pop(c, pollTime=10_000, **orderly)
            assert code == R.SUCCESS and [m.body for m in again] == [b"m1"]
            assert ext["orderCountInfo"] == "0 qo0%1 1;0 0 1"
            ((m1, ck1),) = receipts(ext, again, broker.config.broker_name)
            assert await ack(c, m1, ck1, topic="PopOrder") == R.SUCCESS
            code, _, last = await pop(c, **orderly)
            assert [m.body for m in last] == [b"m2"]
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_pops_filter_by_tag_and_sql92_and_each_group_gets_every_message(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, enable_property_filter=True, **FAST) as (_, broker):
            broker.topics.update(TopicConfig("PopF", 1, 1))
            c = await Client().connect(broker.port)
            for i in range(6):
                props = properties(TAGS="A" if i % 2 else "B", a=str(i % 3))
                assert (
                    await c.call(RC.SEND_MESSAGE, send_ext("PopF", 0, props), f"f{i}".encode())
                ).code == R.SUCCESS
            code, _, tagged = await pop(c, topic="PopF", group="ByTag", exp="A")
            assert code == R.SUCCESS and [m.body for m in tagged] == [b"f1", b"f3", b"f5"]
            code, _, sql = await pop(c, topic="PopF", group="BySql", expType="SQL92", exp="a = 1")
            assert code == R.SUCCESS and [m.body for m in sql] == [b"f1", b"f4"]
            # Past what the filters skipped too.
            assert broker.offsets.query("ByTag", "PopF", 0) == broker.offsets.query("BySql", "PopF", 0) == 6
            code, _, _ = await pop(c, topic="PopF", group="Bad", expType="SQL92", exp="a = = 1")
            assert code == R.SUBSCRIPTION_PARSE_FAILED
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_kill_9_with_messages_invisible_brings_back_every_unacked_one(tmp_path: Path) -> None:
    conf = {"timerPrecisionMs": 100, "flushConsumerOffsetInterval": 100, "mappedFileSizeCommitLog": 1 << 20}
    store = tmp_path / "store"

    async def pop_and_ack(port: int) -> set[bytes]:
        c = await Client().connect(port)
        for i in range(10):
            r = await c.call(
                RC.SEND_MESSAGE, send_ext("PopCrash", i % 4, properties(KEYS=f"k{i}")), f"c{i}".encode()
            )
            assert r.code == R.SUCCESS
        code, ext, msgs = await pop(c, topic="PopCrash", invisibleTime=3000)
        assert code == R.SUCCESS and len(msgs) == 10
        taken = receipts(ext, msgs, "broker-a")
        for m, ck in taken[:4]:
            assert await ack(c, m, ck, topic="PopCrash") == R.SUCCESS
        await c.close()
        return {m.body for m, _ in taken[:4]}

    async def redelivered(port: int) -> list[StoredMessage]:
        c = await Client().connect(port)
        back = await pop_until(c, 6, timeout=40, topic="PopCrash")
        _, _, more = await pop(c, topic="PopCrash", pollTime=3000)
        await c.close()
        return [m for m, _ in back] + more

    with BrokerProcess(tmp_path / "run1", {**conf, "brokerName": "broker-a"}, store=store) as b:
        acked = asyncio.run(asyncio.wait_for(pop_and_ack(b.port), 60))
        # The group's offsets on disk (every 100 ms here), then the kill.
        offsets = store / "config" / "consumerOffset.json"
        wait_until(
            lambda: offsets.exists() and b"PopCrash@PopG" in offsets.read_bytes(), "offsets persisted", 10
        )
        b.stop(kill=True)
    with BrokerProcess(tmp_path / "run2", {**conf, "brokerName": "broker-a"}, store=store) as b:
        back = asyncio.run(asyncio.wait_for(redelivered(b.port), 90))
    assert sorted(m.body for m in back) == sorted({f"c{i}".encode() for i in range(10)} - acked)
    assert {m.reconsume_times for m in back} == {1}


def test_peek_moves_nothing_and_notification_waits_for_a_message(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **FAST) as (_, broker):
            broker.topics.update(TopicConfig("PopPeek", 2, 2))
            c = await Client().connect(broker.port)
            notify = {
                "consumerGroup": "PeekG",
                "topic": "PopPeek",
                "queueId": -1,
                "bornTime": int(time.time() * 1000),
            }
            r = await c.call(RC.NOTIFICATION, {**notify, "pollTime": 0})
            assert r.code == R.SUCCESS and r.ext["hasMsg"] == "false"
            # A waiting notification is answered when a message comes.
            waiting = asyncio.create_task(c.call(RC.NOTIFICATION, {**notify, "pollTime": 20_000}, timeout=30))
            await send(c, 3, topic="PopPeek", queues=2)
            r = await waiting
            assert r.code == R.SUCCESS and r.ext["hasMsg"] == "true"
            peek = {"consumerGroup": "PeekG", "topic": "PopPeek", "queueId": -1, "maxMsgNums": 32}
            r = await c.call(RC.PEEK_MESSAGE, peek)
            assert r.code == R.SUCCESS and sorted(m.body for m in decode_messages(r.body)) == [
                b"m0",
                b"m1",
                b"m2",
            ]
            # Nothing moved: the same again, and a pop still gets all three.
            again = await c.call(RC.PEEK_MESSAGE, peek)
            assert again.body == r.body
            code, _, msgs = await pop(c, topic="PopPeek", group="PeekG")
            assert code == R.SUCCESS and len(msgs) == 3
            r = await c.call(RC.PEEK_MESSAGE, peek)
            assert r.code == R.PULL_NOT_FOUND
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_query_assignment_covers_every_broker_of_the_route(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path / "a", broker_name="broker-a") as (ns, a):
            async with running(tmp_path / "b", namesrv=ns, broker_name="broker-b") as (_, b):
                for broker in (a, b):
                    broker.topics.update(TopicConfig("PopRoute", 2, 2))
                    await broker.register_all()
                a.groups.find_or_create(GROUP)
                c = await Client().connect(a.port)
                body = {"consumerGroup": GROUP, "mode": "POP", "popShareQueueNum": 0, "topic": "PopRoute"}
                assert (await c.call(RC.SET_MESSAGE_REQUEST_MODE, body=orjson.dumps(body))).code == R.SUCCESS
                query = {
                    "topic": "PopRoute",
                    "clientId": "c1",
                    "strategyName": "AVG",
                    "messageModel": "CLUSTERING",
                }
                r = await c.call(RC.QUERY_ASSIGNMENT, body=orjson.dumps({**query, "consumerGroup": GROUP}))
                got = [
                    (x["messageQueue"]["brokerName"], x["messageQueue"]["queueId"], x["mode"])
                    for x in orjson.loads(r.body)["messageQueueAssignments"]
                ]
                assert got == [("broker-a", -1, "POP"), ("broker-b", -1, "POP")]
                # A pulling group's one client gets all four queues of the two brokers.
                r = await c.call(RC.QUERY_ASSIGNMENT, body=orjson.dumps({**query, "consumerGroup": "Puller"}))
                got = [
                    (x["messageQueue"]["brokerName"], x["messageQueue"]["queueId"])
                    for x in orjson.loads(r.body)["messageQueueAssignments"]
                ]
                assert got == [("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)]
                await c.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_slave_refuses_pops_and_acks(tmp_path: Path) -> None:
    """They would write checkpoints and offsets into the replica."""

    async def main() -> None:
        async with running(tmp_path, broker_role="SLAVE", broker_id=1, **FAST) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 1, 1))
            c = await Client().connect(broker.port)
            code, _, _ = await pop(c)
            assert code == R.SERVICE_NOT_AVAILABLE
            ack = {
                "consumerGroup": GROUP,
                "topic": TOPIC,
                "queueId": 0,
                "offset": 0,
                "extraInfo": "0 1 2 3 0 b 0 0",
            }
            assert (await c.call(RC.ACK_MESSAGE, ack)).code == R.SERVICE_NOT_AVAILABLE
            assert broker.topics.get("rmq_sys_REVIVE_LOG_DefaultCluster") is None
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_pops_acks_and_changes_are_served_on_the_data_plane(tmp_path: Path) -> None:
    """Once the revive topic exists, the plane answers pops, acks and changes of invisible time
    itself (by the same rules as Python), a pop that waits included; orderly and SQL92 pops and an
    orderly ack reach Python."""

    async def main() -> None:
        async with running(tmp_path, enable_property_filter=True, **FAST) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 2, 2))
            c = await Client().connect(broker.port)
            # The first pop makes the revive topic (Python), which lets the plane serve pops.
            code, _, _ = await pop(c)
            assert code == R.POLLING_TIMEOUT
            seen = count_python_requests(broker)
            await send(c, 4, queues=2)
            code, ext, msgs = await pop(c, maxMsgNums=3)
            assert code == R.SUCCESS and len(msgs) == 3 and ext["restNum"] == "1"
            assert sum(broker.offsets.query(GROUP, TOPIC, q) for q in range(2)) == 3
            taken = receipts(ext, msgs, broker.config.broker_name)
            assert await ack(c, *taken[0]) == R.SUCCESS
            m, ck = taken[1]
            fields = ck.split(" ")
            r = await c.call(
                RC.CHANGE_MESSAGE_INVISIBLETIME,
                {
                    "consumerGroup": GROUP,
                    "topic": TOPIC,
                    "queueId": int(fields[6]),
                    "offset": int(fields[7]),
                    "extraInfo": ck,
                    "invisibleTime": 300,
                },
            )
            assert r.code == R.SUCCESS and r.ext["invisibleTime"] == "300"
            # Refusals come with Java's code and remark from the plane too.
            bad = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0, "offset": 99, "extraInfo": ck}
            r = await c.call(RC.ACK_MESSAGE, bad)
            assert r.code == R.NO_MESSAGE and r.remark is not None and "offset is illegal" in r.remark
            assert seen[RC.POP_MESSAGE] == seen[RC.ACK_MESSAGE] == 0
            assert seen[RC.CHANGE_MESSAGE_INVISIBLETIME] == 0
            # The one not popped yet, then the changed one once visible again: put back into the
            # retry topic by the revive service and popped on the plane with its receipt.
            code, _, rest = await pop(c)
            assert [x.body for x in rest] == list({b"m0", b"m1", b"m2", b"m3"} - {x.body for x in msgs})
            await until(lambda: broker.pop.revived == 1, "the changed one revived", 20)
            code, ext, back = await pop(c)
            assert code == R.SUCCESS and [(x.body, x.topic, x.reconsume_times) for x in back] == [
                (m.body, TOPIC, 1)
            ]
            ((_, receipt),) = receipts(ext, back, broker.config.broker_name)
            assert receipt == back[0].properties["POP_CK"] and receipt.split(" ")[4] == "1"
            assert await ack(c, back[0], receipt) == R.SUCCESS
            assert seen[RC.POP_MESSAGE] == seen[RC.ACK_MESSAGE] == 0
            # A pop that finds nothing waits on the plane, then answers as Python does.
            code, ext, none = await pop(c, pollTime=300)
            assert (code, none, ext["restNum"]) == (R.POLLING_TIMEOUT, [], "0")
            assert seen[RC.POP_MESSAGE] == 0 and broker.planes.waiting_pops == 0
            # What the plane leaves to Python.
            await pop(c, topic=TOPIC, order="true", maxMsgNums=1)
            await pop(c, exp="a = 1", expType="SQL92")
            assert seen[RC.POP_MESSAGE] == 2
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_pop_that_waits_on_the_plane_takes_what_is_stored_meanwhile(tmp_path: Path) -> None:
    """Long polling on the plane: a pop that finds nothing waits there and takes the message a
    producer sends meanwhile, and one Python stores (a delayed message it delivers), as a pop
    waiting in Python does; a waiting pop whose connection closes is let go."""

    async def main() -> None:
        async with running(tmp_path, **FAST) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 2, 2))
            c = await Client().connect(broker.port)
            code, _, _ = await pop(c)  # makes the revive topic (Python): the plane serves pops
            assert code == R.POLLING_TIMEOUT
            seen = count_python_requests(broker)
            waiter = await Client().connect(broker.port)
            for delay_level in (0, 1):  # sent by the plane, then stored by Python's delay service
                parked = asyncio.create_task(
                    waiter.call(RC.POP_MESSAGE, pop_ext(pollTime=20_000), timeout=30)
                )
                await until(lambda: broker.planes.waiting_pops == 1, "the pop waiting on the plane", 10)
                ext = send_ext(TOPIC, 0, properties(DELAY=str(delay_level)) if delay_level else "")
                r = await c.call(RC.SEND_MESSAGE, ext, f"late {delay_level}".encode())
                assert r.code == R.SUCCESS, r.remark
                r = await parked
                assert r.code == R.SUCCESS and [m.body for m in decode_messages(r.body)] == [
                    f"late {delay_level}".encode()
                ]
                assert broker.planes.waiting_pops == 0
            gone = await Client().connect(broker.port)
            gone_pop = asyncio.create_task(gone.call(RC.POP_MESSAGE, pop_ext(pollTime=20_000), timeout=30))
            await until(lambda: broker.planes.waiting_pops == 1, "the pop waiting on the plane", 10)
            await gone.close()
            await asyncio.gather(gone_pop, return_exceptions=True)
            await send(c, 1)
            await until(lambda: broker.planes.waiting_pops == 0, "the closed connection's pop let go", 10)
            assert seen[RC.POP_MESSAGE] == 0
            await c.close()
            await waiter.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_concurrent_pops_on_the_plane_take_each_message_once(tmp_path: Path) -> None:
    """Eight consumers pop and ack at once from the same queues (on the plane's threads and
    Python's): each message is handed out once, and every one is acked."""

    async def main() -> None:
        async with running(tmp_path, **FAST) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 4, 4))
            c = await Client().connect(broker.port)
            await send(c, 2000)
            seen: list[bytes] = []

            async def consumer() -> None:
                cl = await Client().connect(broker.port)
                deadline = time.monotonic() + 30
                while len(seen) < 2000 and time.monotonic() < deadline:
                    code, ext, msgs = await pop(cl, invisibleTime=60_000)
                    assert code in (R.SUCCESS, R.POLLING_TIMEOUT), code
                    seen.extend(m.body for m in msgs)
                    acks = [ack(cl, m, ck) for m, ck in receipts(ext, msgs, broker.config.broker_name)]
                    assert set(await asyncio.gather(*acks)) <= {R.SUCCESS}
                await cl.close()

            await asyncio.gather(*(consumer() for _ in range(8)))
            assert len(seen) == 2000 and len(set(seen)) == 2000
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 60))
