"""A dead letter carries the properties Apache RocketMQ 4.9.7 gives it: the Java broker sets the delay level
to 0 when it moves a message to %DLQ%group, so the stored record has DELAY=0 (found by
tests/interop/test_side_by_side.py, which compares the dead letter both brokers store)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R

from .brokerkit import Client, properties, running, send_ext


def test_dead_letter_keeps_delay_0(tmp_path: Path) -> None:
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
                retried = []
                for _ in range(100):
                    retried = broker.store.get_messages("%RETRY%V", 0, 0)
                    if retried:
                        break
                    await asyncio.sleep(0.05)
                (m,) = retried
                assert m.properties["DELAY"] == "3"
                back = {"offset": m.physical_offset, "group": "V", "delayLevel": -1}
                r = await c.call(RC.CONSUMER_SEND_MSG_BACK, back)
                assert r.code == R.SUCCESS
                (dead,) = broker.store.get_messages("%DLQ%V", 0, 0)
                assert (dead.body, dead.reconsume_times, dead.properties["DELAY"]) == (b"work", 2, "0")
            finally:
                await c.close()

    asyncio.run(main())
