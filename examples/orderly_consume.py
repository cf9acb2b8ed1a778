"""An orderly consumer: each queue is consumed by one client at a time, in order (run
orderly_produce.py to feed it).

    python examples/orderly_consume.py [--namesrv 127.0.0.1:9876] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os

from ferromq.client import ConsumeOrderlyStatus, PushConsumer, ReceivedMessage


async def handle(msgs: list[ReceivedMessage]) -> ConsumeOrderlyStatus:
    for m in msgs:
        print(f"queue {m.queue.queue_id}: {m.body.decode()}")
    return ConsumeOrderlyStatus.SUCCESS


async def main(namesrv: str, seconds: float) -> None:
    consumer = PushConsumer(
        "example-orderly-consumer", namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    consumer.subscribe("OrderSteps")
    consumer.register_orderly_listener(handle)
    async with consumer:
        await asyncio.sleep(seconds)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"))
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    try:
        asyncio.run(main(args.namesrv, args.seconds))
    except KeyboardInterrupt:  # Ctrl-C: `async with` stopped the client on the way out
        raise SystemExit(130) from None
