"""Orderly consumers while their group changes (issue 27, item 8): the queue locks of LOCK_BATCH_MQ and
UNLOCK_BATCH_MQ against ferromq and Apache RocketMQ 4.9.7, and a joining Java 4.9.7 member of an orderly
group that gets the queues its previous owner gave up only after refusing them.

An orderly Java consumer refused a queue at its rebalance asks again only at its next one (every 20 s,
or when the broker sends NOTIFY_CONSUMER_IDS_CHANGED), while the queue's previous owner unlocks it a
moment later (after the message it is consuming, or 20 s later when it still holds pulled messages).
ferromq answers the locks as RocketMQ does and, unlike it, tells the clients it refused a queue when that
queue is unlocked (or its lock expires), so they rebalance then.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import orjson
import pytest
from apache_rocketmq import ROCKETMQ_VERSION

from ferromq.jsonutil import loads_lenient
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.testing.waiting import until
from tests.integration.brokerkit import Client
from tests.interop.compat import JAVA, OFFICIAL, RAW
from tests.interop.side_by_side import KINDS, Endpoint, build_jar, events, run_java, running_broker

HAVE_JAVA = shutil.which("mvn") is not None and shutil.which("java") is not None

pytestmark = [
    pytest.mark.skipif(not HAVE_JAVA, reason="these tests need `java` and `mvn` (Apache RocketMQ)"),
    # The first run resolves the broker's and the client's jars from Maven Central.
    pytest.mark.timeout(900),
]

WAIT = 15.0  # seconds any awaited condition gets


@pytest.fixture(scope="module")
def endpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Endpoint]]:
    build_jar()
    with ExitStack() as stack:
        yield {
            k: stack.enter_context(running_broker(k, tmp_path_factory.mktemp(f"orderly-{k}"))) for k in KINDS
        }


def _heartbeat(client_id: str, group: str, topic: str) -> bytes:
    """A Java 4.9.7 push consumer's heartbeat (enum names, a TAG subscription to everything)."""
    sub = {
        "classFilterMode": False,
        "codeSet": [],
        "expressionType": "TAG",
        "subString": "*",
        "subVersion": int(time.time() * 1000),
        "tagsSet": [],
        "topic": topic,
    }
    consumer = {
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        "consumeType": "CONSUME_PASSIVELY",
        "groupName": group,
        "messageModel": "CLUSTERING",
        "subscriptionDataSet": [sub],
        "unitMode": False,
    }
    return orjson.dumps({"clientID": client_id, "consumerDataSet": [consumer], "producerDataSet": []})


def _notifications(client: Client, group: str) -> int:
    return sum(
        1
        for r in client.server_requests
        if r.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and r.ext.get("consumerGroup") == group
    )


async def _lock_scenario(ep: Endpoint) -> dict[str, Any]:
    """Clients A and B of one group contend for queues 0-2 of a topic. Returns every answer, and for
    each UNLOCK of A whether B (refused that queue before) was sent NOTIFY_CONSUMER_IDS_CHANGED."""
    group, topic, broker_name = "orderly_lock_group", "OrderlyLockTopic", "broker-a"
    port = int(ep.broker_addr.rsplit(":", 1)[1])

    def body(client_id: str, queues: list[int]) -> bytes:
        mqs = [{"brokerName": broker_name, "queueId": q, "topic": topic} for q in queues]
        return orjson.dumps({"clientId": client_id, "consumerGroup": group, "mqSet": mqs})

    a, b = await Client().connect(port), await Client().connect(port)
    answers: list[Any] = []
    told: list[bool] = []
    try:

        async def lock(c: Client, cid: str, queues: list[int]) -> None:
            r = await c.call(RequestCode.LOCK_BATCH_MQ, body=body(cid, queues))
            locked = loads_lenient(r.body).get("lockOKMQSet") if r.code == ResponseCode.SUCCESS else None
            answers.append(["lock", cid, queues, r.code, sorted(m["queueId"] for m in locked or [])])

        async def unlock(c: Client, cid: str, queues: list[int]) -> None:
            r = await c.call(RequestCode.UNLOCK_BATCH_MQ, body=body(cid, queues))
            answers.append(["unlock", cid, queues, r.code])

        async def a_unlocks(queues: list[int]) -> None:
            """A gives up queues B was refused: does B hear of it? (ferromq: it must)."""
            before = _notifications(b, group)
            await unlock(a, "A", queues)
            if ep.kind == "ferromq":
                await until(
                    lambda: _notifications(b, group) > before,
                    f"NOTIFY_CONSUMER_IDS_CHANGED to B once A unlocked {queues}",
                    WAIT,
                )
                told.append(True)

        for c, cid in ((a, "A"), (b, "B")):
            r = await c.call(RequestCode.HEART_BEAT, body=_heartbeat(cid, group, topic))
            answers.append(["heartbeat", cid, r.code])
        # B's own join is notified to both: wait for it, so that what B is told later is told anew.
        await until(lambda: _notifications(b, group) >= 1, "NOTIFY_CONSUMER_IDS_CHANGED of B's join", WAIT)

        await lock(a, "A", [0, 1])
        await lock(b, "B", [0, 1, 2])  # partly held by A: B gets what it could lock
        await unlock(b, "B", [0])  # not B's: nothing changes
        await lock(b, "B", [0])
        await lock(a, "A", [0, 1])  # renewal
        await a_unlocks([0])
        await lock(b, "B", [0, 1])  # 0 is free now, 1 still A's
        await lock(a, "A", [0])
        await a_unlocks([1])
        await lock(b, "B", [1])
    finally:
        await a.close()
        await b.close()
    return {"answers": answers, "told": told}


