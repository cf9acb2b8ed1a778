"""`ferromq proxy -pm cluster`: the 5.x clients' gRPC front alone, in front of the brokers a name server
lists, as Apache RocketMQ's proxy in cluster mode. A ferromq name server and two ferromq brokers (processes,
one cluster), `ferromq proxy -pm cluster -n NAMESRV -pc rmq-proxy.json` in front and, side by side,
Apache RocketMQ 5.3.3's `ProxyStartup -pm cluster` in front of the same brokers: the official Python 5.x
client's scenarios (tests/interop/client5_scenarios.py) give the same answers through both, transactions
included (the brokers' checks relayed to the producer's Telemetry stream), and the messages ferromq's
proxy sends are spread over both brokers. Without a name server the proxy refuses to start with one line;
a broker that goes away leaves the proxy serving the other."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from apache_rocketmq import (
    ApacheRocketMQClusterProxy,
    have_java,
    start_rocketmq_proxy_cluster,
    topic_routed,
)

from ferromq.client.admin import Admin
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2 as spb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2_grpc as rpc
from ferromq.testing import free_port, write_conf
from ferromq.testing.waiting import wait_until
from tests.interop.grpc_kit import (
    BROKER_CONF,
    CASES,
    CLUSTER,
    assert_outcome,
    assert_same,
    on_both,
    prepare,
    run_client5,
)
from tests.interop.test_grpc_proxy_cli import refusal

FERROMQ = Path(sys.executable).with_name("ferromq")
RUN = uuid.uuid4().hex[:6]
BROKERS = ("broker-a", "broker-b")
# Scenarios side by side with Java's proxy in cluster mode (transaction: Java's proxy ends a transaction
# with the transactionId of the broker's send reply, which ferromq's names as a 5.x broker's does;
# dead_letter: Java's proxy reads the group's retry policy with GET_SUBSCRIPTIONGROUP_CONFIG).
SIDE_BY_SIDE = (
    "roundtrip",
    "redelivery",
    "push_tags",
    "push_sql",
    "wrong_type",
    "fifo",
    "delay",
    "recall",
    "transaction",
    "dead_letter",
)
# Scenarios whose topic is on broker-a alone: their consumers wait less than a receive long-polls (15 s
# invisible time and acks after the last receive in roundtrip, 12 s in recall, which also misses a message
# stored before its group's first pop of that broker), so a broker without their messages, polled in
# turn, makes them fail through either proxy, depending on where the round robin put the messages.
SINGLE_BROKER_CASES = ("roundtrip", "recall")
# Scenarios whose six sends go round robin over the eight writable queues of the two brokers (four each):
# any six in a row reach both.
SPREAD_CASES = ("push_tags", "push_sql")
START_TIMEOUT = 60.0
# Java's proxy names its transactional producers to the brokers every transactionHeartbeatPeriodSecond
# (20 s), ferromq's as a producer comes. A broker checks an open transaction every second here, with or
# without a producer to ask, transactionCheckMax (15) times before it drops it: a first heartbeat 20 s
# after the send came too late for the transaction scenario once. Every second, it comes in time.
JAVA_PROXY_CONF: dict[str, object] = {"transactionHeartbeatPeriodSecond": 1}
STOP_TIMEOUT = 30.0


class FerromqCluster:
    """`ferromq namesrv`, two `ferromq broker`s registered with it, and `ferromq proxy -pm cluster` in front,
    as processes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ns_port, self.grpc_port = free_port(), free_port()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.broker_addrs: dict[str, str] = {}

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(f"--- {name} ---\n{self.log(name)[-20000:]}" for name in self.procs)

    def _start(self, name: str, argv: list[str], ready: str) -> None:
        with open(self.root / f"{name}.log", "wb") as out:
            proc = subprocess.Popen(
                [str(FERROMQ), *argv], stdout=out, stderr=out, stdin=subprocess.DEVNULL, cwd=self.root
            )
        self.procs[name] = proc
        wait_until(lambda: ready in self.log(name) or proc.poll() is not None, f"{name} ready", START_TIMEOUT)
        assert ready in self.log(name), self.log(name)

    def start(self) -> None:
        self._start("namesrv", ["namesrv", "--port", str(self.ns_port)], "listening")
        taken = {self.ns_port, self.grpc_port}
        for name in BROKERS:
            port = free_port()
            while {port, port + 1} & taken:  # a broker's HA port is its port + 1
                port = free_port()
            taken |= {port, port + 1}
            self.broker_addrs[name] = f"127.0.0.1:{port}"
            conf = write_conf(
                self.root / f"{name}.conf",
                {
                    **BROKER_CONF,
                    "brokerClusterName": CLUSTER,
                    "brokerName": name,
                    "brokerIP1": "127.0.0.1",
                    "listenPort": port,
                    "storePathRootDir": str(self.root / name),
                    "mappedFileSizeCommitLog": 67108864,
                    "namesrvAddr": self.namesrv,
                },
            )
            self._start(name, ["broker", "-c", str(conf)], f"ferromq broker {name} listening")
        self.start_proxy()

    def start_proxy(self) -> None:
        pc = self.root / "rmq-proxy.json"
        pc.write_text(json.dumps({"grpcServerPort": self.grpc_port, "rocketMQClusterName": CLUSTER}))
        argv = ["proxy", "-pm", "cluster", "-pc", str(pc), "-n", self.namesrv]
        self._start("proxy", argv, f"ferromq proxy (cluster mode) gRPC on {self.endpoint}")

    def stop(self, name: str) -> int | None:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT)
                return None
        return proc.returncode

    def stop_all(self) -> dict[str, int | None]:
        return {name: self.stop(name) for name in reversed(list(self.procs))}


