"""POP state moves between ferromq and Apache RocketMQ 5.3.3 with the store: messages popped and not
acked when one broker stops come back from the other, the acked ones do not.

One broker takes 10 messages, a group pops them all with an invisible time longer than the broker
takes to stop (Java 5.3.3's shutdown hook: ~17 s) and acks 4, and the broker stops (SIGTERM) while the
checkpoints wait in its timer wheel. The other starts on the same
store directory (Java's `storePathRootDir`, ferromq's `--store`, the same file sizes): its timer
delivers the checkpoints and acks into `rmq_sys_REVIVE_LOG_DefaultCluster`, its revive service puts
the 6 not acked into `%RETRY%<group>_<topic>`, and a pop gets them, with reconsume count 1. Both ways.
The requests are raw remoting (JSON headers), as the 5.x clients send them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import ROCKETMQ_5_VERSION, have_java, start_rocketmq

from ferromq.client import Message, Producer
from ferromq.message import StoredMessage, decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.testing import BrokerProcess
from tests.integration.brokerkit import Client, pop_receipt, pop_request
from tests.interop.conftest import stop_ferromq
from tests.interop.small_store import SMALL_STORE

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="the 5.3.3 POP store tests need `java` and `mvn` on PATH"),
    pytest.mark.timeout(600),
]

GROUP = "PopMoveGroup"
# How long the popped messages stay invisible: past the writer's stop, which each test checks.
INVISIBLE_MS = {"java": 40_000, "ferromq": 15_000}
# The same keys for both brokers of a store moved between them.
STORE_CONF = {
    "brokerClusterName": "DefaultCluster",
    "brokerName": "broker-a",
    "brokerIP1": "127.0.0.1",
    "autoCreateTopicEnable": "true",
    **SMALL_STORE,
    "timerPrecisionMs": "100",
}


def pop_ext(topic: str, **extra: Any) -> dict[str, Any]:
    return pop_request(topic, GROUP, **extra)


def receipt(ext: dict[str, str], m: StoredMessage) -> str:
    return pop_receipt(ext, m, "broker-a")


async def fill_and_pop(namesrv: str, port: int, topic: str, invisible_ms: int) -> set[bytes]:
    """Sends 10, pops them all, acks 4: the bodies acked."""
    async with Producer("PopMoveProducer", namesrv) as producer:
        for i in range(10):
            await producer.send(Message(topic, f"{topic}-{i}".encode(), keys=f"k{i}"))
    c = await Client().connect(port)
    try:
        got: list[tuple[StoredMessage, str]] = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            r = await c.call(
                RC.POP_MESSAGE, pop_ext(topic, pollTime=1000, invisibleTime=invisible_ms), timeout=10
            )
            assert r.code in (R.SUCCESS, R.POLLING_TIMEOUT), (r.code, r.remark)
            if r.code == R.SUCCESS:
                got += [(m, receipt(r.ext, m)) for m in decode_messages(r.body)]
        assert len(got) == 10, [m.body for m, _ in got]
        for _m, ck in got[:4]:
            f = ck.split(" ")
            ext = {"consumerGroup": GROUP, "topic": topic, "queueId": f[6], "offset": f[7], "extraInfo": ck}
            r = await c.call(RC.ACK_MESSAGE, ext)
            assert r.code == R.SUCCESS, (r.code, r.remark)
        return {m.body for m, _ in got[:4]}
    finally:
        await c.close()


async def pop_back(port: int, topic: str, count: int, timeout: float) -> list[StoredMessage]:
    """Pops (acking each) until `count` messages came back or the time is up."""
    c = await Client().connect(port)
    back: list[StoredMessage] = []
    try:
        deadline = time.monotonic() + timeout
        while len(back) < count and time.monotonic() < deadline:
            r = await c.call(RC.POP_MESSAGE, pop_ext(topic, pollTime=3000, invisibleTime=60_000), timeout=15)
            assert r.code in (R.SUCCESS, R.POLLING_TIMEOUT), (r.code, r.remark)
            if r.code == R.SUCCESS:
                for m in decode_messages(r.body):
                    back.append(m)
                    ck = receipt(r.ext, m)
                    f = ck.split(" ")
                    real = topic if f[4] == "0" else f"%RETRY%{GROUP}_{topic}"
                    ext = {
                        "consumerGroup": GROUP,
                        "topic": real,
                        "queueId": f[6],
                        "offset": f[7],
                        "extraInfo": ck,
                    }
                    await c.call(RC.ACK_MESSAGE, ext)
        return back
    finally:
        await c.close()


def check_stopped_in_time(popped: float, invisible_ms: int) -> None:
    """The writer stopped before the popped messages became visible again (else it revived them itself)."""
    ran = time.monotonic() - popped
    assert ran < invisible_ms / 1000, f"the writer took {ran:.0f} s to stop: its own revive may have run"


def check_back(topic: str, acked: set[bytes], back: list[StoredMessage]) -> None:
    expected = {f"{topic}-{i}".encode() for i in range(10)} - acked
    assert sorted(m.body for m in back) == sorted(expected), ([m.body for m in back], acked)
    assert all(m.topic == topic and m.reconsume_times == 1 for m in back), [
        (m.topic, m.reconsume_times) for m in back
    ]


def test_ferromq_brings_back_what_was_popped_from_a_java_store(
    tmp_path: Path, compat: Callable[..., None]
) -> None:
    topic = "PopFromJava"
    mq = start_rocketmq(tmp_path / "java", dict(STORE_CONF), version=ROCKETMQ_5_VERSION)
    try:
        port = int(mq.broker_addr.rsplit(":", 1)[1])
        acked = asyncio.run(asyncio.wait_for(fill_and_pop(mq.namesrv, port, topic, INVISIBLE_MS["java"]), 90))
        popped = time.monotonic()
    finally:
        mq.stop()
    assert mq.broker_exit is not None, f"the Java broker had to be killed\n{mq.log_tail()}"
    check_stopped_in_time(popped, INVISIBLE_MS["java"])
    server = BrokerProcess(tmp_path / "ferromq", STORE_CONF, store=mq.store).start()
    try:
        back = asyncio.run(asyncio.wait_for(pop_back(server.port, topic, 6, 120), 180))
    finally:
        stop_ferromq(server)
    check_back(topic, acked, back)
    compat(
        area="store files shared with Apache RocketMQ",
        item="POP checkpoints and acks of an Apache RocketMQ 5.3.3 store: revived by ferromq",
        client="raw remoting (5.x POP requests)",
        rocketmq_version=ROCKETMQ_5_VERSION,
    )


def test_java_brings_back_what_was_popped_from_a_ferromq_store(
    tmp_path: Path, compat: Callable[..., None]
) -> None:
    topic = "PopFromFerromq"
    root = tmp_path / "java"
    store = root / "store"  # where start_rocketmq(root) points storePathRootDir
    server = BrokerProcess(tmp_path / "ferromq", STORE_CONF, store=store).start()
    try:
        acked = asyncio.run(
            asyncio.wait_for(fill_and_pop(server.namesrv, server.port, topic, INVISIBLE_MS["ferromq"]), 90)
        )
        popped = time.monotonic()
    finally:
        stop_ferromq(server)
    check_stopped_in_time(popped, INVISIBLE_MS["ferromq"])
    mq = start_rocketmq(root, dict(STORE_CONF), version=ROCKETMQ_5_VERSION)
    try:
        port = int(mq.broker_addr.rsplit(":", 1)[1])
        back = asyncio.run(asyncio.wait_for(pop_back(port, topic, 6, 120), 180))
    finally:
        mq.stop()
    check_back(topic, acked, back)
    compat(
        area="store files shared with Apache RocketMQ",
        item="POP checkpoints and acks of a ferromq store: revived by Apache RocketMQ 5.3.3",
        client="raw remoting (5.x POP requests)",
        rocketmq_version=ROCKETMQ_5_VERSION,
    )
