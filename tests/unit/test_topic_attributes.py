"""RocketMQ 5.x attributes as pure code: the `+key=value,-key` text of UPDATE_AND_CREATE_TOPIC
(AttributeParser.parseToMap), changes applied to what a topic has (AttributeUtil.alterCurrentAttributes)
with Java 5.3.3's messages, and TopicConfig / SubscriptionGroupConfig JSON in 5.3.3's shapes."""

from __future__ import annotations

import pytest

from ferromq.broker.subscriptions import GROUP_ATTRIBUTES, SubscriptionGroupConfig
from ferromq.broker.topics import (
    TOPIC_ATTRIBUTES,
    InvalidAttributes,
    TopicConfig,
    alter_attributes,
    parse_attribute_changes,
)

# TopicMessageType's values as 5.5.0 names them (a Guava HashSet of eight; 5.3.3's six printed as
# [UNSPECIFIED, TRANSACTION, FIFO, MIXED, DELAY, NORMAL]).
MESSAGE_TYPE_SET = "[UNSPECIFIED, MIXED, TRANSACTION, PRIORITY, FIFO, DELAY, LITE, NORMAL]"


@pytest.mark.parametrize(
    ("text", "changes"),
    [
        (None, {}),
        ("", {}),
        (",", {}),
        ("+message.type=FIFO", {"+message.type": "FIFO"}),
        ("+message.type=FIFO,", {"+message.type": "FIFO"}),
        ("+a=1,-b,+c=x=y", {"+a": "1", "-b": "", "+c": "x"}),
        ("+a==b", {"+a": ""}),
    ],
)
def test_parse_changes(text: str | None, changes: dict[str, str]) -> None:
    got = parse_attribute_changes(text)
    assert got == changes and list(got) == list(changes)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("message.type=FIFO", "add/alter attribute format is wrong: message.type"),
        ("message.type", "delete attribute format is wrong: message.type"),
        ("+a=1,,+b=2", "delete attribute format is wrong: "),
        ("+a=1,+a=2", "key duplication: +a"),
        ("+a=", "Index 1 out of bounds for length 1"),
        ("=", "Index 0 out of bounds for length 0"),
    ],
)
def test_parse_refusals(text: str, message: str) -> None:
    with pytest.raises(InvalidAttributes) as e:
        parse_attribute_changes(text)
    assert str(e.value) == message


@pytest.mark.parametrize(
    ("create", "current", "changes", "final"),
    [
        (True, {}, {"+message.type": "FIFO"}, {"message.type": "FIFO"}),
        (True, {}, {"+message.type": "UNSPECIFIED"}, {"message.type": "UNSPECIFIED"}),
        (
            True,
            {},
            {"+queue.type": "SimpleCQ", "+reserve.time": "-1"},
            {"queue.type": "SimpleCQ", "reserve.time": "-1"},
        ),
        (False, {"message.type": "FIFO"}, {}, {"message.type": "FIFO"}),
        (False, {"message.type": "FIFO"}, {"+message.type": "DELAY"}, {"message.type": "DELAY"}),
        (False, {"message.type": "FIFO"}, {"-message.type": ""}, {}),
        (
            False,
            {"queue.type": "SimpleCQ"},
            {"+message.type": "NORMAL"},
            {"queue.type": "SimpleCQ", "message.type": "NORMAL"},
        ),
    ],
)
def test_alter(create: bool, current: dict[str, str], changes: dict[str, str], final: dict[str, str]) -> None:
    before = dict(current)
    assert alter_attributes(create, TOPIC_ATTRIBUTES, current, changes) == final
    assert current == before


