"""The data plane (dataPlane=rust): plain sends are stored and answered on its threads, every
other request still reaches the Python dispatcher, and the two agree on what they store."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path

import pytest

from ferromq.broker import Broker
from ferromq.broker.stats import TOPIC_PUT_NUMS
from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import Connection
from ferromq.remoting.plane import PlaneServer
from ferromq.testing.waiting import until

from .brokerkit import Client, batch_body, properties, pull_ext, running, send_ext

SENDS = (RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


def count_python_requests(broker: Broker) -> Counter[int]:
    """Counts the requests that reach the broker's Python dispatcher, by code."""
    seen: Counter[int] = Counter()
    registry = broker._registry
    assert registry is not None

    def counting(conn: Connection, cmd: RemotingCommand) -> object:
        seen[cmd.code] += 1
        return registry(conn, cmd)

    broker._registry = counting  # type: ignore[assignment]
    return seen


async def pull_all(c: Client, topic: str, queue_id: int, expected: int) -> list[bytes]:
    bodies: list[bytes] = []
    for _ in range(100):
        if len(bodies) >= expected:
            break
        r = await c.call(RC.PULL_MESSAGE, pull_ext("G", topic, queue_id, len(bodies)))
        if r.code == R.SUCCESS:
            bodies += [m.body for m in decode_messages(r.body)]
    return bodies


