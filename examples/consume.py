"""A clustering push consumer: every message of the topic is handled once by the group.

python examples/consume.py [--namesrv 127.0.0.1:9876] [--topic Orders] [--tags "*"] [--count N] [--seconds 30]

Stops after --count messages (if given) or --seconds, whichever comes first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os

from ferromq.client import ConsumeStatus, PushConsumer, ReceivedMessage


async def main(namesrv: str, topic: str, tags: str, count: int | None, seconds: float) -> None:
    consumed = 0
    enough = asyncio.Event()

    async def handle(msgs: list[ReceivedMessage]) -> ConsumeStatus:
        nonlocal consumed
        for m in msgs:
            print(f"{m.queue.queue_id}:{m.queue_offset} tags={m.tags} keys={m.keys} body={m.body[:60]!r}")
        consumed += len(msgs)
        if count is not None and consumed >= count:
            enough.set()
        return ConsumeStatus.CONSUME_SUCCESS  # RECONSUME_LATER (or an exception) retries it later

    consumer = PushConsumer("example-consumer", namesrv)
    consumer.subscribe(topic, tags)  # a tag expression: "*" for every tag, or "Created || Batch"
    consumer.register_listener(handle)
    async with consumer:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(enough.wait(), seconds)
    print(f"consumed {consumed} messages")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"))
    ap.add_argument("--topic", default="Orders")
    ap.add_argument("--tags", default="*", help='"*" or tags joined by ||, e.g. "Created || Batch"')
    ap.add_argument("--count", type=int, help="stop after this many messages")
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    try:
        asyncio.run(main(args.namesrv, args.topic, args.tags, args.count, args.seconds))
    except KeyboardInterrupt:  # Ctrl-C: `async with` stopped the client on the way out
        raise SystemExit(130) from None
