"""The RocketMQ 5.x clients' gRPC path: ferromq against Apache RocketMQ 5.3.3's proxy (local mode), same run.

Both servers get the same broker.conf (ASYNC_FLUSH, RocketMQ's default file sizes) and the same client:
this process, grpcio's asyncio client with ferromq's generated stubs (apache.rocketmq.v2), sending what
the official 5.x Python client (rocketmq-python-client 5.1.2) sends. Each client is one such client
instance: its own channel and client id, the client's metadata on every call (x-mq-client-id,
x-mq-language PYTHON, x-mq-protocol GRPC_V2, x-mq-client-version, x-mq-date-time, x-mq-request-id,
x-mq-namespace, authorization with empty credentials), a QueryRoute of its topic, a Telemetry stream
whose first command is its Settings (producer: Publishing of its topics; SIMPLE_CONSUMER: the group's
subscription, TAG *, long polling 5 s), answered before anything else is sent, and a Heartbeat every
10 s; NotifyClientTermination at the end. Each server runs alone on a fresh store: ferromq as
`ferromq serve` (benchlib.serving; its name server is in the same process), Java as a 5.3.3 name server
plus `ProxyStartup -pm local` (one JVM holds the proxy and the broker; -Xms512m -Xmx512m, G1;
tools/apache_rocketmq.py). Server CPU is utime+stime of /proc/PID/stat (ferromq serve's PID; the
proxy JVM's; the Java name server's is given apart), also net of the server's idle CPU rate measured
over 5 s just before the timed part.

1. send      N messages of 1 KiB (NORMAL, no tag) to a NORMAL topic of 8 queues, W SendMessage calls in
             flight over P producer clients (a failed send is retried as the client retries: 3 attempts,
             none for TOO_MANY_REQUESTS), after a warm-up of N/10 (at least 2,000) on another topic:
             msg/s, server CPU per message, SendMessage round trip p50/p99/max.
2. latency   A fixed rate (5,000 msg/s) for S s (1 KiB, P producers, each send started on its schedule
             whatever is in flight) after a warm-up at the same rate: p50/p99/max of the SendMessage
             round trip, start lag (when the call started - when it was due: this client's own delay),
             and whether the rate was held (every send answered OK and OK answers / (last answer -
             first due time) >= 98 % of the rate).
3. receive   The messages of case 1 drained by C simple consumers (a client each): ReceiveMessage batch 32,
             invisible 30 s, long polling 5 s, over the route's queues in turn, then one AckMessage of all
             the batch's entries, then the next receive, until every message is acked (bounded): msg/s,
             server CPU per message (receive + ack), missing, duplicates; after a warm-up drain of case
             1's warm-up topic by another group.

4. follow    Consumers that keep up: the C simple consumers of case 3 receive and ack while P producers
             send at the fixed rate of case 2 (1 KiB) for S s, after a warm-up at that rate: most receives
             find nothing and wait (long polling) for the next message. End-to-end latency (the send's
             start to the first ReceiveMessage answer that carries the message) p50/p99/max, server CPU
             per message (send + receive + ack), receives (empty), missing and duplicates.

The issue's goals: CPU per message <= 0.5x Java's; p99 <= Java's; throughput >= Java's (cases 1-3).

    .venv/bin/python benches/grpc_bench.py [--quick] [--only send,latency,receive,follow]
        [--brokers ferromq,rocketmq] [--messages N] [--in-flight W] [--producers P] [--consumers C]
        [--rate R] [--seconds S]

Defaults: N = 100,000, W = 64, P = 4, C = 8, 5,000 msg/s for 20 s after a 10 s warm-up; --quick: N =
10,000, 5 s after 2 s. Prints one table per case and writes benches/results/grpc_vs_rocketmq.json
(grpc_vs_rocketmq_quick.json with --quick; --json). Needs `java` and `mvn` for the Java proxy (its jars
come from Maven Central on first use).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import itertools
import os
import random
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tools"))

import apache_rocketmq  # noqa: E402  (tools/ is not a package)
import grpc  # noqa: E402
from benchlib import (  # noqa: E402
    client_cpu,
    cpu_seconds,
    cpu_seconds_by_thread,
    free_port,
    loadavg,
    ratio,
    render,
    serving,
    write_results,
)
from google.protobuf import duration_pb2, timestamp_pb2  # noqa: E402

from ferromq.client.admin import Admin  # noqa: E402
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb  # noqa: E402
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2 as spb  # noqa: E402
from ferromq.proxy.proto.apache.rocketmq.v2.service_pb2_grpc import MessagingServiceStub  # noqa: E402

BROKERS = ("ferromq", "rocketmq")
QUEUES = 8
# Both servers get these broker.conf keys.
CONF = {
    "brokerClusterName": "DefaultCluster",
    "brokerName": "broker-a",
    "brokerId": "0",
    "brokerIP1": "127.0.0.1",
    "brokerRole": "ASYNC_MASTER",
    "flushDiskType": "ASYNC_FLUSH",
    "autoCreateTopicEnable": "true",
    "autoCreateSubscriptionGroup": "true",
    "defaultTopicQueueNums": str(QUEUES),
    # RocketMQ's defaults, written out so both surely use the same file sizes.
    "mappedFileSizeCommitLog": str(1 << 30),
    "mappedFileSizeConsumeQueue": str(300_000 * 20),
    "fileReservedTime": "72",
    "deleteWhen": "04",
    "diskMaxUsedSpaceRatio": "95",
}
TOPIC, WARM_TOPIC, LATENCY_TOPIC, FOLLOW_TOPIC = "GrpcBenchT", "GrpcWarmT", "GrpcLatencyT", "GrpcFollowT"
GROUP, WARM_GROUP, FOLLOW_GROUP = "GrpcBenchG", "GrpcWarmG", "GrpcFollowG"
START_TIMEOUT = 180.0
# What the Java proxy logs (ERROR and a stack trace) for every client that cancels its Telemetry stream
# on shutdown, as the official client does, and for the long-polling receives cancelled at a drain's end.
CLOSED_STREAM_NOISE = (
    "telemetry on error",
    "CANCELLED: client cancelled",
    "CANCELLED: call already cancelled",
    "RocketmqProxy - internal server error",
    "Status.asRuntimeException",
    "GlobalExceptionInterceptor$1.onCancel",
)

# What the official Python client (rocketmq-python-client) sends and waits.
SDK_VERSION = "5.1.2"
REQUEST_TIMEOUT_S = 3  # ClientConfiguration.request_timeout
HEARTBEAT_PERIOD_S = 10.0
SEND_ATTEMPTS = 3  # Producer.DEFAULT_MAX_SEND_ATTEMPTS
RECEIVE_BATCH = 32
INVISIBLE_S = 30
LONG_POLLING_S = 5
CHANNEL_OPTIONS = [
    ("grpc.enable_retries", 0),
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.use_local_subchannel_pool", 1),
]
IDLE_S = 5.0


def pct_ms(values: list[float], p: float) -> float | None:
    """The p-th percentile of durations in seconds, in ms."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000, 2)


