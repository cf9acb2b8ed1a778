"""Run inside a host of `ferromq.testing.hosts` (a network namespace), the test's hands there:

load.py send NAMESRV TOPIC PREFIX ACKS STOP   SYNC sends until the file STOP exists; each
                                              acknowledged one appended to ACKS as
                                              `id<TAB>time<TAB>store host:port`
load.py stored TOPIC BROKER...                the message ids the brokers serve (JSON)
load.py replica CONTROLLER GROUP              the controller's view of the group (JSON)
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from ferromq import _store
from ferromq.client.instance import ClientInstance
from ferromq.client.message import Message, SendStatus
from ferromq.client.producer import Producer
from ferromq.controller.codes import ControllerCode
from tests.interop.failover_kit import ask, stored_ids


async def send(namesrv: str, topic: str, prefix: str, acks: Path, stop: Path) -> None:
    instance = ClientInstance(namesrv, instance_name=prefix, timeout=3.0, route_interval=1.0)
    producer = Producer("PG_" + prefix, namesrv, instance=instance, send_timeout=3.0)
    await producer.start()
    i = 0
    with open(acks, "a", buffering=1) as out:
        while not stop.exists():
            msg_id = f"{prefix}-{i}"
            i += 1
            try:
                r = await producer.send(Message(topic, f"{msg_id}|".encode()))
            except Exception as e:  # a failed send is not acknowledged: the load goes on
                print(f"{msg_id}: {e}", flush=True)
                await asyncio.sleep(0.05)
                continue
            if r.status == SendStatus.SEND_OK:
                host, _ = _store.decode_offset_msg_id(r.offset_msg_id)
                out.write(f"{msg_id}\t{time.time()}\t{host}\n")
    await producer.stop()


def main() -> None:
    mode, *args = sys.argv[1:]
    if mode == "send":
        namesrv, topic, prefix, acks, stop = args
        asyncio.run(send(namesrv, topic, prefix, Path(acks), Path(stop)))
    elif mode == "stored":
        topic, *brokers = args
        ids: set[str] = set()
        for broker in brokers:
            try:
                ids.update(stored_ids(broker, topic))
            except OSError as e:  # a broker the test killed: the others must have it all
                print(f"{broker}: {e}", file=sys.stderr)
        print(json.dumps(sorted(ids)))
    elif mode == "replica":
        controller, group = args
        reply = ask(controller, ControllerCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": group})
        print(reply.body.decode() if reply.body else "{}")
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
