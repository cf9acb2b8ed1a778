"""Send a few messages with tags, keys and properties, one of each kind of send.

ferromq serve &            # a broker with its name server on 127.0.0.1:9876
python examples/produce.py [--namesrv 127.0.0.1:9876] [--topic Orders]
"""

from __future__ import annotations

import argparse
import asyncio
import os

from ferromq.client import Message, Producer


async def main(namesrv: str, topic: str) -> None:
    async with Producer("example-producer", namesrv) as producer:
        for i in range(5):
            msg = Message(
                topic, f"order {i}".encode(), tags="Created", keys=[f"order-{i}"], properties={"shop": "7"}
            )
            result = await producer.send(msg)
            queue = result.message_queue.queue_id
            print(f"sent {result.msg_id} to queue {queue} at offset {result.queue_offset}")
        batch = await producer.send_batch(
            [Message(topic, f"batch {i}".encode(), tags="Batch") for i in range(3)]
        )
        print(f"batch of 3 stored from offset {batch.queue_offset}")
        await producer.send_oneway(Message(topic, b"fire and forget"))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"))
    ap.add_argument("--topic", default="Orders")
    args = ap.parse_args()
    try:
        asyncio.run(main(args.namesrv, args.topic))
    except KeyboardInterrupt:  # Ctrl-C: `async with` stopped the client on the way out
        raise SystemExit(130) from None
