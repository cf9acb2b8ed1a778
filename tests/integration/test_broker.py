"""The broker and name server over real sockets on 127.0.0.1, driven with raw protocol frames."""

from __future__ import annotations

import asyncio
import time
import zlib
from pathlib import Path

import orjson
import pytest

from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.command import RemotingCommand, SerializeType
from ferromq.testing.waiting import until

from .brokerkit import Client, batch_body, heartbeat_body, properties, pull_ext, running, send_ext


def run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


def test_routes_and_auto_created_topic(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            c = await Client().connect(ns.port)
            r = await c.call(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"})
            assert r.code == R.TOPIC_NOT_EXIST
            r = await c.call(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
            assert r.code == R.SUCCESS
            route = orjson.loads(r.body)
            assert route["queueDatas"][0]["perm"] == 7
            assert route["brokerDatas"][0]["brokerAddrs"] == {"0": f"127.0.0.1:{broker.port}"}
            b = await Client().connect(broker.port)
            r = await b.call(RC.SEND_MESSAGE, send_ext("Orders", 2), b"hello")
            assert r.code == R.SUCCESS, r.remark
            assert r.ext["queueId"] == "2" and r.ext["queueOffset"] == "0"
            assert r.ext["msgId"] == f"7F000001{broker.port:08X}{0:016X}"
            assert r.ext["MSG_REGION"] == "DefaultRegion" and r.ext["TRACE_ON"] == "true"

            async def route() -> RemotingCommand | None:
                r = await c.call(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"})
                return r if r.code == R.SUCCESS else None

            r = await until(route, "the name server's route for Orders")
            q = orjson.loads(r.body)["queueDatas"][0]
            assert (q["readQueueNums"], q["writeQueueNums"], q["perm"]) == (4, 4, 6)
            r = await c.call(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
            assert "Orders" in orjson.loads(r.body)["topicList"]
            r = await c.call(RC.GET_BROKER_CLUSTER_INFO)
            assert orjson.loads(r.body)["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
            await c.close()
            await b.close()

    run(main())


def test_two_brokers_in_one_cluster_and_expiry(tmp_path: Path) -> None:
    async def main() -> None:
        from ferromq.namesrv import NameServer

        ns = NameServer("127.0.0.1", 0, broker_expire_seconds=120)
        await ns.start()
        try:
            async with running(tmp_path / "a", namesrv=ns, broker_name="broker-a") as (_, a):
                async with running(tmp_path / "b", namesrv=ns, broker_name="broker-b") as (_, b):
                    route = ns.routes.route("TBW102")
                    assert route is not None
                    names = {d["brokerName"]: d["brokerAddrs"]["0"] for d in route["brokerDatas"]}
                    assert names == {"broker-a": f"127.0.0.1:{a.port}", "broker-b": f"127.0.0.1:{b.port}"}
                # broker-b unregistered at shutdown
                route = ns.routes.route("TBW102")
                assert route is not None
                assert [d["brokerName"] for d in route["brokerDatas"]] == ["broker-a"]
                # A silent broker expires.
                assert ns.routes.expire(time.monotonic() + 121) == [f"127.0.0.1:{a.port}"]
                assert ns.routes.route("TBW102") is None
        finally:
            await ns.stop()

    run(main())


def test_send_v1_v2_batch_and_pull_stored_bytes(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            await c.call(
                RC.UPDATE_AND_CREATE_TOPIC, {"topic": "T", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
            )
            props = properties(TAGS="TagA", KEYS="k1 k2", UNIQ_KEY="ABC", WAIT="true") + "\x02"  # C++ style
            r1 = await c.call(RC.SEND_MESSAGE, send_ext("T", 0, props), b"v1", language="CPP", version=63)
            v2 = {"a": "PG", "b": "T", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 1, "h": 7, "i": props}
            r2 = await c.call(RC.SEND_MESSAGE_V2, v2, b"v2")
            batch = batch_body([(b"b0", properties(KEYS="kb0", TAGS="B")), (b"b1", properties(KEYS="kb1"))])
            r3 = await c.call(RC.SEND_BATCH_MESSAGE, {**v2, "m": "true", "i": properties(bp="x")}, batch)
            r4 = await c.call(RC.SEND_MESSAGE, send_ext("T", 0, "", batch="1"), batch, language="CPP")
            assert [r.code for r in (r1, r2, r3, r4)] == [0, 0, 0, 0]
            assert [r.ext["queueOffset"] for r in (r1, r2, r3, r4)] == ["0", "1", "2", "4"]
            assert len(r3.ext["msgId"].split(",")) == 2
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "T", 0, 0))
            assert r.code == R.SUCCESS and r.remark == "FOUND"
            assert {k: r.ext[k] for k in ("nextBeginOffset", "minOffset", "maxOffset")} == {
                "nextBeginOffset": "6",
                "minOffset": "0",
                "maxOffset": "6",
            }
            assert r.ext["suggestWhichBrokerId"] == "0"
            # 5.x's lite pull consumer pulls with LITE_PULL_MESSAGE (361): the same answer.
            lite = await c.call(RC.LITE_PULL_MESSAGE, pull_ext("G", "T", 0, 0))
            assert (lite.code, lite.ext["nextBeginOffset"], lite.body) == (R.SUCCESS, "6", r.body)
            # The body is the stored records, byte for byte.
            stored = broker.store.get("T", 0, 0, 32).body
            assert r.body == stored
            msgs = decode_messages(r.body, check_crc=True)
            assert [m.body for m in msgs] == [b"v1", b"v2", b"b0", b"b1", b"b0", b"b1"]
            assert msgs[0].properties["CLUSTER"] == "DefaultCluster"
            assert "WAIT" not in msgs[0].properties
            assert msgs[1].flag == 7
            assert msgs[2].properties["bp"] == "x" and msgs[2].keys == ["kb0"]
            assert msgs[0].born_host.startswith("127.0.0.1:")
            await c.close()

    run(main())


def test_long_poll_is_held_and_woken_by_a_send(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            await c.call(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "LP", "readQueueNums": 1, "writeQueueNums": 1})
            pull = asyncio.ensure_future(
                c.call(RC.PULL_MESSAGE, pull_ext("G", "LP", 0, 0, sysFlag=6, suspendTimeoutMillis=20000))
            )
            await until(lambda: broker.held_pulls == 1, "the pull to be held")
            assert not pull.done(), "a pull with the suspend flag is held"
            p = await Client().connect(broker.port)
            await p.call(RC.SEND_MESSAGE, send_ext("LP", 0), b"wake")
            r = await asyncio.wait_for(pull, 5)
            assert r.code == R.SUCCESS
            assert decode_messages(r.body)[0].body == b"wake"
            # A held pull with a tag filter ignores messages of other tags, then answers 19 at its timeout.
            started = time.monotonic()
            tagged = asyncio.ensure_future(
                c.call(
                    RC.PULL_MESSAGE,
                    pull_ext("G", "LP", 0, 1, sysFlag=6, suspendTimeoutMillis=800, subscription="TagX"),
                )
            )
            await until(lambda: broker.held_pulls == 1, "the tagged pull to be held")
            await p.call(RC.SEND_MESSAGE, send_ext("LP", 0, properties(TAGS="TagY")), b"other")
            r = await asyncio.wait_for(tagged, 10)
            assert time.monotonic() - started >= 0.7
            assert r.code in (R.PULL_NOT_FOUND, R.PULL_RETRY_IMMEDIATELY)
            # Without the suspend flag: answered at once.
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "LP", 0, 2))
            assert (r.code, r.ext["nextBeginOffset"]) == (R.PULL_NOT_FOUND, "2")
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "LP", 0, 1, subscription="TagX"))
            assert (r.code, r.ext["nextBeginOffset"]) == (R.PULL_RETRY_IMMEDIATELY, "2")
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "LP", 0, 99))
            assert (r.code, r.ext["nextBeginOffset"]) == (R.PULL_OFFSET_MOVED, "2")
            await c.close()
            await p.close()

    run(main())