def summary_ms(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": pct_ms(values, 50),
        "p99": pct_ms(values, 99),
        "max": round(max(values) * 1000, 2) if values else None,
    }


# -- servers --------------------------------------------------------------------------------------


@dataclass
class Server:
    kind: str
    endpoint: str
    """host:port of the gRPC port the 5.x clients are given."""
    pid: int
    """ferromq serve's process (its name server too); the Java proxy JVM (its broker too)."""
    namesrv_pid: int | None
    """The Java name server, a process of its own; None for ferromq."""
    create_topic: Callable[[str], Awaitable[None]]
    log_errors: Callable[[], list[str]]
    remoting: str = ""
    """host:port of the broker's remoting port (POP's remoting requests go there)."""

    def cpu(self) -> tuple[float, float | None]:
        ns = cpu_seconds(self.namesrv_pid) if self.namesrv_pid is not None else None
        return cpu_seconds(self.pid), ns

    def threads(self) -> dict[str, float]:
        """The server's CPU seconds by thread name (ferromq: `ferromq-grpc` is the Rust gRPC front,
        the Python event loop the process's own name)."""
        return cpu_seconds_by_thread(self.pid)


@contextlib.contextmanager
def running(kind: str, work: Path) -> Iterator[Server]:
    """A fresh server of `kind` on a fresh store under `work`, stopped (by its PID) after."""
    work.mkdir(parents=True, exist_ok=True)
    store = work / "store"
    if kind == "ferromq":
        conf = work / "broker.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in CONF.items()))
        log = work / "ferromq.log"
        namesrv_port, port = free_port(), free_port()
        with serving(conf, log, port, namesrv_port, args=["--store", str(store)]) as proc:
            endpoint = proc.grpc_endpoint
            if endpoint is None:
                raise SystemExit(f"ferromq serve names no gRPC port: {proc.ready_line}")

            async def create(topic: str) -> None:
                async with Admin(f"127.0.0.1:{namesrv_port}") as admin:
                    await admin.create_topic(topic, QUEUES)

            def errors() -> list[str]:
                text = log.read_text(errors="replace")
                return [ln for ln in text.splitlines() if " ERROR " in ln or ln.startswith("Traceback")][:20]

            yield Server(kind, endpoint, proc.pid, None, create, errors, f"127.0.0.1:{port}")
    else:
        proxy = apache_rocketmq.start_rocketmq_proxy(
            work,
            broker_conf={
                **CONF,
                "storePathRootDir": str(store),
                "storePathCommitLog": str(store / "commitlog"),
            },
            timeout=START_TIMEOUT,
        )
        try:

            async def create(topic: str) -> None:
                await asyncio.to_thread(proxy.create_topic, topic, queues=QUEUES)

            def errors() -> list[str]:
                # Each closed client's Telemetry stream is logged as an ERROR with a stack trace.
                return [ln for ln in proxy.log_errors() if not any(n in ln for n in CLOSED_STREAM_NOISE)][:20]

            yield Server(
                kind,
                proxy.grpc_endpoint,
                proxy.proxy_pid,
                proxy.namesrv_pid,
                create,
                errors,
                proxy.broker_addr,
            )
        finally:
            proxy.stop()


# -- the client -----------------------------------------------------------------------------------


class MessageIds:
    """Message ids as the official client makes them (MessageIdCodec, version 1): 01, the MAC's low 6
    bytes, the PID's low 2, seconds since 2021-01-01 UTC (4 bytes), a sequence number (4 bytes)."""

    EPOCH_2021 = 1_609_459_200

    def __init__(self) -> None:
        fixed = uuid.getnode().to_bytes(6, "big") + (os.getpid() & 0xFFFF).to_bytes(2, "big")
        self._prefix = "01" + fixed.hex().upper()
        self._seq = itertools.count()

    def next(self) -> str:
        seconds = (int(time.time()) - self.EPOCH_2021) & 0xFFFFFFFF
        return f"{self._prefix}{seconds:08X}{next(self._seq) & 0xFFFFFFFF:08X}"


_client_index = itertools.count()


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return out or "0"


def _resource(name: str) -> pb.Resource:
    return pb.Resource(name=name, resource_namespace="")


def _duration(seconds: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds)


def _code(code: int) -> str:
    try:
        return str(pb.Code.Name(code))
    except ValueError:
        return str(code)