def test_lock_answers_as_rocketmq_and_a_refused_client_is_told_of_the_unlock(
    endpoints: dict[str, Endpoint], compat: Callable[..., None]
) -> None:
    results = {kind: asyncio.run(_lock_scenario(endpoints[kind])) for kind in KINDS}
    # The answers are RocketMQ's, request for request.
    assert results["ferromq"]["answers"] == results["rocketmq"]["answers"]
    assert [a[-1] for a in results["ferromq"]["answers"] if a[0] == "lock"] == [
        [0, 1],
        [2],
        [],
        [0, 1],
        [0],
        [],
        [1],
    ]
    # A deliberate difference: ferromq tells B each time A unlocks a queue B was refused.
    assert results["ferromq"]["told"] == [True, True]
    compat(
        area="side by side",
        item="LOCK_BATCH_MQ / UNLOCK_BATCH_MQ of two clients contending for queues (partial grants)",
        client=RAW,
        rocketmq_version=ROCKETMQ_VERSION,
    )
    compat(
        area="side by side",
        item="NOTIFY_CONSUMER_IDS_CHANGED to a client refused a queue, once that queue is unlocked",
        client=RAW,
        rocketmq_version=ROCKETMQ_VERSION,
        outcome="differs (deliberate)",
        note="RocketMQ sends none: the refused orderly consumer waits for its next rebalance (20 s)",
    )


def test_joining_orderly_member_gets_the_queues_its_previous_owner_gave_up(
    endpoints: dict[str, Endpoint], compat: Callable[..., None]
) -> None:
    """Official Java 4.9.7 orderly push consumers, on ferromq: member 1 pulled every message (stored
    before it started) and consumes; member 2 joins, its LOCK_BATCH_MQ for the queues that are now its
    own are refused (member 1 still holds them and, holding pulled messages, unlocks them 2 s after
    its rebalance). The members' periodic rebalance is an hour here: member 2 gets those queues only
    if the broker tells it they are free. Every message must be consumed, each queue's in order, no
    queue by two members at once (the driver checks each delivery)."""
    ep = endpoints["ferromq"]
    results = run_java(
        ep,
        "OrderlyJoin",
        "orderly-join",
        timeout=90,
        broker=ep.broker_addr,
        topic="OrderlyJoinTopic",
        group="orderly_join_group",
        queues=8,
        n=400,  # member 1 needs 8 s per queue: member 2 joins well before it is done
        work=20,
        members=2,
        joinEvery=1500,
        preload="true",
        rebalanceWaitMs=3_600_000,
        unlockDelayMs=2000,
    )
    summary = events(results, "summary")[-1]
    assert summary["failures"] == []
    assert summary["distinct"] == summary["expected"] == 8 * 400
    # Member 2 consumed its share (AVG allocation: half of the 8 queues, the ones member 1 had).
    taken = sorted(e["queue"] for e in events(results, "first") if e["member"] == "m2")
    assert len(taken) == 4, events(results, "first")
    compat(
        area=OFFICIAL,
        item="orderly push consumers: a joining member gets the queues its previous owner unlocked",
        client=JAVA,
        rocketmq_version=None,
    )
