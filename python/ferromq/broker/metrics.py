"""Prometheus metrics with RocketMQ 5.x's names and labels (`metricsExporterType=PROM`), served at
http://metricsPromExporterHost:metricsPromExporterPort/metrics.

Nothing is added to the send and pull paths for this: a `prometheus_client` collector reads the
broker's stats (broker/stats.py), offsets and store when Prometheus scrapes. The HTTP endpoint is an
asyncio server on the broker's loop, so the collector reads that state on the thread that changes it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from ferromq.broker.lite_consumers import is_lite_queue, parent_of
from ferromq.broker.stats import (
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    RPC_LATENCY_BUCKETS_MS,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    earliest_message_time,
)
from ferromq.broker.topics import is_system_topic
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.constants import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_SYS_GROUP,
)

if TYPE_CHECKING:
    from ferromq import _store
    from ferromq.auth.evaluator import Auth
    from ferromq.broker.processors.context import MetricsContext
    from ferromq.tables.tiering import TieringStatus
    from ferromq.tiered.service import TieredService

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT = 10.0
MAX_REQUEST_HEAD = 16 * 1024


def _lower_name(enum: type[RequestCode] | type[ResponseCode], code: int) -> str:
    """5.x labels codes by their lower-case names (`send_message`, `success`); unknown ones by number."""
    try:
        return enum(code).name.lower()
    except ValueError:
        return str(code)


def _is_system(topic: str, group: str = "") -> str:
    """BrokerMetricsManager.isSystem: a system topic (TopicValidator's) or a system group."""
    system = is_system_topic(topic) or group.startswith("CID_RMQ_SYS_")
    return "true" if system else "false"


def _message_type(topic: str) -> str:
    """The stored topic says what a message was: delayed ones go to SCHEDULE_TOPIC_XXXX first,
    transaction halves to the half topic."""
    if topic == SCHEDULE_TOPIC:
        return "Delay"
    if topic == TRANS_HALF_TOPIC:
        return "Transaction"
    return "Normal"


class BrokerCollector(Collector):
    """Reads one broker's state at scrape time."""

    def __init__(self, broker: MetricsContext) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        cfg = broker.config
        common = {"cluster": cfg.broker_cluster_name, "node_type": "broker", "node_id": cfg.broker_name}
        names = list(common)
        values = list(common.values())
        stats = broker.stats
        stats.catch_up()

        messages_in = CounterMetricFamily(
            "rocketmq_messages_in",
            "Messages stored by producers' sends",
            labels=[*names, "topic", "message_type", "is_system"],
        )
        bytes_in = CounterMetricFamily(
            "rocketmq_throughput_in",
            "Bytes stored by producers' sends",
            labels=[*names, "topic", "message_type", "is_system"],
        )
        for name, family in ((TOPIC_PUT_NUMS, messages_in), (TOPIC_PUT_SIZE, bytes_in)):
            for topic, item in list(stats.sets[name].items.items()):
                family.add_metric([*values, topic, _message_type(topic), _is_system(topic)], item.value)
        yield messages_in
        yield bytes_in

        out_labels = [*names, "topic", "consumer_group", "is_retry", "is_system"]
        messages_out = CounterMetricFamily(
            "rocketmq_messages_out", "Messages pulled by consumers", labels=out_labels
        )
        bytes_out = CounterMetricFamily(
            "rocketmq_throughput_out", "Bytes pulled by consumers", labels=out_labels
        )
        for name, family in ((GROUP_GET_NUMS, messages_out), (GROUP_GET_SIZE, bytes_out)):
            for key, item in list(stats.sets[name].items.items()):
                topic, _, group = key.rpartition("@")
                retry = "true" if topic.startswith(RETRY_PREFIX) else "false"
                family.add_metric([*values, topic, group, retry, _is_system(topic, group)], item.value)
        yield messages_out
        yield bytes_out

        yield from self._consumer_gauges(names, values)

        dlq = CounterMetricFamily(
            "rocketmq_send_to_dlq_messages",
            "Messages moved to a dead-letter topic",
            labels=[*names, "topic", "consumer_group", "is_system"],
        )
        for (group, topic), n in list(stats.send_to_dlq.items()):
            dlq.add_metric([*values, topic, group, _is_system(topic, group)], n)
        yield dlq

        revive = CounterMetricFamily(
            "rocketmq_pop_revive_retry_messages",
            "Messages the POP revive service put back into retry topics, by put status",
            labels=[*names, "consumer_group", "topic", "put_status"],
        )
        for (group, topic, status), n in list(broker.pop.revive_puts.items()):
            revive.add_metric([*values, group, topic, status], n)
        yield revive

        rpc = HistogramMetricFamily(
            "rocketmq_rpc_latency",
            "Time from a request's arrival to its answer (ms)",
            labels=[*names, "protocol_type", "request_code", "response_code"],
            unit="",
        )
        for (request, response), hist in list(stats.rpc.items()):
            cumulative, buckets = 0, []
            for bound, n in zip((*RPC_LATENCY_BUCKETS_MS, float("inf")), hist.counts, strict=True):
                cumulative += n
                buckets.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
            rpc.add_metric(
                [*values, "remoting", _lower_name(RequestCode, request), _lower_name(ResponseCode, response)],
                buckets,
                hist.sum_ms,
            )
        yield rpc

        yield from self._storage_gauges(names, values)

    def _consumer_gauges(self, names: list[str], values: list[str]) -> Iterator[Metric]:
        broker = self.broker
        store = broker.store
        labels = [*names, "topic", "consumer_group", "is_retry", "is_system"]
        lag = GaugeMetricFamily("rocketmq_consumer_lag_messages", "Messages not consumed yet", labels=labels)
        latency = GaugeMetricFamily(
            "rocketmq_consumer_lag_latency",
            "Age of the oldest message not consumed yet (ms)",
            labels=labels,
        )
        inflight = GaugeMetricFamily(
            "rocketmq_consumer_inflight_messages", "Messages pulled but not committed", labels=labels
        )
        ready = GaugeMetricFamily(
            "rocketmq_consumer_ready_messages", "Messages not pulled yet", labels=labels
        )
        now = int(time.time() * 1000)
        pulled = broker.stats.pulled
        # A lite topic's rows count under its parent topic (5.5.0's LiteConsumerLagCalculator): a broker
        # may hold millions of lite topics, and one series each would be as many.
        lite: dict[tuple[str, str], tuple[int, int | None]] = {}
        for key, queues in list(broker.offsets.table.items()):
            topic, _, group = key.partition("@")
            if is_lite_queue(topic):
                high = store.max_offset(topic, 0)
                behind = max(0, high - queues.get(0, high))
                if behind:
                    stored = store.store_time(topic, 0, queues.get(0, 0))
                    parent_key = (parent_of(topic), group)
                    total, oldest_lite = lite.get(parent_key, (0, None))
                    if stored is not None and (oldest_lite is None or stored < oldest_lite):
                        oldest_lite = stored
                    lite[parent_key] = (total + behind, oldest_lite)
                continue
            if topic.startswith(DLQ_PREFIX) or broker.topics.get(topic) is None:
                continue
            total_lag = total_inflight = 0
            oldest: int | None = None
            for queue_id, committed in list(queues.items()):
                high = store.max_offset(topic, queue_id)
                behind = max(0, high - committed)
                total_lag += behind
                total_inflight += max(
                    0, min(high, pulled.get((group, topic, queue_id), committed)) - committed
                )
                if behind:
                    stored = store.store_time(topic, queue_id, committed)
                    if stored is not None and (oldest is None or stored < oldest):
                        oldest = stored
            label_values = [
                *values,
                topic,
                group,
                "true" if topic.startswith(RETRY_PREFIX) else "false",
                _is_system(topic, group),
            ]
            lag.add_metric(label_values, total_lag)
            latency.add_metric(label_values, 0 if oldest is None else max(0, now - oldest))
            inflight.add_metric(label_values, total_inflight)
            ready.add_metric(label_values, total_lag - total_inflight)
        for (parent, group), (total_lag, oldest) in lite.items():
            label_values = [*values, parent, group, "false", _is_system(parent, group)]
            lag.add_metric(label_values, total_lag)
            latency.add_metric(label_values, 0 if oldest is None else max(0, now - oldest))
            # A lite topic's ready messages are its lag (LiteConsumerLagCalculator).
            ready.add_metric(label_values, total_lag)
        yield lag
        yield latency
        yield inflight
        yield ready

        clients = broker.clients
        producers = GaugeMetricFamily(
            "rocketmq_producer_connections", "Producer connections", labels=[*names, "group"]
        )
        for group, channels in list(clients.producers.items()):
            producers.add_metric([*values, group], len(channels))
        yield producers
        consumers = GaugeMetricFamily(
            "rocketmq_consumer_connections", "Consumer connections", labels=[*names, "consumer_group"]
        )
        for group, info in list(clients.consumers.items()):
            consumers.add_metric([*values, group], len(info.channels))
        yield consumers
        yield _gauge(
            "ferromq_lite_queues",
            "Lite topics (light message queues) the store holds",
            names,
            values,
            store.lmq_count(),
        )
        yield _gauge(
            "ferromq_lite_subscriptions",
            "Lite topics subscribed, counted once per client",
            names,
            values,
            broker.lite_consumers.active,
        )

    def _storage_gauges(self, names: list[str], values: list[str]) -> Iterator[Metric]:
        broker = self.broker
        store = broker.store
        yield _gauge(
            "rocketmq_storage_flush_behind_bytes",
            "CommitLog bytes written but not flushed yet",
            names,
            values,
            max(0, store.max_physical_offset - store.flushed_physical_offset),
        )
        # The ConsumeQueue and index entries are written with the record: nothing waits.
        yield _gauge(
            "rocketmq_storage_dispatch_behind_bytes", "CommitLog bytes not dispatched yet", names, values, 0
        )
        earliest = earliest_message_time(store)
        reserve = 0 if earliest is None else max(0, int(time.time() * 1000) - earliest)
        yield _gauge(
            "rocketmq_storage_message_reserve_time",
            "Age of the oldest message kept (ms)",
            names,
            values,
            reserve,
        )
        yield _gauge(
            "rocketmq_storage_size",
            "CommitLog bytes kept",
            names,
            values,
            max(0, store.max_physical_offset - store.min_physical_offset),
        )
        committed = broker.offsets.query(TRANS_SYS_GROUP, TRANS_HALF_TOPIC, 0)
        half = 0
        if broker.topics.get(TRANS_HALF_TOPIC) is not None:
            half = max(0, store.max_offset(TRANS_HALF_TOPIC, 0) - max(0, committed))
        yield _gauge(
            "rocketmq_half_messages", "Transaction half messages not checked past yet", names, values, half
        )
        yield _gauge(
            "rocketmq_broker_permission",
            "The broker's permission bits",
            names,
            values,
            broker.config.broker_permission,
        )
        yield from self._timer_metrics(names, values)
        yield _gauge("rocketmq_topic_number", "Topics", names, values, len(broker.topics.topics))
        yield _gauge(
            "rocketmq_consumer_group_number", "Subscription groups", names, values, len(broker.groups.groups)
        )

    def _timer_metrics(self, names: list[str], values: list[str]) -> Iterator[Metric]:
        """RocketMQ 5.x's timer metrics (DefaultStoreMetricsManager), for the whole wheel."""
        if not self.broker.config.timer_wheel_enable:
            return
        t = self.broker.store.timer_stats()
        for name, doc, key in (
            ("rocketmq_timer_enqueue_total", "Messages taken into the timer wheel", "enqueued"),
            ("rocketmq_timer_dequeue_total", "Timer messages put back into their topics", "delivered"),
        ):
            counter = CounterMetricFamily(name, doc, labels=names)
            counter.add_metric(values, t[key])
            yield counter
        yield _gauge(
            "rocketmq_timer_enqueue_lag",
            "Timer messages not in the wheel yet",
            names,
            values,
            t["enqueue_behind"],
        )
        yield _gauge(
            "rocketmq_timer_dequeue_latency",
            "How far delivery of due timer messages is behind the clock (ms)",
            names,
            values,
            t["dequeue_behind_ms"],
        )
        yield _gauge(
            "rocketmq_timing_messages", "Timer messages waiting in the wheel", names, values, t["pending"]
        )


class AuthCollector(Collector):
    """ACL 2.0's refusals since the broker started, by reason (no_user, unknown_user,
    disabled_user, bad_signature, bad_header, no_policy, deny), and its users and ACLs."""

    def __init__(self, auth: Auth, broker: MetricsContext) -> None:
        self.auth = auth
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        cfg = self.broker.config
        common = {"cluster": cfg.broker_cluster_name, "node_type": "broker", "node_id": cfg.broker_name}
        names, values = list(common), list(common.values())
        denials = CounterMetricFamily(
            "ferromq_auth_denials", "Requests ACL 2.0 refused, by reason", labels=[*names, "reason"]
        )
        for reason, n in sorted(self.auth.audit.denials.items()):
            denials.add_metric([*values, reason], n)
        yield denials
        metadata = self.auth.metadata
        yield _gauge("ferromq_auth_users", "ACL 2.0 users", names, values, len(metadata.users))
        yield _gauge("ferromq_auth_acls", "ACL 2.0 subjects with an ACL", names, values, len(metadata.acls))


class TieringCollector(Collector):
    """Table topics (ferromq.tables.tiering): per topic, what was tiered since the broker started
    and how far its table is behind the log, read at scrape time."""

    def __init__(self, tiering: TieringStatus, broker: MetricsContext) -> None:
        self.tiering = tiering
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        cfg = self.broker.config
        common = {"cluster": cfg.broker_cluster_name, "node_type": "broker", "node_id": cfg.broker_name}
        labels = [*common, "topic"]
        values = list(common.values())
        progress = self.tiering.progress()
        lags = self.tiering.lags(progress)
        rows = CounterMetricFamily(
            "ferromq_table_topic_rows", "Messages appended to the topic's table", labels=labels
        )
        commits = CounterMetricFamily(
            "ferromq_table_topic_commits", "Commits to the topic's table", labels=labels
        )
        failures = CounterMetricFamily(
            "ferromq_table_topic_failures", "Tiering or compaction runs that failed", labels=labels
        )
        lost = CounterMetricFamily(
            "ferromq_table_topic_lost_messages",
            "Messages retention deleted from the log before they were tiered",
            labels=labels,
        )
        lag = GaugeMetricFamily(
            "ferromq_table_topic_lag_messages", "Messages not in the table yet", labels=labels
        )
        version = GaugeMetricFamily("ferromq_table_topic_version", "The table's Delta version", labels=labels)
        cpu = CounterMetricFamily(
            "ferromq_table_topic_cpu_seconds",
            "CPU time of the tiering thread for the topic: tier (read, write, commit) or maintain "
            "(compact, expire, vacuum)",
            labels=[*labels, "work"],
        )
        for p in progress:
            topic = [*values, p.topic]
            rows.add_metric(topic, p.rows_tiered)
            commits.add_metric(topic, p.commits)
            failures.add_metric(topic, p.failures)
            lost.add_metric(topic, p.rows_lost)
            lag.add_metric(topic, lags.get(p.topic, 0))
            version.add_metric(topic, -1 if p.version is None else p.version)
            cpu.add_metric([*topic, "tier"], p.tier_cpu_seconds)
            cpu.add_metric([*topic, "maintain"], p.maintain_cpu_seconds)
        yield from (rows, commits, failures, lost, lag, version, cpu)


class TieredStoreCollector(Collector):
    """Tiered storage (ferromq.tiered): the bucket's files, the uploader's work and failures, what
    waits to go, and the read cache, read at scrape time."""

    def __init__(self, tiered: TieredService, broker: MetricsContext) -> None:
        self.tiered = tiered
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        cfg = self.broker.config
        common = {"cluster": cfg.broker_cluster_name, "node_type": "broker", "node_id": cfg.broker_name}
        labels, values = list(common), list(common.values())
        t = self.tiered
        files = t.tiered_files()

        def one(
            kind: type[CounterMetricFamily | GaugeMetricFamily], name: str, doc: str, value: float
        ) -> Metric:
            family = kind(name, doc, labels=labels)
            family.add_metric(values, value)
            return family

        yield one(GaugeMetricFamily, "ferromq_tiered_files", "CommitLog files in the bucket", len(files))
        yield one(
            GaugeMetricFamily,
            "ferromq_tiered_bytes",
            "Bytes of records in the bucket's CommitLog files",
            sum(f.end - f.start for f in files),
        )
        yield one(
            GaugeMetricFamily,
            "ferromq_tiered_pending_bytes",
            "Sealed CommitLog bytes not in the bucket yet (local retention keeps them)",
            t.pending_bytes(),
        )
        yield one(CounterMetricFamily, "ferromq_tiered_uploads", "CommitLog files uploaded", t.uploaded_files)
        yield one(
            CounterMetricFamily,
            "ferromq_tiered_upload_failures",
            "Uploads or deletions in the bucket that failed (tried again)",
            t.failures,
        )
        yield one(
            CounterMetricFamily, "ferromq_tiered_expired", "Files deleted from the bucket", t.expired_files
        )
        yield one(
            CounterMetricFamily,
            "ferromq_tiered_uploader_starts",
            "Uploader processes started",
            t.uploader_starts,
        )
        cache = CounterMetricFamily(
            "ferromq_tiered_read_cache_reads", "Block reads of the read cache", labels=[*labels, "result"]
        )
        cache.add_metric([*values, "hit"], t.cache.hits)
        cache.add_metric([*values, "miss"], t.cache.misses)
        yield cache


class GrpcFrontCollector(Collector):
    """The gRPC port: the calls its Rust front answered itself on the data plane (the rest went to
    the Python service), read at scrape time."""

    def __init__(self, front: Callable[[], _store.GrpcFront | None], broker: MetricsContext) -> None:
        self.front = front
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        front = self.front()
        if front is None:
            return
        cfg = self.broker.config
        common = {"cluster": cfg.broker_cluster_name, "node_type": "broker", "node_id": cfg.broker_name}
        calls = CounterMetricFamily(
            "ferromq_grpc_front_calls",
            "gRPC calls the front answered on the data plane (send: SendMessage; receive: "
            "ReceiveMessage and AckMessage)",
            labels=[*common, "call"],
        )
        calls.add_metric([*common.values(), "send"], front.sends_answered)
        calls.add_metric([*common.values(), "receive"], front.receives_answered)
        yield calls
        python = CounterMetricFamily(
            "ferromq_grpc_python_calls",
            "gRPC calls the front handed to Python directly (not through grpcio), answered",
            labels=list(common),
        )
        python.add_metric(list(common.values()), front.inbox_answered)
        yield python


def _gauge(name: str, doc: str, names: list[str], values: list[str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=names)
    family.add_metric(values, value)
    return family


class MetricsExporter:
    """The /metrics endpoint: an asyncio HTTP/1.1 server answering GET /metrics (one request a
    connection) with the registry's text."""

    def __init__(self, broker: MetricsContext, host: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker))
        self._host = host or None
        self._port = port
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, self._port, limit=MAX_REQUEST_HEAD)
        logger.info("metrics at http://%s:%d/metrics", self._host or "0.0.0.0", self.port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
            method, path, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            if method not in ("GET", "HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"only GET\n"
            elif path.split("?", 1)[0] != "/metrics":
                status, ctype, body = "404 Not Found", "text/plain", b"metrics are at /metrics\n"
            else:
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + (body if method != "HEAD" else b"")
            )
            await writer.drain()
        except (
            TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            ValueError,
        ):
            pass
        finally:
            writer.close()