def messages_per_broker(namesrv: str, topic: str) -> dict[str, int]:
    async def stats() -> dict[str, int]:
        async with Admin(namesrv) as admin:
            out: dict[str, int] = {}
            for q in await admin.topic_stats(topic):
                out[q.queue.broker_name] = out.get(q.queue.broker_name, 0) + q.messages
            return out

    return asyncio.run(stats())


def route_brokers(endpoint: str, topic: str) -> set[str]:
    """The brokers of the topic's route as the proxy answers a QueryRoute."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = rpc.MessagingServiceStub(channel)
        r = stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
            metadata=[("x-mq-client-id", f"route-check@{RUN}")],
            timeout=10,
        )
    return {q.broker.name for q in r.message_queues} if r.status.code == pb.OK else set()


@pytest.fixture(scope="module")
def ferromq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FerromqCluster]:
    cluster = FerromqCluster(tmp_path_factory.mktemp("ferromq-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        codes = cluster.stop_all()
    assert codes == dict.fromkeys(reversed(list(cluster.procs)), 0), (codes, cluster.logs())


@pytest.fixture(scope="module")
def java_cluster_proxy(
    ferromq_cluster: FerromqCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApacheRocketMQClusterProxy]:
    root = tmp_path_factory.mktemp("rocketmq-cluster-proxy")
    with start_rocketmq_proxy_cluster(
        root, ferromq_cluster.namesrv, cluster=CLUSTER, proxy_conf=JAVA_PROXY_CONF
    ) as proxy:
        yield proxy


def prepare_on(broker_addr: str, namesrv: str, root: Path, topic: str, case: str) -> None:
    """The scenario's typed topic on one broker (its group is a default one), routed."""
    _, orderly, retry_max_times = CASES[case]
    assert not orderly and retry_max_times is None, case
    prepare(namesrv, root, topic, "", case, broker_addr)
    wait_until(lambda: topic_routed(namesrv, topic), f"{topic} routed", 30)


def _renamed(result: dict[str, Any], names: tuple[str, str], to: tuple[str, str]) -> dict[str, Any]:
    """A scenario's answer with its topic and group named as the other side's (both sides share the
    brokers, so each has topics of its own)."""
    text = json.dumps(result)
    for name, new in zip(names, to, strict=True):
        text = text.replace(name, new)
    out: dict[str, Any] = json.loads(text)
    return out


