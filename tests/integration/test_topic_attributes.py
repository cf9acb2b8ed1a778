"""RocketMQ 5.x typed topics and orderly groups on an in-process broker over real sockets: the
`attributes` field of UPDATE_AND_CREATE_TOPIC (`+message.type=FIFO`) applied and refused as Apache
RocketMQ 5.3.3 does (codes and remarks), shown by GET_ALL_TOPIC_CONFIG, kept in config/topics.json in
5.3.3's shape and across a restart; a 5.3.3 topics.json read back; orderly groups (and the other 5.x
fields of a subscription group) through UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
subscriptionGroup.json and a restart."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import orjson

from ferromq.broker import Broker
from ferromq.broker.topics import TopicConfig
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.command import RemotingCommand
from tests.integration.brokerkit import Client, running

TOPIC = "TypedT"
GROUP = "OrderlyG"
# TopicMessageType's values as 5.5.0 names them (a Guava HashSet of eight; 5.3.3's six printed as
# [UNSPECIFIED, TRANSACTION, FIFO, MIXED, DELAY, NORMAL]).
MESSAGE_TYPE_SET = "[UNSPECIFIED, MIXED, TRANSACTION, PRIORITY, FIFO, DELAY, LITE, NORMAL]"


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def create_ext(topic: str, attributes: str | None = None, queues: int = 4) -> dict[str, Any]:
    """UPDATE_AND_CREATE_TOPIC's header as 5.3.3's admin client sends it."""
    ext: dict[str, Any] = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": "false",
    }
    if attributes is not None:
        ext["attributes"] = attributes
    return ext


async def topic_table(c: Client) -> dict[str, Any]:
    r = await c.call(RC.GET_ALL_TOPIC_CONFIG)
    assert r.code == R.SUCCESS, r.remark
    table: dict[str, Any] = orjson.loads(r.body)["topicConfigTable"]
    return table


async def group_table(c: Client) -> dict[str, Any]:
    r = await c.call(RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert r.code == R.SUCCESS, r.remark
    table: dict[str, Any] = orjson.loads(r.body)["subscriptionGroupTable"]
    return table


def config_of(broker: Broker, topic: str) -> TopicConfig:
    tc = broker.topics.get(topic)
    assert tc is not None, topic
    return tc


def stored(path: Path, table: str, name: str) -> Any:
    return json.loads(path.read_text())[table].get(name)


def refused(r: RemotingCommand, code: int, remark: str) -> None:
    assert (r.code, r.remark) == (code, remark)


def test_message_type_round_trip_and_restart(tmp_path: Path) -> None:
    topics_json = tmp_path / "store" / "config" / "topics.json"

    async def first() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext(TOPIC, "+message.type=FIFO"))
            assert r.code == R.SUCCESS, r.remark
            assert config_of(broker, TOPIC).message_type == "FIFO"
            entry = (await topic_table(c))[TOPIC]
            assert entry["attributes"] == {"message.type": "FIFO"}
            # Every topic has the map, empty when it has no attribute (as 5.3.3 writes it).
            assert (await topic_table(c))["SELF_TEST_TOPIC"]["attributes"] == {}
            # A topics.json entry in 5.3.3's shape.
            assert stored(topics_json, "topicConfigTable", TOPIC) == {
                "attributes": {"message.type": "FIFO"},
                "order": False,
                "perm": 6,
                "readQueueNums": 4,
                "topicFilterType": "SINGLE_TAG",
                "topicName": TOPIC,
                "topicSysFlag": 0,
                "writeQueueNums": 4,
            }
            # One topic's configuration (GET_TOPIC_CONFIG, 5.x): the same entry; refused by name when
            # the broker has no such topic.
            r = await c.call(RC.GET_TOPIC_CONFIG, {"topic": TOPIC})
            assert r.code == R.SUCCESS and orjson.loads(r.body) == entry
            r = await c.call(RC.GET_TOPIC_CONFIG, {"topic": "NoSuchTopic"})
            refused(r, R.TOPIC_NOT_EXIST, "No topic in this broker. topic: NoSuchTopic")
            # An update without attributes keeps them (the changes are applied to what the topic has).
            r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext(TOPIC, queues=8))
            assert r.code == R.SUCCESS, r.remark
            entry = (await topic_table(c))[TOPIC]
            assert (entry["writeQueueNums"], entry["attributes"]) == (8, {"message.type": "FIFO"})
            # message.type may change after creation in 5.3.3, and be removed (NORMAL again).
            r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext(TOPIC, "+message.type=DELAY", queues=8))
            assert r.code == R.SUCCESS, r.remark
            assert config_of(broker, TOPIC).message_type == "DELAY"
            r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext("Untyped", "-message.type"))
            refused(
                r, R.SYSTEM_ERROR, "only add attribute is supported while creating topic. key: message.type"
            )
            r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext("Untyped"))
            assert r.code == R.SUCCESS
            r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext("Untyped", "-message.type"))
            refused(r, R.SYSTEM_ERROR, "attempt to delete a nonexistent key: message.type")
            r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext(TOPIC, "+message.type=FIFO", queues=8))
            assert r.code == R.SUCCESS, r.remark
            await c.close()

    async def again() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            table = await topic_table(c)
            assert table[TOPIC]["attributes"] == {"message.type": "FIFO"}
            assert table["Untyped"]["attributes"] == {}
            assert config_of(broker, TOPIC).message_type == "FIFO"
            assert config_of(broker, "Untyped").message_type == "NORMAL"
            r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext(TOPIC, "-message.type", queues=8))
            assert r.code == R.SUCCESS, r.remark
            assert (await topic_table(c))[TOPIC]["attributes"] == {}
            assert config_of(broker, TOPIC).message_type == "NORMAL"
            await c.close()

    run(first())
    run(again())


def test_refusals_have_java_codes_and_remarks_and_change_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext("Kept", "+queue.type=SimpleCQ"))
            assert r.code == R.SUCCESS, r.remark
            cases = [
                ("Bad1", "+message.type=BAD", R.SYSTEM_ERROR, f"value is not in set: {MESSAGE_TYPE_SET}"),
                ("Bad2", "+message.type=MIXED", R.INVALID_PARAMETER, "MIXED message type is not supported."),
                ("Bad3", "+foo=1", R.SYSTEM_ERROR, "unsupported key: foo"),
                (
                    "Bad4",
                    "message.type=FIFO",
                    R.SYSTEM_ERROR,
                    "add/alter attribute format is wrong: message.type",
                ),
                (
                    "Bad5",
                    "+message.type=FIFO,+message.type=DELAY",
                    R.SYSTEM_ERROR,
                    "key duplication: +message.type",
                ),
                ("Bad6", "+reserve.time=-5", R.SYSTEM_ERROR, f"value is not in range(-1, {2**63 - 1})"),
                (
                    "Kept",
                    "+queue.type=SimpleCQ",
                    R.SYSTEM_ERROR,
                    "attempt to update an unchangeable attribute. key: queue.type",
                ),
                ("Kept", "+message.type=NOPE", R.SYSTEM_ERROR, f"value is not in set: {MESSAGE_TYPE_SET}"),
                # Accepted by Java, but a store ferromq does not keep: refused rather than ignored.
                (
                    "Bad7",
                    "+queue.type=BatchCQ",
                    R.SYSTEM_ERROR,
                    "queue.type=BatchCQ is not supported by ferromq",
                ),
                (
                    "Bad8",
                    "+cleanup.policy=COMPACTION",
                    R.SYSTEM_ERROR,
                    "cleanup.policy=COMPACTION is not supported by ferromq",
                ),
                # 5.5's lite topics expire within 30 days at most.
                (
                    "Bad9",
                    "+message.type=LITE,+lite.topic.expiration=43201",
                    R.SYSTEM_ERROR,
                    "value is not in range(-1, 43200)",
                ),
            ]
            for topic, attributes, code, remark in cases:
                r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext(topic, attributes, queues=2))
                assert (r.code, r.remark) == (code, remark), attributes
            table = await topic_table(c)
            assert not [t for t in table if t.startswith("Bad")]
            assert table["Kept"]["writeQueueNums"] == 4 and table["Kept"]["attributes"] == {
                "queue.type": "SimpleCQ"
            }
            assert config_of(broker, "Kept").attributes == {"queue.type": "SimpleCQ"}
            await c.close()

    run(main())


def test_a_5x_topics_json_is_read(tmp_path: Path) -> None:
    """config/topics.json as a 5.3.3 broker writes it (tab-indented, stateVersion, an empty map for
    untyped topics), and a 4.x entry without the map."""
    config = tmp_path / "store" / "config"
    config.mkdir(parents=True)
    entry = {
        "order": False,
        "perm": 6,
        "readQueueNums": 2,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
    }
    table = {
        "Fifo5": {"attributes": {"message.type": "FIFO"}, **entry, "topicName": "Fifo5", "writeQueueNums": 2},
        "Plain5": {"attributes": {}, **entry, "topicName": "Plain5", "writeQueueNums": 2},
        "Old4": {**entry, "topicName": "Old4", "writeQueueNums": 2},
    }
    data = {"dataVersion": {"counter": 3, "stateVersion": 0, "timestamp": 1}, "topicConfigTable": table}
    (config / "topics.json").write_text(json.dumps(data, indent="\t"))

    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            assert [config_of(broker, t).message_type for t in ("Fifo5", "Plain5", "Old4")] == [
                "FIFO",
                "NORMAL",
                "NORMAL",
            ]
            c = await Client().connect(broker.port)
            got = await topic_table(c)
            assert [got[t]["attributes"] for t in ("Fifo5", "Plain5", "Old4")] == [
                {"message.type": "FIFO"},
                {},
                {},
            ]
            await c.close()

    run(main())


def test_orderly_group_round_trip_and_restart(tmp_path: Path) -> None:
    group_json = tmp_path / "store" / "config" / "subscriptionGroup.json"
    # The body 5.3.3's mqadmin sends for `updateSubGroup -g G -o true -p <policy>`.
    body = {
        "attributes": {},
        "brokerId": 0,
        "consumeBroadcastEnable": False,
        "consumeEnable": True,
        "consumeFromMinEnable": False,
        "consumeMessageOrderly": True,
        "consumeTimeoutMinute": 15,
        "groupName": GROUP,
        "groupRetryPolicy": {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [1000, 5000, 10000]}},
        "groupSysFlag": 0,
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": 16,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }

    async def first() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            r = await c.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(body))
            assert r.code == R.SUCCESS, r.remark
            assert broker.groups.groups[GROUP].consume_message_orderly
            assert (await group_table(c))[GROUP] == body
            assert stored(group_json, "subscriptionGroupTable", GROUP) == body
            # 5.3.3 knows no group attribute: any change of one is refused, as an exception that
            # reached Java's remoting layer; the group stays as it was.
            changed = {**body, "consumeMessageOrderly": False, "attributes": {"+foo": "bar"}}
            r = await c.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(changed))
            refused(
                r,
                R.SYSTEM_ERROR,
                "java.lang.RuntimeException: unsupported key: foo, "
                "org.apache.rocketmq.common.attribute.AttributeUtil.validateAlter(AttributeUtil.java:117)",
            )
            new = {**body, "groupName": "NewG", "attributes": {"-foo": ""}}
            r = await c.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(new))
            assert r.code == R.SYSTEM_ERROR and "only add attribute is supported" in (r.remark or "")
            groups = await group_table(c)
            assert groups[GROUP] == body and "NewG" not in groups
            # A 4.x body (no 5.x field) gets 5.3.3's defaults: not orderly.
            r = await c.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps({"groupName": "OldG"}))
            assert r.code == R.SUCCESS, r.remark
            old = (await group_table(c))["OldG"]
            assert old["consumeMessageOrderly"] is False and old["groupRetryPolicy"] == {"type": "CUSTOMIZED"}
            await c.close()

    async def again() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            assert (await group_table(c))[GROUP] == body
            assert broker.groups.groups[GROUP].consume_message_orderly
            await c.close()

    run(first())
    run(again())
