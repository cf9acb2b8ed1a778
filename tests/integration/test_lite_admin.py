"""RocketMQ 5.5's lite admin views on ferromq alone, over real sockets (what mqadmin 5.5.0's
getLiteGroupInfo, getLiteTopicInfo, getParentTopicInfo and switchTimerEngine ask): GET_LITE_GROUP_INFO
(a lite group's lag, of one lite topic or the top K by lag count), GET_LITE_TOPIC_INFO's subscribers,
GET_PARENT_TOPIC_INFO's groups, SWITCH_TIMER_ENGINE (the file time wheel is the only engine). Side by side
with 5.5.0 through its mqadmin: tests/interop/test_mqadmin55_lite.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from ferromq.broker.topics import TopicConfig
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.testing import Broker
from tests.integration.brokerkit import Client
from tests.integration.test_lite_consumers import ack_lite, lite_group, lmq, pop_until, sync
from tests.integration.test_lite_topics import LITE_TYPE, LMQ_ON, send_lite
from tests.integration.test_topic_attributes import create_ext

pytestmark = [pytest.mark.timeout(120)]

RUN = uuid.uuid4().hex[:6]


async def ask(c: Client, code: int, ext: dict[str, Any]) -> tuple[int, str | None, Any]:
    r = await c.call(code, ext)
    return r.code, r.remark, orjson.loads(r.body) if r.body else None


def test_lite_group_info() -> None:
    async def main() -> None:
        async with Broker(config=LMQ_ON) as b:
            parent, group = f"LiteAdm{RUN}", f"LiteAdmG{RUN}"
            b.broker.topics.update(TopicConfig(parent, 1, 1, attributes=LITE_TYPE))
            c = await Client().connect(b.broker.port)
            await lite_group(c, group, parent)
            # A group that is not a lite group, and none at all.
            r = await c.call(
                RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps({"groupName": "Plain"})
            )
            assert r.code == R.SUCCESS
            assert (await ask(c, RC.GET_LITE_GROUP_INFO, {"group": "Plain", "topK": 5}))[:2] == (
                R.INVALID_PARAMETER,
                "Group [Plain] is not a LITE group.",
            )
            assert (await ask(c, RC.GET_LITE_GROUP_INFO, {"group": "Nope", "topK": 5}))[:2] == (
                R.SUBSCRIPTION_GROUP_NOT_EXIST,
                "Group [Nope] not exist.",
            )
            for lite, n in (("a", 5), ("b", 3), ("c", 1)):
                for i in range(n):
                    assert (await send_lite(c, parent, f"{lite}{i}".encode(), lite))[0] == R.SUCCESS
            # Nothing consumed yet: no offset, no lag counted (as 5.5.0: only committed offsets count).
            code, _, body = await ask(c, RC.GET_LITE_GROUP_INFO, {"group": group, "topK": 5})
            assert code == R.SUCCESS
            assert body == {
                "earliestUnconsumedTimestamp": -1,
                "group": group,
                "lagCountTopK": [],
                "lagTimestampTopK": [],
                "parentTopic": parent,
                "totalLagCount": 0,
            }
            # A client takes "a" and acks two of its messages; "b" and "c" committed at 0 and 1.
            assert (await sync(c, "PARTIAL_ADD", "c1", group, parent, ["a"])).code == R.SUCCESS
            got = await pop_until(c, "c1", group, parent, 5)
            assert len(got) == 5
            for r, m in got[:2]:
                assert (await ack_lite(c, group, parent, r, m)).code == R.SUCCESS
            b.broker.offsets.commit(group, lmq(parent, "b"), 0, 0)
            b.broker.offsets.commit(group, lmq(parent, "c"), 0, 1)
            a_offset = b.broker.offsets.query(group, lmq(parent, "a"), 0)
            assert a_offset == 2

            code, _, body = await ask(c, RC.GET_LITE_GROUP_INFO, {"group": group, "topK": 5})
            assert code == R.SUCCESS
            top = body.pop("lagCountTopK")
            # Most behind first ("c", 0 behind, is not there); ties by name here, in any order in Java.
            assert [(t["liteTopic"], t["lagCount"]) for t in top] == [("a", 3), ("b", 3)]
            for t in top:  # the store time of the first message not consumed
                name = lmq(parent, t["liteTopic"])
                first = b.broker.offsets.query(group, name, 0)
                assert t["earliestUnconsumedTimestamp"] == b.broker.store.store_time(name, 0, first)
            assert body == {
                "earliestUnconsumedTimestamp": -1,
                "group": group,
                "lagTimestampTopK": [],
                "parentTopic": parent,
                "totalLagCount": 6,
            }
            code, _, body = await ask(c, RC.GET_LITE_GROUP_INFO, {"group": group, "topK": 1})
            assert len(body["lagCountTopK"]) == 1 and body["totalLagCount"] == 6

            # One lite topic: its offsets.
            a = lmq(parent, "a")
            code, _, body = await ask(
                c, RC.GET_LITE_GROUP_INFO, {"group": group, "liteTopic": "a", "topK": 5}
            )
            assert code == R.SUCCESS
            assert body == {
                "earliestUnconsumedTimestamp": b.broker.store.store_time(a, 0, 2),
                "group": group,
                "liteTopic": "a",
                "liteTopicOffsetWrapper": {
                    "brokerOffset": 5,
                    "consumerOffset": 2,
                    "lastTimestamp": b.broker.store.store_time(a, 0, 1),
                    "pullOffset": 0,
                },
                "parentTopic": parent,
                "totalLagCount": 3,
            }
            # A lite topic with no message, and one with messages but no offset of the group.
            code, _, body = await ask(
                c, RC.GET_LITE_GROUP_INFO, {"group": group, "liteTopic": "zz", "topK": 5}
            )
            assert (body["totalLagCount"], body["earliestUnconsumedTimestamp"]) == (-1, -1)
            assert "liteTopicOffsetWrapper" not in body
            assert (await send_lite(c, parent, b"d0", "d"))[0] == R.SUCCESS
            code, _, body = await ask(
                c, RC.GET_LITE_GROUP_INFO, {"group": group, "liteTopic": "d", "topK": 5}
            )
            assert (body["totalLagCount"], body["earliestUnconsumedTimestamp"]) == (0, -1)
            assert "liteTopicOffsetWrapper" not in body
            await c.close()

    asyncio.run(main())


def test_lite_topic_subscribers_and_parent_groups() -> None:
    async def main() -> None:
        async with Broker(config=LMQ_ON) as b:
            parent, group, wild = f"LiteSub{RUN}", f"LiteSubG{RUN}", f"LiteWildG{RUN}"
            b.broker.topics.update(TopicConfig(parent, 1, 1, attributes=LITE_TYPE))
            c = await Client().connect(b.broker.port)
            await lite_group(c, group, parent)
            await lite_group(c, wild, parent, **{"+lite.sub.wildcard": "*"})
            assert (await send_lite(c, parent, b"x", "t1"))[0] == R.SUCCESS
            ext = {"parentTopic": parent, "liteTopic": "t1"}
            code, _, body = await ask(c, RC.GET_LITE_TOPIC_INFO, ext)
            assert code == R.SUCCESS and body["subscriber"] == []
            for client_id in ("c1", "c2"):
                r = await sync(c, "PARTIAL_ADD", client_id, group, parent, ["t1"])
                assert r.code == R.SUCCESS, r.remark
            code, _, body = await ask(c, RC.GET_LITE_TOPIC_INFO, ext)
            assert body["subscriber"] == [
                {"clientId": "c1", "group": group},
                {"clientId": "c2", "group": group},
            ]
            # A wildcard group's clients show as one ("*", group).
            assert (await sync(c, "COMPLETE_ADD", "w1", wild, parent, [])).code == R.SUCCESS
            code, _, body = await ask(c, RC.GET_LITE_TOPIC_INFO, ext)
            assert body["subscriber"] == [
                {"clientId": "c1", "group": group},
                {"clientId": "c2", "group": group},
                {"clientId": "*", "group": wild},
            ]
            code, _, body = await ask(c, RC.GET_PARENT_TOPIC_INFO, {"topic": parent})
            assert code == R.SUCCESS and body["groups"] == sorted([group, wild])
            await c.close()

    asyncio.run(main())


@pytest.mark.parametrize("wheel", [True, False])
def test_switch_timer_engine(wheel: bool) -> None:
    async def main() -> None:
        config = {} if wheel else {"timerWheelEnable": "false"}
        async with Broker(config=config) as b:
            c = await Client().connect(b.broker.port)
            answers = {}
            # MessageConst.TIMER_ENGINE_FILE_TIME_WHEEL "F", TIMER_ENGINE_ROCKSDB_TIMELINE "R".
            for engine in ("F", "R", "FILE_TIME_WHEEL", None):
                r = await c.call(RC.SWITCH_TIMER_ENGINE, {} if engine is None else {"E_T": engine})
                answers[engine] = (r.code, r.remark)
            await c.close()
            if not wheel:
                assert set(answers.values()) == {(R.INVALID_PARAMETER, "broker timerWheelEnable is false")}
                return
            assert answers["F"] == (R.SUCCESS, "switch timer engine success")
            code, remark = answers["R"]
            assert code == R.INVALID_PARAMETER
            assert remark.startswith("timerRocksDBEnable must be configured true when broker start")
            assert "ferromq has no RocksDB timer engine" in remark
            assert answers["FILE_TIME_WHEEL"] == answers[None] == (R.INVALID_PARAMETER, "param error")

    asyncio.run(main())


def test_deleting_a_topic_named_with_semicolons_deletes_nothing() -> None:
    """mqadmin 5.5.0's deleteTopic -t "a;b" sends the name whole: no topic has it, success (as 5.5.0)."""

    async def main() -> None:
        async with Broker() as b:
            for t in ("SemiA", "SemiB"):
                b.broker.topics.update(TopicConfig(t, 1, 1))
            c = await Client().connect(b.broker.port)
            r = await c.call(RC.DELETE_TOPIC_IN_BROKER, {"topic": "SemiA;SemiB"})
            assert (r.code, r.remark) == (R.SUCCESS, None)
            assert b.broker.topics.get("SemiA") is not None and b.broker.topics.get("SemiB") is not None
            await c.close()

    asyncio.run(main())