class Session:
    """One official 5.x client instance: a producer of `topics`, or a SIMPLE_CONSUMER of `group`
    subscribed to `topics` (TAG *)."""

    def __init__(self, endpoint: str, client_type: int, topics: list[str], group: str | None = None) -> None:
        self.endpoint = endpoint
        host, port = endpoint.rsplit(":", 1)
        self.endpoints = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])
        self.client_type = client_type
        self.topics = topics
        self.group = group
        self.client_id = (
            f"{socket.gethostname()}@{os.getpid()}@{next(_client_index)}@{_base36(time.time_ns())}"
        )
        self.queues: dict[str, list[pb.MessageQueue]] = {}
        self.server_settings: pb.Settings | None = None
        self.errors: list[str] = []
        self._md_second = -1
        self._md_fixed: tuple[tuple[str, str], ...] = ()
        self._md_auth: tuple[tuple[str, str], ...] = ()
        self._channel: grpc.aio.Channel | None = None
        self.stub: Any = None
        self._telemetry: Any = None
        self._tasks: list[asyncio.Task[None]] = []

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The official client's metadata (Signature.metadata), its date-time and signature made once a
        second."""
        now = int(time.time())
        if now != self._md_second:
            date_time = time.strftime("%Y%m%dT%H%M%SZ", time.localtime(now))
            signature = hmac.new(b"", date_time.encode(), hashlib.sha1).hexdigest()
            self._md_second = now
            self._md_fixed = (
                ("x-mq-language", "PYTHON"),
                ("x-mq-protocol", "GRPC_V2"),
                ("x-mq-client-version", SDK_VERSION),
                ("x-mq-date-time", date_time),
            )
            self._md_auth = (
                ("x-mq-client-id", self.client_id),
                ("x-mq-namespace", ""),
                (
                    "authorization",
                    f"MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature={signature}",
                ),
            )
        return (*self._md_fixed, ("x-mq-request-id", str(uuid.uuid4())), *self._md_auth)

    def settings(self) -> pb.Settings:
        """What sync_setting_req sends (Producer's or Consumer's + SimpleConsumer's)."""
        ua = pb.UA(language=pb.PYTHON, version=SDK_VERSION, platform=f"Linux {os.uname().release}")
        ua.hostname = "127.0.0.1"
        s = pb.Settings(
            client_type=self.client_type,  # type: ignore[arg-type]
            access_point=self.endpoints,
            request_timeout=_duration(REQUEST_TIMEOUT_S),
            user_agent=ua,
            metric=pb.Metric(on=False),
        )
        if self.group is None:
            s.publishing.CopyFrom(
                pb.Publishing(
                    topics=[_resource(t) for t in self.topics],
                    max_body_size=128 * 1024 * 1024,
                    validate_message_type=True,
                )
            )
        else:
            s.subscription.CopyFrom(
                pb.Subscription(
                    group=_resource(self.group),
                    subscriptions=[
                        pb.SubscriptionEntry(
                            topic=_resource(t), expression=pb.FilterExpression(type=pb.TAG, expression="*")
                        )
                        for t in self.topics
                    ],
                    long_polling_timeout=_duration(LONG_POLLING_S),
                )
            )
        return s

    async def start(self, timeout: float = 15.0) -> Session:
        """QueryRoute of each topic, the Telemetry stream with the Settings (waits for the server's
        answer), a first heartbeat; then a heartbeat every 10 s."""
        self._channel = grpc.aio.insecure_channel(self.endpoint, options=CHANNEL_OPTIONS)
        self.stub = MessagingServiceStub(self._channel)  # type: ignore[no-untyped-call]
        for topic in self.topics:
            req = spb.QueryRouteRequest(topic=_resource(topic), endpoints=self.endpoints)
            r = await self.stub.QueryRoute(req, metadata=self.metadata(), timeout=REQUEST_TIMEOUT_S)
            if r.status.code != pb.OK:
                raise RuntimeError(f"QueryRoute {topic}: {_code(r.status.code)} {r.status.message}")
            self.queues[topic] = list(r.message_queues)
        self._telemetry = self.stub.Telemetry(metadata=self.metadata(), wait_for_ready=True)
        await self._telemetry.write(spb.TelemetryCommand(settings=self.settings()))
        reply = await asyncio.wait_for(self._telemetry.read(), timeout)
        if reply is grpc.aio.EOF or not reply.HasField("settings"):
            raise RuntimeError(f"Telemetry: no Settings back for {self.settings()}: {reply}")
        if reply.HasField("status") and reply.status.code != pb.OK:
            raise RuntimeError(f"Telemetry: {_code(reply.status.code)} {reply.status.message}")
        self.server_settings = reply.settings
        self._tasks.append(asyncio.create_task(self._read_commands()))
        await self.heartbeat()
        self._tasks.append(asyncio.create_task(self._heartbeats()))
        return self

    async def heartbeat(self) -> None:
        req = spb.HeartbeatRequest(client_type=self.client_type)  # type: ignore[arg-type]
        if self.group is not None:
            req.group.CopyFrom(_resource(self.group))
        r = await self.stub.Heartbeat(req, metadata=self.metadata(), timeout=REQUEST_TIMEOUT_S)
        if r.status.code != pb.OK:
            raise RuntimeError(f"Heartbeat: {_code(r.status.code)} {r.status.message}")

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_PERIOD_S)
            try:
                await self.heartbeat()
            except Exception as e:
                self.errors.append(f"heartbeat: {e!r}")

    async def _read_commands(self) -> None:
        """Commands the server sends later (none is expected here)."""
        while True:
            cmd = await self._telemetry.read()
            if cmd is grpc.aio.EOF:
                return
            if len(self.errors) < 10:
                self.errors.append(f"telemetry command: {str(cmd)[:200]}")

    async def stop(self) -> None:
        """As the client shuts down: its schedulers stop, NotifyClientTermination, the Telemetry stream
        cancelled, the channel closed."""
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.stub is not None:
            req = spb.NotifyClientTerminationRequest()
            if self.group is not None:
                req.group.CopyFrom(_resource(self.group))
            with contextlib.suppress(Exception):
                await self.stub.NotifyClientTermination(
                    req, metadata=self.metadata(), timeout=REQUEST_TIMEOUT_S
                )
        if self._telemetry is not None:
            self._telemetry.cancel()  # as the client closes its channel (RpcStreamStreamCall.close)
        if self._channel is not None:
            await self._channel.close()


async def open_sessions(
    server: Server, n: int, client_type: int, topics: list[str], group: str | None = None
) -> list[Session]:
    return list(
        await asyncio.gather(
            *(Session(server.endpoint, client_type, topics, group).start() for _ in range(n))
        )
    )


async def close_sessions(sessions: list[Session]) -> None:
    await asyncio.gather(*(s.stop() for s in sessions), return_exceptions=True)


def send_request(topic: str, body: bytes, message_id: str) -> spb.SendMessageRequest:
    """Producer.__send_req of a NORMAL message without tag, keys or properties."""
    props = pb.SystemProperties(
        message_id=message_id,
        message_type=pb.NORMAL,
        born_timestamp=timestamp_pb2.Timestamp(seconds=int(time.time())),
        born_host="127.0.0.1",
        body_encoding=pb.IDENTITY,
    )
    return spb.SendMessageRequest(
        messages=[pb.Message(topic=_resource(topic), system_properties=props, body=body)]
    )


@dataclass
class Sent:
    ok: int = 0
    failed: int = 0
    retries: int = 0
    seconds: float = 0.0
    ids: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0


async def send_one(s: Session, req: spb.SendMessageRequest, sent: Sent) -> bool:
    """One send as the client makes it: up to 3 attempts (backoff 10 ms, doubling), none after
    TOO_MANY_REQUESTS. The errors (request summary and response) go to sent.errors."""
    for attempt in range(SEND_ATTEMPTS):
        if attempt:
            sent.retries += 1
            await asyncio.sleep(0.01 * 2 ** (attempt - 1))
        try:
            r = await s.stub.SendMessage(req, metadata=s.metadata(), timeout=REQUEST_TIMEOUT_S)
        except grpc.aio.AioRpcError as e:
            why = f"gRPC {e.code().name}: {e.details()}"
            code = None
        else:
            code = r.status.code
            if code == pb.OK and r.entries and r.entries[0].status.code == pb.OK:
                return True
            why = f"{_code(code)} {r.status.message!r} entries={[str(e.status) for e in r.entries][:1]}"
        if len(sent.errors) < 10:
            m = req.messages[0]
            sent.errors.append(
                f"SendMessage(topic={m.topic.name}, message_id={m.system_properties.message_id}, "
                f"{len(m.body)} B) attempt {attempt + 1}: {why}"
            )
        if code == pb.TOO_MANY_REQUESTS:
            break
    return False


async def send_all(
    sessions: list[Session],
    topic: str,
    n: int,
    in_flight: int,
    body: bytes,
    ids: MessageIds,
    deadline_s: float,
) -> Sent:
    """n sends with `in_flight` calls at once, spread over the sessions (bounded by deadline_s)."""
    sent = Sent()
    it = iter(range(n))
    deadline = time.monotonic() + deadline_s

    async def worker(k: int) -> None:
        s = sessions[k % len(sessions)]
        for _ in it:
            if time.monotonic() > deadline:
                return
            message_id = ids.next()
            t = time.perf_counter()
            if await send_one(s, send_request(topic, body, message_id), sent):
                sent.latencies.append(time.perf_counter() - t)
                sent.ok += 1
                sent.ids.append(message_id)
            else:
                sent.failed += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(min(in_flight, n))))
    sent.seconds = time.perf_counter() - started
    return sent


