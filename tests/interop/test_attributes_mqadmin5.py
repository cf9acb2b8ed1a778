"""RocketMQ 5.x typed topics and orderly groups through Apache RocketMQ 5.3.3's own mqadmin
(rocketmq-tools 5.3.3's MQAdminStartup, in one JVM per side that runs every command: tests/interop/mqadmin.py
`MqadminShell`), against ferromq and against the Java 5.3.3 broker side by side (same broker.conf keys,
fresh stores):

- `updateTopic -c CLUSTER -t T -a +message.type=FIFO` creates a FIFO topic on both; a second updateTopic
  changes the type (5.3.3 lets message.type change); `exportMetadata -c CLUSTER` (GET_ALL_TOPIC_CONFIG
  through mqadmin's own TopicConfig) reads the topics back with the same attributes on both;
- a value outside TopicMessageType and MIXED are refused on both, and create nothing: MIXED with the same
  code and remark, the value outside with the set each knows (ferromq's is 5.5.0's, PRIORITY among them);
- `updateSubGroup -c CLUSTER -g G -o true` makes an orderly group: `getConsumerConfig -g G` prints the same
  fields on both (consumeMessageOrderly=true, groupRetryPolicy, ...) and exportMetadata the same entry;
- `updateSubGroup --attributes +foo=bar` is refused by both with the same code and remark (5.3.3 knows no
  group attribute).

Run with `-s` to see what was compared.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from apache_rocketmq import ROCKETMQ_5_VERSION, have_java

from tests.interop.mqadmin import key_values, scrub
from tests.interop.sides import CLUSTER, MQADMIN_CONF, both, mqadmin_sides, same, serve_both
from tests.interop.sides import MqadminSide as Side

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="5.3.3's mqadmin and broker need `java` and `mvn` on PATH"),
    # The first run resolves the 5.3.3 jars (Maven Central).
    pytest.mark.timeout(900),
]

KINDS = ("ferromq", "rocketmq")
CONF = {**MQADMIN_CONF, "autoCreateTopicEnable": "true", "autoCreateSubscriptionGroup": "true"}
FIFO_TOPIC = "AttrFifo"
CHANGED_TOPIC = "AttrChanged"
BAD_TOPIC = "AttrBad"
MIXED_TOPIC = "AttrMixed"
ORDERLY_GROUP = "AttrOrderlyG"
ATTRIBUTE_GROUP = "AttrAttributeG"
MESSAGE_TYPE_SET = "[UNSPECIFIED, TRANSACTION, FIFO, MIXED, DELAY, NORMAL]"
MESSAGE_TYPE_SET_55 = "[UNSPECIFIED, MIXED, TRANSACTION, PRIORITY, FIFO, DELAY, LITE, NORMAL]"
# MQClientException / MQBrokerException text: "CODE: 1  DESC: <remark>" (then the FAQ url, or
# " BROKER: <addr>").
_REFUSAL = re.compile(r"CODE: (\d+)\s+DESC: (.*?)(?:\s+BROKER: \S+)?$", re.MULTILINE)


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Side]]:
    with ExitStack() as stack:
        where = serve_both(stack, tmp_path_factory, "attr", CONF, ROCKETMQ_5_VERSION)
        yield mqadmin_sides(stack, where, ROCKETMQ_5_VERSION)


def admin_both(sides: dict[str, Side], subcommand: str, *args: str) -> dict[str, str]:
    return both(sides, lambda s: s.admin(subcommand, *args))  # type: ignore[no-any-return]


def refusal(out: str) -> tuple[int, str]:
    """(code, remark) of the refusal mqadmin printed."""
    m = _REFUSAL.search(out)
    assert m is not None, f"no refusal in mqadmin's output:\n{out}"
    return int(m.group(1)), m.group(2).strip()


def succeeded(outputs: dict[str, str], what: str) -> None:
    for kind, out in outputs.items():
        assert "success" in out and "Exception" not in out, f"[{kind}] {what}:\n{out}"


def exported(side: Side) -> dict[str, Any]:
    """`exportMetadata -c CLUSTER`: the user topics and groups of the cluster's masters, as mqadmin's
    own TopicConfig and SubscriptionGroupConfig classes read them."""
    target = side.home / "export"
    out = side.admin("exportMetadata", "-c", CLUSTER, "-f", str(target))
    assert "success" in out, f"[{side.kind}] exportMetadata:\n{out}"
    data: dict[str, Any] = json.loads((target / "metadata.json").read_text())
    return data


def test_typed_topics(sides: dict[str, Side]) -> None:
    outs = admin_both(sides, "updateTopic", "-c", CLUSTER, "-t", FIFO_TOPIC, "-a", "+message.type=FIFO")
    succeeded(outs, "updateTopic +message.type=FIFO")
    # What mqadmin printed of the config it sent (the changes as the admin client keeps them).
    printed = {
        k: [line for line in o.splitlines() if line.startswith("TopicConfig [")] for k, o in outs.items()
    }
    assert same(printed, "updateTopic's TopicConfig") == [
        f"TopicConfig [topicName={FIFO_TOPIC}, readQueueNums=8, writeQueueNums=8, perm=RW-, "
        "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false, attributes={+message.type=FIFO}]"
    ]
    # 5.3.3 lets message.type change after creation.
    for attributes in ("+message.type=FIFO", "+message.type=DELAY"):
        outs = admin_both(sides, "updateTopic", "-c", CLUSTER, "-t", CHANGED_TOPIC, "-a", attributes)
        succeeded(outs, f"updateTopic {CHANGED_TOPIC} {attributes}")

    refusals = {}
    cases = (
        (BAD_TOPIC, "+message.type=BAD"),
        (MIXED_TOPIC, "+message.type=MIXED"),
        (BAD_TOPIC, "+queue.type=X"),
        (BAD_TOPIC, "+cleanup.policy=X"),
        (BAD_TOPIC, "+foo=bar"),
        (FIFO_TOPIC, "+queue.type=SimpleCQ"),
        (BAD_TOPIC, "+reserve.time=-5"),
    )
    for topic, attributes in cases:
        outs = admin_both(sides, "updateTopic", "-c", CLUSTER, "-t", topic, "-a", attributes)
        answers = {k: refusal(o) for k, o in outs.items()}
        if attributes == "+message.type=BAD":
            # The one answer that is not 5.3.3's: ferromq's topic types are 5.5's, PRIORITY among them,
            # and so is the set it names (tests/interop/test_priority_rocketmq55.py has 5.5.0's).
            assert answers == {
                "ferromq": (1, f"value is not in set: {MESSAGE_TYPE_SET_55}"),
                "rocketmq": (1, f"value is not in set: {MESSAGE_TYPE_SET}"),
            }
            continue
        refusals[attributes] = same(answers, f"updateTopic {attributes}")
    assert refusals == {
        "+message.type=MIXED": (29, "MIXED message type is not supported."),
        "+queue.type=X": (1, "value is not in set: [SimpleCQ, BatchCQ]"),
        "+cleanup.policy=X": (1, "value is not in set: [DELETE, COMPACTION]"),
        "+foo=bar": (1, "unsupported key: foo"),
        "+queue.type=SimpleCQ": (1, "attempt to update an unchangeable attribute. key: queue.type"),
        "+reserve.time=-5": (1, f"value is not in range(-1, {2**63 - 1})"),
    }

    metadata = both(sides, exported)
    topics = same(
        {
            k: {t: m["topicConfigTable"].get(t) for t in (FIFO_TOPIC, CHANGED_TOPIC, BAD_TOPIC, MIXED_TOPIC)}
            for k, m in metadata.items()
        },
        "exportMetadata's topics",
    )
    assert topics[FIFO_TOPIC]["attributes"] == {"message.type": "FIFO"}
    assert topics[CHANGED_TOPIC]["attributes"] == {"message.type": "DELAY"}
    assert topics[BAD_TOPIC] is None and topics[MIXED_TOPIC] is None
    assert {k: v for k, v in topics[FIFO_TOPIC].items() if k != "attributes"} == {
        "order": False,
        "perm": 6,
        "readQueueNums": 8,
        "topicFilterType": "SINGLE_TAG",
        "topicName": FIFO_TOPIC,
        "topicSysFlag": 0,
        "writeQueueNums": 8,
    }


def test_orderly_groups(sides: dict[str, Side]) -> None:
    outs = admin_both(sides, "updateSubGroup", "-c", CLUSTER, "-g", ORDERLY_GROUP, "-o", "true")
    succeeded(outs, "updateSubGroup -o true")

    outs = admin_both(
        sides, "updateSubGroup", "-c", CLUSTER, "-g", ATTRIBUTE_GROUP, "--attributes", "+foo=bar"
    )
    code, remark = same({k: refusal(o) for k, o in outs.items()}, "updateSubGroup --attributes +foo=bar")
    assert code == 1 and remark.startswith("java.lang.RuntimeException: unsupported key: foo")

    outs = admin_both(sides, "getConsumerConfig", "-g", ORDERLY_GROUP)
    fields = same(
        {k: key_values(scrub(o, sides[k].labels()), "=") for k, o in outs.items()}, "getConsumerConfig"
    )
    assert fields["groupName"] == ORDERLY_GROUP and fields["consumeMessageOrderly"] == "true"

    metadata = both(sides, exported)
    groups = same(
        {
            k: {g: m["subscriptionGroupTable"].get(g) for g in (ORDERLY_GROUP, ATTRIBUTE_GROUP)}
            for k, m in metadata.items()
        },
        "exportMetadata's groups",
    )
    assert groups[ORDERLY_GROUP]["consumeMessageOrderly"] is True and groups[ATTRIBUTE_GROUP] is None
