"""Lite consumers (RocketMQ 5.5, the official Java client 5.2.0's LitePushConsumer over gRPC) against Apache
RocketMQ 5.5.0: its name server and broker (enableLmq, enableMultiDispatch) and, in front of them, its proxy
in cluster mode (5.5.0's local-mode proxy has no LiteSubscriptionService: it serves no lite consumer).

The `lite` scenario of tests/interop/java5grpc (Lite5.java) subscribes lite topics a, b, c of a LITE parent
topic, sends COUNT messages to each of a, b, c and d (never subscribed) interleaved, unsubscribes c, sends
more to c and a, then subscribes a lite topic "e" that already holds two messages, and tries two illegal
names. Every side in `sides` must give the answers below (EXPECTED_*), which are 5.5.0's.

Facts observed from 5.5.0 (Java client 5.2.0, proxy in cluster mode), for a ferromq side to match:

- The parent topic: created over remoting with attributes `+message.type=LITE` (1 queue here). The group:
  UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with attributes `{"+lite.bind.topic": <parent>}` and
  consumeMessageOrderly true, created before the consumer starts.
- consumeMessageOrderly decides the order the listener sees: the proxy's settings answer has
  `subscription.fifo = consumeMessageOrderly` (GrpcClientSettingsManager), and with fifo false the client
  consumes a received batch on several threads: a lite topic's messages reach the listener out of send
  order (seen: a-1, a-0, a-2, ... and b-4, b-3, b-0, ...), though the broker pops them in order. With true:
  each lite topic in send order, every run. (QueryAssignment gives a lite group one queue, id -1, either
  way: RouteActivity's per-queue assignments are for `fifo && !lite` only.)
- A group without `lite.bind.topic`: the proxy ends the client's Telemetry stream with INVALID_ARGUMENT
  "process client telemetryCommand failed. regular group cannot use LITE mode: <group>"; a group bound to
  another topic: "... lite group <group> is expected to bind topic <other>, but actual is <parent>". The
  client then fails its start (build() throws IllegalStateException "Expected the service
  LitePushConsumerImpl-0 [FAILED] to be RUNNING", caused by "Failed to fetch topics after 3 attempts":
  "Stream is already completed").
- A parent topic that is NORMAL: the consumer starts and subscribeLite succeeds (no check of the parent's
  type there), but the client refuses to send a lite message to it: IllegalArgumentException "Current
  message type not match with topic accept message types, topic=<t>, actualMessageType=LITE,
  acceptMessageTypes=[NORMAL]" (from the route's accept message types).
- Settings (Telemetry answer): liteSubscriptionQuota 2000 (the group's `lite.sub.client.quota`, default
  2000), maxLiteTopicSize 64 (the proxy's maxLiteTopicSize). Until the settings arrive the client's quota
  is 0 and it refuses every subscribeLite on its own (the scenario waits for a quota above 0; it comes at
  once here).
- Refusals: "bad,topic" goes to the server, which answers SyncLiteSubscription with code 40020
  (ILLEGAL_LITE_TOPIC) "lite topic can only contain alphanumeric characters, hyphens(-), and
  underscores(_)" (client: BadRequestException); a 65-char name never leaves the client
  (IllegalArgumentException "liteTopic length exceeded max length 64, liteTopic: <name>", no code; the
  server would answer 40020 "lite topic exceed the max size 64", its limit in UTF-8 bytes).
- Nothing of a lite topic never subscribed (d) reaches the consumer; after unsubscribeLite("c"), nothing
  more of c (watched 3 s after the a's sent with them arrived).
- A lite topic subscribed after messages were sent to it gets them all: e-before-0, e-before-1, then
  e-after. (No OffsetOption: the broker's first pop of the group's LMQ starts at 0 when its first message is
  still in memory, initPopOffsetByCheckMsgInMem default true; otherwise at the last message, max - 1.)
- Timing: deliveries are prompt — all 3 x COUNT within ~0.6 s of the last send, later ones within ~0.1 s
  (the driver prints them on stderr as {"timing": ...}); the whole driver run takes ~10-12 s, 6 s of them
  its two fixed 3 s grace waits.

ferromq runs the same scenario twice: in local mode (the broker's own gRPC port) and behind `ferromq proxy
-pm cluster` (LITE_SUBSCRIPTION_CTL, POP_LITE_MESSAGE, lite acks and NOTIFY_UNSUBSCRIBE_LITE over remoting,
as 5.5.0's proxy sends them). Each side must give 5.5.0's answers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from apache_rocketmq import (
    ROCKETMQ_55_VERSION,
    have_java,
    start_rocketmq,
    start_rocketmq_proxy_cluster,
    topic_routed,
)

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.testing import Broker, free_port
from ferromq.testing.waiting import wait_until
from tests.integration.brokerkit import Client
from tests.integration.test_lite_topics import LMQ_ON
from tests.integration.test_topic_attributes import create_ext
from tests.interop.grpc_kit import run_client5
from tests.interop.java5build import build_grpc5_jar, run_driver
from tests.interop.sides import GrpcSide as Side
from tests.interop.test_grpc_cluster_mode import FERROMQ, START_TIMEOUT, STOP_TIMEOUT

pytestmark = [
    pytest.mark.skipif(
        not have_java(), reason="Apache RocketMQ 5.5.0 and the Java client need `java` and `mvn`"
    ),
    # The first run resolves the 5.5.0 jars and builds the Java driver.
    pytest.mark.timeout(900),
]

RUN = uuid.uuid4().hex[:6]
COUNT = 5
ROUTE_TIMEOUT = 60.0
# Above the driver's own watchdog (110 s).
DRIVER_TIMEOUT = 150.0


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Side]]:
    """Every side, by kind: 5.5.0 behind its cluster-mode proxy, ferromq in local mode (its own gRPC
    port), ferromq's proxy in cluster mode in front of a ferromq broker (lite pops, subscriptions, acks
    and notices then go over remoting), and 5.5.0's proxy in front of a ferromq broker."""
    root = tmp_path_factory.mktemp("lite_consumers55")
    mq = start_rocketmq(root / "broker", dict(LMQ_ON), version=ROCKETMQ_55_VERSION)
    try:
        proxy = start_rocketmq_proxy_cluster(root / "proxy", mq.namesrv, version=ROCKETMQ_55_VERSION)
        try:
            with (
                Broker(config=LMQ_ON) as b,
                Broker(config=LMQ_ON) as c,
                ferromq_cluster_proxy(root / "ferromq-proxy", c.namesrv) as endpoint,
                Broker(config=LMQ_ON) as d,
                start_rocketmq_proxy_cluster(
                    root / "java-proxy", d.namesrv, version=ROCKETMQ_55_VERSION
                ) as jp,
            ):
                try:
                    yield {
                        "rocketmq": Side("rocketmq", mq.namesrv, mq.broker_addr, proxy.grpc_endpoint),
                        "ferromq": Side("ferromq", b.namesrv, b.broker_addr, b.grpc_endpoint),
                        "ferromq-cluster": Side("ferromq-cluster", c.namesrv, c.broker_addr, endpoint),
                        # 5.5.0's own proxy in front of a ferromq broker: the broker side of the remoting
                        # codes.
                        "rocketmq-proxy": Side("rocketmq-proxy", d.namesrv, d.broker_addr, jp.grpc_endpoint),
                    }
                finally:
                    jp.stop(kill=True)  # nobody reads a reference proxy's state: no shutdown wait
        finally:
            proxy.stop(kill=True)
    finally:
        mq.stop(kill=True)  # nobody reads its store


