"""Master-slave replication with real processes on 127.0.0.1 and the official clients: ferromq master +
ferromq slave (SYNC_MASTER and ASYNC_MASTER), ferromq master + Apache RocketMQ 4.9.7 slave, and
RocketMQ 4.9.7 master + ferromq slave. In each: the C++ (and Java) clients send, the slave's CommitLog
and ConsumeQueue files are byte-compared with the master's, the master is killed with SIGKILL and
consumers read every message from the slave."""

from __future__ import annotations

import base64
import importlib.util
import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import have_java, start_rocketmq

from ferromq.testing.waiting import wait_until
from tests.interop.replication_kit import (
    STORE_CONF,
    differences,
    master_conf,
    slave_conf,
    start_broker,
    start_namesrv,
    store_files,
    wait_slave_connected,
)
from tests.interop.side_by_side import Endpoint, build_jar, run_cpp, run_java

HAVE_JAVA = have_java() and shutil.which("mvn") is not None
pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("rocketmq") is None, reason="needs the C++ client (PyPI rocketmq)"
    ),
    # The first run resolves the Java broker's and client's jars from Maven Central.
    pytest.mark.timeout(900),
]
needs_java = pytest.mark.skipif(not HAVE_JAVA, reason="needs `java` and `mvn` (Apache RocketMQ 4.9.7)")


def endpoint(namesrv: str, workdir: Path) -> Endpoint:
    return Endpoint("replication", namesrv, "", workdir)


def cpp_send(ep: Endpoint, topic: str, count: int, prefix: str, body_size: int = 0) -> list[dict[str, Any]]:
    r = run_cpp(
        ep,
        "produce",
        topic=topic,
        group=f"P{uuid.uuid4().hex[:6]}",
        count=count,
        prefix=prefix,
        keys=True,
        body_size=body_size,
    )
    assert not r.get("errors"), r.get("errors")
    sent: list[dict[str, Any]] = r["sent"]
    assert len(sent) == count
    assert {s["status"] for s in sent} == {0}, "every send SEND_OK"
    return sent


def java_send(
    ep: Endpoint, topic: str, count: int, prefix: str, status: str = "SEND_OK"
) -> list[dict[str, Any]]:
    spec = ep.workdir / f"spec-{uuid.uuid4().hex[:6]}.json"
    messages = [
        {
            "id": f"{prefix}{i}",
            "tags": "J",
            "keys": [f"{prefix}{i}"],
            "body": base64.b64encode(f"{prefix}{i}".encode()).decode(),
        }
        for i in range(count)
    ]
    spec.write_text(json.dumps({"topic": topic, "group": f"JP{uuid.uuid4().hex[:6]}", "messages": messages}))
    results = run_java(ep, "Generic", "produce", spec=spec)
    sent = [r for r in results if r.get("event") == "sent"]
    assert len(sent) == count
    assert {s["status"] for s in sent} == {status}
    return sent


def cpp_consume_all(ep: Endpoint, topic: str, expect: int) -> set[str]:
    r = run_cpp(ep, "push", topic=topic, group=f"C{uuid.uuid4().hex[:6]}", expect=expect, wait=60, timeout=90)
    ids = {m["id"] for m in r["received"]}
    assert r["stop_reason"] == "expected", f"{len(ids)} of {expect} consumed"
    return ids


def java_consume_all(ep: Endpoint, topic: str, expect: int) -> set[str]:
    results = run_java(
        ep, "Generic", "consume", topic=topic, group=f"JC{uuid.uuid4().hex[:6]}", expect=expect, timeout=90
    )
    # The id is the body up to "|" (C++ scenario bodies) or the whole body (Java spec bodies).
    return {
        base64.b64decode(r["body"]).split(b"|")[0].decode() for r in results if r.get("event") == "received"
    }


def wait_same_files(master_root: Path, slave_root: Path, commitlog_dir: str = "commitlog") -> None:
    """Until the slave's CommitLog and ConsumeQueue files are byte-identical to the master's."""
    last: list[str] = []

    def same() -> bool:
        nonlocal last
        last = differences(store_files(master_root, commitlog_dir), store_files(slave_root, commitlog_dir))
        last += differences(store_files(master_root, "consumequeue"), store_files(slave_root, "consumequeue"))
        return not last and bool(store_files(slave_root, commitlog_dir))

    wait_until(same, "byte-identical stores", timeout=60, why=lambda: "\n".join(last[:20]))