@pytest.mark.parametrize(
    ("create", "current", "changes", "message"),
    [
        (True, {}, {"+message.type": "BAD"}, f"value is not in set: {MESSAGE_TYPE_SET}"),
        (True, {}, {"+queue.type": "X"}, "value is not in set: [SimpleCQ, BatchCQ]"),
        (True, {}, {"+cleanup.policy": "X"}, "value is not in set: [DELETE, COMPACTION]"),
        (True, {}, {"+reserve.time": "x"}, 'For input string: "x"'),
        (True, {}, {"+reserve.time": "-2"}, f"value is not in range(-1, {2**63 - 1})"),
        (True, {}, {"+foo": "1"}, "unsupported key: foo"),
        (
            True,
            {},
            {"-message.type": ""},
            "only add attribute is supported while creating topic. key: message.type",
        ),
        (False, {}, {"-message.type": ""}, "attempt to delete a nonexistent key: message.type"),
        (
            False,
            {},
            {"+queue.type": "SimpleCQ"},
            "attempt to update an unchangeable attribute. key: queue.type",
        ),
        (False, {}, {"message.type": "FIFO"}, "wrong format key: essage.type"),
        (True, {}, {"+": "x"}, "kv string format wrong."),
        (True, {}, {"+a+b": "x"}, "kv string format wrong."),
        (True, {}, {"+a-b": "x"}, "kv string format wrong."),
        (
            False,
            {"message.type": "FIFO"},
            {"+message.type": "FIFO", "-message.type": ""},
            "alter duplication key. key: message.type",
        ),
    ],
)
def test_alter_refusals(create: bool, current: dict[str, str], changes: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidAttributes) as e:
        alter_attributes(create, TOPIC_ATTRIBUTES, current, changes)
    assert str(e.value) == message


def test_groups_know_no_attribute_and_refuse_as_an_escaped_exception() -> None:
    assert alter_attributes(True, GROUP_ATTRIBUTES, {}, {}) == {}
    with pytest.raises(InvalidAttributes) as e:
        alter_attributes(True, GROUP_ATTRIBUTES, {}, {"+foo": "bar"})
    # What a 5.3.3 broker answers: the RuntimeException and its first frame (UtilAll.exceptionSimpleDesc).
    assert e.value.java_desc() == (
        "java.lang.RuntimeException: unsupported key: foo, "
        "org.apache.rocketmq.common.attribute.AttributeUtil.validateAlter(AttributeUtil.java:117)"
    )


def test_topic_config_json_and_message_type() -> None:
    plain = TopicConfig("T", 4, 4)
    assert plain.message_type == "NORMAL"
    assert plain.to_json() == {
        "attributes": {},
        "order": False,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "T",
        "topicSysFlag": 0,
        "writeQueueNums": 4,
    }
    assert list(plain.to_json()) == sorted(plain.to_json())  # fastjson's order
    fifo = TopicConfig.from_json({**plain.to_json(), "attributes": {"message.type": "FIFO"}})
    assert fifo.message_type == "FIFO" and fifo.to_json()["attributes"] == {"message.type": "FIFO"}
    # 4.x files have no attributes, and Java reads a null map as none.
    old = {k: v for k, v in plain.to_json().items() if k != "attributes"}
    assert TopicConfig.from_json(old).attributes == {}
    assert TopicConfig.from_json({**old, "attributes": None}).message_type == "NORMAL"
    with pytest.raises(TypeError):
        TopicConfig.from_json({**old, "attributes": ["message.type"]})


def test_group_config_json_carries_the_5x_fields() -> None:
    # A 4.x body: the 5.x fields get 5.3.3's defaults, written as a 5.3.3 broker writes them.
    g = SubscriptionGroupConfig.from_json({"groupName": "G", "retryMaxTimes": 3})
    assert g.to_json() == {
        "attributes": {},
        "brokerId": 0,
        "consumeBroadcastEnable": True,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeMessageOrderly": False,
        "consumeTimeoutMinute": 15,
        "groupName": "G",
        "groupRetryPolicy": {"type": "CUSTOMIZED"},
        "groupSysFlag": 0,
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": 3,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }
    assert list(g.to_json()) == sorted(g.to_json())
    # A 5.x body comes back as sent, nulls left out as fastjson leaves them out.
    policy = {
        "type": "EXPONENTIAL",
        "exponentialRetryPolicy": {"initial": 5000, "max": 7200000, "multiplier": 2},
    }
    subs = [{"topic": "T", "expressionType": "TAG", "expression": "*", "version": 1}]
    body = {
        **g.to_json(),
        "consumeMessageOrderly": True,
        "groupRetryPolicy": policy,
        "groupSysFlag": 1,
        "consumeTimeoutMinute": 7,
        "subscriptionDataSet": subs,
    }
    back = SubscriptionGroupConfig.from_json(body)
    assert back.consume_message_orderly and back.to_json() == body
    assert (
        "groupRetryPolicy"
        not in SubscriptionGroupConfig.from_json({**body, "groupRetryPolicy": None}).to_json()
    )
