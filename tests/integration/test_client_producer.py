"""The Python client's Producer against real brokers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ferromq.client import (
    ConsumeStatus,
    LocalTransactionState,
    Message,
    Producer,
    ReceivedMessage,
    SendStatus,
)
from ferromq.client.blocking import (
    BlockingProducer,
    BlockingPullConsumer,
    BlockingPushConsumer,
    BlockingTransactionProducer,
    LoopThread,
)
from ferromq.client.fault import LatencyFaultTolerance
from ferromq.errors import BrokerError
from ferromq.namesrv import NameServer
from ferromq.protocol.codes import RequestCode as RC
from ferromq.testing.waiting import until

from .brokerkit import Client, running


def run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def producer(ns: NameServer, group: str = "PG", **options: object) -> AsyncIterator[Producer]:
    async with Producer(group, f"127.0.0.1:{ns.port}", **options) as p:  # type: ignore[arg-type]
        yield p


def test_send_modes_and_what_is_stored(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker), producer(ns) as p:
            r = await p.send(
                Message("Shop", b"plain", tags="TagA", keys=["o-1", "u-7"], properties={"x": "ü"})
            )
            assert r.status == SendStatus.SEND_OK
            assert len(r.msg_id) == 32 and r.msg_id != r.offset_msg_id
            assert r.offset_msg_id.endswith(f"{0:016X}")
            big = bytes(range(256)) * 40  # 10 KiB, compressed on the way
            rb = await p.send(Message("Shop", big))
            results = []
            done = asyncio.Event()

            def cb(res: object, err: BaseException | None) -> None:
                results.append((res, err))
                done.set()

            p.send_async(Message("Shop", b"async"), cb)
            await asyncio.wait_for(done.wait(), 10)
            assert results[0][1] is None
            await p.send_oneway(Message("Shop", b"oneway"))
            rbatch = await p.send_batch([Message("Shop", f"b{i}".encode(), keys=f"bk{i}") for i in range(3)])
            assert len(rbatch.msg_id.split(",")) == 3 and len(rbatch.offset_msg_id.split(",")) == 3
            rd = await p.send(Message("Shop", b"later", delay_level=1))
            assert rd.status == SendStatus.SEND_OK
            await until(
                lambda: sum(q[3] for q in broker.store.queues() if q[0] == "Shop") >= 7, "the delayed message"
            )
            stored = {}
            for topic, qid, lo, hi in broker.store.queues():
                if topic == "Shop":
                    for m in broker.store.get_messages("Shop", qid, lo, hi - lo):
                        stored[m.payload()] = m
            assert set(stored) >= {b"plain", big, b"async", b"oneway", b"b0", b"b1", b"b2"}
            m = stored[b"plain"]
            assert (m.tags, m.keys, m.properties["x"], m.uniq_key) == ("TagA", ["o-1", "u-7"], "ü", r.msg_id)
            assert stored[big].compressed and stored[big].body == zlib.compress(big, 5)
            assert stored[big].msg_id == rb.offset_msg_id
            assert [stored[f"b{i}".encode()].queue_offset for i in range(3)] == [
                rbatch.queue_offset + i for i in range(3)
            ]
            assert broker.store.get_messages("SCHEDULE_TOPIC_XXXX", 0, 0)[0].payload() == b"later"
            assert "PG" in broker.clients.producers
        assert "PG" not in broker.clients.producers, "UNREGISTER_CLIENT at stop"

    run(main())


def test_orderly_sends_keep_a_key_on_one_queue(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker), producer(ns) as p:
            c = await Client().connect(broker.port)
            await c.call(
                RC.UPDATE_AND_CREATE_TOPIC, {"topic": "Ord", "readQueueNums": 8, "writeQueueNums": 8}
            )
            await c.close()
            await p.instance.route("Ord", refresh=True)
            queues: dict[str, set[int]] = {}
            for i in range(60):
                key = f"user-{i % 5}"
                r = await p.send_orderly(Message("Ord", f"{key}:{i}".encode()), key)
                queues.setdefault(key, set()).add(r.message_queue.queue_id)
            assert all(len(q) == 1 for q in queues.values())
            for key, (qid,) in queues.items():
                bodies = [m.body.decode() for m in broker.store.get_messages("Ord", qid, 0, 100)]
                mine = [int(b.split(":")[1]) for b in bodies if b.startswith(key + ":")]
                assert mine == sorted(mine) and len(mine) == 12

    run(main())


def test_refusals_raise_typed_errors(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, max_message_size=2000) as (ns, _), producer(ns) as p:
            with pytest.raises(BrokerError) as e:
                await p.send(Message("Shop", bytes(range(256)) * 2 + b"x" * 1500 + bytes(200)))
            assert e.value.code == 13
            with pytest.raises(ValueError, match="same topic"):
                await p.send_batch([Message("A", b"1"), Message("B", b"2")])

    run(main())


def test_failed_broker_is_retried_elsewhere_and_avoided(tmp_path: Path) -> None:
    async def main() -> None:
        ns = NameServer("127.0.0.1", 0)
        await ns.start()
        try:
            async with (
                running(tmp_path / "a", namesrv=ns, broker_name="broker-a") as (_, a),
                running(tmp_path / "b", namesrv=ns, broker_name="broker-b") as (_, b),
            ):
                for br in (a, b):
                    c = await Client().connect(br.port)
                    await c.call(
                        RC.UPDATE_AND_CREATE_TOPIC, {"topic": "Two", "readQueueNums": 2, "writeQueueNums": 2}
                    )
                    await c.close()
                async with producer(ns) as p:
                    route = await p.instance.route("Two", refresh=True)
                    assert route is not None and set(route.broker_addrs) == {"broker-a", "broker-b"}
                    assert b.server is not None
                    await b.server.stop()  # broker-b stops answering; the name server still lists it
                    brokers = set()
                    for i in range(10):
                        r = await p.send(Message("Two", f"{i}".encode()))
                        brokers.add(r.message_queue.broker_name)
                    assert brokers == {"broker-a"}
                    assert p._fault is not None and not p._fault.available("broker-b")
        finally:
            await ns.stop()

    run(main())


def test_latency_fault_tolerance_backs_off_by_latency() -> None:
    now = [0.0]
    f = LatencyFaultTolerance(clock=lambda: now[0])
    f.update("slow", 40)
    assert f.available("slow")
    f.update("slow", 600)  # ≥ 550 ms: avoided for 30 s
    assert not f.available("slow")
    now[0] = 29.9
    assert not f.available("slow")
    now[0] = 30.1
    assert f.available("slow")
    f.update("dead", 0, failed=True)  # a failure counts as 30 s latency: avoided for 10 min
    now[0] += 599
    assert not f.available("dead")


def test_blocking_facades(tmp_path: Path) -> None:
    server = LoopThread("test-broker")
    started: dict[str, object] = {}

    async def start() -> None:
        cm = running(tmp_path)
        started["cm"] = cm
        started["ns"], started["broker"] = await cm.__aenter__()

    server.run(start(), timeout=30)
    try:
        ns = started["ns"]
        assert isinstance(ns, NameServer)
        namesrv = f"127.0.0.1:{ns.port}"
        with BlockingProducer("PGB", namesrv) as p:
            r = p.send(Message("Sync", b"one"))
            assert r.status == SendStatus.SEND_OK
            fut = p.send_async(Message("Sync", b"two"))
            assert fut.result(10).status == SendStatus.SEND_OK
            p.send_oneway(Message("Sync", b"three"))
            assert p.send_batch([Message("Sync", b"4"), Message("Sync", b"5")]).status == SendStatus.SEND_OK

        class Commit:
            def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
                return LocalTransactionState.COMMIT_MESSAGE

            def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
                return LocalTransactionState.COMMIT_MESSAGE

        with BlockingTransactionProducer("PGT", namesrv, Commit()) as tp:
            assert tp.send_message_in_transaction(Message("Sync", b"tx")).status == SendStatus.SEND_OK

        got: list[bytes] = []
        seen = threading.Event()

        def on_messages(msgs: list[ReceivedMessage]) -> ConsumeStatus:
            got.extend(m.body for m in msgs)
            if len(got) >= 6:
                seen.set()
            return ConsumeStatus.CONSUME_SUCCESS

        consumer = BlockingPushConsumer("CGB", namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        consumer.subscribe("Sync")
        consumer.register_listener(on_messages)
        with consumer:
            assert seen.wait(20)
        assert sorted(got) == sorted([b"one", b"two", b"three", b"4", b"5", b"tx"])

        with BlockingPullConsumer("CGP", namesrv, auto_commit=False) as pull:
            pull.assign(pull.fetch_queues("Sync"))
            for q in pull.assignment():
                pull.seek_to_begin(q)
            polled: list[bytes] = []
            for _ in range(20):
                polled += [m.body for m in pull.poll(timeout=1.0)]
                if len(polled) >= 6:
                    break
            pull.commit()
        assert sorted(polled) == sorted(got)
    finally:
        cm = started["cm"]
        server.run(cm.__aexit__(None, None, None), timeout=30)  # type: ignore[attr-defined]
        server.close()