@contextlib.contextmanager
def ferromq_cluster_proxy(root: Path, namesrv: str) -> Iterator[str]:
    """`ferromq proxy -pm cluster` in front of the brokers `namesrv` lists: its gRPC endpoint."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    pc = root / "rmq-proxy.json"
    pc.write_text(json.dumps({"grpcServerPort": port}))
    log = root / "proxy.log"
    with open(log, "wb") as out:
        argv = [str(FERROMQ), "proxy", "-pm", "cluster", "-pc", str(pc), "-n", namesrv]
        proc = subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, cwd=root)
    try:
        ready = f"gRPC on 127.0.0.1:{port}"
        wait_until(lambda: ready in log.read_text() or proc.poll() is not None, "the proxy up", START_TIMEOUT)
        assert ready in log.read_text(), log.read_text()
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)


async def prepare(side: Side, parent: str, group: str) -> None:
    """The LITE parent topic and the lite group bound to it, over remoting (as mqadmin updateTopic -a
    +message.type=LITE and updateSubGroup -a +lite.bind.topic=<parent> send them)."""
    c = await Client().connect(side.broker_port)
    try:
        r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext(parent, "+message.type=LITE", 1))
        assert r.code == R.SUCCESS, (side.kind, r.remark)
        body = {
            "groupName": group,
            "consumeEnable": True,
            "consumeMessageOrderly": True,
            "attributes": {"+lite.bind.topic": parent},
        }
        r = await c.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(body))
        assert r.code == R.SUCCESS, (side.kind, r.remark)
        deadline = time.monotonic() + ROUTE_TIMEOUT
        while not await asyncio.to_thread(topic_routed, side.namesrv, parent):
            assert time.monotonic() < deadline, f"{side.kind}: no route for {parent}"
            await asyncio.sleep(0.1)
    finally:
        await c.close()


def run_lite(side: Side, workdir: Path, parent: str, group: str) -> dict[str, Any]:
    r = run_driver(
        build_grpc5_jar(),
        workdir / side.kind,
        "Grpc5",
        side.grpc_endpoint,
        "lite",
        parent,
        group,
        str(COUNT),
        timeout=DRIVER_TIMEOUT,
    )
    lines = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    assert r.code == 0 and lines, f"{side.kind}: {r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    print(f"{side.kind}: {json.dumps(result)}; {[e for e in r.err if 'timing' in e]}")
    return result


def expected(count: int) -> dict[str, Any]:
    """The scenario's whole RESULT, as 5.5.0 gives it."""
    return {
        "settings": {"liteSubscriptionQuota": 2000, "maxLiteTopicSize": 64},
        "received": {lite: [f"{lite}-{i}" for i in range(count)] for lite in ("a", "b", "c")},
        "unexpected": [],
        "after_unsubscribe": {"a": [f"a-{i}" for i in range(count, 2 * count)], "c": []},
        "before_subscribe": {"e": ["e-before-0", "e-before-1", "e-after"]},
        "refusals": {
            "illegal_char": {
                "class": "org.apache.rocketmq.client.java.exception.BadRequestException",
                "code": 40020,
                "message": "[response-code=40020] lite topic can only contain alphanumeric characters,"
                " hyphens(-), and underscores(_)",
            },
            "too_long": {
                "class": "java.lang.IllegalArgumentException",
                "code": None,
                "message": f"liteTopic length exceeded max length 64, liteTopic: {'x' * 65}",
            },
        },
    }


