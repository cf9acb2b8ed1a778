"""The pull consumer: read a topic's queues at your own pace, commit when done.

python examples/pull.py [--namesrv 127.0.0.1:9876] [--topic Orders]
"""

from __future__ import annotations

import argparse
import asyncio
import os

from ferromq.client import PullConsumer


async def main(namesrv: str, topic: str) -> None:
    async with PullConsumer("example-pull", namesrv, auto_commit=False) as consumer:
        consumer.assign(await consumer.fetch_queues(topic))
        for queue in consumer.assignment():
            await consumer.seek_to_begin(queue)
        while batch := await consumer.poll(timeout=2.0):
            for m in batch:
                print(f"{m.queue.queue_id}:{m.queue_offset} {m.body[:60]!r}")
        await consumer.commit()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"))
    ap.add_argument("--topic", default="Orders")
    args = ap.parse_args()
    try:
        asyncio.run(main(args.namesrv, args.topic))
    except KeyboardInterrupt:  # Ctrl-C: `async with` stopped the client on the way out
        raise SystemExit(130) from None