def test_plain_sends_are_stored_and_answered_on_the_plane(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            assert isinstance(broker.server, PlaneServer)
            seen = count_python_requests(broker)
            c = await Client().connect(broker.port)
            # A topic the plane does not know yet: Python creates it (and tells the plane).
            r = await c.call(RC.SEND_MESSAGE, send_ext("DP", 0), b"first")
            assert r.code == R.SUCCESS, r.remark
            assert seen[RC.SEND_MESSAGE] == 1
            for i in range(1, 30):
                code = RC.SEND_MESSAGE if i % 2 else RC.SEND_MESSAGE_V2
                ext = send_ext("DP", 0, properties(TAGS=f"t{i}", KEYS=f"k{i}"))
                if code == RC.SEND_MESSAGE_V2:
                    ext = {"a": "PG", "b": "DP", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 1, "h": 0}
                    ext["i"] = properties(TAGS=f"t{i}", KEYS=f"k{i}")
                r = await c.call(code, ext, f"m{i}".encode())
                assert r.code == R.SUCCESS, r.remark
                assert (r.ext["queueId"], r.ext["queueOffset"]) == ("0", str(i))
                assert r.ext["MSG_REGION"] == "DefaultRegion" and r.ext["TRACE_ON"] == "true"
                assert "transactionId" not in r.ext, "no UNIQ_KEY, none named (as 5.3.3)"
            # As Apache RocketMQ 5.x: the reply names the message's UNIQ_KEY as its transactionId (the
            # 5.x proxy ends transactions with it), a batch's as its batchUniqId.
            uniq = "0A000001000000000000000000000ABC"
            r = await c.call(RC.SEND_MESSAGE, send_ext("DP", 0, properties(UNIQ_KEY=uniq)), b"u")
            assert r.code == R.SUCCESS and r.ext["transactionId"] == uniq, (r.remark, r.ext)
            batch = batch_body([(f"b{i}".encode(), properties(KEYS=f"bk{i}")) for i in range(5)])
            ext = send_ext("DP", 0, properties(UNIQ_KEY=uniq), batch="true")
            r = await c.call(RC.SEND_BATCH_MESSAGE, ext, batch)
            assert r.code == R.SUCCESS, r.remark
            assert r.ext["queueOffset"] == "31" and len(r.ext["msgId"].split(",")) == 5
            assert r.ext["batchUniqId"] == uniq and "transactionId" not in r.ext
            # A random queue (-1) is one of the topic's write queues.
            r = await c.call(RC.SEND_MESSAGE, send_ext("DP", -1), b"anywhere")
            assert r.code == R.SUCCESS and 0 <= int(r.ext["queueId"]) < 4
            assert sum(seen[code] for code in SENDS) == 1, "only the first send reached Python"
            bodies = await pull_all(c, "DP", 0, 36)
            assert bodies[:31] == [b"first"] + [f"m{i}".encode() for i in range(1, 30)] + [b"u"]
            # (The random queue may have been 0: its message would follow.)
            assert bodies[31:36] == [f"b{i}".encode() for i in range(5)]
            assert seen[RC.PULL_MESSAGE] > 0, "pulls are Python's"
            broker.sync_plane_stats()
            item = broker.stats.sets[TOPIC_PUT_NUMS].item("DP")
            assert item.value == 37 and item.times == 33
            await c.close()

    run(main())


def test_sends_the_plane_cannot_decide_are_answered_by_python(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            seen = count_python_requests(broker)
            c = await Client().connect(broker.port)
            r = await c.call(RC.SEND_MESSAGE, send_ext("Known", 0), b"x")
            assert r.code == R.SUCCESS
            before = seen[RC.SEND_MESSAGE]
            # An illegal queue: refused by the send rules on the plane itself, named as Java does.
            r = await c.call(RC.SEND_MESSAGE, send_ext("Known", 9), b"x")
            assert r.code == R.SYSTEM_ERROR and "queueId[9] is illegal" in (r.remark or "")
            assert seen[RC.SEND_MESSAGE] == before
            # A half message of a transaction.
            r = await c.call(
                RC.SEND_MESSAGE, send_ext("Known", 0, properties(TRAN_MSG="true", PGROUP="PG")), b"half"
            )
            assert r.code == R.SUCCESS
            assert broker.store.max_offset("RMQ_SYS_TRANS_HALF_TOPIC", 0) == 1
            # A retry topic (may become a dead letter) and a system topic (refused).
            r = await c.call(RC.SEND_MESSAGE, send_ext("%RETRY%G", 0), b"again")
            assert r.code == R.SUCCESS
            r = await c.call(RC.SEND_MESSAGE, send_ext("SCHEDULE_TOPIC_XXXX", 0), b"no")
            assert r.code == R.NO_PERMISSION
            # A read-only topic: Python refuses the send.
            r = await c.call(
                RC.UPDATE_AND_CREATE_TOPIC,
                {"topic": "Known", "readQueueNums": 4, "writeQueueNums": 4, "perm": 4},
            )
            assert r.code == R.SUCCESS
            r = await c.call(RC.SEND_MESSAGE, send_ext("Known", 0), b"x")
            assert r.code == R.NO_PERMISSION
            assert seen[RC.SEND_MESSAGE] == before + 4
            await c.close()

    run(main())


def test_sync_flush_sends_and_a_held_pull_woken_by_one(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, flush_disk_type="SYNC_FLUSH") as (_, broker):
            c = await Client().connect(broker.port)
            r = await c.call(RC.SEND_MESSAGE, send_ext("SF", 0), b"create")
            assert r.code == R.SUCCESS
            replies = await asyncio.gather(
                *(c.call(RC.SEND_MESSAGE, send_ext("SF", 0), f"s{i}".encode()) for i in range(50))
            )
            assert [r.code for r in replies] == [R.SUCCESS] * 50
            assert sorted(int(r.ext["queueOffset"]) for r in replies) == list(range(1, 51))
            assert broker.store.flushed_physical_offset >= broker.store.max_physical_offset
            # A pull held at the queue's end, with a tag filter: a send of another tag does not
            # wake it, a send of its tag does.
            held = asyncio.ensure_future(
                c.call(
                    RC.PULL_MESSAGE,
                    pull_ext("G", "SF", 0, 51, sysFlag=6, suspendTimeoutMillis=20_000, subscription="Want"),
                )
            )
            await until(lambda: broker.hold.held_count, "the pull to be held")
            assert broker.hold.held_count == 1
            p = await Client().connect(broker.port)
            r = await p.call(RC.SEND_MESSAGE, send_ext("SF", 0, properties(TAGS="Other")), b"other")
            assert r.code == R.SUCCESS
            r = await p.call(RC.SEND_MESSAGE, send_ext("SF", 0, properties(TAGS="Want")), b"wanted")
            assert r.code == R.SUCCESS
            r = await asyncio.wait_for(held, 10)
            assert r.code == R.SUCCESS
            assert [m.body for m in decode_messages(r.body)] == [b"wanted"]
            await c.close()
            await p.close()

    run(main())


@pytest.mark.parametrize("plane", ["rust", "python"])
def test_either_plane_serves_the_same_send(tmp_path: Path, plane: str) -> None:
    async def main() -> None:
        async with running(tmp_path, data_plane=plane) as (_, broker):
            assert isinstance(broker.server, PlaneServer)
            seen = count_python_requests(broker)
            c = await Client().connect(broker.port)
            for i in range(3):
                r = await c.call(RC.SEND_MESSAGE, send_ext("Either", 1), f"e{i}".encode())
                assert r.code == R.SUCCESS and r.ext["queueOffset"] == str(i)
            assert await pull_all(c, "Either", 1, 3) == [b"e0", b"e1", b"e2"]
            # dataPlane=python: the plane serves the connection, Python every request; rust: the
            # plane answers the sends after the first (which creates the topic).
            expected = 3 if plane == "python" else 1
            assert seen[RC.SEND_MESSAGE] == expected
            await c.close()

    run(main())
