"""/metrics (metricsExporterType=PROM) of an in-process broker over real sockets, parsed with
prometheus_client's parser: RocketMQ 5.x's names and labels, values following what was sent,
pulled, committed and sent to the dead-letter topic."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from ferromq.acl.signing import Credentials
from ferromq.broker.topics import TopicConfig
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.testing.waiting import until
from tests.integration.brokerkit import Client, properties, pull_ext, running, send_ext

TOPIC = "MetricsT"
GROUP = "MetricsG"


async def http_get(port: int, path: str) -> tuple[str, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    async with asyncio.timeout(10):
        data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode(), body


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The one sample of `name` whose labels include `labels`."""
    hits = [v for (n, ls), v in found.items() if n == name and set(labels.items()) <= ls]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_metrics_follow_sends_pulls_commits_and_dead_letters(tmp_path: Path) -> None:
    async def main() -> None:
        overrides = {
            "metrics_exporter_type": "PROM",
            "metrics_prom_exporter_host": "127.0.0.1",
            "metrics_prom_exporter_port": 0,
        }
        async with running(tmp_path, **overrides) as (_, broker):
            assert broker.metrics is not None
            port = broker.metrics.port
            broker.topics.update(TopicConfig(TOPIC, 1, 1))
            c = await Client().connect(broker.port)
            for i in range(5):
                r = await c.call(
                    RC.SEND_MESSAGE, send_ext(TOPIC, 0, properties(TAGS="A", KEYS=f"k{i}")), b"m" * 50
                )
                assert r.code == R.SUCCESS
            stored = broker.store.max_physical_offset
            r = await c.call(RC.PULL_MESSAGE, pull_ext(GROUP, TOPIC, 0, 0, maxMsgNums=3))
            assert r.code == R.SUCCESS
            pulled_bytes = len(r.body)
            r = await c.call(
                RC.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0, "commitOffset": 1},
            )
            assert r.code == R.SUCCESS
            # The first message (CommitLog offset 0) failed for good: to %DLQ%MetricsG.
            r = await c.call(
                RC.CONSUMER_SEND_MSG_BACK,
                {
                    "group": GROUP,
                    "offset": 0,
                    "delayLevel": -1,
                    "originTopic": TOPIC,
                    "maxReconsumeTimes": 16,
                },
            )
            assert r.code == R.SUCCESS
            # A timer message a minute ahead: taken into the wheel, not delivered.
            broker.topics.update(TopicConfig("MetricsTimer", 1, 1))
            r = await c.call(
                RC.SEND_MESSAGE, send_ext("MetricsTimer", 0, properties(TIMER_DELAY_SEC="60")), b"t"
            )
            assert r.code == R.SUCCESS
            await until(lambda: broker.store.timer_stats()["pending"] == 1, "the timer message in the wheel")

            status, body = await http_get(port, "/metrics")
            assert status == "HTTP/1.1 200 OK"
            found = samples(body.decode())
            common = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
            assert (
                value(
                    found,
                    "rocketmq_messages_in_total",
                    topic=TOPIC,
                    message_type="Normal",
                    is_system="false",
                    **common,
                )
                == 5
            )
            assert value(found, "rocketmq_throughput_in_total", topic=TOPIC) == stored
            out = {"topic": TOPIC, "consumer_group": GROUP, "is_retry": "false"}
            assert value(found, "rocketmq_messages_out_total", **out) == 3
            assert value(found, "rocketmq_throughput_out_total", **out) == pulled_bytes
            assert value(found, "rocketmq_consumer_lag_messages", **out) == 4
            assert value(found, "rocketmq_consumer_inflight_messages", **out) == 2
            assert value(found, "rocketmq_consumer_ready_messages", **out) == 2
            assert value(found, "rocketmq_consumer_lag_latency", **out) >= 0
            assert value(found, "rocketmq_send_to_dlq_messages_total", topic=TOPIC, consumer_group=GROUP) == 1
            assert value(found, "rocketmq_messages_in_total", topic=f"%DLQ%{GROUP}") == 1
            send = {"protocol_type": "remoting", "request_code": "send_message", "response_code": "success"}
            assert value(found, "rocketmq_rpc_latency_count", **send) == 6  # with the timer message
            assert value(found, "rocketmq_rpc_latency_bucket", le="+Inf", **send) == 6
            assert value(found, "rocketmq_storage_flush_behind_bytes") >= 0
            assert value(found, "rocketmq_storage_message_reserve_time") >= 0
            assert value(found, "rocketmq_half_messages") == 0
            assert value(found, "rocketmq_broker_permission") == 6
            assert value(found, "rocketmq_topic_number") == len(broker.topics.topics)
            assert value(found, "rocketmq_timing_messages") == 1
            assert value(found, "rocketmq_timer_enqueue_total") == 1
            assert value(found, "rocketmq_timer_dequeue_total") == 0
            assert value(found, "rocketmq_timer_enqueue_lag") == 0
            assert value(found, "rocketmq_timer_dequeue_latency") >= 0

            status, _ = await http_get(port, "/other")
            assert status == "HTTP/1.1 404 Not Found"
            await c.close()

    asyncio.run(main())


def test_metrics_are_off_unless_asked(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            assert broker.metrics is None

    asyncio.run(main())


def test_acl2_refusals_are_counted_by_reason(tmp_path: Path) -> None:
    async def main() -> None:
        overrides = {
            "metrics_exporter_type": "PROM",
            "metrics_prom_exporter_host": "127.0.0.1",
            "metrics_prom_exporter_port": 0,
            "authentication_enabled": True,
            "authorization_enabled": True,
            "init_authentication_user": '{"username": "rocketmq", "password": "12345678"}',
        }
        async with running(tmp_path, **overrides) as (_, broker):
            assert broker.metrics is not None
            broker.topics.update(TopicConfig(TOPIC, 1, 1))
            c = await Client().connect(broker.port)
            ext = {k: str(v) for k, v in send_ext(TOPIC, 0, properties(TAGS="A")).items()}
            assert (await c.call(RC.SEND_MESSAGE, dict(ext), b"m")).remark == "username cannot be null."
            for _ in range(2):
                wrong = dict(ext)
                Credentials("rocketmq", "not-the-password").apply(wrong, b"m")
                assert (await c.call(RC.SEND_MESSAGE, wrong, b"m")).remark == "check signature failed."
            right = dict(ext)
            Credentials("rocketmq", "12345678").apply(right, b"m")
            assert (await c.call(RC.SEND_MESSAGE, right, b"m")).code == R.SUCCESS
            await c.close()
            status, body = await http_get(broker.metrics.port, "/metrics")
            assert status.endswith("200 OK")
            found = samples(body.decode())
            assert value(found, "ferromq_auth_denials_total", reason="no_user") == 1
            assert value(found, "ferromq_auth_denials_total", reason="bad_signature") == 2
            assert value(found, "ferromq_auth_users") == 1

    asyncio.run(main())
