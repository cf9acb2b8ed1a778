"""A clustering push consumer: every message of the topic is handled once by the group.

python examples/consume.py [--namesrv 127.0.0.1:9876] [--topic Orders] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio

from ferromq.client import ConsumeStatus, PushConsumer, ReceivedMessage


async def handle(msgs: list[ReceivedMessage]) -> ConsumeStatus:
    for m in msgs:
        print(f"{m.queue.queue_id}:{m.queue_offset} tags={m.tags} keys={m.keys} body={m.body[:60]!r}")
    return ConsumeStatus.CONSUME_SUCCESS  # RECONSUME_LATER (or an exception) retries it later


async def main(namesrv: str, topic: str, seconds: float) -> None:
    consumer = PushConsumer("example-consumer", namesrv)
    consumer.subscribe(topic, "Created || Batch")  # or "*" for every tag
    consumer.register_listener(handle)
    async with consumer:
        await asyncio.sleep(seconds)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv", default="127.0.0.1:9876")
    ap.add_argument("--topic", default="Orders")
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    try:
        asyncio.run(main(args.namesrv, args.topic, args.seconds))
    except KeyboardInterrupt:  # Ctrl-C: `async with` stopped the client on the way out
        raise SystemExit(130) from None
