"""Scenarios of the official RocketMQ 5.x Python client (PyPI rocketmq-python-client), run in its own
environment (`client5_python()`: its package `rocketmq` is the C++ client's too) against a gRPC
endpoint, ferromq's or Apache RocketMQ's proxy:

    python client5_scenarios.py ENDPOINT SCENARIO TOPIC GROUP

Each prints one `RESULT {json}` line with what the client saw, normalised (no message ids, times or
hosts) so the same scenario against both servers gives comparable answers. Bounded: every wait has a
deadline."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from rocketmq import (  # type: ignore[import-not-found]
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)

DEADLINE_SECONDS = 60.0


def config(endpoint: str) -> Any:
    """The client's configuration; signed with FERROMQ_TEST_AK / FERROMQ_TEST_SK when set."""
    ak, sk = os.environ.get("FERROMQ_TEST_AK"), os.environ.get("FERROMQ_TEST_SK")
    credentials = Credentials(ak, sk) if ak and sk else Credentials()
    return ClientConfiguration(endpoint, credentials, request_timeout=10)


def message(topic: str, body: str, tag: str = "T", keys: tuple[str, ...] = (), **props: str) -> Any:
    m = Message()
    m.topic = topic
    m.body = body.encode()
    m.tag = tag
    for key in keys:
        m.keys = key  # the setter adds one key
    for k, v in props.items():
        m.add_property(k, v)
    return m


def seen(m: Any) -> dict[str, Any]:
    return {
        "body": m.body.decode(),
        "tag": m.tag,
        "keys": sorted(m.keys or []),
        "properties": dict(sorted((m.properties or {}).items())),
        "delivery_attempt": m.delivery_attempt,
        "topic": m.topic,
    }


def receive(consumer: Any, count: int, invisible: int) -> list[Any]:
    """One receive. Apache RocketMQ's proxy answers a receive that comes before it has taken the
    consumer's settings (Telemetry) with a NullPointerException: then again, for a while."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return list(consumer.receive(count, invisible))
        except Exception as e:
            if "settings" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def receive_until(
    consumer: Any,
    count: int,
    invisible: int,
    done: Callable[[list[Any]], bool] | None = None,
    *,
    ack: bool = False,
) -> list[Any]:
    """Receives until `count` messages came (or `done` says so). With `ack`, each is acked as it
    comes: when they come far apart, the first ones' receipt handles would otherwise expire (after
    `invisible` seconds) before an ack at the end, which the broker refuses as Java's does."""
    out: list[Any] = []
    deadline = time.monotonic() + DEADLINE_SECONDS
    while len(out) < count and time.monotonic() < deadline:
        got = receive(consumer, count - len(out), invisible)
        for m in got if ack else ():
            consumer.ack(m)
        out += got
        if done is not None and done(out):
            break
    return out


def send_all(endpoint: str, topic: str, messages: list[Any]) -> list[str]:
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    try:
        return [producer.send(m).message_id for m in messages]
    finally:
        producer.shutdown()


