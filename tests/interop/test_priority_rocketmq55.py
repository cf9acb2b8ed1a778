"""Priority messages (RocketMQ 5.4, RIP-80) side by side with Apache RocketMQ 5.5.0: ferromq (in process) and
5.5.0's proxy in local mode (its broker inside, with 5.5.0's defaults: priorityOrderAsc true,
popFromRetryProbabilityForPriority 0) are given the same requests and give the same answers:

- over remoting, sends with `_SYS_MSG_PRIORITY_` to a PRIORITY and a NORMAL topic: the queue each lands in
  (the reply's and the store's, read back by PULL) and whether the property stays — a priority picks the
  queue by the message's type, not the topic's; a message group, or a priority that is not a number, do not;
- a POP of a PRIORITY topic holding three messages of each of ten priorities, sent lowest first: the highest
  priority first, the send order within one;
- the refusals of a `priority.factor` outside 0..100 and of a message type outside 5.5.0's set;
- over gRPC, the official Java client 5.2.0: the same messages sent with `setPriority` and received by a
  SimpleConsumer, in the same order with the same priorities; the client refuses a priority with a message
  group.

The rules themselves are tested on ferromq alone in tests/integration/test_priority_messages.py."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import ApacheRocketMQProxy, have_java, topic_routed

from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.constants import PROPERTY_PRIORITY, PROPERTY_SHARDING_KEY
from ferromq.testing import Broker
from tests.integration.brokerkit import Client, pop_request, pull_ext
from tests.integration.test_priority_messages import BY_PRIORITY, LEVELS, SENT, create_group, send_one
from tests.integration.test_topic_attributes import create_ext
from tests.interop.java5build import build_grpc5_jar, run_driver
from tests.interop.sides import GrpcSide as Side

pytestmark = [
    pytest.mark.skipif(
        not have_java(), reason="Apache RocketMQ 5.5.0 and the Java client need `java` and `mvn`"
    ),
    # The first run resolves the 5.5.0 jars and builds the Java driver.
    pytest.mark.timeout(900),
]

RUN = uuid.uuid4().hex[:6]
ROUTE_TIMEOUT = 60.0
DRIVER_TIMEOUT = 150.0
KINDS = ("ferromq", "rocketmq")


@pytest.fixture(scope="module")
def sides(proxy55: ApacheRocketMQProxy) -> Iterator[dict[str, Side]]:
    with Broker() as b:
        yield {
            "ferromq": Side("ferromq", b.namesrv, b.broker_addr, b.grpc_endpoint),
            "rocketmq": Side("rocketmq", proxy55.namesrv, proxy55.broker_addr, proxy55.grpc_endpoint),
        }


def on_both(sides: dict[str, Side], fn: Any) -> dict[str, Any]:
    """`fn(side)` (a coroutine function) on each side, one after the other."""
    return {kind: asyncio.run(asyncio.wait_for(fn(sides[kind]), 120)) for kind in KINDS}


def same(answers: dict[str, Any], what: str) -> Any:
    assert answers["ferromq"] == answers["rocketmq"], f"{what}: {json.dumps(answers, indent=1, default=str)}"
    return answers["ferromq"]


async def create_topic(c: Client, side: Side, topic: str, queues: int, message_type: str) -> None:
    r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext(topic, f"+message.type={message_type}", queues))
    assert r.code == R.SUCCESS, (side.kind, r.remark)
    deadline = time.monotonic() + ROUTE_TIMEOUT
    while not await asyncio.to_thread(topic_routed, side.namesrv, topic):
        assert time.monotonic() < deadline, f"{side.kind}: no route for {topic}"
        await asyncio.sleep(0.1)


async def stored(c: Client, topic: str, queues: int, group: str) -> dict[str, tuple[int, str | None]]:
    """Every message of `topic`, read by PULL: body -> (queue, its priority property)."""
    out: dict[str, tuple[int, str | None]] = {}
    for q in range(queues):
        r = await c.call(RC.PULL_MESSAGE, pull_ext(group, topic, q, 0))
        if r.code == R.SUCCESS:
            for m in decode_messages(r.body):
                out[m.body.decode()] = (m.queue_id, m.properties.get(PROPERTY_PRIORITY))
    return out


def test_remoting_sends_pops_and_refusals(sides: dict[str, Side]) -> None:
    priority, normal, ordered = f"PrioR{RUN}", f"NormR{RUN}", f"PrioPop{RUN}"
    group = f"PrioRG{RUN}"
    # (topic, asked queue, properties)
    cases: list[tuple[str, int, dict[str, str]]] = [
        (priority, 3, {PROPERTY_PRIORITY: "0"}),
        (priority, 0, {PROPERTY_PRIORITY: "2"}),
        (priority, 0, {PROPERTY_PRIORITY: "9"}),
        (normal, 3, {PROPERTY_PRIORITY: "1"}),
        (priority, 1, {PROPERTY_PRIORITY: "3", PROPERTY_SHARDING_KEY: "g"}),
        (priority, 1, {PROPERTY_PRIORITY: "high"}),
        (priority, 2, {PROPERTY_PRIORITY: "-1"}),
    ]

    async def run(side: Side) -> dict[str, Any]:
        c = await Client().connect(side.broker_port)
        try:
            await create_topic(c, side, priority, 4, "PRIORITY")
            await create_topic(c, side, normal, 4, "NORMAL")
            await create_topic(c, side, ordered, LEVELS, "PRIORITY")
            assert await create_group(c, group) == (R.SUCCESS, ""), side.kind
            replies = []
            for i, (topic, asked, props) in enumerate(cases):
                ext = await send_one(c, topic, asked, f"case{i}".encode(), **props)
                replies.append(int(ext["queueId"]))
            landed = {**await stored(c, priority, 4, group), **await stored(c, normal, 4, group)}
            for body in SENT:
                await send_one(c, ordered, 0, body.encode(), **{PROPERTY_PRIORITY: body[1]})
            r = await c.call(RC.POP_MESSAGE, pop_request(ordered, group, maxMsgNums=len(SENT) + 2))
            assert r.code == R.SUCCESS, (side.kind, r.code, r.remark)
            popped = [m.body.decode() for m in decode_messages(r.body)]
            bad_factor = await create_group(c, f"{group}X", {"+priority.factor": "101"})
            r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext(f"Bad{RUN}", "+message.type=BAD"))
            return {
                "replies": replies,
                "stored": landed,
                "popped": popped,
                "bad_factor": bad_factor,
                "bad_type": (r.code, r.remark),
            }
        finally:
            await c.close()

    answers = same(on_both(sides, run), "remoting")
    assert answers["replies"] == [0, 2, 3, 1, 1, 1, 2]
    assert answers["stored"]["case4"] == (1, None)  # a FIFO message: its priority dropped
    assert answers["popped"] == BY_PRIORITY
    assert answers["bad_factor"][1].startswith("java.lang.RuntimeException: value is not in range(0, 100)")
    assert answers["bad_type"] == (
        R.SYSTEM_ERROR,
        "value is not in set: [UNSPECIFIED, MIXED, TRANSACTION, PRIORITY, FIFO, DELAY, LITE, NORMAL]",
    )


def test_java_client_priority_over_grpc(sides: dict[str, Side], tmp_path: Path) -> None:
    jar = build_grpc5_jar()
    topic, group = f"PrioG{RUN}", f"PrioGG{RUN}"

    async def prepare(side: Side) -> None:
        c = await Client().connect(side.broker_port)
        try:
            await create_topic(c, side, topic, LEVELS, "PRIORITY")
            assert await create_group(c, group) == (R.SUCCESS, ""), side.kind
        finally:
            await c.close()

    on_both(sides, prepare)
    results = {}
    for kind, side in sides.items():
        r = run_driver(
            jar,
            tmp_path / kind,
            "Grpc5",
            side.grpc_endpoint,
            "priority",
            topic,
            group,
            str(LEVELS),
            timeout=DRIVER_TIMEOUT,
        )
        lines = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
        assert r.code == 0 and lines, f"{kind}: {r.stdout[-3000:]}\n{r.stderr[-6000:]}"
        results[kind] = json.loads(lines[-1][len("RESULT ") :])
    result = same(results, "the Java client's priority run")
    assert result["bodies"] == BY_PRIORITY
    assert result["priorities"] == [int(body[1]) for body in BY_PRIORITY]
    assert result["with_group"] == "refused"