def test_lite_push_consumer(sides: dict[str, Side], tmp_path: Path) -> None:
    results = {}
    for kind, side in sides.items():
        parent, group = f"LiteP{RUN}{kind[:2]}", f"LiteG{RUN}{kind[:2]}"
        asyncio.run(asyncio.wait_for(prepare(side, parent, group), 120))
        results[kind] = run_lite(side, tmp_path, parent, group)
    want = expected(COUNT)
    for kind, result in results.items():
        for key, value in want.items():
            assert result[key] == value, f"{kind}: {key}: {json.dumps(result[key])}"
    assert all(result == results["rocketmq"] for result in results.values()), json.dumps(results, indent=1)


def test_python_client_lite_consumers(sides: dict[str, Side], tmp_path: Path) -> None:
    """The official Python client 5.1.2's LitePushConsumer on every side; its LiteSimpleConsumer (a client
    type 5.5.0's proxy does not serve) on ferromq."""
    results: dict[str, dict[str, Any]] = {}
    for kind, side in sides.items():
        parent, group = f"LitePy{RUN}{kind[:2]}{kind[-2:]}", f"LitePyG{RUN}{kind[:2]}{kind[-2:]}"
        asyncio.run(asyncio.wait_for(prepare(side, parent, group), 120))
        results[kind] = run_client5(side.grpc_endpoint, "lite_push", parent, group, tmp_path / kind)
    want = {
        "first": {"a": ["a-0", "a-1", "a-2"], "b": ["b-0", "b-1", "b-2"]},
        "after_unsubscribe": {"a": ["a-late"], "b": []},
    }
    for kind, result in results.items():
        assert result == want, f"{kind}: {json.dumps(result)}"
    for kind in ("ferromq", "ferromq-cluster"):
        side = sides[kind]
        parent, group = f"LiteSi{RUN}{kind[-2:]}", f"LiteSiG{RUN}{kind[-2:]}"
        asyncio.run(asyncio.wait_for(prepare(side, parent, group), 120))
        simple = run_client5(side.grpc_endpoint, "lite_simple", parent, group, tmp_path / f"{kind}-simple")
        assert simple == {"first": ["s-0", "s-1", "s-2"], "lite_topics": ["s"], "again": [["s-2", 2]]}, simple
