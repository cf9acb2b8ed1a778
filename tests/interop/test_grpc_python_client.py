"""The official RocketMQ 5.x Python client (PyPI rocketmq-python-client, over gRPC) against `ferromq serve`
and against Apache RocketMQ 5.3.3's proxy in local mode (`ProxyStartup -pm local`), side by side: the same
scenarios (tests/interop/client5_scenarios.py, run in the client's own environment) give the same answers.

- roundtrip: a Producer sends three messages with a tag, keys and a user property; a SimpleConsumer receives
  them all (same ids, tag, keys, properties, delivery attempt 1) and acks them;
- redelivery: a message received and not acked comes back once its invisible duration (changed to 1 s) is
  over, with delivery attempt 2; acked, it does not come back;
- push_tags: a PushConsumer subscribed to `TagA || TagC` receives only those, and the one its listener
  failed once again with delivery attempt 2;
- push_sql: a PushConsumer with an SQL92 filter on user properties receives only the matching ones;
- dead_letter: a PushConsumer failing every message, in a group with retryMaxTimes 0, sees it once;
  then it is in the group's %DLQ% topic (read by a SimpleConsumer), its delivery attempt raised;
- wrong_type: a FIFO message (message group) to a NORMAL topic is refused (the client checks the route's
  accepted message types);
- fifo: two message groups interleaved on a FIFO topic reach an orderly group's SimpleConsumer each in
  the order sent;
- delay: a message sent with a delivery timestamp 3 s ahead arrives, not before it;
- transaction: of three half messages, the committed one and the one the broker checks back about (the
  client's checker commits it over Telemetry) are delivered, the rolled back one never;
- recall: a delayed message recalled with its send's recall handle never arrives; another one does.

Also, with grpcio's client: the Settings a push or simple consumer is given back over Telemetry (the
group's retry policy and FIFO flag) are the same.

Typed topics (message.type) and the orderly group are made by Apache RocketMQ 5.3.3's own mqadmin on both
servers. Both check open transactions every second once they are 5 s old (transactionCheckInterval,
transactionTimeOut) and allow recalls (recallMessageEnable).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from apache_rocketmq import ApacheRocketMQProxy, have_java

from ferromq.testing import BrokerProcess
from tests.interop.grpc_kit import (
    CASES,
    assert_outcome,
    assert_same,
    on_both,
    prepare,
    run_client5,
)
from tests.interop.mqadmin import MqadminShell

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="the side-by-side runs need `java` and `mvn` on PATH"),
    pytest.mark.timeout(900),
]

RUN = uuid.uuid4().hex[:6]


def topic_of(case: str) -> str:
    return f"G5{case.replace('_', '')}{RUN}"


@pytest.mark.parametrize("case", list(CASES))
def test_python_client_side_by_side(
    case: str,
    ferromq_grpc: BrokerProcess,
    java_proxy: ApacheRocketMQProxy,
    grpc_admins: tuple[MqadminShell, MqadminShell],
    tmp_path: Path,
    failure_sections: list[tuple[str, Callable[[], str]]],
) -> None:
    failure_sections.append(("Apache RocketMQ 5.3.3 proxy logs", java_proxy.log_tail))
    failure_sections.append(("ferromq log", ferromq_grpc.log_tail))
    topic, group = topic_of(case), f"G5G{case.replace('_', '')}{RUN}"
    on_both(
        lambda: prepare(ferromq_grpc.namesrv, tmp_path, topic, group, case, admin=grpc_admins[0].run),
        lambda: prepare(java_proxy.namesrv, tmp_path, topic, group, case, admin=grpc_admins[1].run),
    )
    ours, theirs = on_both(
        lambda: run_client5(ferromq_grpc.grpc_endpoint, case, topic, group, tmp_path / "ferromq"),
        lambda: run_client5(java_proxy.grpc_endpoint, case, topic, group, tmp_path / "rocketmq"),
    )
    print(f"\n{case}: ferromq {ours}\n{case}: rocketmq {theirs}")
    ours = assert_same(ours, theirs)
    # And what each scenario must show on its own (both brokers gave it, as compared above).
    assert_outcome(case, ours)


def consumer_settings(endpoint: str, topic: str, group: str, client_type: int) -> object:
    """The Settings a consumer of `group` is given back over Telemetry (the first answer)."""
    import grpc

    from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
    from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2 as spb
    from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2_grpc as rpc

    settings = pb.Settings(
        client_type=client_type,  # type: ignore[arg-type]
        subscription=pb.Subscription(
            group=pb.Resource(name=group),
            subscriptions=[
                pb.SubscriptionEntry(
                    topic=pb.Resource(name=topic), expression=pb.FilterExpression(type=pb.TAG, expression="*")
                )
            ],
        ),
    )
    answered = threading.Event()

    def commands() -> Iterator[spb.TelemetryCommand]:
        yield spb.TelemetryCommand(settings=settings)
        # The stream stays open until the answer (Java's proxy ends a closed one unanswered).
        answered.wait(30)

    with grpc.insecure_channel(endpoint) as ch:
        replies = rpc.MessagingServiceStub(ch).Telemetry(
            commands(),
            metadata=[
                ("x-mq-client-id", f"settings-{uuid.uuid4().hex[:8]}"),
                ("x-mq-language", "PYTHON"),
                ("x-mq-protocol", "GRPC_V2"),
                ("x-mq-client-version", "5.1.2"),
            ],
            timeout=30,
        )
        try:
            first = next(replies)
        finally:
            answered.set()
        assert first.status.code == pb.OK, first
        return (first.settings.backoff_policy, first.settings.subscription.fifo)


@pytest.mark.parametrize("case", ["roundtrip", "fifo"])
def test_consumer_settings_side_by_side(
    case: str,
    ferromq_grpc: BrokerProcess,
    java_proxy: ApacheRocketMQProxy,
    grpc_admins: tuple[MqadminShell, MqadminShell],
    tmp_path: Path,
) -> None:
    """Push and simple consumers are given the settings Java's proxy gives: the group's retry policy
    (by default 1 s, 5 s, 10 s, ... for retryMaxTimes + 1 attempts) and whether it is FIFO, for a
    group made by mqadmin (fifo: an orderly one) and for one no server has (roundtrip)."""
    from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb

    topic, group = topic_of(case) + "S", f"G5Settings{case}{RUN}"
    on_both(
        lambda: prepare(ferromq_grpc.namesrv, tmp_path, topic, group, case, admin=grpc_admins[0].run),
        lambda: prepare(java_proxy.namesrv, tmp_path, topic, group, case, admin=grpc_admins[1].run),
    )
    for client_type in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER):
        ours, theirs = on_both(
            lambda t=client_type: consumer_settings(ferromq_grpc.grpc_endpoint, topic, group, t),
            lambda t=client_type: consumer_settings(java_proxy.grpc_endpoint, topic, group, t),
        )
        assert ours == theirs
