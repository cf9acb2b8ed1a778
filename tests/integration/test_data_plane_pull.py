"""Pulls on the data plane (dataPlane=rust): answered on its threads exactly as Python answers
them, held there until a matching message is stored (by the plane or by Python) or their time
is up; what the plane cannot decide reaches Python; commits and statistics reach Python."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from ferromq.broker import Broker
from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.plane import PlaneServer
from ferromq.testing.waiting import until

from .brokerkit import Client, batch_body, heartbeat_body, properties, pull_ext, running, send_ext
from .test_data_plane import count_python_requests


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


def plane_of(broker: Broker) -> Any:
    assert isinstance(broker.server, PlaneServer) and broker.server.plane is not None
    return broker.server.plane


def answer(r: RemotingCommand) -> tuple[int, str | None, dict[str, str], bytes]:
    return r.code, r.remark, dict(r.ext), r.body


async def fill(c: Client, topic: str) -> None:
    """20 messages tagged A and B in turn, then a batch of 3 (no tags), in queue 0."""
    for i in range(20):
        tag = "A" if i % 2 == 0 else "B"
        r = await c.call(RC.SEND_MESSAGE, send_ext(topic, 0, properties(TAGS=tag)), f"{tag}{i}".encode())
        assert r.code == R.SUCCESS, r.remark
    batch = batch_body([(f"b{i}".encode(), properties(KEYS=f"k{i}")) for i in range(3)])
    r = await c.call(RC.SEND_BATCH_MESSAGE, send_ext(topic, 0, batch="true"), batch)
    assert r.code == R.SUCCESS, r.remark


async def ready(broker: Broker, topic: str) -> Client:
    """A client, `topic` filled, and group G known to the plane (its first pull, answered by
    Python, creates it)."""
    c = await Client().connect(broker.port)
    await fill(c, topic)
    r = await c.call(RC.PULL_MESSAGE, pull_ext("G", topic, 0, 0))
    assert r.code == R.SUCCESS
    return c


def test_pulls_are_answered_on_the_plane_as_python_answers_them(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await ready(broker, "PL")
            seen = count_python_requests(broker)
            pulls = [
                pull_ext("G", "PL", 0, 0, maxMsgNums=5),
                pull_ext("G", "PL", 0, 3, subscription="A"),
                pull_ext("G", "PL", 0, 10, subscription="A || B"),
                pull_ext("G", "PL", 0, 0, subscription="Nope"),  # nothing matches: retry at once
                pull_ext("G", "PL", 0, 23),  # at the end, not suspended
                pull_ext("G", "PL", 0, 20, maxMsgNums=0),  # the batch, one message at least
                pull_ext("G", "PL", 1, 0),  # an empty queue
                pull_ext("G", "PL", 0, 21, subscription="A", expressionType="TAG"),
            ]
            on_plane = [answer(await c.call(RC.PULL_MESSAGE, ext)) for ext in pulls]
            assert seen[RC.PULL_MESSAGE] == 0, "every pull was answered on the plane"
            codes = [a[0] for a in on_plane]
            assert codes == [
                R.SUCCESS,
                R.SUCCESS,
                R.SUCCESS,
                R.PULL_RETRY_IMMEDIATELY,
                R.PULL_NOT_FOUND,
                R.SUCCESS,
                R.PULL_NOT_FOUND,
                R.PULL_RETRY_IMMEDIATELY,  # the batch's messages have no tags
            ]
            assert [m.body for m in decode_messages(on_plane[1][3])] == [
                f"A{i}".encode() for i in range(4, 20, 2)
            ]
            # The same pulls answered by Python: byte for byte the same answers.
            plane_of(broker).stop_serving_pulls()
            by_python = [answer(await c.call(RC.PULL_MESSAGE, ext)) for ext in pulls]
            assert seen[RC.PULL_MESSAGE] == len(pulls)
            assert by_python == on_plane
            await c.close()

    run(main())


def test_pull_answers_keep_to_the_transfer_caps(tmp_path: Path) -> None:
    """maxTransferCountOnMessageInMemory and maxTransferBytesOnMessageInMemory cap what one pull
    carries (a Java client asks for up to 32, but may ask for more); with
    accessMessageInMemoryMaxRatio=0 every message counts as read from disk and the ...InDisk caps
    apply. Plane and Python answer alike."""

    async def main() -> None:
        caps = {"max_transfer_count_on_message_in_memory": 5, "max_transfer_bytes_on_message_in_memory": 2500}
        async with running(tmp_path / "memory", **caps) as (_, broker):
            c = await ready(broker, "CAP")  # 23 records of ~100 bytes, then four of ~1.1 KB
            big = [(await c.call(RC.SEND_MESSAGE, send_ext("CAP", 0), b"x" * 1000)).code for _ in range(4)]
            assert big == [R.SUCCESS] * 4
            pulls = [pull_ext("G", "CAP", 0, 0, maxMsgNums=50), pull_ext("G", "CAP", 0, 23, maxMsgNums=50)]
            on_plane = [answer(await c.call(RC.PULL_MESSAGE, ext)) for ext in pulls]
            plane_of(broker).stop_serving_pulls()
            by_python = [answer(await c.call(RC.PULL_MESSAGE, ext)) for ext in pulls]
            assert by_python == on_plane
            counts = [len(decode_messages(a[3])) for a in on_plane]
            assert counts[0] == 5, "the count cap"
            assert counts[1] == 2, "the byte cap: two ~1.1 KB records fit in 2,500 bytes, not three"
            await c.close()
        async with running(tmp_path / "disk", access_message_in_memory_max_ratio=0) as (_, broker):
            c = await ready(broker, "CAP")
            r = answer(await c.call(RC.PULL_MESSAGE, pull_ext("G", "CAP", 0, 0, maxMsgNums=50)))
            assert len(decode_messages(r[3])) == 8, "maxTransferCountOnMessageInDisk"
            await c.close()

    run(main())


def test_pulls_the_plane_cannot_decide_reach_python(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, enable_property_filter=True) as (_, broker):
            c = await ready(broker, "PY")
            seen = count_python_requests(broker)
            # SQL92 is Python's.
            r = await c.call(
                RC.PULL_MESSAGE, pull_ext("G", "PY", 0, 0, subscription="TAGS = 'B'", expressionType="SQL92")
            )
            assert r.code == R.SUCCESS
            assert {m.properties["TAGS"] for m in decode_messages(r.body)} == {"B"}
            # An offset past the end: Python corrects it (and records the OffsetMovedEvent).
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "PY", 0, 1000))
            assert r.code == R.PULL_OFFSET_MOVED and r.ext["nextBeginOffset"] == "23"
            # An illegal queue, an unknown topic, a group not seen yet.
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "PY", 9, 0))
            assert r.code == R.SYSTEM_ERROR and "queueId[9] is illegal" in (r.remark or "")
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "Nowhere", 0, 0))
            assert r.code == R.TOPIC_NOT_EXIST
            r = await c.call(RC.PULL_MESSAGE, pull_ext("Fresh", "PY", 0, 0))
            assert r.code == R.SUCCESS
            # No subscription in the pull and none registered: Python says so.
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "PY", 0, 0, sysFlag=0))
            assert r.code == R.SUBSCRIPTION_NOT_EXIST
            assert seen[RC.PULL_MESSAGE] == 6
            # "Fresh" exists now: the plane serves it.
            r = await c.call(RC.PULL_MESSAGE, pull_ext("Fresh", "PY", 0, 5))
            assert r.code == R.SUCCESS and seen[RC.PULL_MESSAGE] == 6
            await c.close()

    run(main())


def test_subscriptions_registered_by_heartbeat_filter_pulls_on_the_plane(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            await fill(c, "HB")
            r = await c.call(RC.HEART_BEAT, body=heartbeat_body("client-1", "HBG", "HB", "B"))
            assert r.code == R.SUCCESS
            await until(lambda: "HBG" in broker.groups.groups, "the group")
            version = broker.clients.consumers["HBG"].subscriptions["HB"].sub_version
            seen = count_python_requests(broker)
            # No subscription in the pull (as Java's push consumer): the heartbeat's, "B".
            r = await c.call(RC.PULL_MESSAGE, pull_ext("HBG", "HB", 0, 0, sysFlag=0, subVersion=version))
            assert r.code == R.SUCCESS
            assert [m.body for m in decode_messages(r.body)] == [f"B{i}".encode() for i in range(1, 20, 2)]
            assert seen[RC.PULL_MESSAGE] == 0
            # A consumer newer than its registration: Python answers.
            r = await c.call(RC.PULL_MESSAGE, pull_ext("HBG", "HB", 0, 0, sysFlag=0, subVersion=version + 1))
            assert r.code == R.SUBSCRIPTION_NOT_LATEST and seen[RC.PULL_MESSAGE] == 1
            # The subscription changes: the plane follows.
            r = await c.call(RC.HEART_BEAT, body=heartbeat_body("client-1", "HBG", "HB", "A"))
            assert r.code == R.SUCCESS
            version = broker.clients.consumers["HBG"].subscriptions["HB"].sub_version
            r = await c.call(RC.PULL_MESSAGE, pull_ext("HBG", "HB", 0, 0, sysFlag=0, subVersion=version))
            assert r.code == R.SUCCESS and seen[RC.PULL_MESSAGE] == 1
            assert {m.properties["TAGS"] for m in decode_messages(r.body)} == {"A"}
            await c.close()

    run(main())


def test_pulls_held_on_the_plane(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, message_delay_level="1s 2s") as (_, broker):
            c = await ready(broker, "H")
            seen = count_python_requests(broker)
            # Held at the end with a tag filter: another tag does not wake it, its tag does.
            held = asyncio.ensure_future(
                c.call(
                    RC.PULL_MESSAGE,
                    pull_ext("G", "H", 0, 23, sysFlag=6, suspendTimeoutMillis=20_000, subscription="Want"),
                )
            )
            await until(lambda: broker.held_pulls == 1, "the held pull")
            assert broker.hold.held_count == 0, "held on the plane, not in Python"
            p = await Client().connect(broker.port)
            r = await p.call(RC.SEND_MESSAGE, send_ext("H", 0, properties(TAGS="Other")), b"other")
            assert r.code == R.SUCCESS
            r = await p.call(RC.SEND_MESSAGE, send_ext("H", 0, properties(TAGS="Want")), b"wanted")
            assert r.code == R.SUCCESS
            r = await asyncio.wait_for(held, 10)
            assert r.code == R.SUCCESS and [m.body for m in decode_messages(r.body)] == [b"wanted"]
            assert r.ext["nextBeginOffset"] == "25"
            # Its suspend time up: answered with what there is (nothing).
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "H", 0, 25, sysFlag=6, suspendTimeoutMillis=200))
            assert r.code == R.PULL_NOT_FOUND and r.ext["nextBeginOffset"] == "25"
            # Woken by a message Python stores: a delayed message delivered after 1 s.
            held = asyncio.ensure_future(
                c.call(RC.PULL_MESSAGE, pull_ext("G", "H", 0, 25, sysFlag=6, suspendTimeoutMillis=20_000))
            )
            await until(lambda: broker.held_pulls == 1, "the held pull")
            r = await p.call(RC.SEND_MESSAGE, send_ext("H", 0, properties(DELAY="1")), b"later")
            assert r.code == R.SUCCESS
            r = await asyncio.wait_for(held, 10)
            assert r.code == R.SUCCESS and [m.body for m in decode_messages(r.body)] == [b"later"]
            assert seen[RC.PULL_MESSAGE] == 0
            # A held pull whose connection closes is dropped with it.
            gone = await Client().connect(broker.port)
            lost = asyncio.ensure_future(
                gone.call(RC.PULL_MESSAGE, pull_ext("G", "H", 1, 0, sysFlag=6, suspendTimeoutMillis=60_000))
            )
            await until(lambda: broker.held_pulls == 1, "the held pull")
            await gone.close()
            await asyncio.gather(lost, return_exceptions=True)
            await until(lambda: broker.held_pulls == 0, "the dropped pull")
            # The broker stops: a held pull is answered before the connection closes.
            held = asyncio.ensure_future(
                c.call(RC.PULL_MESSAGE, pull_ext("G", "H", 0, 26, sysFlag=6, suspendTimeoutMillis=20_000))
            )
            await until(lambda: broker.held_pulls == 1, "the held pull")
            await broker.stop()
            r = await asyncio.wait_for(held, 10)
            assert r.code == R.PULL_NOT_FOUND
            await p.close()

    run(main())


def test_commits_and_statistics_of_plane_pulls_reach_python(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await ready(broker, "CS")
            seen = count_python_requests(broker)
            # A pull that commits the consumer's offset (sysFlag COMMIT_OFFSET | SUBSCRIPTION).
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "CS", 0, 10, sysFlag=5, commitOffset=7))
            assert r.code == R.SUCCESS and seen[RC.PULL_MESSAGE] == 0
            r = await c.call(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "CS", "queueId": 0})
            assert r.code == R.SUCCESS and r.ext["offset"] == "7"
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "CS", 0, 20, maxMsgNums=2))
            assert r.code == R.SUCCESS
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "CS", 0, 23))
            assert r.code == R.PULL_NOT_FOUND
            broker.sync_plane_stats()
            assert broker.stats.pulled[("G", "CS", 0)] == 23
            store = broker.stats.store
            found, missed = store.get_found, store.get_miss
            # Counted as Python counts its own pulls.
            plane_of(broker).stop_serving_pulls()
            await c.call(RC.PULL_MESSAGE, pull_ext("G", "CS", 0, 20, maxMsgNums=2))
            await c.call(RC.PULL_MESSAGE, pull_ext("G", "CS", 0, 23))
            assert (store.get_found, store.get_miss) == (found + 1, missed + 1)
            await c.close()

    run(main())
