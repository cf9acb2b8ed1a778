"""Clients for test_mqadmin.py, run as a child process against one name server (the same against
ferromq and the Java broker): producer group MqaPG sends 10 messages to MqaT (queue i % 4, tags
TagA, keys k0..k9); group MqaOld consumes them all, commits and leaves; group MqaG consumes them
all, commits and stays online with the producer. Prints `RESULT {json}` (the message ids), then
stays until its stdin closes."""

from __future__ import annotations

import asyncio
import json
import sys

from ferromq.client.message import Message, MessageQueue
from ferromq.client.producer import Producer
from ferromq.client.pull_consumer import PullConsumer

TOPIC = "MqaT"
COUNT = 10
BROKER_NAME = "broker-a"


async def consume_all(consumer: PullConsumer, deadline: float) -> int:
    got = 0
    loop = asyncio.get_running_loop()
    while got < COUNT:
        if loop.time() > deadline:
            raise TimeoutError(f"{consumer.group} got {got} of {COUNT} messages")
        got += len(await consumer.poll(timeout=1.0))
    # One queue at a time: Apache RocketMQ 4.9.7's ConsumerOffsetManager.commitOffset creates a new
    # topic@group table with get-then-put, so concurrent first commits of a group can lose queues.
    for mq in consumer.assignment():
        position = consumer.position(mq)
        if position is not None:
            await consumer.commit({mq: position})
    return got


async def main(namesrv: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    async with Producer("MqaPG", namesrv) as producer:
        sent = []
        for i in range(COUNT):
            msg = Message(TOPIC, f"body-{i}".encode(), tags="TagA", keys=f"k{i}")
            r = await producer.send(msg, queue=MessageQueue(TOPIC, BROKER_NAME, i % 4))
            sent.append({"msgId": r.msg_id, "offsetMsgId": r.offset_msg_id, "queueOffset": r.queue_offset})
        for group in ("MqaOld", "MqaG"):
            consumer = PullConsumer(
                group, namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET", auto_commit=False
            )
            await consumer.start()
            consumer.subscribe(TOPIC)
            await consume_all(consumer, deadline)
            if group == "MqaOld":
                await consumer.stop()
        print("RESULT " + json.dumps({"sent": sent}), flush=True)
        # Online until the test closes stdin.
        await loop.run_in_executor(None, sys.stdin.read)
        await consumer.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
