"""The admin requests mqadmin sends, against an in-process broker over real sockets: the counters
behind runtime info and the stats items follow what was sent and pulled; bodies have Java's shapes
(fastjson maps keyed by MessageQueue objects); config updates apply the run-time keys only; resets
reach the consumers online."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from ferromq.broker.stats import java_double, now_ms, tps_columns
from ferromq.broker.topics import TopicConfig
from ferromq.client.admin import parse_consume_stats
from ferromq.jsonutil import loads_lenient
from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import Connection, open_connection
from ferromq.testing.waiting import until
from tests.integration.brokerkit import Client, heartbeat_body, properties, pull_ext, running, send_ext

TOPIC = "AdminT"


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


async def _send(c: Client, n: int, queue_id: int = 0) -> None:
    for i in range(n):
        r = await c.call(
            RC.SEND_MESSAGE, send_ext(TOPIC, queue_id, properties(TAGS="A", KEYS=f"k{i}")), b"x" * 10
        )
        assert r.code == R.SUCCESS, r.remark


def test_counters_and_stats_items_follow_sends_and_pulls(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 2, 2))
            c = await Client().connect(broker.port)
            await _send(c, 5)
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G1", TOPIC, 0, 0))
            assert r.code == R.SUCCESS
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G1", TOPIC, 0, 5))
            assert r.code == R.PULL_NOT_FOUND

            table = orjson.loads((await c.call(RC.GET_BROKER_RUNTIME_INFO)).body)["table"]
            assert table["msgPutTotalTodayNow"] == "5" and table["putMessageTimesTotal"] == "5"
            assert table["msgGetTotalTodayNow"] == "5"
            size = int(table["putMessageSizeTotal"])
            assert size == broker.store.max_physical_offset
            assert table["putMessageAverageSize"] == java_double(size / 5)
            assert table["commitLogMaxOffset"] == str(size)
            for key in ("putTps", "getTransferedTps", "commitLogDiskRatio", "dispatchBehindBytes", "runtime"):
                assert key in table
            assert float(table["commitLogDiskRatio"]) > 0

            r = await c.call(RC.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": TOPIC})
            assert r.code == R.SUCCESS
            minute = orjson.loads(r.body)["statsMinute"]
            # Java seeds a new item with a zero snapshot 10 s back; the sum shows once sampled.
            broker.stats.sample_items("minute", now_ms() + 10_000)
            minute = orjson.loads(
                (
                    await c.call(
                        RC.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": TOPIC}
                    )
                ).body
            )["statsMinute"]
            assert minute["sum"] == 5 and minute["avgpt"] == 1.0 and minute["tps"] > 0
            got = orjson.loads(
                (
                    await c.call(
                        RC.VIEW_BROKER_STATS_DATA, {"statsName": "GROUP_GET_NUMS", "statsKey": f"{TOPIC}@G1"}
                    )
                ).body
            )["statsMinute"]
            assert got["sum"] == 5 and got["avgpt"] == 5.0
            r = await c.call(RC.VIEW_BROKER_STATS_DATA, {"statsName": "GROUP_GET_NUMS", "statsKey": "nope@G"})
            assert r.code == R.SYSTEM_ERROR and r.remark == "The stats <GROUP_GET_NUMS> <nope@G> not exist"
            await c.close()

    run(main())


def test_tps_columns_leave_unfilled_windows_empty() -> None:
    from collections import deque

    snaps = deque([(i * 1000, i * 2) for i in range(31)])
    assert tps_columns(snaps) == "2.0  "
    assert java_double(12345678.0) == "1.2345678E7" and java_double(0.5) == "0.5" and java_double(3) == "3.0"


def test_topic_and_consume_stats_are_maps_keyed_by_message_queue(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 2, 2))
            c = await Client().connect(broker.port)
            await _send(c, 3, queue_id=1)
            r = await c.call(RC.GET_TOPIC_STATS_INFO, {"topic": TOPIC})
            assert r.code == R.SUCCESS
            assert r.body.startswith(
                b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"AdminT"}:'
            )
            assert b'"queueId":1,"topic":"AdminT"}:{"lastUpdateTimestamp":' in r.body
            assert b'"maxOffset":3,"minOffset":0}' in r.body
            r = await c.call(RC.GET_TOPIC_STATS_INFO, {"topic": "Missing"})
            assert r.code == R.TOPIC_NOT_EXIST and r.remark == "topic[Missing] not exist"

            broker.offsets.commit("G2", TOPIC, 1, 2)
            r = await c.call(RC.GET_CONSUME_STATS, {"consumerGroup": "G2"})
            progress, _ = parse_consume_stats(r.body, "G2")
            assert r.body.startswith(b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a"')
            by_queue = {p.queue.queue_id: (p.broker_offset, p.consumer_offset) for p in progress}
            assert by_queue == {0: (0, 0), 1: (3, 2)}

            r = await c.call(RC.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": TOPIC})
            assert orjson.loads(r.body) == {"groupList": ["G2"]}
            r = await c.call(RC.QUERY_CONSUME_TIME_SPAN, {"topic": TOPIC, "group": "G2"})
            spans = orjson.loads(r.body)["consumeTimeSpanSet"]
            assert [s["messageQueue"]["queueId"] for s in spans] == [0, 1]
            # Queue 1 has 3 messages, 2 consumed: its delay runs from the third one's store time.
            assert spans[1]["delayTime"] >= 0 and spans[1]["minTimeStamp"] <= spans[1]["consumeTimeStamp"]
            assert spans[1]["consumeTimeStamp"] <= spans[1]["maxTimeStamp"]
            await c.close()

    run(main())


def test_connections_reset_and_running_info_reach_the_clients(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 2, 2))
            producer = await Client().connect(broker.port)
            await _send(producer, 4)
            consumer = await Client().connect(broker.port)
            r = await consumer.call(RC.HEART_BEAT, body=heartbeat_body("cid-1", "G3", TOPIC))
            assert r.code == R.SUCCESS
            admin = await Client().connect(broker.port)

            r = await admin.call(RC.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G3"})
            conns = orjson.loads(r.body)
            assert [x["clientId"] for x in conns["connectionSet"]] == ["cid-1"]
            assert conns["subscriptionTable"][TOPIC]["subString"] == "*"
            assert conns["consumeFromWhere"] == "CONSUME_FROM_LAST_OFFSET"
            r = await admin.call(RC.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "Nobody"})
            assert r.code == R.CONSUMER_NOT_ONLINE and r.remark == "the consumer group[Nobody] not online"
            r = await admin.call(RC.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "Nobody"})
            assert r.code == R.SYSTEM_ERROR and r.remark == "the producer group[Nobody] not exist"

            # A reset needs the group's committed offsets, then goes to each consumer online.
            r = await admin.call(
                RC.INVOKE_BROKER_TO_RESET_OFFSET,
                {"topic": TOPIC, "group": "G3", "timestamp": 0, "isForce": "true"},
            )
            assert r.code == R.SYSTEM_ERROR and r.remark == "THe consumer group <G3> not exist"
            broker.offsets.commit("G3", TOPIC, 0, 4)
            broker.offsets.commit("G3", TOPIC, 1, 0)
            r = await admin.call(
                RC.INVOKE_BROKER_TO_RESET_OFFSET,
                {"topic": TOPIC, "group": "G3", "timestamp": 0, "isForce": "true"},
            )
            assert r.code == R.SUCCESS
            assert b'"queueId":0,"topic":"AdminT"}:0' in r.body

            def resets() -> list[RemotingCommand]:
                return [x for x in consumer.server_requests if x.code == RC.RESET_CONSUMER_CLIENT_OFFSET]

            await until(resets, "the reset request to reach the consumer", timeout=5)
            (sent,) = resets()
            assert sent.code == RC.RESET_CONSUMER_CLIENT_OFFSET and sent.ext["group"] == "G3"
            assert sent.body == r.body

            r = await admin.call(RC.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "G3", "clientId": "other"})
            assert r.code == R.SYSTEM_ERROR and r.remark == "The Consumer <G3> <other> not online"
            await admin.close()
            await consumer.close()
            await producer.close()

    run(main())


def test_broker_config_lists_keys_and_updates_run_time_ones(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            r = await c.call(RC.GET_BROKER_CONFIG)
            props = dict(line.split("=", 1) for line in r.body.decode().splitlines())
            assert props["brokerName"] == "broker-a" and props["brokerPermission"] == "6"
            assert loads_lenient(r.ext["version"])["counter"] == 0

            r = await c.call(
                RC.UPDATE_BROKER_CONFIG, body=b"brokerPermission=4\nsendMessageThreadPoolNums=8\n"
            )
            assert r.code == R.SUCCESS
            assert broker.config.broker_permission == 4
            r = await c.call(RC.UPDATE_BROKER_CONFIG, body=b"listenPort=1\nbrokerPermision=6\n")
            assert r.code == R.SYSTEM_ERROR
            assert r.remark is not None and "listenPort cannot change while the broker runs" in r.remark
            assert "did you mean brokerPermission?" in r.remark
            r = await c.call(RC.UPDATE_BROKER_CONFIG, body=b"brokerPermission=x\n")
            assert r.code == R.SYSTEM_ERROR and r.remark == "brokerPermission must be an integer, not 'x'"
            assert broker.config.broker_permission == 4
            r = await c.call(RC.GET_BROKER_CONFIG)
            assert "brokerPermission=4\n" in r.body.decode()
            assert loads_lenient(r.ext["version"])["counter"] == 1
            await c.close()

    run(main())


def test_running_info_and_direct_consume_go_through_to_the_consumer(tmp_path: Path) -> None:
    """GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY are passed to the named consumer
    (the latter with the stored message as body) and its answers come back as they are."""

    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 1, 1))
            producer = await Client().connect(broker.port)
            r = await producer.call(RC.SEND_MESSAGE, send_ext(TOPIC, 0, properties(TAGS="A")), b"direct!")
            offset_msg_id = r.ext["msgId"]
            seen: list[RemotingCommand] = []

            async def answer(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
                seen.append(cmd)
                if cmd.code == RC.GET_CONSUMER_RUNNING_INFO:
                    return cmd.reply(R.SUCCESS, body=b'{"properties":{"x":"1"}}')
                if cmd.code == RC.CONSUME_MESSAGE_DIRECTLY:
                    (msg,) = decode_messages(cmd.body)
                    return cmd.reply(R.SUCCESS, remark=msg.body.decode())
                return None

            consumer = await open_connection("127.0.0.1", broker.port, answer)
            hb = RemotingCommand(code=RC.HEART_BEAT, body=heartbeat_body("cid-9", "G9", TOPIC))
            assert (await consumer.request(hb, 5)).code == R.SUCCESS
            admin = await Client().connect(broker.port)
            r = await admin.call(RC.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "G9", "clientId": "cid-9"})
            assert (r.code, r.body) == (R.SUCCESS, b'{"properties":{"x":"1"}}')
            ext = {"consumerGroup": "G9", "clientId": "cid-9", "msgId": offset_msg_id}
            r = await admin.call(RC.CONSUME_MESSAGE_DIRECTLY, ext)
            assert (r.code, r.remark) == (R.SUCCESS, "direct!")
            assert seen[-1].ext["brokerName"] == "broker-a"
            r = await admin.call(RC.CONSUME_MESSAGE_DIRECTLY, {**ext, "msgId": "nonsense"})
            assert r.code == R.SYSTEM_ERROR and r.remark == "no message with offsetMsgId nonsense"
            await admin.close()
            await consumer.close()
            await producer.close()

    run(main())


def test_query_consume_queue_reads_units_and_names_what_is_missing(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 1, 1))
            c = await Client().connect(broker.port)
            await _send(c, 3)
            ask = {"topic": TOPIC, "queueId": 0, "index": 1, "count": 5}
            r = await c.call(RC.QUERY_CONSUME_QUEUE, ask)
            body = orjson.loads(r.body)
            assert (body["minQueueIndex"], body["maxQueueIndex"]) == (0, 3)
            units = body["queueData"]
            size = broker.store.max_physical_offset // 3
            assert [(u["physicOffset"], u["physicSize"]) for u in units] == [(size, size), (2 * size, size)]
            assert units[0]["tagsCode"] == broker.tags_code_of({"TAGS": "A"})
            r = await c.call(RC.QUERY_CONSUME_QUEUE, {**ask, "index": 3})
            assert (r.code, r.remark, r.body) == (R.SUCCESS, f"Index 3 of 0@{TOPIC} is not exist!", b"")
            r = await c.call(RC.QUERY_CONSUME_QUEUE, {**ask, "queueId": 5})
            assert (r.code, r.remark) == (R.SYSTEM_ERROR, f"5@{TOPIC} is not exist!")
            await c.close()

    run(main())
