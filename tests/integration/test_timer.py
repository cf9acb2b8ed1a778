"""Timer messages (RocketMQ 5.x's TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS): delivered at
their time and not before, refused as Java refuses them, and none lost across kill -9."""

from __future__ import annotations

import asyncio
import base64
import time
from collections import Counter
from pathlib import Path

import pytest

from ferromq.client import Message, Producer
from ferromq.errors import BrokerError
from ferromq.message import StoredMessage
from ferromq.protocol.codes import ResponseCode
from ferromq.store import MessageStore
from ferromq.testing import BrokerProcess
from ferromq.testing.waiting import until, wait_until

from .brokerkit import SMALL_STORE, running

PRECISION_MS = 100


def now_ms() -> int:
    return int(time.time() * 1000)


def rounded(deliver_ms: int, precision: int = PRECISION_MS) -> int:
    """The slot a deliver time waits in (Java's rounding: an exact multiple one slot earlier)."""
    return deliver_ms - precision if deliver_ms % precision == 0 else deliver_ms // precision * precision


def keys(messages: list[StoredMessage]) -> set[str]:
    return {m.properties["KEYS"] for m in messages}


def topic_messages(store: MessageStore, topic: str, queues: int = 8) -> list[StoredMessage]:
    return [m for q in range(queues) for m in store.get_messages(topic, q, 0, 1000)]


def test_timer_messages_arrive_at_their_time_with_javas_properties(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, timer_precision_ms=PRECISION_MS) as (ns, broker):
            async with Producer("PTimer", f"127.0.0.1:{ns.port}") as p:
                sent_at = now_ms()
                asked = {
                    b"deliver": Message("Timed", b"deliver", deliver_time_ms=sent_at + 1500),
                    b"delay-ms": Message("Timed", b"delay-ms", delay_ms=1200),
                    b"delay-sec": Message("Timed", b"delay-sec", properties={"TIMER_DELAY_SEC": "1"}),
                    # A delay level wins; the timer request is dropped.
                    b"level": Message("Timed", b"level", delay_level=1, delay_ms=60_000),
                }
                results = {body: await p.send(m) for body, m in asked.items()}
            # The producer sees its own topic and queue.
            assert {r.message_queue.topic for r in results.values()} == {"Timed"}
            await until(lambda: len(topic_messages(broker.store, "Timed")) == 4, "4 timer messages back", 20)
            got = {m.body: m for m in topic_messages(broker.store, "Timed")}
            for body in (b"deliver", b"delay-ms", b"delay-sec"):
                m = got[body]
                out_ms = int(m.properties["TIMER_OUT_MS"])
                # Never before the slot it waited in has passed, and so never before it was asked.
                assert m.store_timestamp >= out_ms + PRECISION_MS
                assert m.properties["REAL_TOPIC"] == "Timed"
                assert m.properties["REAL_QID"] == str(m.queue_id)
                assert int(m.properties["TIMER_DEQUEUE_MS"]) >= out_ms + PRECISION_MS
                assert int(m.properties["TIMER_ENQUEUE_MS"]) <= int(m.properties["TIMER_DEQUEUE_MS"])
                assert m.queue_id == results[body].message_queue.queue_id
            assert int(got[b"deliver"].properties["TIMER_OUT_MS"]) == rounded(sent_at + 1500)
            assert got[b"deliver"].store_timestamp >= sent_at + 1500
            assert "TIMER_DELAY_MS" not in got[b"level"].properties
            assert got[b"level"].properties["DELAY"] == "1"
            stats = broker.timer.stats() if broker.timer else {}
            assert stats["delivered"] == 3 and stats["pending"] == 0

    asyncio.run(asyncio.wait_for(main(), 60))


