"""DELETE_TOPIC_IN_BROKER and DELETE_SUBSCRIPTIONGROUP side by side with Apache RocketMQ 5.5.0 (whose
AdminBrokerProcessor is 5.3.3's here, plus a LITE topic's lite topics): a blank name and a system topic are
refused with the same code and remark, and deleting a topic a group popped from takes the group's POP retry
topic with it (clearRetryTopicWhenDeleteTopic); a group deleted with `cleanOffset` loses its offsets, one
deleted without keeps them, on both."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from apache_rocketmq import ROCKETMQ_55_VERSION, have_java, start_rocketmq

from ferromq.jsonutil import loads_lenient
from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.testing import Broker
from tests.integration.brokerkit import Client, pop_request
from tests.integration.test_priority_messages import create_group, send_one
from tests.interop.sides import GrpcSide as Side
from tests.interop.test_priority_rocketmq55 import create_topic, on_both, same

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="Apache RocketMQ 5.5.0 needs `java` and `mvn` on PATH"),
    pytest.mark.timeout(900),
]

RUN = uuid.uuid4().hex[:6]
# How long a popped, unacked message may take to reach its retry topic (invisible time + revive scans).
RETRY_WAIT = 90.0


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Side]]:
    mq = start_rocketmq(tmp_path_factory.mktemp("delete55"), version=ROCKETMQ_55_VERSION)
    try:
        with Broker() as b:
            yield {
                "ferromq": Side("ferromq", b.namesrv, b.broker_addr, ""),
                "rocketmq": Side("rocketmq", mq.namesrv, mq.broker_addr, ""),
            }
    finally:
        mq.stop(kill=True)


def test_delete_topic_refusals_and_retry_topics(sides: dict[str, Side]) -> None:
    topic, group = f"Del{RUN}", f"DelG{RUN}"

    async def run(side: Side) -> dict[str, Any]:
        c = await Client().connect(side.broker_port)
        try:
            refusals = {}
            for name in ("", " ", "RMQ_SYS_TRANS_HALF_TOPIC", "SCHEDULE_TOPIC_XXXX", "rmq_sys_anything"):
                r = await c.call(RC.DELETE_TOPIC_IN_BROKER, {"topic": name})
                refusals[name] = (r.code, r.remark)
            await create_topic(c, side, topic, 1, "NORMAL")
            assert await create_group(c, group) == (R.SUCCESS, "")
            await send_one(c, topic, 0, b"popped")
            r = await c.call(RC.POP_MESSAGE, pop_request(topic, group, invisibleTime=1000))
            assert r.code == R.SUCCESS and len(decode_messages(r.body)) == 1, (side.kind, r.code, r.remark)

            async def retry_topics() -> list[str]:
                r = await c.call(RC.GET_ALL_TOPIC_CONFIG, {})
                table = json.loads(r.body)["topicConfigTable"]
                return sorted(t for t in table if t.startswith("%RETRY%") and t.endswith(topic))

            # Not acked, the message is revived into the group's POP retry topic, which that makes.
            deadline = time.monotonic() + RETRY_WAIT
            while not (before := await retry_topics()) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            r = await c.call(RC.DELETE_TOPIC_IN_BROKER, {"topic": topic})
            return {
                "refusals": refusals,
                "retry_before": before,
                "deleted": (r.code, r.remark),
                "retry_after": await retry_topics(),
            }
        finally:
            await c.close()

    answers = same(on_both(sides, run), "delete topic")
    assert answers["refusals"][""] == (R.INVALID_PARAMETER, "The specified topic is blank.")
    assert answers["refusals"]["SCHEDULE_TOPIC_XXXX"] == (
        R.INVALID_PARAMETER,
        "The topic[SCHEDULE_TOPIC_XXXX] is conflict with system topic.",
    )
    assert answers["retry_before"] == [f"%RETRY%{group}_{topic}"]
    assert answers["deleted"][0] == R.SUCCESS and answers["retry_after"] == []


def test_delete_group_with_and_without_its_offsets(sides: dict[str, Side]) -> None:
    topic, kept, cleaned = f"DelO{RUN}", f"Kept{RUN}", f"Clean{RUN}"

    async def run(side: Side) -> list[str]:
        c = await Client().connect(side.broker_port)
        try:
            await create_topic(c, side, topic, 2, "NORMAL")
            for group in (kept, cleaned):
                assert await create_group(c, group) == (R.SUCCESS, "")
                for q in range(2):
                    ext = {"consumerGroup": group, "topic": topic, "queueId": q, "commitOffset": 0}
                    r = await c.call(RC.UPDATE_CONSUMER_OFFSET, ext)
                    assert r.code == R.SUCCESS, (side.kind, r.remark)
            r = await c.call(RC.DELETE_SUBSCRIPTIONGROUP, {"groupName": kept})
            assert r.code == R.SUCCESS, (side.kind, r.remark)
            r = await c.call(RC.DELETE_SUBSCRIPTIONGROUP, {"groupName": cleaned, "cleanOffset": "true"})
            assert r.code == R.SUCCESS, (side.kind, r.remark)
            r = await c.call(RC.GET_ALL_CONSUMER_OFFSET, {})
            table = loads_lenient(r.body)["offsetTable"]  # fastjson's integer keys
            return sorted(k for k in table if k.startswith(f"{topic}@"))
        finally:
            await c.close()

    assert same(on_both(sides, run), "offsets left") == [f"{topic}@{kept}"]