@pytest.mark.skipif(not have_java(), reason="the side-by-side runs need `java` and `mvn` on PATH")
@pytest.mark.timeout(900)
@pytest.mark.parametrize("case", SIDE_BY_SIDE)
def test_cluster_mode_side_by_side(
    case: str,
    ferromq_cluster: FerromqCluster,
    java_cluster_proxy: ApacheRocketMQClusterProxy,
    tmp_path: Path,
    failure_sections: list[tuple[str, Callable[[], str]]],
) -> None:
    failure_sections.append(("Apache RocketMQ 5.3.3 proxy (cluster mode) logs", java_cluster_proxy.log_tail))
    failure_sections.append(("ferromq logs", ferromq_cluster.logs))
    name = case.replace("_", "")
    ours, theirs = (f"CM{name}{RUN}", f"CMG{name}{RUN}"), (f"CJ{name}{RUN}", f"CJG{name}{RUN}")
    namesrv = ferromq_cluster.namesrv
    if case in SINGLE_BROKER_CASES:
        addr = ferromq_cluster.broker_addrs[BROKERS[0]]
        on_both(
            lambda: prepare_on(addr, namesrv, tmp_path / "mqadmin-ferromq", ours[0], case),
            lambda: prepare_on(addr, namesrv, tmp_path / "mqadmin-rocketmq", theirs[0], case),
        )
    else:
        on_both(
            lambda: prepare(namesrv, tmp_path / "mqadmin-ferromq", *ours, case),
            lambda: prepare(namesrv, tmp_path / "mqadmin-rocketmq", *theirs, case),
        )
    mine, java = on_both(
        lambda: run_client5(ferromq_cluster.endpoint, case, *ours, tmp_path / "ferromq"),
        lambda: run_client5(java_cluster_proxy.grpc_endpoint, case, *theirs, tmp_path / "rocketmq"),
    )
    print(f"\n{case}: ferromq {mine}\n{case}: rocketmq {java}")
    assert_outcome(case, assert_same(mine, _renamed(java, theirs, ours)))
    if case in SPREAD_CASES:
        spread = messages_per_broker(namesrv, ours[0])
        assert set(spread) == set(BROKERS) and all(spread.values()), spread


def test_cluster_mode_without_a_name_server_is_refused_with_one_line(tmp_path: Path) -> None:
    assert refusal(tmp_path, "-pm", "cluster").startswith("ferromq: no name server: pass -n")


def test_cluster_mode_off_loopback_is_refused_with_one_line(tmp_path: Path) -> None:
    """Without ACL 2.0 cluster mode checks no signatures: it must not be reachable from the network."""
    line = refusal(tmp_path, "-pm", "cluster", "-n", "127.0.0.1:9876", "--host", "0.0.0.0")
    assert "without checking the clients' signatures" in line and "--host" in line


@pytest.mark.timeout(600)
def test_a_broker_gone_leaves_the_proxy_serving_the_other(tmp_path: Path) -> None:
    cluster = FerromqCluster(tmp_path / "cluster")
    cluster.root.mkdir()
    topic, group = f"CMgone{RUN}", f"CMGgone{RUN}"
    try:
        cluster.start()
        subprocess.run(
            [str(FERROMQ), "admin", "-n", cluster.namesrv, "create-topic", topic, "--message-type", "NORMAL"],
            check=True,
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        wait_until(lambda: route_brokers(cluster.endpoint, topic) == set(BROKERS), "both brokers routed", 30)
        assert cluster.stop("broker-b") == 0, cluster.log("broker-b")
        # The name server drops the broker; the proxy's route follows within its route lifetime.
        wait_until(lambda: route_brokers(cluster.endpoint, topic) == {"broker-a"}, "broker-b unrouted", 60)
        result = run_client5(cluster.endpoint, "roundtrip", topic, group, tmp_path / "client")
        assert_outcome("roundtrip", result)
        assert messages_per_broker(cluster.namesrv, topic) == {"broker-a": 3}
        assert cluster.procs["proxy"].poll() is None, cluster.log("proxy")
    finally:
        codes = cluster.stop_all()
    assert codes["proxy"] == 0, cluster.logs()
