"""Orderly sends: every message of one sharding key goes to the same queue, so a consumer of that
queue sees them in order.

    python examples/orderly_produce.py [--namesrv 127.0.0.1:9876]
"""

from __future__ import annotations

import argparse
import asyncio
import os

from ferromq.client import Message, Producer


async def main(namesrv: str) -> None:
    async with Producer("example-orderly", namesrv) as producer:
        for step in ("created", "paid", "shipped", "delivered"):
            for order in ("A-1", "B-2", "C-3"):
                r = await producer.send_orderly(
                    Message("OrderSteps", f"{order} {step}".encode(), keys=order), order
                )
                print(f"{order} {step:<9} -> queue {r.message_queue.queue_id}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"))
    try:
        asyncio.run(main(ap.parse_args().namesrv))
    except KeyboardInterrupt:  # Ctrl-C: `async with` stopped the client on the way out
        raise SystemExit(130) from None
