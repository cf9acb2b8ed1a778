"""Behaviour the side-by-side comparison with Apache RocketMQ 4.9.7 (tests/interop/test_side_by_side.py)
found ferromq doing differently: each test pins what the Java broker does."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.testing.waiting import until

from .brokerkit import Client, properties, running, send_ext


def test_dead_letter_keeps_delay_0(tmp_path: Path) -> None:
    """The Java broker sets the delay level to 0 when it moves a message to %DLQ%group, so the stored dead
    letter has DELAY=0."""

    async def main() -> None:
        async with running(tmp_path, message_delay_level="1s 1s 1s 1s") as (_, broker):
            c = await Client().connect(broker.port)
            try:
                props = properties(TAGS="T1", KEYS="job-1", mine="x")
                r = await c.call(RC.SEND_MESSAGE, send_ext("Job", 0, props), b"work")
                assert r.code == R.SUCCESS
                phys = int(r.ext["msgId"][-16:], 16)
                # maxReconsumeTimes=0 (honoured from client version 121 on): straight to the DLQ.
                back = {"offset": phys, "group": "W", "delayLevel": 0, "maxReconsumeTimes": 0}
                r = await c.call(RC.CONSUMER_SEND_MSG_BACK, back, version=453)
                assert r.code == R.SUCCESS
                (dead,) = broker.store.get_messages("%DLQ%W", 0, 0)
                assert (dead.body, dead.reconsume_times, dead.queue_offset) == (b"work", 1, 0)
                assert dead.properties["DELAY"] == "0"
                assert dead.properties["RETRY_TOPIC"] == "Job"
                assert dead.properties["ORIGIN_MESSAGE_ID"] == f"7F000001{broker.port:08X}{phys:016X}"
                assert (dead.properties["TAGS"], dead.properties["mine"]) == ("T1", "x")
                # DELAY=0 delays nothing: the dead letter is in its queue, none went to the schedule topic.
                assert broker.store.get_messages("SCHEDULE_TOPIC_XXXX", 2, 0) == []
                # A message that came back through a retry (DELAY=3 from the scheduler) loses its level too.
                r = await c.call(RC.CONSUMER_SEND_MSG_BACK, {"offset": phys, "group": "V", "delayLevel": 0})
                assert r.code == R.SUCCESS
                (m,) = await until(lambda: broker.store.get_messages("%RETRY%V", 0, 0), "the retry message")
                assert m.properties["DELAY"] == "3"
                back = {"offset": m.physical_offset, "group": "V", "delayLevel": -1}
                r = await c.call(RC.CONSUMER_SEND_MSG_BACK, back)
                assert r.code == R.SUCCESS
                (dead,) = broker.store.get_messages("%DLQ%V", 0, 0)
                assert (dead.body, dead.reconsume_times, dead.properties["DELAY"]) == (b"work", 2, "0")
            finally:
                await c.close()

    asyncio.run(main())


def test_send_to_a_not_allowed_system_topic_is_no_permission(tmp_path: Path) -> None:
    """TopicValidator.isNotAllowedSendTopic answers NO_PERMISSION (16) in Java 4.9.7, not SYSTEM_ERROR."""

    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            try:
                for topic in (
                    "SCHEDULE_TOPIC_XXXX",
                    "RMQ_SYS_TRANS_HALF_TOPIC",
                    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                ):
                    r = await c.call(RC.SEND_MESSAGE, send_ext(topic, 0), b"x")
                    assert (r.code, r.remark) == (
                        R.NO_PERMISSION,
                        f"Sending message to topic[{topic}] is forbidden.",
                    ), topic
                r = await c.call(RC.SEND_MESSAGE, send_ext("bad topic!", 0), b"x")
                assert r.code == R.SYSTEM_ERROR
            finally:
                await c.close()

    asyncio.run(main())


def test_heartbeat_without_a_body_is_system_error(tmp_path: Path) -> None:
    """Java 4.9.7 answers SYSTEM_ERROR to a HEART_BEAT without a body (it cannot decode the HeartbeatData);
    a heartbeat with a body registers the client as before."""

    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            try:
                r = await c.call(RC.HEART_BEAT)
                assert r.code == R.SYSTEM_ERROR
                # A producer's heartbeat (a consumer's would make the broker notify this bare client).
                body = orjson.dumps({"clientID": "C1", "producerDataSet": [{"groupName": "HPG"}]})
                r = await c.call(RC.HEART_BEAT, body=body)
                assert r.code == R.SUCCESS
                assert list(broker.clients.producers["HPG"]) == ["C1"]
            finally:
                await c.close()

    asyncio.run(main())