def test_refusals_have_javas_codes_and_remarks(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path / "on") as (ns, _broker):
            async with Producer("PTimerBad", f"127.0.0.1:{ns.port}") as p:
                for value in ("259201", "soon"):
                    with pytest.raises(BrokerError) as e:
                        await p.send(Message("TimedBad", b"x", properties={"TIMER_DELAY_SEC": value}))
                    assert e.value.code == ResponseCode.MESSAGE_ILLEGAL
                    assert str(e.value).startswith(
                        "timer message illegal, the delay time should not be bigger than the max delay"
                        " 259200000ms; or if set del msg, the delay time should be bigger than the current"
                        " time"
                    )
                # A time already passed is no timer: the message is stored at once.
                r = await p.send(Message("TimedBad", b"past", deliver_time_ms=now_ms() - 1000))
                assert r.message_queue.topic == "TimedBad"
        async with running(tmp_path / "off", timer_wheel_enable=False) as (ns, broker):
            assert broker.timer is None
            async with Producer("PTimerOff", f"127.0.0.1:{ns.port}") as p:
                with pytest.raises(BrokerError) as e:
                    await p.send(Message("TimedOff", b"x", delay_ms=5000))
                assert e.value.code == ResponseCode.SYSTEM_ERROR
                assert str(e.value) == "accurate timer message is not enabled, timerWheelEnable is false"

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_recalled_timer_message_is_never_delivered(tmp_path: Path) -> None:
    async def main() -> None:
        settings = {"timer_precision_ms": PRECISION_MS, "recall_message_enable": True}
        async with running(tmp_path, **settings) as (ns, broker):
            async with Producer("PRecall", f"127.0.0.1:{ns.port}") as p:
                due = now_ms() + 1500
                gone = await p.send(Message("Recall", b"gone", deliver_time_ms=due))
                kept = await p.send(Message("Recall", b"kept", deliver_time_ms=due))
                plain = await p.send(Message("Recall", b"plain"))
                assert gone.recall_handle and kept.recall_handle and plain.recall_handle is None
                # The handle is RocketMQ's: base64 of "v1 TOPIC BROKER DELIVER_MS UNIQ_KEY".
                raw = base64.urlsafe_b64decode(gone.recall_handle).decode().split(" ")
                assert raw == ["v1", "Recall", broker.config.broker_name, str(rounded(due) + 1), gone.msg_id]
                assert await p.recall("Recall", gone.recall_handle) == gone.msg_id
                # Refusals, with Java's codes and remarks.
                past = base64.urlsafe_b64encode(
                    f"v1 Recall {broker.config.broker_name} 1 X".encode()
                ).decode()
                for topic, handle, code, remark in (
                    ("Recall", past, ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid"),
                    (
                        "Recall2",
                        kept.recall_handle,
                        ResponseCode.TOPIC_NOT_EXIST,
                        "recall failed, the topic[Recall2] not exist",
                    ),
                ):
                    with pytest.raises(BrokerError) as e:
                        await p.recall(topic, handle)
                    assert (e.value.code, str(e.value)) == (code, remark)
            await until(
                lambda: {m.body for m in topic_messages(broker.store, "Recall")} >= {b"kept", b"plain"},
                "the kept timer message delivered",
                20,
            )
            # Delivered in the same slot pass as the recalled one would have been.
            assert sorted(m.body for m in topic_messages(broker.store, "Recall")) == [b"kept", b"plain"]
            assert broker.timer is not None and broker.timer.stats()["recalled"] == 1

    asyncio.run(asyncio.wait_for(main(), 60))


def test_recalls_are_refused_unless_recall_message_enable(tmp_path: Path) -> None:
    """As RocketMQ 5.x: recallMessageEnable is false by default, and a recall is NO_PERMISSION."""

    async def main() -> None:
        async with running(tmp_path, timer_precision_ms=PRECISION_MS) as (ns, broker):
            async with Producer("PRecallOff", f"127.0.0.1:{ns.port}") as p:
                sent = await p.send(Message("RecallOff", b"due", deliver_time_ms=now_ms() + 1500))
                assert sent.recall_handle
                with pytest.raises(BrokerError) as e:
                    await p.recall("RecallOff", sent.recall_handle)
                assert (e.value.code, str(e.value)) == (
                    ResponseCode.NO_PERMISSION,
                    "recall failed, operation is forbidden",
                )
            await until(
                lambda: [m.body for m in topic_messages(broker.store, "RecallOff")] == [b"due"],
                "the timer message delivered",
                20,
            )

    asyncio.run(asyncio.wait_for(main(), 60))


def test_kill_9_loses_no_timer_and_delivers_none_early(tmp_path: Path) -> None:
    """Timers pending in the wheel when the broker is killed are delivered after the restart, on
    time and once; the ones delivered before the kill are not lost either."""
    conf = {
        "timerPrecisionMs": PRECISION_MS,
        "flushDiskType": "SYNC_FLUSH",
        "mappedFileSizeCommitLog": SMALL_STORE["mapped_file_size_commitlog"],
        "mappedFileSizeTimerLog": 64 * 1024,
    }
    store = tmp_path / "store"

    def delivered() -> list[StoredMessage]:
        with MessageStore.open_read_only(store) as view:
            return topic_messages(view, "Crash")

    async def send(namesrv: str) -> dict[str, int]:
        asked = {}
        async with Producer("PCrash", namesrv) as p:
            for i in range(40):
                # Half due before the kill, half after the restart (each from its own send: on a
                # loaded machine 40 sends can take longer than the early half's delay).
                deliver = now_ms() + (400 if i % 2 else 6000)
                await p.send(Message("Crash", f"m{i}".encode(), keys=f"k{i}", deliver_time_ms=deliver))
                asked[f"k{i}"] = deliver
        return asked

    with BrokerProcess(tmp_path / "run1", conf, store=store) as broker:
        asked = asyncio.run(asyncio.wait_for(send(broker.namesrv), 60))
        # The early half back: the timer ran before the kill.
        wait_until(lambda: len(delivered()) >= 20, "the early half delivered before the kill", 30)
        broker.stop(kill=True)
    assert len(keys(delivered())) < len(asked), "the late half was still pending at the kill"
    with BrokerProcess(tmp_path / "run2", conf, store=store):
        wait_until(lambda: keys(delivered()) >= set(asked), "every timer after restart", 60)
        got = delivered()
    late_half = {f"k{i}" for i in range(0, 40, 2)}
    counts = Counter(m.properties["KEYS"] for m in got)
    assert {k: counts[k] for k in late_half} == dict.fromkeys(late_half, 1), "pending timers delivered once"
    for m in got:
        key = m.properties["KEYS"]
        timer_out = m.properties.get("TIMER_OUT_MS")
        if timer_out is not None:
            assert int(timer_out) == rounded(asked[key])
        else:  # an early one whose send took longer than its delay: due on arrival, stored at once
            assert key not in late_half, key
        assert m.store_timestamp >= asked[key], f"{key} delivered {asked[key] - m.store_timestamp} ms early"