def roundtrip(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """Three messages with a tag, keys and a user property; a SimpleConsumer receives and acks them."""
    sent = [message(topic, f"rt {i}", "TagA", (f"k{i}",), color="blue") for i in range(3)]
    ids = send_all(endpoint, topic, sent)
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    try:
        got = receive_until(consumer, 3, 15)
        for m in got:
            consumer.ack(m)
        return {
            "received": sorted((seen(m) for m in got), key=lambda s: s["body"]),
            "ids_match": sorted(m.message_id for m in got) == sorted(ids),
        }
    finally:
        consumer.shutdown()


def redelivery(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """A message not acked comes back once its invisible time (changed to 1 s) is over, with its
    delivery attempt raised; acked, it does not come back."""
    send_all(endpoint, topic, [message(topic, "again")])
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    try:
        first = receive_until(consumer, 1, 20)
        consumer.change_invisible_duration(first[0], 1)
        second = receive_until(consumer, 1, 20)
        for m in second:
            consumer.ack(m)
        third = receive(consumer, 1, 20)
        return {
            "first": [seen(m) for m in first],
            "second": [seen(m) for m in second],
            "after_ack": [seen(m) for m in third],
        }
    finally:
        consumer.shutdown()


def push_tags(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """A PushConsumer subscribed to TagA || TagC gets only those; the one that fails once comes back."""
    got: list[dict[str, Any]] = []
    failed: set[str] = set()

    class Listener(MessageListener):  # type: ignore[misc]
        def consume(self, m: Any) -> Any:
            body = m.body.decode()
            if body == "p 2" and body not in failed:
                failed.add(body)
                return ConsumeResult.FAILURE
            got.append(seen(m))
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(config(endpoint), group, Listener(), {topic: FilterExpression("TagA || TagC")})
    consumer.startup()
    try:
        send_all(
            endpoint, topic, [message(topic, f"p {i}", ["TagA", "TagB", "TagC"][i % 3]) for i in range(6)]
        )
        deadline = time.monotonic() + DEADLINE_SECONDS
        while len(got) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        return {"received": sorted((g["body"], g["tag"], g["delivery_attempt"]) for g in got)}
    finally:
        consumer.shutdown()


def push_sql(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """A PushConsumer with an SQL92 filter gets only the messages whose properties match it."""
    from rocketmq.grpc_protocol import FilterType  # type: ignore[import-not-found]

    got: list[dict[str, Any]] = []

    class Listener(MessageListener):  # type: ignore[misc]
        def consume(self, m: Any) -> Any:
            got.append(seen(m))
            return ConsumeResult.SUCCESS

    expression = FilterExpression("a > 1 AND color = 'red'", FilterType.SQL)
    consumer = PushConsumer(config(endpoint), group, Listener(), {topic: expression})
    consumer.startup()
    try:
        colors = ("red", "blue")
        send_all(endpoint, topic, [message(topic, f"s {i}", a=str(i), color=colors[i % 2]) for i in range(6)])
        deadline = time.monotonic() + DEADLINE_SECONDS
        while len(got) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        return {"received": sorted((g["body"], g["delivery_attempt"]) for g in got)}
    finally:
        consumer.shutdown()


def dead_letter(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """A PushConsumer that fails every message, in a group that retries none (retryMaxTimes 0): the
    message is delivered once, then lands in the group's dead letter topic, where a SimpleConsumer of
    another group reads it."""
    deliveries: list[list[Any]] = []

    class Listener(MessageListener):  # type: ignore[misc]
        def consume(self, m: Any) -> Any:
            deliveries.append([m.body.decode(), m.delivery_attempt])
            return ConsumeResult.FAILURE

    consumer = PushConsumer(config(endpoint), group, Listener(), {topic: FilterExpression("*")})
    consumer.startup()
    try:
        send_all(endpoint, topic, [message(topic, "dead", "TagD", ("dk",), color="grey")])
        dead = read_dead_letters(endpoint, group)
        return {"deliveries": deliveries, "dead": [seen(m) for m in dead]}
    finally:
        consumer.shutdown()


def read_dead_letters(endpoint: str, group: str) -> list[Any]:
    """The first message of `%DLQ%group`, read by a SimpleConsumer of another group. The topic exists
    once the first message is in it: until then its route is not found, and the reader asks again."""
    consumer = SimpleConsumer(
        config(endpoint), f"{group}Reader", {f"%DLQ%{group}": FilterExpression("*")}, await_duration=5
    )
    consumer.startup()
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while True:
            try:
                got = receive(consumer, 1, 15)
            except Exception as e:
                if "route" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
                continue
            if got or time.monotonic() > deadline:
                break
        for m in got:
            consumer.ack(m)
        return got
    finally:
        consumer.shutdown()


def wrong_type(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """A FIFO message (message group) to a NORMAL topic is refused."""
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    try:
        m = message(topic, "fifo to normal")
        m.message_group = "g1"
        try:
            producer.send(m)
        except Exception as e:
            return {"refused": type(e).__name__, "message": str(e)}
        return {"refused": None}
    finally:
        producer.shutdown()


def query_route_status(endpoint: str, topic: str) -> list[Any]:
    """The status of a QueryRoute signed as the client signs its calls (the client itself reports a
    refused route only as "failed to fetch topic route")."""
    import grpc  # type: ignore[import-not-found]
    from rocketmq.grpc_protocol import MessagingServiceStub, QueryRouteRequest, Resource  # type: ignore[import-not-found]
    from rocketmq.v5.util.signature import Signature  # type: ignore[import-not-found]

    with grpc.insecure_channel(endpoint) as channel:
        stub = MessagingServiceStub(channel)
        metadata = Signature.metadata(config(endpoint), "scenario@1@0@0")
        r = stub.QueryRoute(QueryRouteRequest(topic=Resource(name=topic)), metadata=metadata, timeout=10)
    return [r.status.code, r.status.message]


def signed_send(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """One send with the environment's credentials: sent, or the refusal (and how a signed
    QueryRoute is answered)."""
    producer = Producer(config(endpoint), (topic,))
    try:
        producer.startup()
        producer.send(message(topic, "signed"))
    except Exception as e:
        route = query_route_status(endpoint, topic)
        return {"sent": False, "refused": type(e).__name__, "message": str(e), "route": route}
    finally:
        producer.shutdown()
    return {"sent": True}


def fifo(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """Two message groups interleaved on a FIFO topic; an orderly group's SimpleConsumer gets each
    group's messages in the order they were sent (acking each before the next comes)."""
    messages = []
    for i in range(4):
        for g in ("gA", "gB"):
            m = message(topic, f"{g}-{i}")
            m.message_group = g
            messages.append(m)
    send_all(endpoint, topic, messages)
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    order: dict[str, list[str]] = {"gA": [], "gB": []}
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while sum(map(len, order.values())) < 8 and time.monotonic() < deadline:
            for m in receive_until(consumer, 1, 15):
                order[m.message_group].append(m.body.decode())
                consumer.ack(m)
        return {"order": order}
    finally:
        consumer.shutdown()


def delay(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """A message delivered at its delivery timestamp (now + 3 s): not before it."""
    m = message(topic, "later")
    due = int(time.time()) + 3
    m.delivery_timestamp = due
    send_all(endpoint, topic, [m])
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    try:
        got = receive_until(consumer, 1, 15)
        at = time.time()
        for r in got:
            consumer.ack(r)
        return {"received": [r.body.decode() for r in got], "early": at < due}
    finally:
        consumer.shutdown()


def transaction(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """Three half messages: one committed, one rolled back, one left open and committed when the
    broker checks back (through the telemetry stream); a consumer gets the committed two only."""
    from rocketmq import TransactionChecker, TransactionResolution  # type: ignore[import-not-found]

    checked: list[str] = []

    class Checker(TransactionChecker):  # type: ignore[misc]
        def check(self, m: Any) -> Any:
            body = m.body.decode()
            checked.append(body)
            return TransactionResolution.ROLLBACK if body == "roll me back" else TransactionResolution.COMMIT

    producer = Producer(config(endpoint), (topic,), Checker())
    producer.startup()
    try:
        for body, end in (("commit me", "commit"), ("roll me back", "rollback"), ("check me", None)):
            t = producer.begin_transaction()
            producer.send(message(topic, body), t)
            if end == "commit":
                t.commit()
            elif end == "rollback":
                t.rollback()
        consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, await_duration=5)
        consumer.startup()
        try:
            # The third comes after the broker checked back, which may take longer than 15 s.
            got = receive_until(consumer, 2, 15, ack=True)
            late = receive(consumer, 1, 15)  # nothing more: the rolled back one never comes
            bodies = [r.body.decode() for r in got + late]
            return {
                "received": sorted(set(bodies)),
                # At least once: a commit and a check that cross may deliver a message twice.
                "duplicates": len(bodies) - len(set(bodies)),
                "checked": sorted(set(checked)),
            }
        finally:
            consumer.shutdown()
    finally:
        producer.shutdown()


def recall(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """A delayed message recalled before it is due is never delivered; another one is."""
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    try:
        first = message(topic, "recalled")
        first.delivery_timestamp = int(time.time()) + 6
        handle = producer.send(first).recall_handle
        producer.recall_message(topic, handle)
        second = message(topic, "kept")
        second.delivery_timestamp = int(time.time()) + 2
        producer.send(second)
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    try:
        got: list[Any] = []
        deadline = time.monotonic() + 12  # past the recalled one's time
        while time.monotonic() < deadline:
            for r in receive(consumer, 2, 15):
                got.append(r)
                consumer.ack(r)
        return {"received": sorted(r.body.decode() for r in got), "had_handle": bool(handle)}
    finally:
        consumer.shutdown()


def hold(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """Five messages received (invisible for 10 s), two of them acked, three left invisible."""
    send_all(endpoint, topic, [message(topic, f"h{i}") for i in range(5)])
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    try:
        got = receive_until(consumer, 5, 10)
        acked = [m for m in got if m.body.decode() in ("h0", "h1")]
        for m in acked:
            consumer.ack(m)
        return {
            "received": sorted(m.body.decode() for m in got),
            "acked": sorted(m.body.decode() for m in acked),
        }
    finally:
        consumer.shutdown()


def take_back(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """What comes back (after a restart): the messages received and not acked, once invisible no
    more; nothing acked. Receives until three came back, then once more to see nothing else does."""
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    try:
        got = receive_until(consumer, 3, 30)
        for m in got:
            consumer.ack(m)
        more = receive(consumer, 5, 30)
        return {
            "received": sorted(m.body.decode() for m in got + more),
            "attempts": sorted(m.delivery_attempt for m in got + more),
        }
    finally:
        consumer.shutdown()


def slow_push(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """A PushConsumer whose listener takes 6 s over one message (longer than the invisible time the
    broker gives a push consumer's messages here): every delivery, until 8 s after it finished."""
    deliveries: list[list[Any]] = []
    finished: list[float] = []

    class Listener(MessageListener):  # type: ignore[misc]
        def consume(self, m: Any) -> Any:
            deliveries.append([m.body.decode(), m.delivery_attempt])
            time.sleep(6)
            finished.append(time.monotonic())
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(config(endpoint), group, Listener(), {topic: FilterExpression("*")})
    consumer.startup()
    try:
        send_all(endpoint, topic, [message(topic, "slow")])
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not (finished and time.monotonic() > finished[0] + 8) and time.monotonic() < deadline:
            time.sleep(0.1)
        return {"deliveries": deliveries}
    finally:
        consumer.shutdown()


def lite_message(topic: str, lite: str, body: str) -> Any:
    m = Message()
    m.topic = topic
    m.body = body.encode()
    m.lite_topic = lite
    return m


def lite_push(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """A LitePushConsumer (bind topic `topic`, a lite group) subscribes lite topics a and b: it gets
    theirs in order, none of d (not subscribed), and after unsubscribe_lite("b") no more of b."""
    from rocketmq import LitePushConsumer

    got: dict[str, list[str]] = {}

    class Listener(MessageListener):  # type: ignore[misc]
        def consume(self, m: Any) -> Any:
            got.setdefault(m.lite_topic or "", []).append(m.body.decode())
            return ConsumeResult.SUCCESS

    consumer = LitePushConsumer(config(endpoint), group, topic, Listener())
    consumer.startup()
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not consumer_quota(consumer) and time.monotonic() < deadline:
            time.sleep(0.05)
        for lite in ("a", "b"):
            consumer.subscribe_lite(lite)
        send_all(
            endpoint, topic, [lite_message(topic, lite, f"{lite}-{i}") for i in range(3) for lite in "abd"]
        )
        while sum(len(v) for v in got.values()) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        first = {k: list(v) for k, v in got.items()}
        consumer.unsubscribe_lite("b")
        send_all(endpoint, topic, [lite_message(topic, lite, f"{lite}-late") for lite in "ba"])
        while len(got.get("a", [])) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(2)  # nothing more of b may come: watched for a while (the only fixed wait)
        return {"first": first, "after_unsubscribe": {k: v[len(first.get(k, [])) :] for k, v in got.items()}}
    finally:
        consumer.shutdown()


def consumer_quota(consumer: Any) -> int:
    """The lite subscription quota the server's settings gave the client (0 until they came)."""
    manager = next((v for k, v in vars(consumer).items() if k.endswith("__subscription_manager")), None)
    return int(manager.lite_subscription_quota or 0) if manager is not None else 0


def lite_simple(endpoint: str, topic: str, group: str) -> dict[str, Any]:
    """A LiteSimpleConsumer subscribes lite topic s, receives its messages in order and acks them; one
    left unacked comes again after its invisible time."""
    from rocketmq import LiteSimpleConsumer

    consumer = LiteSimpleConsumer(topic, config(endpoint), group, await_duration=5)
    consumer.startup()
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not consumer_quota(consumer) and time.monotonic() < deadline:
            time.sleep(0.05)
        consumer.subscribe_lite("s")
        send_all(endpoint, topic, [lite_message(topic, "s", f"s-{i}") for i in range(3)])
        first = receive_until(consumer, 3, 10)  # the shortest invisible time a receive may ask
        bodies = [m.body.decode() for m in first]
        for m in first[:2]:
            consumer.ack(m)
        again = receive_until(consumer, 1, 20)
        for m in again:
            consumer.ack(m)
        return {
            "first": bodies,
            "lite_topics": sorted({m.lite_topic for m in first}),
            "again": [(m.body.decode(), m.delivery_attempt) for m in again],
        }
    finally:
        consumer.shutdown()


SCENARIOS = {
    f.__name__: f
    for f in (
        lite_push,
        lite_simple,
        roundtrip,
        redelivery,
        push_tags,
        push_sql,
        dead_letter,
        wrong_type,
        signed_send,
        fifo,
        delay,
        transaction,
        recall,
        hold,
        take_back,
        slow_push,
    )
}


def main() -> None:
    endpoint, scenario, topic, group = sys.argv[1:5]
    result = SCENARIOS[scenario](endpoint, topic, group)
    print("RESULT " + json.dumps(result, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
