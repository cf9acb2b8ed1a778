"""Child process for the C++ client interop tests: runs ONE client scenario with the official RocketMQ
C++ client (PyPI `rocketmq` 0.4.4, librocketmq.so) and prints `RESULT {json}` on stdout.

    python cpp_scenarios.py SCENARIO NAMESRV [options]

The C++ library runs its own threads and can crash or hang, so the tests start it in a child process
(subprocess timeout) and every wait in here is bounded too: a watchdog prints a `RESULT` with
`"error": "watchdog"` (and what was received so far) and exits with code 3 when `--deadline` passes.

Scenarios
  produce   send `--count` messages with `--mode` sync | async | oneway | orderly | batch
  push      a push consumer (`--orderly`, `--broadcast`), stops after `--expect` distinct messages (ids
            starting with `--expect-prefix`) were consumed successfully, or when `--stop-file` exists,
            or after `--wait`; `--fail-once ID` makes the callback raise the first time it sees ID
  pull      the C API pull consumer (`PullConsumer.pull`) over all queues of the topic

Message identity: every body starts with `<id>|` (the id is unique per test); consumers report the id,
the length and SHA-256 of the body, tags, keys, user properties, queue id/offset, reconsume times.
Each consumer also appends one JSON line per delivery to `--out` (if given) so that the parent can watch
progress while it runs.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import sys
import threading
import time
from typing import Any

from rocketmq.client import Message, MessageModel, Producer, PullConsumer, PushConsumer, RecvMessage
from rocketmq.ffi import _CConsumeStatus, dll

_out_lock = threading.Lock()
_state: dict[str, Any] = {"scenario": None, "received": [], "sent": [], "errors": []}


def emit(result: dict[str, Any]) -> None:
    with _out_lock:
        sys.stdout.write("RESULT " + json.dumps(result, sort_keys=True) + "\n")
        sys.stdout.flush()


def log(text: str) -> None:
    with _out_lock:
        sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {text}\n")
        sys.stderr.flush()


def start_watchdog(deadline: float) -> None:
    """Hard bound on the whole scenario, shutdown included: report what we have, then _exit."""

    def run() -> None:
        time.sleep(max(0.0, deadline - time.monotonic()))
        log("watchdog: deadline passed, exiting")
        emit({**_state, "error": "watchdog"})
        os._exit(3)

    threading.Thread(target=run, name="watchdog", daemon=True).start()


def body_for(msg_id: str, size: int) -> str:
    head = f"{msg_id}|"
    if size <= len(head):
        return head
    # Printable filler (the C API takes bodies as C strings: no NUL bytes), not too repetitive.
    filler = "".join(chr(33 + (i * 7 + i // 91) % 94) for i in range(size - len(head)))
    return head + filler


def describe_body(body: bytes) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": body.split(b"|", 1)[0].decode("utf-8", "replace"),
        "body_len": len(body),
        "body_sha": hashlib.sha256(body).hexdigest(),
    }
    if len(body) <= 200:
        d["body"] = body.decode("utf-8", "replace")
    return d


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


def describe(msg: RecvMessage, prop_names: list[str]) -> dict[str, Any]:
    d = describe_body(msg.body or b"")
    d.update(
        topic=msg.topic,
        tags=_text(msg.tags),
        keys=_text(msg.keys),
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
        reconsume_times=msg.reconsume_times,
        born_timestamp=msg.born_timestamp,
        store_timestamp=msg.store_timestamp,
        commit_log_offset=msg.commit_log_offset,
        store_size=msg.store_size,
        msg_id=msg.id,
        uniq_key=_text(msg.get_property("UNIQ_KEY")),
        props={name: _text(msg.get_property(name)) for name in prop_names},
        t=time.time(),
        thread=threading.get_ident(),
    )
    return d


def set_log_level(kind: str, handle: Any) -> None:
    # INFO keeps the C++ log (under $HOME/logs/rocketmq-cpp) useful for failure reports.
    fn = {"producer": dll.SetProducerLogLevel, "push": dll.SetPushConsumerLogLevel}.get(kind)
    if fn is not None:
        fn(handle, 4)


def release(client: Any, destroy: Any) -> None:
    """Shut down and destroy the C++ object now, and disarm the wrapper's __del__ (which would do both
    again at interpreter exit)."""
    client.shutdown()
    handle, client._handle = client._handle, None
    destroy(handle)


# ---------------------------------------------------------------------------------------------- produce


# rocketmq 0.4.4 may fail a process's first send while its connection to the broker is still being made:
# its log shows the send failing before "connect ... successfully", then "could not find property mq" for
# its retries (the one broker is excluded), and the error "No route info of this topic". Nothing reached the
# broker, so the first send is tried again, a few times at most.
FIRST_SEND_ATTEMPTS = 4


def send_first_sync(producer: Any, m: Any) -> Any:
    for attempt in range(FIRST_SEND_ATTEMPTS):
        try:
            return producer.send_sync(m)
        except Exception as e:
            if "No route info" not in str(e) or attempt == FIRST_SEND_ATTEMPTS - 1:
                raise
            time.sleep(0.2)
    raise AssertionError("unreachable")


def make_message(args: argparse.Namespace, i: int) -> tuple[Message, dict[str, Any]]:
    msg_id = f"{args.prefix}-{i}"
    body = body_for(msg_id, args.body_size)
    m = Message(args.topic)
    m.set_body(body)
    rec: dict[str, Any] = {"id": msg_id, "i": i, **describe_body(body.encode())}
    if args.tags:
        tag = args.tags.split(",")[i % len(args.tags.split(","))]
        m.set_tags(tag)
        rec["tags"] = tag
    keys = f"{msg_id}-k1 {msg_id}-k2" if args.keys else None
    if keys:
        m.set_keys(keys)
        rec["keys"] = keys
    props = {}
    for spec in args.prop or []:
        name, value = spec.split("=", 1)
        props[name] = value.replace("{i}", str(i))
    props["seq"] = str(i)
    for name, value in props.items():
        m.set_property(name, value)
    rec["props"] = props
    return m, rec


def credentials(client: Any, args: argparse.Namespace) -> None:
    """ACL: the client signs its requests with these keys (channel as the C++ client's default)."""
    if args.access_key:
        client.set_session_credentials(args.access_key, args.secret_key, "ALIYUN")


def scenario_produce(args: argparse.Namespace) -> dict[str, Any]:
    producer = Producer(args.group, timeout=args.send_timeout_ms)
    set_log_level("producer", producer._handle)
    producer.set_namesrv_addr(args.namesrv)
    credentials(producer, args)
    producer.start()
    sent: list[dict[str, Any]] = _state["sent"]
    errors: list[str] = _state["errors"]
    try:
        if args.mode == "batch":
            msgs, recs = [], []
            for i in range(args.count):
                m, rec = make_message(args, i)
                msgs.append(m)
                recs.append(rec)
            r = producer.send_batch(msgs)
            for rec in recs:
                rec.update(status=int(r.status), msg_id=r.msg_id, offset=r.offset)
                sent.append(rec)
        elif args.mode == "async":
            done = threading.Semaphore(0)

            def on_ok(rec: dict[str, Any]) -> Any:
                def cb(r: Any) -> None:
                    rec.update(status=int(r.status), msg_id=r.msg_id, offset=r.offset)
                    sent.append(rec)
                    done.release()

                return cb

            def on_err(rec: dict[str, Any]) -> Any:
                def cb(exc: Exception) -> None:
                    errors.append(f"{rec['id']}: {exc!r}")
                    done.release()

                return cb

            keep = []  # Message objects must outlive the asynchronous send
            for i in range(args.count):
                m, rec = make_message(args, i)
                keep.append(m)
                producer.send_async(m, on_ok(rec), on_err(rec))
            until = time.monotonic() + args.wait
            for _ in range(args.count):
                if not done.acquire(timeout=max(0.0, until - time.monotonic())):
                    errors.append("timed out waiting for async send callbacks")
                    break
        else:
            for i in range(args.count):
                if args.stop_file and os.path.exists(args.stop_file):
                    break
                m, rec = make_message(args, i)
                if args.mode == "sync":
                    try:
                        r = send_first_sync(producer, m) if i == 0 else producer.send_sync(m)
                    except Exception as e:
                        if not args.keep_going:
                            raise
                        errors.append(f"{rec['id']}: {e}")
                        time.sleep(0.05)
                        continue
                    rec.update(status=int(r.status), msg_id=r.msg_id, offset=r.offset)
                    if args.out:
                        # Progress for the parent (failover tests): the id and when it was answered.
                        with open(args.out, "a") as out:
                            out.write(f"{rec['id']} {rec['status']} {time.time():.3f}\n")
                elif args.mode == "oneway":
                    producer.send_oneway(m)
                elif args.mode == "orderly":
                    order = i % args.orders
                    seen: dict[str, int] = {}

                    def selector(mq_size: int, _msg: Any, arg: Any, seen: dict[str, int] = seen) -> int:
                        value = ctypes.cast(arg, ctypes.POINTER(ctypes.c_int))[0]
                        seen["mq_size"] = mq_size
                        seen["queue"] = value % mq_size
                        return value % mq_size

                    m.set_property("order", str(order))
                    rec["props"]["order"] = str(order)
                    r = producer.send_orderly(m, order, queue_selector=selector)
                    rec.update(
                        status=int(r.status),
                        msg_id=r.msg_id,
                        offset=r.offset,
                        order=order,
                        queue=seen.get("queue"),
                        mq_size=seen.get("mq_size"),
                    )
                else:
                    raise SystemExit(f"unknown mode {args.mode}")
                sent.append(rec)
                if args.interval:
                    time.sleep(args.interval)
    finally:
        release(producer, dll.DestroyProducer)
    return {"sent": sent, "errors": errors}


# ------------------------------------------------------------------------------------------------- push


def subscribe(consumer: PushConsumer, topic: str, expression: str, callback: Any) -> None:
    """PushConsumer.subscribe of rocketmq 0.4.4, except that an exception in the callback returns
    RECONSUME_LATER. (0.4.4's wrapper re-raises inside the ctypes callback, so the status the C++ side
    sees is whatever happened to be in the return register: undefined.)"""

    def on_message(_consumer: Any, msg: Any) -> int:
        try:
            callback(RecvMessage(msg))
        except Exception as e:
            log(f"callback raised {e!r}: RECONSUME_LATER")
            return int(_CConsumeStatus.RECONSUME_LATER.value)
        return int(_CConsumeStatus.CONSUME_SUCCESS.value)

    ret = dll.Subscribe(consumer._handle, topic.encode(), expression.encode())
    if ret != 0:
        raise RuntimeError(f"Subscribe failed: {ret}")
    consumer._register_callback(on_message)


def scenario_push(args: argparse.Namespace) -> dict[str, Any]:
    model = MessageModel.BROADCASTING if args.broadcast else MessageModel.CLUSTERING
    consumer = PushConsumer(args.group, orderly=args.orderly, message_model=model)
    set_log_level("push", consumer._handle)
    consumer.set_namesrv_addr(args.namesrv)
    credentials(consumer, args)
    if args.threads:
        consumer.set_thread_count(args.threads)
    received: list[dict[str, Any]] = _state["received"]
    ok_ids: set[str] = set()
    fail_once = set(args.fail_once or [])
    failed: list[dict[str, Any]] = _state.setdefault("failed", [])
    lock = threading.Lock()
    out = open(args.out, "a", encoding="utf-8") if args.out else None
    prop_names = ["seq", "order", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", *(args.props or [])]

    def on_message(msg: RecvMessage) -> None:
        d = describe(msg, prop_names)
        with lock:
            if d["id"] in fail_once:
                fail_once.discard(d["id"])
                d["failed"] = True
                failed.append(d)
                if out:
                    out.write(json.dumps(d) + "\n")
                    out.flush()
                raise RuntimeError(f"failing {d['id']} once on purpose")
            received.append(d)
            if d["id"].startswith(args.expect_prefix):
                ok_ids.add(d["id"])
            if out:
                out.write(json.dumps(d) + "\n")
                out.flush()
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000)

    subscribe(consumer, args.topic, args.expression, on_message)
    started = time.monotonic()
    consumer.start()
    log(f"push consumer {args.group} started")
    print("STARTED", flush=True)
    until = started + args.wait
    reason = "deadline"
    while time.monotonic() < until:
        with lock:
            n = len(ok_ids)
        if args.expect and n >= args.expect and not fail_once:
            reason = "expected"
            break
        if args.stop_file and os.path.exists(args.stop_file):
            reason = "stop-file"
            break
        time.sleep(0.05)
    if args.linger:
        time.sleep(args.linger)
    t = time.monotonic()
    release(consumer, dll.DestroyPushConsumer)  # shutdown commits the consumed offsets (CLUSTERING)
    log(f"push consumer {args.group} shut down in {time.monotonic() - t:.2f}s ({reason})")
    if out:
        out.close()
    with lock:
        return {
            "received": list(received),
            "failed": failed,
            "stop_reason": reason,
            "elapsed": time.monotonic() - started,
        }


# ------------------------------------------------------------------------------------------------- pull


def scenario_pull(args: argparse.Namespace) -> dict[str, Any]:
    consumer = PullConsumer(args.group)
    consumer.set_namesrv_addr(args.namesrv)
    consumer.start()
    received: list[dict[str, Any]] = _state["received"]
    ids: set[str] = set()
    rounds = 0
    started = time.monotonic()
    try:
        while time.monotonic() < started + args.wait:
            rounds += 1
            for msg in consumer.pull(args.topic, expression=args.expression, max_num=args.max_num):
                d = describe(msg, ["seq", *(args.props or [])])
                received.append(d)
                ids.add(d["id"])
            if args.expect and len(ids) >= args.expect:
                break
            time.sleep(0.2)
    finally:
        release(consumer, dll.DestroyPullConsumer)
    offsets = {}
    for key, offset in PullConsumer.offset_table.items():  # keys look like "b'topic'@3"
        topic, _, queue = key.rpartition("@")
        if topic.startswith(("b'", 'b"')):
            topic = topic[2:-1]
        offsets[f"{topic}@{queue}"] = offset
    return {
        "received": received,
        "rounds": rounds,
        "offsets": offsets,
        "elapsed": time.monotonic() - started,
    }


# ------------------------------------------------------------------------------------------------- main


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["produce", "push", "pull"])
    p.add_argument("namesrv")
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--deadline", type=float, default=60.0, help="hard bound for the whole process, seconds")
    p.add_argument("--wait", type=float, default=30.0, help="bound for the scenario's own waiting")
    p.add_argument("--props", action="append", help="extra user property names consumers report")
    p.add_argument("--expression", default="*")
    # produce
    p.add_argument("--mode", default="sync")
    p.add_argument("--count", type=int, default=10)
    p.add_argument("--prefix", default="m")
    p.add_argument("--body-size", type=int, default=0)
    p.add_argument("--tags", default="")
    p.add_argument("--keys", action="store_true")
    p.add_argument("--prop", action="append", help="NAME=VALUE user property ({i} = index)")
    p.add_argument("--orders", type=int, default=4)
    p.add_argument("--interval", type=float, default=0.0)
    p.add_argument("--send-timeout-ms", type=int, default=5000)
    # consume
    p.add_argument("--orderly", action="store_true")
    p.add_argument("--broadcast", action="store_true")
    p.add_argument("--expect", type=int, default=0, help="stop after this many distinct ids were consumed")
    p.add_argument("--expect-prefix", default="", help="count only ids starting with this")
    p.add_argument("--out")
    p.add_argument("--stop-file")
    p.add_argument("--linger", type=float, default=0.0)
    p.add_argument("--fail-once", action="append")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--sleep-ms", type=int, default=0)
    p.add_argument("--max-num", type=int, default=32)
    p.add_argument("--access-key", help="ACL: sign requests with this access key (and --secret-key)")
    p.add_argument("--secret-key")
    p.add_argument(
        "--keep-going",
        action="store_true",
        help="produce sync: record a failed send and go on;"
        " with --stop-file: stop when that file exists; with --out: one line per answer",
    )
    args = p.parse_args()

    _state["scenario"] = args.scenario
    start_watchdog(time.monotonic() + args.deadline)
    fn = {"produce": scenario_produce, "push": scenario_push, "pull": scenario_pull}[args.scenario]
    try:
        result = fn(args)
    except Exception as e:
        log(f"scenario failed: {e!r}")
        emit({**_state, "error": repr(e)})
        os._exit(2)
    emit({"scenario": args.scenario, **result})
    # A normal exit, so that the C++ log (written through a buffered sink) is flushed.
    sys.exit(0)


if __name__ == "__main__":
    main()