def test_offsets_heartbeat_notify_and_locks(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            a, b = await Client().connect(broker.port), await Client().connect(broker.port)
            await a.call(RC.SEND_MESSAGE, send_ext("O", 0), b"x")
            r = await a.call(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "CG", "topic": "O", "queueId": 0})
            assert (r.code, r.ext["offset"]) == (R.SUCCESS, "0"), "new group, queue starts at 0"
            await a.call(
                RC.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "CG", "topic": "O", "queueId": 0, "commitOffset": 1},
            )
            r = await a.call(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "CG", "topic": "O", "queueId": 0})
            assert r.ext["offset"] == "1"
            r = await a.call(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"})
            assert r.code == R.SYSTEM_ERROR
            assert (await a.call(RC.HEART_BEAT, body=heartbeat_body("A", "CG", "O"))).code == R.SUCCESS
            assert broker.topics.get("%RETRY%CG") is not None
            assert (await b.call(RC.HEART_BEAT, body=heartbeat_body("B", "CG", "O"))).code == R.SUCCESS
            r = await a.call(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"})
            assert orjson.loads(r.body) == {"consumerIdList": ["A", "B"]}
            await until(
                lambda: any(x.code == RC.NOTIFY_CONSUMER_IDS_CHANGED for x in a.server_requests),
                "A to be told the group changed",
            )
            notify = [x for x in a.server_requests if x.code == RC.NOTIFY_CONSUMER_IDS_CHANGED]
            assert notify and notify[0].ext == {"consumerGroup": "CG"} and notify[0].is_oneway
            mqs = [{"topic": "O", "brokerName": "broker-a", "queueId": q} for q in range(3)]
            lock = {"consumerGroup": "CG", "clientId": "A", "mqSet": mqs}
            r = await a.call(RC.LOCK_BATCH_MQ, body=orjson.dumps(lock))
            assert len(orjson.loads(r.body)["lockOKMQSet"]) == 3
            r = await b.call(RC.LOCK_BATCH_MQ, body=orjson.dumps({**lock, "clientId": "B"}))
            assert orjson.loads(r.body)["lockOKMQSet"] == []
            await a.call(RC.UNLOCK_BATCH_MQ, body=orjson.dumps({**lock, "mqSet": mqs[:1]}))
            r = await b.call(RC.LOCK_BATCH_MQ, body=orjson.dumps({**lock, "clientId": "B"}))
            assert [m["queueId"] for m in orjson.loads(r.body)["lockOKMQSet"]] == [0]
            # A closed connection takes its consumer out of the group.
            await b.close()
            await until(lambda: broker.clients.consumers["CG"].client_ids() == ["A"], "B to leave the group")
            await a.call(RC.UNREGISTER_CLIENT, {"clientID": "A", "consumerGroup": "CG", "producerGroup": ""})
            assert "CG" not in broker.clients.consumers
            await a.close()
        data = orjson.loads((tmp_path / "store/config/consumerOffset.json").read_bytes())
        assert data["offsetTable"]["O@CG"] == {"0": 1}

    run(main())


def test_send_back_retry_and_dead_letter(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, message_delay_level="1s 1s 1s 1s") as (_, broker):
            c = await Client().connect(broker.port)
            r = await c.call(
                RC.SEND_MESSAGE, send_ext("Job", 0, properties(TAGS="T1", KEYS="job-1")), b"work"
            )
            phys = int(r.ext["msgId"][-16:], 16)
            r = await c.call(RC.CONSUMER_SEND_MSG_BACK, {"offset": phys, "group": "W", "delayLevel": 0})
            assert r.code == R.SUCCESS
            # Level 3 + 0 → one second here; the scheduler delivers it to %RETRY%W.
            (m,) = await until(lambda: broker.store.get_messages("%RETRY%W", 0, 0), "the retry message")
            assert (m.body, m.reconsume_times) == (b"work", 1)
            assert m.properties["RETRY_TOPIC"] == "Job"
            assert m.properties["ORIGIN_MESSAGE_ID"] == f"7F000001{broker.port:08X}{phys:016X}"
            # Delivered as Apache RocketMQ 4.9.7 does: the schedule record's properties, DELAY included.
            assert m.properties["DELAY"] == "3" and m.properties["REAL_TOPIC"] == "%RETRY%W"
            # Too many attempts → %DLQ%W.
            r = await c.call(
                RC.SEND_MESSAGE,
                send_ext("%RETRY%W", 0, properties(KEYS="job-2"), reconsumeTimes=16),
                b"dead",
            )
            assert r.code == R.SUCCESS
            assert [x.body for x in broker.store.get_messages("%DLQ%W", 0, 0)] == [b"dead"]
            r = await c.call(
                RC.CONSUMER_SEND_MSG_BACK, {"offset": m.physical_offset, "group": "W", "delayLevel": -1}
            )
            assert [x.body for x in broker.store.get_messages("%DLQ%W", 0, 0)] == [b"dead", b"work"]
            r = await c.call(RC.CONSUMER_SEND_MSG_BACK, {"offset": 10**12, "group": "W", "delayLevel": 0})
            assert r.code == R.SYSTEM_ERROR
            await c.close()

    run(main())


def test_query_and_view_and_offsets_by_time(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            ids = []
            for i in range(5):
                r = await c.call(
                    RC.SEND_MESSAGE, send_ext("Q", 0, properties(KEYS=f"order-{i % 2}")), f"{i}".encode()
                )
                ids.append(r.ext["msgId"])
            r = await c.call(
                RC.QUERY_MESSAGE,
                {"topic": "Q", "key": "order-1", "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 2**62},
            )
            assert r.code == R.SUCCESS
            assert sorted(m.body for m in decode_messages(r.body)) == [b"1", b"3"]
            r = await c.call(
                RC.QUERY_MESSAGE,
                {"topic": "Q", "key": "nope", "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 1},
            )
            assert r.code == R.QUERY_NOT_FOUND
            r = await c.call(RC.VIEW_MESSAGE_BY_ID, {"offset": int(ids[3][-16:], 16)})
            assert decode_messages(r.body)[0].body == b"3"
            r = await c.call(RC.VIEW_MESSAGE_BY_ID, {"offset": 7})
            assert r.code == R.SYSTEM_ERROR
            assert (await c.call(RC.GET_MAX_OFFSET, {"topic": "Q", "queueId": 0})).ext["offset"] == "5"
            assert (await c.call(RC.GET_MIN_OFFSET, {"topic": "Q", "queueId": 0})).ext["offset"] == "0"
            r = await c.call(RC.GET_EARLIEST_MSG_STORETIME, {"topic": "Q", "queueId": 0})
            earliest = int(r.ext["timestamp"])
            assert abs(earliest - time.time() * 1000) < 60_000
            r = await c.call(
                RC.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "Q", "queueId": 0, "timestamp": earliest}
            )
            assert r.ext["offset"] == "0"
            await c.close()

    run(main())


def test_refusals_carry_rocketmq_codes(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, max_message_size=1024, auto_create_topic_enable=False) as (_, broker):
            c = await Client().connect(broker.port)
            r = await c.call(RC.SEND_MESSAGE, send_ext("bad topic!", 0), b"x")
            assert r.code == R.SYSTEM_ERROR and "illegal" in (r.remark or "")
            r = await c.call(RC.SEND_MESSAGE, send_ext("SCHEDULE_TOPIC_XXXX", 0), b"x")
            assert r.code == R.NO_PERMISSION and "forbidden" in (r.remark or "")  # as Java 4.9.7
            r = await c.call(RC.SEND_MESSAGE, send_ext("Unknown", 0), b"x")
            assert r.code == R.TOPIC_NOT_EXIST
            await c.call(
                RC.UPDATE_AND_CREATE_TOPIC, {"topic": "Small", "readQueueNums": 1, "writeQueueNums": 1}
            )
            r = await c.call(RC.SEND_MESSAGE, send_ext("Small", 0), b"x" * 1025)
            assert r.code == R.MESSAGE_ILLEGAL
            r = await c.call(RC.SEND_MESSAGE, send_ext("Small", 5), b"x")
            assert r.code == R.SYSTEM_ERROR and "queueId" in (r.remark or "")
            r = await c.call(RC.SEND_MESSAGE, {"topic": "Small"}, b"x")
            assert r.code == R.SYSTEM_ERROR and "producerGroup" in (r.remark or "")
            r = await c.call(9999)
            assert r.code == R.REQUEST_CODE_NOT_SUPPORTED
            r = await c.call(
                RC.PULL_MESSAGE, pull_ext("G", "Small", 0, 0, subscription="a = 1", expressionType="SQL92")
            )
            assert r.code == R.SYSTEM_ERROR
            # A binary-header request gets a binary-header reply.
            r = await c.call(RC.GET_MAX_OFFSET, {"topic": "Small", "queueId": 0}, ser=SerializeType.ROCKETMQ)
            assert r.serialize_type == SerializeType.ROCKETMQ and r.ext["offset"] == "0"
            await c.close()

    run(main())


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00\x00\x10GET / HTTP/1.1\r\n",
        b"\x7f\xff\xff\xff" + b"\x00" * 16,  # a 2 GiB length prefix
        (30).to_bytes(4, "big") + (26).to_bytes(4, "big") + b"{not json at all, really!}",
        (8).to_bytes(4, "big") + (0x05000004).to_bytes(4, "big") + b"abcd",  # unknown serialize type
    ],
)
def test_bad_bytes_close_only_that_connection(tmp_path: Path, garbage: bytes) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            good = await Client().connect(broker.port)
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
            writer.write(garbage)
            await writer.drain()
            assert await asyncio.wait_for(reader.read(100), 5) == b"", "the broker closes the connection"
            writer.close()
            # Truncated frame, then the client goes away: nothing breaks.
            _, w2 = await asyncio.open_connection("127.0.0.1", broker.port)
            w2.write((100).to_bytes(4, "big") + b"\x00\x00")
            await w2.drain()
            w2.close()
            r = await good.call(RC.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0})
            assert r.code == R.SUCCESS
            await good.close()

    run(main())


def test_restart_keeps_messages_topics_and_offsets(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            for i in range(20):
                await c.call(RC.SEND_MESSAGE, send_ext("Keep", i % 4, sysFlag=1), zlib.compress(b"z" * 5000))
            await c.call(
                RC.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "K", "topic": "Keep", "queueId": 1, "commitOffset": 3},
            )
            await c.close()
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            assert broker.topics.get("Keep") is not None
            r = await c.call(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "K", "topic": "Keep", "queueId": 1})
            assert r.ext["offset"] == "3"
            r = await c.call(RC.PULL_MESSAGE, pull_ext("K", "Keep", 1, 0))
            msgs = decode_messages(r.body, check_crc=True)
            assert len(msgs) == 5 and msgs[0].compressed and msgs[0].payload() == b"z" * 5000
            await c.close()

    run(main())


def test_deleted_topic_starts_again_at_zero(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            c = await Client().connect(broker.port)
            for _ in range(3):
                await c.call(RC.SEND_MESSAGE, send_ext("Gone", 0), b"x")
            assert (await c.call(RC.DELETE_TOPIC_IN_BROKER, {"topic": "Gone"})).code == R.SUCCESS
            n = await Client().connect(ns.port)
            assert (await n.call(RC.DELETE_TOPIC_IN_NAMESRV, {"topic": "Gone"})).code == R.SUCCESS
            assert (await n.call(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Gone"})).code == R.TOPIC_NOT_EXIST
            r = await c.call(RC.SEND_MESSAGE, send_ext("Gone", 0), b"again")
            assert r.ext["queueOffset"] == "0"
            assert (await c.call(RC.GET_MAX_OFFSET, {"topic": "Gone", "queueId": 0})).ext["offset"] == "1"
            await c.close()
            await n.close()

    run(main())
