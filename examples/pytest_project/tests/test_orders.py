"""The application's tests against a real RocketMQ broker: ferromq's pytest fixtures."""

from __future__ import annotations

import json
import time

import pytest
from orders import PaidOrderCounter, publish_orders

from ferromq.testing import Broker

ORDERS = [
    {"id": "o-1", "status": "paid", "amount": 30},
    {"id": "o-2", "status": "created", "amount": 5},
    {"id": "o-3", "status": "paid", "amount": 12},
]


def test_orders_are_stored_with_tags_and_keys(ferromq_broker: Broker) -> None:
    ids = publish_orders(ferromq_broker.namesrv, "Orders", ORDERS)
    stored = ferromq_broker.wait_for_messages("Orders", len(ORDERS))
    assert sorted(m.uniq_key or "" for m in stored) == sorted(ids)
    by_key = {m.keys[0]: m for m in stored}
    assert by_key["o-2"].tags == "created"
    assert json.loads(by_key["o-3"].payload())["amount"] == 12


@pytest.mark.ferromq(config={"autoCreateTopicEnable": "false"})
def test_sending_to_a_topic_nobody_created_fails(ferromq_broker: Broker) -> None:
    with pytest.raises(Exception, match=r"(?i)topic|route"):
        publish_orders(ferromq_broker.namesrv, "NoSuchTopic", ORDERS[:1])


def test_paid_orders_are_counted(
    ferromq_session_broker: Broker, ferromq_topic: str, ferromq_group: str
) -> None:
    broker = ferromq_session_broker
    broker.create_topic(ferromq_topic, queues=2)
    counter = PaidOrderCounter(broker.namesrv, ferromq_topic, ferromq_group)
    counter.start()
    try:
        publish_orders(broker.namesrv, ferromq_topic, ORDERS)
        deadline = time.monotonic() + 60
        while counter.total < 42 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        counter.stop()  # commits the consumed offsets
    assert counter.total == 42
    broker.wait_consumed(ferromq_group, ferromq_topic)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_topics_of_the_session_broker_are_apart(
    ferromq_session_broker: Broker, ferromq_topic: str, n: int
) -> None:
    publish_orders(ferromq_session_broker.namesrv, ferromq_topic, ORDERS[:n])
    assert len(ferromq_session_broker.wait_for_messages(ferromq_topic, n)) == n
    assert ferromq_session_broker.count(ferromq_topic) == n