async def idle_rate(server: Server, seconds: float = IDLE_S) -> tuple[float, float | None]:
    """CPU seconds per second of the server (and the Java name server) doing nothing."""
    c0, n0 = server.cpu()
    await asyncio.sleep(seconds)
    c1, n1 = server.cpu()
    return (c1 - c0) / seconds, (n1 - n0) / seconds if n0 is not None and n1 is not None else None


def _cpu_fields(
    server_cpu: float, idle: float, seconds: float, done: int, ns_cpu: float | None
) -> dict[str, Any]:
    net = server_cpu - idle * seconds
    return {
        "server_cpu_s": round(server_cpu, 3),
        "server_idle_cpu_per_s": round(idle, 4),
        "server_cpu_us_per_msg": round(server_cpu / done * 1e6, 2) if done else None,
        "server_cpu_us_per_msg_net_of_idle": round(net / done * 1e6, 2) if done else None,
        "namesrv_cpu_s": None if ns_cpu is None else round(ns_cpu, 3),
    }


def by_thread(before: dict[str, float], after: dict[str, float], done: int) -> dict[str, float]:
    """CPU microseconds per message by thread name, the busiest first (those above 1 µs)."""
    per = {k: (v - before.get(k, 0.0)) / done * 1e6 for k, v in after.items()} if done else {}
    return {k: round(v, 1) for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 1}


# -- 1. send --------------------------------------------------------------------------------------


