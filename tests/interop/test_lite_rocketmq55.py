"""Lite topics' store side by side with Apache RocketMQ 5.5.0 (both with enableLmq and enableMultiDispatch):
the same lite messages sent over remoting to a LITE topic of each are read back by PULL from each lite
topic's light message queue (`%LMQ%$<topic>$<lite topic>`, queue 0) with the same bodies, queue offsets and
properties (`__LITE_TOPIC`, INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET; no WAIT), and from the topic's
own queues too.

Where they differ, on purpose: 5.5.0 keeps a consume-queue directory per light message queue
(`consumequeue/%LMQ%$<topic>$<lite topic>/0/`); ferromq keeps them all in one journal (`lmq/journal`), so a
Java broker opening a ferromq store does not see them. 5.5.0 also takes a lite topic with a ',' over
remoting (its multi-dispatch then names two queues); ferromq refuses it (MESSAGE_ILLEGAL)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import ROCKETMQ_55_VERSION, have_java, start_rocketmq

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.testing import Broker
from tests.integration.brokerkit import Client
from tests.integration.test_lite_topics import LMQ_ON, SESSIONS, pull_all, send_lite
from tests.interop.sides import GrpcSide as Side
from tests.interop.test_priority_rocketmq55 import create_topic, on_both, same

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="Apache RocketMQ 5.5.0 needs `java` and `mvn` on PATH"),
    pytest.mark.timeout(900),
]

RUN = uuid.uuid4().hex[:6]
PARENT = f"LiteX{RUN}"
COUNT = 9
# What differs by nature between two brokers' records.
VOLATILE = {"UNIQ_KEY", "CLUSTER", "MSG_REGION", "TRACE_ON", "MAX_OFFSET", "MIN_OFFSET"}


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Side], dict[str, Path]]]:
    """Both brokers, and the consume-queue directory of each store."""
    mq = start_rocketmq(tmp_path_factory.mktemp("lite55"), dict(LMQ_ON), version=ROCKETMQ_55_VERSION)
    try:
        with Broker(config=LMQ_ON) as b:
            sides = {
                "ferromq": Side("ferromq", b.namesrv, b.broker_addr, ""),
                "rocketmq": Side("rocketmq", mq.namesrv, mq.broker_addr, ""),
            }
            stores = {"ferromq": Path(b.broker.store.config.root), "rocketmq": mq.store}
            yield sides, stores
    finally:
        mq.stop(kill=True)  # its store is only listed


def shown(m: Any) -> dict[str, Any]:
    return {
        "body": m.body.decode(),
        "topic": m.topic,
        "queue_offset": m.queue_offset,
        "properties": {k: v for k, v in sorted(m.properties.items()) if k not in VOLATILE},
    }


def test_lite_queues_side_by_side(sides: tuple[dict[str, Side], dict[str, Path]]) -> None:
    brokers, stores = sides

    async def run(side: Side) -> dict[str, Any]:
        c = await Client().connect(side.broker_port)
        try:
            await create_topic(c, side, PARENT, 1, "LITE")
            for i in range(COUNT):
                code, remark = await send_lite(c, PARENT, f"m{i}".encode(), SESSIONS[i % 3])
                assert code == R.SUCCESS, (side.kind, remark)
            lite = {s: [shown(m) for m in await pull_all(c, f"%LMQ%${PARENT}${s}")] for s in SESSIONS}
            parent = [shown(m) for m in await pull_all(c, PARENT)]
            return {"lite": lite, "parent": parent}
        finally:
            await c.close()

    answers = same(on_both(brokers, run), "lite queues")
    for k, s in enumerate(SESSIONS):
        got = answers["lite"][s]
        assert [m["body"] for m in got] == [f"m{i}" for i in range(k, COUNT, 3)]
        assert [m["properties"]["INNER_MULTI_QUEUE_OFFSET"] for m in got] == ["0", "1", "2"]
        assert all("WAIT" not in m["properties"] for m in got)
    assert [m["body"] for m in answers["parent"]] == [f"m{i}" for i in range(COUNT)]
    # Where each keeps them (the module's docstring).
    lmqs = {f"%LMQ%${PARENT}${s}" for s in SESSIONS}
    assert {p.name for p in (stores["rocketmq"] / "consumequeue").glob("%LMQ%*")} == lmqs
    assert not list((stores["ferromq"] / "consumequeue").glob("%LMQ%*"))
    assert (stores["ferromq"] / "lmq" / "journal").stat().st_size > 0


def test_lite_admin_views_side_by_side(sides: tuple[dict[str, Side], dict[str, Path]]) -> None:
    """GET_PARENT_TOPIC_INFO and GET_LITE_TOPIC_INFO (5.5.0's LiteManagerProcessor) answer alike, refusals
    included; the times of the last writes differ by nature and are compared as present."""
    brokers, _ = sides
    parent = f"LiteV{RUN}"

    async def run(side: Side) -> dict[str, Any]:
        c = await Client().connect(side.broker_port)
        try:
            await create_topic(c, side, parent, 1, "LITE")
            await create_topic(c, side, f"Plain{RUN}", 1, "NORMAL")
            for i in range(3):
                assert (await send_lite(c, parent, f"v{i}".encode(), "only"))[0] == R.SUCCESS
            out: dict[str, Any] = {}
            for name, code, ext in (
                ("parent", RC.GET_PARENT_TOPIC_INFO, {"topic": parent}),
                ("missing", RC.GET_PARENT_TOPIC_INFO, {"topic": f"Nope{RUN}"}),
                ("not_lite", RC.GET_PARENT_TOPIC_INFO, {"topic": f"Plain{RUN}"}),
                ("lite", RC.GET_LITE_TOPIC_INFO, {"parentTopic": parent, "liteTopic": "only"}),
                ("lite_unknown", RC.GET_LITE_TOPIC_INFO, {"parentTopic": parent, "liteTopic": "none"}),
            ):
                r = await c.call(code, ext)
                body = json.loads(r.body) if r.body else None
                if body and "topicOffset" in body:
                    body["topicOffset"]["lastUpdateTimestamp"] = (
                        body["topicOffset"]["lastUpdateTimestamp"] > 0
                    )
                if body and "lmqNum" in body:
                    body["lmqNum"] = body["lmqNum"] > 0
                out[name] = (r.code, r.remark, body)
            return out
        finally:
            await c.close()

    answers = same(on_both(brokers, run), "lite admin views")
    assert answers["parent"][2] == {"liteTopicCount": 1, "lmqNum": True, "topic": parent, "ttl": -1}
    assert answers["lite"][2]["topicOffset"] == {"lastUpdateTimestamp": True, "maxOffset": 3, "minOffset": 0}
    assert answers["missing"][0] == R.TOPIC_NOT_EXIST and answers["not_lite"][0] == R.INVALID_PARAMETER