@pytest.mark.parametrize("role", ["SYNC_MASTER", "ASYNC_MASTER"])
def test_ferromq_master_and_ferromq_slave(tmp_path: Path, role: str) -> None:
    ns = start_namesrv(tmp_path)
    master = start_broker(tmp_path, "master", ns.addr, master_conf(role))
    slave = start_broker(tmp_path, "slave", ns.addr, slave_conf(haSendHeartbeatInterval="500"))
    procs = [slave, master, ns]
    try:
        wait_slave_connected(master)
        ep = endpoint(ns.addr, tmp_path)
        topic = f"Repl{role[:4]}{uuid.uuid4().hex[:4]}"
        sent = {s["id"] for s in cpp_send(ep, topic, 300, "c")}
        if HAVE_JAVA:
            build_jar()
            sent |= {s["id"] for s in java_send(ep, topic, 100, "j")}
        wait_same_files(tmp_path / "master" / "store", tmp_path / "slave" / "store")

        # The slave restarts and catches up with what it missed.
        assert slave.stop() == 0, slave.log()
        if role == "ASYNC_MASTER":
            sent |= {s["id"] for s in cpp_send(ep, topic, 200, "r")}
        elif HAVE_JAVA:
            # Stored, but not on a slave: SLAVE_NOT_AVAILABLE, which the Java client returns as a status
            # (the C++ client throws for any status but SEND_OK).
            sent |= {s["id"] for s in java_send(ep, topic, 50, "r", status="SLAVE_NOT_AVAILABLE")}
        slave = start_broker(tmp_path, "slave", ns.addr, slave_conf(haSendHeartbeatInterval="500"))
        procs[0] = slave
        wait_same_files(tmp_path / "master" / "store", tmp_path / "slave" / "store")

        # The master dies: consumers read every message from the slave.
        master.kill()
        assert cpp_consume_all(ep, topic, len(sent)) >= sent
        if HAVE_JAVA:
            assert java_consume_all(ep, topic, len(sent)) >= sent
        assert not slave.logged(" ERROR "), slave.log()
    finally:
        for p in procs:
            p.stop()


def test_slave_serves_a_topic_it_has_no_configuration_for_yet(tmp_path: Path) -> None:
    """Issue 27, item 6: 100 messages to an auto-created topic and the master killed (SIGKILL) right after
    they were acknowledged, well before the slave's next 10 s metadata sync. The name server still
    routes the topic to the slave, which holds every message but never got the topic's configuration
    from the master: it configures the topic from its consume queues and the C++ push consumer reads
    every message from it."""
    ns = start_namesrv(tmp_path)
    master = start_broker(tmp_path, "master", ns.addr, master_conf("SYNC_MASTER"))
    slave = start_broker(tmp_path, "slave", ns.addr, slave_conf())
    procs = [slave, master, ns]
    try:
        wait_slave_connected(master)
        # The slave's first sync from the master is done: the next is 10 s away (the topic is not
        # created yet, so only the slave's queues can tell it about the topic before the kill).
        wait_until(
            lambda: slave.logged("topic config updated from master"),
            "the slave's first sync",
            timeout=30,
            why=slave.log,
        )
        synced = time.monotonic()
        ep = endpoint(ns.addr, tmp_path)
        topic = f"ReplNew{uuid.uuid4().hex[:6]}"
        sent = cpp_send(ep, topic, 100, "n", body_size=300)
        master.kill()
        assert time.monotonic() - synced < 9, "sent too slowly: the slave may have synced the topic meanwhile"

        r = run_cpp(
            ep, "push", topic=topic, group=f"C{uuid.uuid4().hex[:6]}", expect=100, wait=60, timeout=90
        )
        got = {m["id"]: (m["body_len"], m["body_sha"]) for m in r["received"]}
        assert len(got) == 100, f"{len(got)} of 100 consumed from the slave\n{slave.log()[-5000:]}"
        assert got == {s["id"]: (s["body_len"], s["body_sha"]) for s in sent}
        adopted = [line for line in slave.log().splitlines() if "from the replicated queues" in line]
        assert any(topic in line for line in adopted), slave.log()
        assert not slave.logged(" ERROR "), slave.log()
    finally:
        for p in procs:
            p.stop()


