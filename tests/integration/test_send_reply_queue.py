"""The answer to a send names the queue the producer asked for, as Apache RocketMQ 4.9.7's does
(SendMessageProcessor answers with the request's queueId), also when the message is stored in another
queue: a delay level's SCHEDULE_TOPIC_XXXX queue or the transaction half queue. Clients build their
SendResult's MessageQueue from it. (The same sends against the real Java broker are in
tests/interop/test_apache_rocketmq_launcher.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R

from .brokerkit import Client, properties, running, send_ext

# (properties, stored topic, stored queue) of each kind of send to queue 1 of a four-queue topic.
CASES = [
    (properties(DELAY="3"), "SCHEDULE_TOPIC_XXXX", 2),
    (properties(TRAN_MSG="true", PGROUP="PG"), "RMQ_SYS_TRANS_HALF_TOPIC", 0),
    (properties(TAGS="plain"), "ReplyQ", 1),
]


def test_send_reply_names_the_requested_queue(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            b = await Client().connect(broker.port)
            for props, stored_topic, stored_queue in CASES:
                sys_flag = 0x4 if "TRAN_MSG" in props else 0
                r = await b.call(RC.SEND_MESSAGE, send_ext("ReplyQ", 1, props, sysFlag=sys_flag), b"x")
                assert r.code == R.SUCCESS, r.remark
                assert r.ext["queueId"] == "1", (props, r.ext)
                stored = broker.store.read(int(r.ext["msgId"][16:], 16))
                assert stored is not None and (stored.topic, stored.queue_id) == (stored_topic, stored_queue)
            await b.close()

    asyncio.run(asyncio.wait_for(main(), 60))
