"""Delayed messages: level 1 is 1 s, level 3 is 10 s, ... (the broker's messageDelayLevel).

python examples/delay_produce.py [--namesrv 127.0.0.1:9876] [--level 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from ferromq.client import Message, Producer


async def main(namesrv: str, level: int) -> None:
    async with Producer("example-delay", namesrv) as producer:
        r = await producer.send(
            Message("Reminders", f"sent at {time.time():.3f}".encode(), delay_level=level)
        )
        print(f"stored {r.msg_id}; consumers of Reminders receive it after delay level {level}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"))
    ap.add_argument("--level", type=int, default=2)
    args = ap.parse_args()
    try:
        asyncio.run(main(args.namesrv, args.level))
    except KeyboardInterrupt:  # Ctrl-C: `async with` stopped the client on the way out
        raise SystemExit(130) from None
