"""The blocking facade, for scripts without asyncio.

python examples/blocking_produce.py [--namesrv 127.0.0.1:9876]
"""

from __future__ import annotations

import argparse
import os

from ferromq.client import Message
from ferromq.client.blocking import BlockingProducer

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"))
    args = ap.parse_args()
    try:
        with BlockingProducer("example-blocking", args.namesrv) as producer:
            result = producer.send(Message("Orders", b"hello from a script", tags="Script"))
            print(result)
    except KeyboardInterrupt:  # Ctrl-C: the producer was closed on the way out
        raise SystemExit(130) from None