async def send_case(
    server: Server, producers: list[Session], n: int, in_flight: int, body: bytes, ids: MessageIds
) -> tuple[dict[str, Any], Sent, Sent]:
    """The row, what was sent, and what the warm-up sent (to WARM_TOPIC)."""
    warm_n = max(2000, n // 10)
    warm = await send_all(producers, WARM_TOPIC, warm_n, in_flight, body, ids, 120 + warm_n / 100)
    print(
        f"  [{server.kind}] warm-up: {warm.ok:,} sent at {warm.rate:,.0f}/s ({warm.failed} failed)",
        flush=True,
    )
    await asyncio.sleep(3)
    idle, _ = await idle_rate(server)
    load0 = loadavg()
    (c0, n0), cc0, t0 = server.cpu(), client_cpu(), server.threads()
    sent = await send_all(producers, TOPIC, n, in_flight, body, ids, 300 + n / 200)
    (c1, n1), cc1, t1 = server.cpu(), client_cpu(), server.threads()
    print(f"  [{server.kind}] {sent.ok:,} sent at {sent.rate:,.0f}/s ({sent.failed} failed)", flush=True)
    ns_cpu = n1 - n0 if n0 is not None and n1 is not None else None
    row = {
        "broker": server.kind,
        "messages": n,
        "body_bytes": len(body),
        "in_flight": in_flight,
        "producers": len(producers),
        "sent": sent.ok,
        "failed": sent.failed,
        "retries": sent.retries,
        "errors": sent.errors,
        "seconds": round(sent.seconds, 2),
        "msgs_per_s": round(sent.rate),
        **_cpu_fields(c1 - c0, idle, sent.seconds, sent.ok, ns_cpu),
        "server_cpu_us_per_msg_by_thread": by_thread(t0, t1, sent.ok),
        "client_cpu_s": round(cc1 - cc0, 2),
        "send_ms": summary_ms(sent.latencies),
        "warmup": {
            "messages": warm_n,
            "sent": warm.ok,
            "msgs_per_s": round(warm.rate),
            "errors": warm.errors,
        },
        "loadavg_start": load0,
        "loadavg_end": loadavg(),
    }
    return row, sent, warm


# -- 3. receive -----------------------------------------------------------------------------------


@dataclass
class Drained:
    received: int = 0
    acked: int = 0
    ack_failed: int = 0
    duplicates: int = 0
    missing: int = 0
    receive_calls: int = 0
    empty_receives: int = 0
    seconds: float = 0.0
    codes: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


async def drain(
    consumers: list[Session],
    topic: str,
    group: str,
    expected: set[str],
    arrived: dict[str, float] | None = None,
) -> Drained:
    """The simple consumers receive (batch 32, invisible 30 s, long polling 5 s) and ack each batch with
    one AckMessage until every expected message is acked, a consumer fails, or a bounded wait ends.
    `arrived` gets each message's first answer time (perf_counter)."""
    d = Drained()
    seen: set[str] = set()
    acked: set[str] = set()
    acked_expected = 0
    done = asyncio.Event()
    if not expected:
        done.set()

    def error(text: str) -> None:
        if len(d.errors) < 10:
            d.errors.append(text)

    async def consume(s: Session) -> None:
        nonlocal acked_expected
        queues = [
            q for q in s.queues[topic] if q.permission in (pb.READ, pb.READ_WRITE) and q.broker.id == 0
        ] or s.queues[topic]
        turn = random.randrange(len(queues))
        while not done.is_set():
            q = queues[turn % len(queues)]
            turn += 1
            req = spb.ReceiveMessageRequest(
                group=_resource(group),
                message_queue=q,
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                batch_size=RECEIVE_BATCH,
                invisible_duration=_duration(INVISIBLE_S),
                auto_renew=False,
                long_polling_timeout=_duration(LONG_POLLING_S),
            )
            status: pb.Status | None = None
            messages: list[pb.Message] = []
            try:
                call = s.stub.ReceiveMessage(
                    req, metadata=s.metadata(), timeout=REQUEST_TIMEOUT_S + LONG_POLLING_S
                )
                async for r in call:
                    kind = r.WhichOneof("content")
                    if kind == "status":
                        status = r.status
                    elif kind == "message":
                        messages.append(r.message)
            except grpc.aio.AioRpcError as e:
                error(f"ReceiveMessage(queue {q.id}): gRPC {e.code().name}: {e.details()}")
                await asyncio.sleep(0.05)
                continue
            d.receive_calls += 1
            name = _code(status.code) if status is not None else "NO_STATUS"
            d.codes[name] = d.codes.get(name, 0) + 1
            if status is None or status.code != pb.OK or not messages:
                d.empty_receives += 1
                if status is None or status.code not in (pb.OK, pb.MESSAGE_NOT_FOUND):
                    error(f"ReceiveMessage(group={group}, queue {q.id}, batch 32): {name} {status}")
                    await asyncio.sleep(0.05)
                continue
            d.received += len(messages)
            now = time.perf_counter()
            for m in messages:
                mid = m.system_properties.message_id
                if mid in seen:
                    d.duplicates += 1
                elif arrived is not None:
                    arrived[mid] = now
                seen.add(mid)
            ack = spb.AckMessageRequest(
                group=_resource(group),
                topic=_resource(topic),
                entries=[
                    spb.AckMessageEntry(
                        message_id=m.system_properties.message_id,
                        receipt_handle=m.system_properties.receipt_handle,
                    )
                    for m in messages
                ],
            )
            try:
                r = await s.stub.AckMessage(ack, metadata=s.metadata(), timeout=REQUEST_TIMEOUT_S)
            except grpc.aio.AioRpcError as e:
                d.ack_failed += len(messages)
                error(f"AckMessage({len(messages)} entries): gRPC {e.code().name}: {e.details()}")
                continue
            by_id = {e.message_id: e.status.code for e in r.entries}
            for m in messages:
                mid = m.system_properties.message_id
                if by_id.get(mid, r.status.code) == pb.OK:
                    d.acked += 1
                    if mid in expected and mid not in acked:
                        acked_expected += 1
                    acked.add(mid)
                else:
                    d.ack_failed += 1
            if r.status.code != pb.OK:
                error(f"AckMessage({len(messages)} entries): {_code(r.status.code)} {r.status.message!r}")
            if acked_expected >= len(expected):
                done.set()

    t0 = time.perf_counter()
    tasks = [asyncio.create_task(consume(s)) for s in consumers]
    waiter = asyncio.create_task(done.wait())
    limit = 120 + len(expected) / 500
    await asyncio.wait([waiter, *tasks], timeout=limit, return_when=asyncio.FIRST_COMPLETED)
    # Whatever came first: all acked, a consumer that crashed (reported below), or the time limit.
    d.seconds = time.perf_counter() - t0
    done.set()
    for t in tasks:
        t.cancel()
    waiter.cancel()
    for x in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(x, Exception):
            error(f"consumer: {x!r}")
    d.missing = len(expected - acked)
    return d


async def receive_case(
    server: Server, consumers: int, expected: set[str], warm_expected: set[str]
) -> dict[str, Any]:
    warm_cons = await open_sessions(server, consumers, pb.SIMPLE_CONSUMER, [WARM_TOPIC], WARM_GROUP)
    try:
        warm = await drain(warm_cons, WARM_TOPIC, WARM_GROUP, warm_expected)
    finally:
        await close_sessions(warm_cons)
    print(
        f"  [{server.kind}] warm-up: {warm.acked:,} received+acked in {warm.seconds:.1f} s "
        f"({warm.missing} missing)",
        flush=True,
    )
    cons = await open_sessions(server, consumers, pb.SIMPLE_CONSUMER, [TOPIC], GROUP)
    try:
        await asyncio.sleep(3)
        idle, _ = await idle_rate(server)
        load0 = loadavg()
        (c0, n0), cc0, t0 = server.cpu(), client_cpu(), server.threads()
        d = await drain(cons, TOPIC, GROUP, expected)
        (c1, n1), cc1, t1 = server.cpu(), client_cpu(), server.threads()
        session_errors = [e for s in cons for e in s.errors][:10]
    finally:
        await close_sessions(cons)
    done = len(expected) - d.missing
    print(f"  [{server.kind}] {done:,} received+acked at {done / d.seconds:,.0f}/s", flush=True)
    ns_cpu = n1 - n0 if n0 is not None and n1 is not None else None
    return {
        "broker": server.kind,
        "messages": len(expected),
        "consumers": consumers,
        "batch": RECEIVE_BATCH,
        "invisible_s": INVISIBLE_S,
        "long_polling_s": LONG_POLLING_S,
        "received": d.received,
        "acked": d.acked,
        "ack_failed": d.ack_failed,
        "duplicates": d.duplicates,
        "missing": d.missing,
        "receive_calls": d.receive_calls,
        "empty_receives": d.empty_receives,
        "receive_codes": d.codes,
        "errors": d.errors,
        "session_errors": session_errors,
        "seconds": round(d.seconds, 2),
        "msgs_per_s": round(done / d.seconds) if d.seconds else None,
        **_cpu_fields(c1 - c0, idle, d.seconds, done, ns_cpu),
        "server_cpu_us_per_msg_by_thread": by_thread(t0, t1, done),
        "client_cpu_s": round(cc1 - cc0, 2),
        "warmup": {
            "messages": len(warm_expected),
            "acked": warm.acked,
            "missing": warm.missing,
            "seconds": round(warm.seconds, 2),
            "errors": warm.errors,
        },
        "loadavg_start": load0,
        "loadavg_end": loadavg(),
    }


async def send_receive(
    server: Server, cases: list[str], args: argparse.Namespace
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Case 1, then case 3 on what it sent (case 1 runs as the pre-send of case 3 when only that one is
    asked for)."""
    for topic in (WARM_TOPIC, TOPIC):
        await server.create_topic(topic)
    body = b"b" * args.body
    ids = MessageIds()
    producers = await open_sessions(server, args.producers, pb.PRODUCER, [WARM_TOPIC, TOPIC])
    try:
        send_row, sent, warm = await send_case(server, producers, args.messages, args.in_flight, body, ids)
        send_row["session_errors"] = [e for s in producers for e in s.errors][:10]
    finally:
        await close_sessions(producers)
    recv_row = None
    if "receive" in cases:
        # The send warm-up's messages are the receive warm-up's.
        recv_row = await receive_case(server, args.consumers, set(sent.ids), set(warm.ids))
        recv_row["server_log_errors"] = server.log_errors()
    send_row["server_log_errors"] = server.log_errors()
    return (send_row if "send" in cases else None), recv_row


# -- 2. latency -----------------------------------------------------------------------------------


@dataclass
class Paced:
    planned: int = 0
    ok: int = 0
    failed: int = 0
    retries: int = 0
    first_due: float = 0.0
    last_answer: float = 0.0
    latencies: list[float] = field(default_factory=list)
    start_lag: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def fixed_rate(
    producers: list[Session],
    topic: str,
    rate: float,
    seconds: float,
    body: bytes,
    ids: MessageIds | Iterator[str],
    started: dict[str, float] | None = None,
) -> Paced:
    """Sends at `rate` for `seconds`: send i is started at first_due + i / rate whatever is still in
    flight (at most 20,000 at once: past that the schedule slips, which shows as start lag). `ids`
    names the messages (an iterator: ids chosen beforehand); `started` gets each send's start time."""
    next_id = ids.next if isinstance(ids, MessageIds) else ids.__next__
    p = Paced(planned=int(rate * seconds))
    sent = Sent()  # for send_one's retry and error bookkeeping
    room = asyncio.Semaphore(20_000)
    pending: set[asyncio.Task[None]] = set()

    async def one(i: int, due: float) -> None:
        try:
            s = producers[i % len(producers)]
            start = time.perf_counter()
            p.start_lag.append(start - due)
            message_id = next_id()
            if started is not None:
                started[message_id] = start
            ok = await send_one(s, send_request(topic, body, message_id), sent)
            end = time.perf_counter()
            if ok:
                p.ok += 1
                p.latencies.append(end - start)
                p.last_answer = max(p.last_answer, end)
            else:
                p.failed += 1
        finally:
            room.release()

    p.first_due = time.perf_counter() + 0.05
    for i in range(p.planned):
        due = p.first_due + i / rate
        delay = due - time.perf_counter()
        await asyncio.sleep(delay if delay > 0 else 0)
        await room.acquire()
        task = asyncio.create_task(one(i, due))
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        await asyncio.wait(set(pending), timeout=SEND_ATTEMPTS * (REQUEST_TIMEOUT_S + 1) + 5)
    p.retries, p.errors = sent.retries, sent.errors
    return p


async def latency_case(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    await server.create_topic(LATENCY_TOPIC)
    body = b"l" * args.body
    ids = MessageIds()
    producers = await open_sessions(server, args.producers, pb.PRODUCER, [LATENCY_TOPIC])
    try:
        warm = await fixed_rate(producers, LATENCY_TOPIC, args.rate, args.warmup_seconds, body, ids)
        print(
            f"  [{server.kind}] warm-up: {warm.ok:,} at {args.rate:,.0f}/s, p99 "
            f"{pct_ms(warm.latencies, 99)} ms ({warm.failed} failed)",
            flush=True,
        )
        await asyncio.sleep(3)
        idle, _ = await idle_rate(server)
        load0 = loadavg()
        (c0, n0), cc0 = server.cpu(), client_cpu()
        p = await fixed_rate(producers, LATENCY_TOPIC, args.rate, args.seconds, body, ids)
        (c1, n1), cc1 = server.cpu(), client_cpu()
        session_errors = [e for s in producers for e in s.errors][:10]
    finally:
        await close_sessions(producers)
    span = p.last_answer - p.first_due
    achieved = p.ok / span if span > 0 else 0.0
    held = p.failed == 0 and p.ok == p.planned and achieved >= 0.98 * args.rate
    lat = summary_ms(p.latencies)
    print(
        f"  [{server.kind}] {p.ok:,} at {args.rate:,.0f}/s: p50/p99/max "
        f"{lat['p50']}/{lat['p99']}/{lat['max']} ms, "
        f"rate {'held' if held else 'NOT held'} ({achieved:,.0f}/s)",
        flush=True,
    )
    ns_cpu = n1 - n0 if n0 is not None and n1 is not None else None
    return {
        "broker": server.kind,
        "rate": args.rate,
        "window_s": args.seconds,
        "body_bytes": len(body),
        "producers": len(producers),
        "planned": p.planned,
        "sent": p.ok,
        "failed": p.failed,
        "retries": p.retries,
        "errors": p.errors,
        "session_errors": session_errors,
        "rate_held": held,
        "achieved_msgs_per_s": round(achieved),
        "last_answer_after_window_s": round(span - args.seconds, 3),
        "send_ms": lat,
        "start_lag_ms": summary_ms(p.start_lag),
        **_cpu_fields(c1 - c0, idle, span, p.ok, ns_cpu),
        "client_cpu_s": round(cc1 - cc0, 2),
        "warmup": {
            "seconds": args.warmup_seconds,
            "sent": warm.ok,
            "failed": warm.failed,
            "send_ms": summary_ms(warm.latencies),
        },
        "loadavg_start": load0,
        "loadavg_end": loadavg(),
        "server_log_errors": server.log_errors(),
    }


# -- 4. follow -------------------------------------------------------------------------------------


async def follow(
    producers: list[Session], consumers: list[Session], rate: float, seconds: float, body: bytes
) -> tuple[Paced, Drained, list[float]]:
    """Sends at `rate` for `seconds` while the consumers receive and ack: what was sent, what was
    drained, and each message's end-to-end latency (its send's start to its first receive)."""
    ids = MessageIds()
    planned = [ids.next() for _ in range(int(rate * seconds))]
    started: dict[str, float] = {}
    arrived: dict[str, float] = {}
    drained = asyncio.create_task(drain(consumers, FOLLOW_TOPIC, FOLLOW_GROUP, set(planned), arrived))
    paced = await fixed_rate(producers, FOLLOW_TOPIC, rate, seconds, body, iter(planned), started)
    d = await drained
    latencies = [arrived[i] - started[i] for i in planned if i in arrived and i in started]
    return paced, d, latencies


async def follow_case(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    await server.create_topic(FOLLOW_TOPIC)
    body = b"f" * args.body
    producers = await open_sessions(server, args.producers, pb.PRODUCER, [FOLLOW_TOPIC])
    consumers = await open_sessions(server, args.consumers, pb.SIMPLE_CONSUMER, [FOLLOW_TOPIC], FOLLOW_GROUP)
    try:
        wp, wd, wl = await follow(producers, consumers, args.rate, args.warmup_seconds, body)
        print(
            f"  [{server.kind}] warm-up: {wp.ok:,} sent at {args.rate:,.0f}/s, {wd.acked:,} acked, "
            f"end to end p99 {pct_ms(wl, 99)} ms ({wd.missing} missing)",
            flush=True,
        )
        await asyncio.sleep(3)
        idle, _ = await idle_rate(server)
        load0 = loadavg()
        (c0, n0), cc0, t0 = server.cpu(), client_cpu(), server.threads()
        p, d, latencies = await follow(producers, consumers, args.rate, args.seconds, body)
        (c1, n1), cc1, t1 = server.cpu(), client_cpu(), server.threads()
        session_errors = [e for s in producers + consumers for e in s.errors][:10]
    finally:
        await close_sessions(producers + consumers)
    done = p.planned - d.missing
    e2e = summary_ms(latencies)
    print(
        f"  [{server.kind}] {done:,} sent and received at {args.rate:,.0f}/s: end to end p50/p99/max "
        f"{e2e['p50']}/{e2e['p99']}/{e2e['max']} ms, {d.receive_calls:,} receives "
        f"({d.empty_receives:,} empty)",
        flush=True,
    )
    ns_cpu = n1 - n0 if n0 is not None and n1 is not None else None
    return {
        "broker": server.kind,
        "rate": args.rate,
        "window_s": args.seconds,
        "body_bytes": len(body),
        "producers": len(producers),
        "consumers": len(consumers),
        "batch": RECEIVE_BATCH,
        "long_polling_s": LONG_POLLING_S,
        "planned": p.planned,
        "sent": p.ok,
        "send_failed": p.failed,
        "acked": d.acked,
        "ack_failed": d.ack_failed,
        "duplicates": d.duplicates,
        "missing": d.missing,
        "receive_calls": d.receive_calls,
        "empty_receives": d.empty_receives,
        "receive_codes": d.codes,
        "errors": p.errors + d.errors,
        "session_errors": session_errors,
        "seconds": round(d.seconds, 2),
        "end_to_end_ms": e2e,
        "send_ms": summary_ms(p.latencies),
        **_cpu_fields(c1 - c0, idle, d.seconds, done, ns_cpu),
        "server_cpu_us_per_msg_by_thread": by_thread(t0, t1, done),
        "client_cpu_s": round(cc1 - cc0, 2),
        "warmup": {
            "seconds": args.warmup_seconds,
            "sent": wp.ok,
            "acked": wd.acked,
            "missing": wd.missing,
            "end_to_end_ms": summary_ms(wl),
        },
        "loadavg_start": load0,
        "loadavg_end": loadavg(),
        "server_log_errors": server.log_errors(),
    }


# -- tables ---------------------------------------------------------------------------------------


def _ms(d: dict[str, Any], *keys: str) -> str:
    return "/".join("-" if d.get(k) is None else f"{d[k]:g}" for k in keys)


def _s(v: Any) -> str:
    return "-" if v is None else str(v)


def send_table(rows: list[dict[str, Any]]) -> str:
    head = ["broker", "sent", "failed", "msg/s", "cpu s", "cpu us/msg", "net us/msg", "namesrv cpu s"]
    head += ["client cpu s", "send p50/p99/max ms", "load"]
    out = []
    for r in rows:
        out.append(
            [
                r["broker"],
                f"{r['sent']:,}",
                str(r["failed"]),
                f"{r['msgs_per_s']:,}",
                _s(r["server_cpu_s"]),
                _s(r["server_cpu_us_per_msg"]),
                _s(r["server_cpu_us_per_msg_net_of_idle"]),
                _s(r["namesrv_cpu_s"]),
                _s(r["client_cpu_s"]),
                _ms(r["send_ms"], "p50", "p99", "max"),
                r["loadavg_end"].split()[0],
            ]
        )
    return render(head, out)


def latency_table(rows: list[dict[str, Any]]) -> str:
    head = ["broker", "rate", "sent", "failed", "held", "achieved/s", "p50/p99/max ms", "start lag p99 ms"]
    head += ["cpu us/msg", "net us/msg", "namesrv cpu s", "client cpu s", "load"]
    out = []
    for r in rows:
        out.append(
            [
                r["broker"],
                f"{r['rate']:,.0f}/s x {r['window_s']:g} s",
                f"{r['sent']:,}",
                str(r["failed"]),
                "yes" if r["rate_held"] else "NO",
                f"{r['achieved_msgs_per_s']:,}",
                _ms(r["send_ms"], "p50", "p99", "max"),
                _s(r["start_lag_ms"]["p99"]),
                _s(r["server_cpu_us_per_msg"]),
                _s(r["server_cpu_us_per_msg_net_of_idle"]),
                _s(r["namesrv_cpu_s"]),
                _s(r["client_cpu_s"]),
                r["loadavg_end"].split()[0],
            ]
        )
    return render(head, out)


def receive_table(rows: list[dict[str, Any]]) -> str:
    head = ["broker", "messages", "acked", "dup", "missing", "msg/s", "cpu s", "cpu us/msg", "net us/msg"]
    head += ["namesrv cpu s", "client cpu s", "receives (empty)", "load"]
    out = []
    for r in rows:
        out.append(
            [
                r["broker"],
                f"{r['messages']:,}",
                f"{r['acked']:,}",
                str(r["duplicates"]),
                str(r["missing"]),
                _s(None if r["msgs_per_s"] is None else f"{r['msgs_per_s']:,}"),
                _s(r["server_cpu_s"]),
                _s(r["server_cpu_us_per_msg"]),
                _s(r["server_cpu_us_per_msg_net_of_idle"]),
                _s(r["namesrv_cpu_s"]),
                _s(r["client_cpu_s"]),
                f"{r['receive_calls']:,} ({r['empty_receives']:,})",
                r["loadavg_end"].split()[0],
            ]
        )
    return render(head, out)


def follow_table(rows: list[dict[str, Any]]) -> str:
    head = ["broker", "rate", "sent", "acked", "dup", "missing", "end to end p50/p99/max ms"]
    head += ["cpu s", "cpu us/msg", "net us/msg", "receives (empty)", "load"]
    out = []
    for r in rows:
        out.append(
            [
                r["broker"],
                f"{r['rate']:,.0f}/s x {r['window_s']:g} s",
                f"{r['sent']:,}",
                f"{r['acked']:,}",
                str(r["duplicates"]),
                str(r["missing"]),
                _ms(r["end_to_end_ms"], "p50", "p99", "max"),
                _s(r["server_cpu_s"]),
                _s(r["server_cpu_us_per_msg"]),
                _s(r["server_cpu_us_per_msg_net_of_idle"]),
                f"{r['receive_calls']:,} ({r['empty_receives']:,})",
                r["loadavg_end"].split()[0],
            ]
        )
    return render(head, out)


def print_by_thread(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        parts = ", ".join(f"{k} {v:g}" for k, v in r.get("server_cpu_us_per_msg_by_thread", {}).items())
        print(f"  {r['broker']} cpu us/msg by thread: {parts}")


def ratios(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    def pair(case: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        by = {r["broker"]: r for r in results.get(case, [])}
        return (by["ferromq"], by["rocketmq"]) if len(by) == 2 else None

    def cpu(f: dict[str, Any], j: dict[str, Any]) -> dict[str, Any]:
        return {
            "cpu_per_msg": ratio(f["server_cpu_us_per_msg"], j["server_cpu_us_per_msg"]),
            "cpu_per_msg_net_of_idle": ratio(
                f["server_cpu_us_per_msg_net_of_idle"], j["server_cpu_us_per_msg_net_of_idle"]
            ),
        }

    out: dict[str, Any] = {}
    if p := pair("send"):
        f, j = p
        out["send"] = {"msgs_per_s": ratio(f["msgs_per_s"], j["msgs_per_s"]), **cpu(f, j)}
    if p := pair("latency"):
        f, j = p
        out["latency"] = {
            "p50": ratio(f["send_ms"]["p50"], j["send_ms"]["p50"]),
            "p99": ratio(f["send_ms"]["p99"], j["send_ms"]["p99"]),
            "max": ratio(f["send_ms"]["max"], j["send_ms"]["max"]),
            **cpu(f, j),
        }
    if p := pair("receive"):
        f, j = p
        out["receive"] = {"msgs_per_s": ratio(f["msgs_per_s"], j["msgs_per_s"]), **cpu(f, j)}
    if p := pair("follow"):
        f, j = p
        out["follow"] = {
            "end_to_end_p50": ratio(f["end_to_end_ms"]["p50"], j["end_to_end_ms"]["p50"]),
            "end_to_end_p99": ratio(f["end_to_end_ms"]["p99"], j["end_to_end_ms"]["p99"]),
            **cpu(f, j),
        }
    return out


def targets(rat: dict[str, Any]) -> dict[str, Any]:
    """The issue's goals: CPU per message (net of idle) <= 0.5x Java's, p99 <= Java's, throughput >=
    Java's."""

    def goal(value: float | None, ok: Callable[[float], bool]) -> dict[str, Any]:
        return {"ratio": value, "met": None if value is None else ok(value)}

    out: dict[str, Any] = {}
    for case in ("send", "receive", "latency"):
        if case in rat:
            out[f"{case}_cpu_per_msg_le_half_java"] = goal(
                rat[case]["cpu_per_msg_net_of_idle"], lambda v: v <= 0.5
            )
    if "latency" in rat:
        out["latency_p99_le_java"] = goal(rat["latency"]["p99"], lambda v: v <= 1.0)
    for case in ("send", "receive"):
        if case in rat:
            out[f"{case}_msgs_per_s_ge_java"] = goal(rat[case]["msgs_per_s"], lambda v: v >= 1.0)
    return out


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="10k messages, 5 s at the fixed rate after 2 s")
    p.add_argument("--only", default="send,latency,receive,follow", help="cases to run (default: all four)")
    p.add_argument("--brokers", default=",".join(BROKERS), help="ferromq,rocketmq (default both)")
    p.add_argument("--messages", type=int, help="messages sent by case 1 and drained by case 3 (100,000)")
    p.add_argument("--in-flight", type=int, default=64, help="SendMessage calls in flight in case 1 (64)")
    p.add_argument("--producers", type=int, default=4, help="producer clients (channels) of cases 1, 2 (4)")
    p.add_argument("--consumers", type=int, default=8, help="simple consumers of cases 3, 4 (8)")
    p.add_argument("--rate", type=float, default=5000.0, help="msg/s of cases 2, 4 (5,000)")
    p.add_argument("--seconds", type=float, help="measured window of cases 2, 4 (20)")
    p.add_argument("--warmup-seconds", type=float, help="warm-up at the rate before cases 2, 4 (10)")
    p.add_argument("--body", type=int, default=1024, help="body size (1024)")
    p.add_argument("--json", type=Path, help="where the results go (benches/results/grpc_vs_rocketmq.json)")
    p.add_argument("--dir", help="parent of the scratch directory (default: the system temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the stores and logs")
    args = p.parse_args(argv)
    quick = {"messages": 10_000, "seconds": 5.0, "warmup_seconds": 2.0}
    full = {"messages": 100_000, "seconds": 20.0, "warmup_seconds": 10.0}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.json is None:
        name = "grpc_vs_rocketmq_quick.json" if args.quick else "grpc_vs_rocketmq.json"
        args.json = HERE / "results" / name
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = [c.strip() for c in args.only.split(",") if c.strip()]
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    for c in cases:
        if c not in ("send", "latency", "receive", "follow"):
            raise SystemExit(f"unknown case {c!r}")
    if "rocketmq" in brokers:
        if not apache_rocketmq.have_java():
            print("the Java proxy needs `java` and `mvn` on PATH", file=sys.stderr)
            return 2
        apache_rocketmq.classpath(apache_rocketmq.ROCKETMQ_5_VERSION)
    # Each group runs on one fresh server per broker: send and receive share theirs (case 3 drains
    # what case 1 sent), latency and follow get their own.
    groups = (["send_receive"] if {"send", "receive"} & set(cases) else []) + [
        c for c in ("latency", "follow") if c in cases
    ]
    scratch = Path(tempfile.mkdtemp(prefix="grpc_bench-", dir=args.dir))
    results: dict[str, list[dict[str, Any]]] = {}
    started = time.monotonic()
    load_start = loadavg()
    try:
        for k, group in enumerate(groups):
            # Alternate which broker goes first, so slow drift of a shared machine hits both.
            order = brokers if k % 2 == 0 else list(reversed(brokers))
            for kind in order:
                print(f"{group}: {kind}", flush=True)
                with running(kind, scratch / f"{group}-{kind}") as server:
                    if group == "latency":
                        results.setdefault("latency", []).append(asyncio.run(latency_case(server, args)))
                    elif group == "follow":
                        results.setdefault("follow", []).append(asyncio.run(follow_case(server, args)))
                    else:
                        send_row, recv_row = asyncio.run(send_receive(server, cases, args))
                        if send_row is not None:
                            results.setdefault("send", []).append(send_row)
                        if recv_row is not None:
                            results.setdefault("receive", []).append(recv_row)
                if not args.keep:
                    shutil.rmtree(scratch / f"{group}-{kind}" / "store", ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    for rows in results.values():
        rows.sort(key=lambda r: BROKERS.index(r["broker"]))
    rat = ratios(results)
    tgt = targets(rat)
    print()
    if "send" in results:
        r0 = results["send"][0]
        print(
            f"send: {r0['messages']:,} messages of {r0['body_bytes']} B to a NORMAL topic of 8 queues, "
            f"{r0['in_flight']} SendMessage in flight over {r0['producers']} producer clients; server CPU "
            "per message (net: minus the idle rate)"
        )
        print(send_table(results["send"]))
        print_by_thread(results["send"])
        print()
    if "latency" in results:
        r0 = results["latency"][0]
        print(
            f"latency: {r0['rate']:,.0f} msg/s of {r0['body_bytes']} B for {r0['window_s']:g} s over "
            f"{r0['producers']} producer clients; SendMessage round trip"
        )
        print(latency_table(results["latency"]))
        print()
    if "receive" in results:
        r0 = results["receive"][0]
        print(
            f"receive: {r0['messages']:,} messages drained by {r0['consumers']} simple consumers, "
            f"ReceiveMessage batch {r0['batch']}, invisible {r0['invisible_s']} s, long polling "
            f"{r0['long_polling_s']} s, one AckMessage per batch"
        )
        print(receive_table(results["receive"]))
        print_by_thread(results["receive"])
        print()
    if "follow" in results:
        r0 = results["follow"][0]
        print(
            f"follow: {r0['rate']:,.0f} msg/s of {r0['body_bytes']} B for {r0['window_s']:g} s over "
            f"{r0['producers']} producer clients, received as they come by {r0['consumers']} simple "
            f"consumers (batch {r0['batch']}, long polling {r0['long_polling_s']} s), one AckMessage per "
            "batch; end to end: send start to first receive"
        )
        print(follow_table(results["follow"]))
        print_by_thread(results["follow"])
        print()
    if rat:
        print("ratios ferromq / RocketMQ 5.3.3 proxy:", rat)
    for name, value in tgt.items():
        print(f"target {name}: {value}")
    params = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    doc = {
        "benchmark": "grpc_vs_rocketmq",
        "params": {
            **params,
            "conf": CONF,
            "rocketmq_version": apache_rocketmq.ROCKETMQ_5_VERSION,
            "client": f"grpcio {grpc.__version__} asyncio, as rocketmq-python-client {SDK_VERSION}",
        },
        "seconds": round(time.monotonic() - started, 1),
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
        "results": results,
        "ratios_ferromq_over_rocketmq": rat,
        "targets": tgt,
    }
    write_results(args.json, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
