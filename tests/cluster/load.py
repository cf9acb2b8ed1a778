"""Run inside a host of `ferromq.testing.hosts` (a network namespace), the test's hands there. Each
record is one JSON line, as `ferromq.testing.checker` reads them.

load.py send NAMESRV TOPIC PREFIX OUT STOP     SYNC sends, one message at a time, until the file
                                               STOP exists; every attempt appended to OUT
load.py consume NAMESRV TOPIC GROUP OUT STOP   an orderly push consumer from the first offset;
                                               every delivery appended to OUT
load.py stored TOPIC BROKER...                 the copies the brokers hold (JSON)
load.py replica GROUP CONTROLLER...            each controller's view of the group (a JSON list;
                                               {} for a controller that did not answer)
load.py metadata CONTROLLER...                 each controller's Raft view: leaderId, selfId,
                                               isLeader (a JSON list; {} when no answer)
load.py forge FIELDS OUT STOP CONTROLLER...    unsigned BROKER_HEARTBEATs with FIELDS (JSON) to
                                               every controller every 200 ms; answer codes to OUT

A message is tried up to three times, each attempt recorded with what its answer says about the
message: `ok` (SEND_OK), `stored` (stored but not replicated: the official C++ client sends such a
message again, so this load does too), `unknown` (no answer) or `refused`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ferromq.client.instance import ClientInstance
from ferromq.client.message import Message, ReceivedMessage, SendStatus
from ferromq.client.producer import Producer
from ferromq.client.push_consumer import ConsumeOrderlyStatus, PushConsumer
from ferromq.client.rebalance import ConsumeFromWhere
from ferromq.controller.codes import ControllerCode
from ferromq.errors import ConnectionClosedError, RequestTimeoutError
from ferromq.protocol.codes import ResponseCode
from ferromq.testing.checker import Outcome
from tests.interop.failover_kit import ask, stored_copies

ATTEMPTS = 3


def _write(out: TextIO, record: dict[str, object]) -> None:
    out.write(json.dumps(record) + "\n")


async def send(namesrv: str, topic: str, prefix: str, out_path: Path, stop: Path) -> None:
    instance = ClientInstance(namesrv, instance_name=prefix, timeout=3.0, route_interval=1.0)
    # Retries are this loop's, so that each attempt is recorded.
    producer = Producer("PG_" + prefix, namesrv, instance=instance, send_timeout=3.0, retries=0)
    await producer.start()
    i = 0
    with open(out_path, "a", buffering=1) as out:
        while not stop.exists():
            msg_id = f"{prefix}-{i}"
            i += 1
            for _ in range(ATTEMPTS):
                start = time.time()
                record: dict[str, object] = {"id": msg_id, "start": start}
                try:
                    r = await producer.send(Message(topic, f"{msg_id}|".encode()))
                except (RequestTimeoutError, ConnectionClosedError) as e:
                    record.update(outcome=Outcome.UNKNOWN, detail=str(e))
                except Exception as e:  # a refusal, or no connection: not stored
                    record.update(outcome=Outcome.REFUSED, detail=str(e))
                else:
                    # Every other status says stored, not yet replicated or flushed.
                    record.update(
                        outcome=Outcome.OK if r.status == SendStatus.SEND_OK else Outcome.STORED,
                        detail=str(r.status),
                        group=r.message_queue.broker_name,
                        queue=r.message_queue.queue_id,
                        offset=r.queue_offset,
                    )
                record["end"] = time.time()
                _write(out, record)
                if record["outcome"] == Outcome.OK:
                    break
                await asyncio.sleep(0.05)
    await producer.stop()


async def consume(namesrv: str, topic: str, group: str, out_path: Path, stop: Path) -> None:
    consumer = PushConsumer(
        group,
        namesrv,
        instance_name=group,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        rebalance_interval=2.0,
        persist_interval=1.0,
        lock_interval=2.0,
    )
    consumer.subscribe(topic, "*")
    with open(out_path, "a", buffering=1) as out:

        def listener(msgs: list[ReceivedMessage]) -> ConsumeOrderlyStatus:
            for m in msgs:
                msg_id = m.body.split(b"|", 1)[0].decode()
                record = {"id": msg_id, "group": m.queue.broker_name, "queue": m.queue.queue_id}
                _write(out, {**record, "offset": m.queue_offset, "at": time.time()})
            return ConsumeOrderlyStatus.SUCCESS

        consumer.register_orderly_listener(listener)
        await consumer.start()
        while not stop.exists():
            await asyncio.sleep(0.2)
        await consumer.stop()


def replica(controller: str, group: str) -> dict[str, object]:
    """The controller's view of the group: ferromq's answer (its body), or Apache RocketMQ's
    (the master in the header, the SyncStateSet in the body) in the same keys."""
    reply = ask(controller, ControllerCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": group})
    body: dict[str, object] = json.loads(reply.body) if reply.body else {}
    if "known" in body or reply.code != ResponseCode.SUCCESS:
        return body
    master = reply.ext.get("masterAddress", "")
    return {"known": bool(master), "masterAddr": master, "syncStateSet": body.get("syncStateSet", [])}


def metadata(controller: str) -> dict[str, str]:
    return ask(controller, ControllerCode.CONTROLLER_GET_METADATA_INFO).ext


def answer_of(question: Callable[..., dict[str, Any]], *args: str) -> dict[str, Any]:
    """`question(*args)`, or {} from a controller that did not answer (down, cut off, not started)."""
    try:
        return question(*args)
    except (OSError, TimeoutError, RequestTimeoutError, ConnectionClosedError):
        return {}


def forge(fields: dict[str, str], out_path: Path, stop: Path, controllers: list[str]) -> None:
    with open(out_path, "a", buffering=1) as out:
        while not stop.exists():
            for controller in controllers:
                with contextlib.suppress(OSError, TimeoutError):
                    code = ask(controller, ControllerCode.BROKER_HEARTBEAT, fields).code
                    _write(out, {"controller": controller, "code": code})
            time.sleep(0.2)


def main() -> None:
    mode, *args = sys.argv[1:]
    if mode == "send":
        namesrv, topic, prefix, out, stop = args
        asyncio.run(send(namesrv, topic, prefix, Path(out), Path(stop)))
    elif mode == "consume":
        namesrv, topic, group, out, stop = args
        asyncio.run(consume(namesrv, topic, group, Path(out), Path(stop)))
    elif mode == "stored":
        topic, *brokers = args
        held: dict[str, list[dict[str, object]]] = {}
        for broker in brokers:
            try:
                copies = stored_copies(broker, topic)
                held[broker] = [{"id": i, "queue": q, "offset": o} for i, q, o in copies]
            except OSError as e:  # a broker the test killed: the others must have it all
                print(f"{broker}: {e}", file=sys.stderr)
        print(json.dumps(held))
    elif mode == "replica":
        group, *controllers = args
        print(json.dumps([answer_of(replica, c, group) for c in controllers]))
    elif mode == "metadata":
        print(json.dumps([answer_of(metadata, c) for c in args]))
    elif mode == "forge":
        fields, out, stop, *controllers = args
        forge(json.loads(fields), Path(out), Path(stop), controllers)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