FERROMQ = Path(sys.executable).with_name("ferromq")


def cli(namesrv: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FERROMQ), "admin", "-n", namesrv, "--timeout", "5", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_ferromq_admin_lite_commands() -> None:
    """`ferromq admin lite broker|parent|topic|client|group|trigger-dispatch` against a broker."""

    async def main() -> None:
        async with Broker(config=LMQ_ON) as b:
            parent, group = f"LiteCli{RUN}", f"LiteCliG{RUN}"
            c = await Client().connect(b.broker.port)
            r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext(parent, "+message.type=LITE", 1))
            assert r.code == R.SUCCESS, r.remark
            await lite_group(c, group, parent)
            for i in range(3):
                assert (await send_lite(c, parent, f"a{i}".encode(), "a"))[0] == R.SUCCESS
            assert (await sync(c, "PARTIAL_ADD", "c1", group, parent, ["a"])).code == R.SUCCESS
            got = await pop_until(c, "c1", group, parent, 3)
            assert (await ack_lite(c, group, parent, *got[0])).code == R.SUCCESS

            def run(*args: str) -> Any:
                done = cli(b.namesrv, "lite", *args, "--json")
                assert done.returncode == 0, (args, done.stdout, done.stderr)
                return json.loads(done.stdout)

            deadline = time.monotonic() + 30
            # The broker runs in this loop: each command from a thread. The route comes first.
            while (await asyncio.to_thread(cli, b.namesrv, "lite", "parent", parent)).returncode != 0:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.2)
            assert (await asyncio.to_thread(run, "parent", parent))["broker-a"]["groups"] == [group]
            topic = (await asyncio.to_thread(run, "topic", parent, "a"))["broker-a"]
            assert topic["topicOffset"]["maxOffset"] == 3
            assert topic["subscriber"] == [{"clientId": "c1", "group": group}]
            client = (await asyncio.to_thread(run, "client", parent, group, "c1"))["broker-a"]
            assert client["liteTopicCount"] == 1
            lag = (await asyncio.to_thread(run, "group", parent, group))["broker-a"]
            assert lag["totalLagCount"] == 2 and [t["liteTopic"] for t in lag["lagCountTopK"]] == ["a"]
            one = (await asyncio.to_thread(run, "group", parent, group, "-l", "a"))["broker-a"]
            assert one["liteTopicOffsetWrapper"]["consumerOffset"] == 1
            assert await asyncio.to_thread(run, "trigger-dispatch", parent, group) == {
                "dispatched": ["broker-a"]
            }
            brokers = await asyncio.to_thread(run, "broker", "-d")
            assert [info["groupMeta"] for info in brokers.values()] == [{parent: [group]}]
            table = await asyncio.to_thread(cli, b.namesrv, "lite", "group", parent, group)
            assert table.returncode == 0 and "total lag: 2" in table.stdout
            refused = await asyncio.to_thread(cli, b.namesrv, "lite", "group", parent, "NopeG")
            assert refused.returncode == 3 and "SUBSCRIPTION_GROUP_NOT_EXIST" in refused.stderr
            await c.close()

    asyncio.run(main())
