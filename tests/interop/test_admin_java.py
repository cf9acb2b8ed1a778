"""`ferromq.client.Admin` and `ferromq admin` against Apache RocketMQ 4.9.7's name server and broker
(started by tools/apache_rocketmq.py): the admin requests whose bodies only the Java broker writes
in full today (topic stats, connections, broker config, offset resets with consumers online,
broker stats items), parsed from Java's own bytes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import ApacheRocketMQ, have_java, start_rocketmq

from ferromq.client import Admin, ConsumeStatus, Message, Producer, PushConsumer, ReceivedMessage
from ferromq.errors import BrokerError
from ferromq.protocol.codes import ResponseCode
from ferromq.testing.waiting import until

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="the Apache RocketMQ broker needs `java` and `mvn` on PATH"),
]

FERROMQ = Path(sys.executable).with_name("ferromq")
WAIT = 30.0


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheRocketMQ]:
    mq = start_rocketmq(tmp_path_factory.mktemp("rocketmq-admin"))
    try:
        yield mq
    finally:
        mq.stop(kill=True)  # a reference broker: nothing reads its store afterwards


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 120))


def unique(kind: str) -> str:
    return f"{kind}{uuid.uuid4().hex[:8]}"


def cli(namesrv: str, *args: str) -> Any:
    r = subprocess.run(
        [str(FERROMQ), "admin", "-n", namesrv, *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, f"ferromq admin {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout)


async def topic_with_messages(admin: Admin, producer: Producer, n: int) -> str:
    topic = unique("JAdm")
    await admin.create_topic(topic, queue_nums=2)

    async def routed() -> bool:
        try:
            return bool((await admin.topic_route(topic)).queue_datas)
        except BrokerError:
            return False

    await until(routed, f"the route of {topic}", timeout=WAIT)
    for i in range(n):
        await producer.send(Message(topic, f"m{i}".encode(), keys=[f"k{i}"]))
    return topic


def test_runtime_info_topic_stats_and_broker_config(java: ApacheRocketMQ) -> None:
    async def main() -> None:
        async with Admin(java.namesrv) as admin, Producer(unique("PG"), java.namesrv) as producer:
            topic = await topic_with_messages(admin, producer, 5)

            async def sampled() -> bool:
                # A fresh Java broker answers SYSTEM_ERROR (NoSuchElementException) until its
                # stats service took its first samples.
                try:
                    await admin.broker_runtime_info(java.broker_addr)
                except BrokerError:
                    return False
                return True

            await until(sampled, "the Java broker's first stats samples", timeout=WAIT)
            rt = await admin.broker_runtime_info(java.broker_addr)
            assert rt.version == "V4_9_7"
            assert rt.put_today >= 5 and rt.put_tps >= 0.0
            assert 0.0 < rt.commitlog_disk_ratio < 1.0
            assert {"putTps", "getTransferedTps", "dispatchBehindBytes", "pageCacheLockTimeMills"} <= set(
                rt.table
            )

            stats = await admin.topic_stats(topic)
            assert [(s.queue.topic, s.queue.queue_id, s.min_offset) for s in stats] == [
                (topic, 0, 0),
                (topic, 1, 0),
            ]
            assert sum(s.messages for s in stats) == 5 and all(s.last_update_timestamp > 0 for s in stats)

            config = await admin.broker_config(java.broker_addr)
            assert config["brokerName"] == "broker-a" and config["brokerClusterName"] == "DefaultCluster"
            assert await admin.update_broker_config({"fileReservedTime": "48"}, cluster="DefaultCluster") == [
                java.broker_addr
            ]
            assert (await admin.broker_config(java.broker_addr))["fileReservedTime"] == "48"

            put = await admin.broker_stats(java.broker_addr, "TOPIC_PUT_NUMS", topic)
            assert (put.name, put.key) == ("TOPIC_PUT_NUMS", topic)
            assert put.minute.sum >= 0 and put.hour.tps >= 0.0
            with pytest.raises(BrokerError):
                await admin.broker_stats(java.broker_addr, "TOPIC_PUT_NUMS", unique("never-written"))

            # The CLI prints what the client parsed.
            rows = cli(java.namesrv, "topic-status", topic)
            assert sum(r["messages"] for r in rows) == 5
            assert cli(java.namesrv, "broker-config", "-b", java.broker_addr)[java.broker_addr][
                "brokerName"
            ] == ("broker-a")
            traffic = cli(java.namesrv, "stats", "--topic", topic)
            assert [r["topic"] for r in traffic] == [topic] and traffic[0]["inTps"] >= 0.0
            cluster = cli(java.namesrv, "cluster")
            assert cluster[0]["version"] == "V4_9_7" and cluster[0]["putToday"] >= 5

    run(main())


def test_connections_consumer_groups_and_reset_with_consumers_online(java: ApacheRocketMQ) -> None:
    async def main() -> None:
        group, pgroup = unique("JG"), unique("JPG")
        async with Admin(java.namesrv) as admin, Producer(pgroup, java.namesrv) as producer:
            topic = await topic_with_messages(admin, producer, 6)
            with pytest.raises(BrokerError) as offline:
                await admin.consumer_connections(group)
            assert offline.value.code == ResponseCode.CONSUMER_NOT_ONLINE

            got: list[ReceivedMessage] = []

            async def on_messages(msgs: list[ReceivedMessage]) -> ConsumeStatus:
                got.extend(msgs)
                return ConsumeStatus.CONSUME_SUCCESS

            consumer = PushConsumer(group, java.namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            consumer.subscribe(topic, "*")
            consumer.register_listener(on_messages)
            async with consumer:

                async def online() -> bool:
                    try:
                        await admin.consumer_connections(group)
                    except BrokerError:
                        return False
                    return True

                await until(online, f"{group} online", timeout=WAIT)
                cc = await admin.consumer_connections(group)
                assert [c.language for c in cc.connections] == ["PYTHON"]
                assert cc.connections[0].client_id == consumer.client_id
                assert cc.subscriptions[topic].expression == "*"
                assert cc.message_model == "CLUSTERING" and cc.consume_type == "CONSUME_PASSIVELY"

                pc = await admin.producer_connections(pgroup, topic)
                assert [c.language for c in pc.connections] == ["PYTHON"]

                assert group in await admin.topic_consumer_groups(topic)
                assert (
                    cli(java.namesrv, "connections", group)["connections"][0]["clientId"]
                    == consumer.client_id
                )

                # Java's broker resets only groups with committed offsets ("THe consumer group <G>
                # not exist" otherwise): consume everything and commit first.
                async def consumed() -> bool:
                    return len(got) >= 6

                await until(consumed, "the 6 messages", timeout=WAIT)
                await consumer.persist_offsets(wait=True)
                # Online consumers: the broker computes the offsets and tells the clients.
                reset = await admin.reset_offset_by_time(group, topic, 0)
                assert reset.clients_notified
                assert sorted((r.queue.queue_id, r.offset) for r in reset.queues) == [(0, 0), (1, 0)]

                # The Python consumer took the reset (RESET_CONSUMER_CLIENT_OFFSET): it consumes
                # the six messages again.
                async def consumed_again() -> bool:
                    return len(got) >= 12

                await until(consumed_again, "the messages consumed again after the reset", timeout=WAIT)
                assert sorted(m.body for m in got[6:]) == sorted(m.body for m in got[:6])

    run(main())