@needs_java
def test_ferromq_master_and_java_slave(tmp_path: Path) -> None:
    """The Java 4.9.7 slave follows a ferromq SYNC_MASTER: both register with the Java name server."""
    build_jar()
    m_conf = master_conf("SYNC_MASTER")
    ha_addr = f"127.0.0.1:{m_conf['haListenPort']}"
    # It learns the master's request address when it registers next (every 10 s at the quickest).
    java_conf = {
        **STORE_CONF,
        "brokerRole": "SLAVE",
        "brokerId": "1",
        "haMasterAddress": ha_addr,
        "registerNameServerPeriod": "10000",
    }
    mq = start_rocketmq(tmp_path / "java-slave", java_conf)
    master = None
    try:
        master = start_broker(tmp_path, "master", mq.namesrv, m_conf)
        # The Java slave reports its offset a heartbeat interval (5 s) after it connects.
        wait_slave_connected(master, "the Java slave", timeout=60)
        ep = endpoint(mq.namesrv, tmp_path)
        topic = f"ReplJ{uuid.uuid4().hex[:6]}"
        sent = {s["id"] for s in cpp_send(ep, topic, 300, "c")}
        sent |= {s["id"] for s in java_send(ep, topic, 100, "j")}
        wait_same_files(tmp_path / "master" / "store", tmp_path / "java-slave" / "store")
        # The Java slave copies the topic from the ferromq master (SlaveSynchronize, every 10 s, through
        # the master's VIP channel on listenPort - 2).
        topics = tmp_path / "java-slave" / "store" / "config" / "topics.json"
        wait_until(lambda: topics.exists() and topic in topics.read_text(), "topic sync", timeout=60)
        master.kill()
        assert cpp_consume_all(ep, topic, len(sent)) >= sent
        assert java_consume_all(ep, topic, len(sent)) >= sent
    finally:
        if master is not None:
            master.stop()
        mq.stop(kill=True)  # the Java slave's store is not read afterwards


@needs_java
def test_java_master_and_ferromq_slave(tmp_path: Path) -> None:
    """A ferromq slave follows a Java 4.9.7 SYNC_MASTER; it learns the master's HA address from the Java
    name server's REGISTER_BROKER reply."""
    build_jar()
    mq = start_rocketmq(tmp_path / "java-master", {**STORE_CONF, "brokerRole": "SYNC_MASTER"})
    slave = None
    try:
        slave = start_broker(tmp_path, "slave", mq.namesrv, slave_conf())
        wait_until(
            lambda: slave.logged("HA client: connected to master"),
            "the ferromq slave to connect",
            timeout=60,
            why=slave.log,
        )
        ep = endpoint(mq.namesrv, tmp_path)
        topic = f"ReplF{uuid.uuid4().hex[:6]}"
        sent = {s["id"] for s in cpp_send(ep, topic, 300, "c")}
        sent |= {s["id"] for s in java_send(ep, topic, 100, "j")}
        wait_same_files(tmp_path / "java-master" / "store", tmp_path / "slave" / "store")
        topics = tmp_path / "slave" / "store" / "config" / "topics.json"
        wait_until(lambda: topics.exists() and topic in topics.read_text(), "topic sync", timeout=30)
        assert mq.broker_proc is not None
        mq.broker_proc.kill()
        mq.broker_proc.wait(timeout=15)
        assert cpp_consume_all(ep, topic, len(sent)) >= sent
        assert java_consume_all(ep, topic, len(sent)) >= sent
        assert not slave.logged(" ERROR "), slave.log()
    finally:
        if slave is not None:
            slave.stop()
        mq.stop(kill=True)  # its broker is already gone; the name server is not needed
