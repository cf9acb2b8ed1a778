"""Automatic failover (controller mode) with real processes on 127.0.0.1: a name server, a 3-node
controller group and three ferromq brokers of one group (SYNC_MASTER, allAckInSyncStateSet).

* kill -9 of the master under SYNC load (the ferromq Python client, the official C++ client and the
  official Java client): a new master takes writes, every acknowledged message is readable from it,
  the producers go on without restart; the old master comes back, cuts its CommitLog where the new
  master's epoch began and replicates again: its CommitLog is byte-identical to the new master's;
* SIGSTOP/SIGCONT of the master: a new master is elected meanwhile, the paused one acknowledges
  nothing after it wakes, steps down and follows; no acknowledged message is lost;
* killing the controller leader does not disturb sends; the controllers' state survives a restart
  of all of them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from apache_rocketmq import have_java

from ferromq.controller.codes import ControllerCode
from ferromq.protocol.codes import ResponseCode
from ferromq.testing.waiting import wait_until
from tests.interop.failover_kit import (
    FailoverCluster,
    ProcessLoad,
    PythonConsumer,
    PythonLoad,
    ask,
    commitlog_bytes,
    forged_heartbeat,
    start_cluster,
    stored_ids,
)
from tests.interop.javabuild import build_interop_jar

pytestmark = [pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FailoverCluster]:
    c = start_cluster(tmp_path_factory.mktemp("failover"))
    try:
        yield c
    finally:
        c.stop_all()


def max_offsets(cluster: FailoverCluster) -> dict[str, int]:
    members = cluster.replica_info()["members"]
    return {m["addr"]: int(m["maxOffset"]) for m in members.values()}


def assert_rejoined_identical(cluster: FailoverCluster, old: str, master: str) -> None:
    """`old` follows `master` again, is back in the SyncStateSet, and its CommitLog is the master's
    byte for byte (what it had alone was cut)."""
    wait_until(lambda: cluster.role_of(old) == "replica", f"{old} to follow the new master", timeout=60)
    cluster.wait_in_sync(3)
    old_addr, master_addr = cluster.brokers[old].addr, cluster.brokers[master].addr
    wait_until(
        lambda: max_offsets(cluster).get(old_addr) == max_offsets(cluster).get(master_addr),
        f"{old} to catch up",
        timeout=60,
        why=lambda: str(max_offsets(cluster)),
    )
    end = max_offsets(cluster)[master_addr]
    assert commitlog_bytes(cluster.store(old), end) == commitlog_bytes(cluster.store(master), end)


@pytest.mark.skipif(
    importlib.util.find_spec("rocketmq") is None, reason="needs the C++ client (PyPI rocketmq)"
)
@pytest.mark.skipif(not have_java(), reason="needs java and mvn (the Java client)")
def test_kill_master_under_sync_load(cluster: FailoverCluster) -> None:
    """SYNC sends of the Python, C++ and Java clients; kill -9 of the master: each client's sends
    are acknowledged by the new master without a restart, and every acknowledged message is there."""
    topic = "FailoverKill"
    old = cluster.wait_master()
    old_addr = cluster.brokers[old].addr
    build_interop_jar()
    consumer = PythonConsumer(cluster.namesrv_addr, topic, "CG_failover").start()
    loads: list[PythonLoad | ProcessLoad] = [PythonLoad(cluster.namesrv_addr, topic, "py").start()]
    for kind in ("cpp", "java"):
        loads.append(ProcessLoad(kind, cluster.workdir / f"load-{kind}", cluster.namesrv_addr, topic, kind))
    try:
        for load in loads:
            wait_until(lambda ld=load: len(ld.acked) >= 100, f"sends before the kill ({load})", timeout=120)
        killed_at = time.time()
        cluster.brokers[old].kill()
        new = cluster.wait_master(not_addr=old_addr)
        new_addr = cluster.brokers[new].addr
        for load in loads:
            wait_until(
                lambda ld=load: ld.acked_since(killed_at) >= 100,
                f"acknowledged sends after the kill ({load})",
                timeout=120,
                why=lambda ld=load: "\n".join(ld.not_ok[-5:]),
            )
    finally:
        for load in loads:
            load.stop()
    try:
        stored = set(stored_ids(new_addr, topic))
        every = set()
        for load in loads:
            acked = {a.id for a in load.acked}
            assert not acked - stored, f"{load}: acknowledged but lost: {sorted(acked - stored)[:10]}"
            every |= acked
        # The consumer went on through the failover, without a restart, and got every one of them.
        wait_until(
            lambda: every <= consumer.received,
            "the consumer to receive every acknowledged message",
            timeout=120,
            why=lambda: (
                f"{len(every - consumer.received)} missing, e.g. {sorted(every - consumer.received)[:5]}"
            ),
        )
    finally:
        consumer.stop()
    cluster.start_broker(old)
    assert_rejoined_identical(cluster, old, new)


def test_paused_master_is_fenced(cluster: FailoverCluster) -> None:
    """SIGSTOP of the master (a stand-in for a partition) until another is elected, then SIGCONT:
    the old master acknowledges nothing after it wakes (its in-sync replicas follow the new master),
    steps down, cuts what it wrote alone and follows; no acknowledged message is lost."""
    topic = "FailoverPause"
    old = cluster.wait_master()
    old_addr = cluster.brokers[old].addr
    load = PythonLoad(cluster.namesrv_addr, topic, "pause").start()
    try:
        wait_until(lambda: len(load.acked) >= 200, "acknowledged sends before the pause", timeout=60)
        cluster.pause(old)
        paused_at = time.time()
        try:
            new = cluster.wait_master(not_addr=old_addr)
            new_addr = cluster.brokers[new].addr
            wait_until(
                lambda: load.acked_since(paused_at, new_addr) >= 100, "sends on the new master", timeout=90
            )
        finally:
            cluster.resume(old)
        resumed_at = time.time()
        wait_until(lambda: cluster.role_of(old) == "replica", "the old master to step down", timeout=60)
        wait_until(
            lambda: load.acked_since(resumed_at, new_addr) >= 100, "more sends on the new master", timeout=60
        )
    finally:
        load.stop()
    assert load.acked_since(resumed_at, old_addr) == 0, "the deposed master acknowledged sends"
    acked = {a.id for a in load.acked}
    stored = set(stored_ids(new_addr, topic))
    assert not acked - stored, f"acknowledged but lost: {sorted(acked - stored)[:10]}"
    assert_rejoined_identical(cluster, old, new)


def test_old_master_cuts_what_it_wrote_alone(cluster: FailoverCluster) -> None:
    """The master's replicas die; it stores sends it cannot acknowledge (SLAVE_NOT_AVAILABLE) and
    dies too. A replica is elected when they return; the old master, back, cuts those bytes
    (after the last epoch it shares with the new master) and becomes a byte-identical replica."""
    topic = "FailoverAlone"
    master = cluster.wait_master()
    load = PythonLoad(cluster.namesrv_addr, topic, "alone").start()
    try:
        wait_until(lambda: len(load.acked) >= 100, "acknowledged sends", timeout=60)
    finally:
        load.stop()
    replicas = [n for n in cluster.brokers if n != master]
    for name in replicas:
        cluster.brokers[name].kill()
    before = max_offsets(cluster)[cluster.brokers[master].addr]
    alone = PythonLoad(cluster.namesrv_addr, topic, "alone2").start()
    try:
        wait_until(lambda: len(alone.not_ok) >= 20, "sends the master stores alone", timeout=30)
    finally:
        alone.stop()
    assert not alone.acked, "sends acknowledged without the in-sync replicas"
    cluster.brokers[master].kill()
    grown = commitlog_end(cluster.store(master))
    assert grown > before
    for name in replicas:
        cluster.start_broker(name)
    new = cluster.wait_master(not_addr=cluster.brokers[master].addr)
    cluster.start_broker(master)
    assert_rejoined_identical(cluster, master, new)
    assert cluster.brokers[master].logged("cutting the CommitLog")
    acked = {a.id for a in load.acked}
    assert not acked - set(stored_ids(cluster.brokers[new].addr, topic))


def test_sync_state_set_follows_its_replicas(cluster: FailoverCluster) -> None:
    """A replica that dies leaves the SyncStateSet after haMaxTimeSlaveNotCatchup (3 s here) and SYNC
    sends are acknowledged again without it; back and caught up, it joins again."""
    master = cluster.wait_master()
    replica = next(n for n in cluster.brokers if n != master)
    replica_id = next(
        int(i)
        for i, m in cluster.replica_info()["members"].items()
        if m["addr"] == cluster.brokers[replica].addr
    )
    load = PythonLoad(cluster.namesrv_addr, "FailoverSet", "set").start()
    try:
        wait_until(lambda: len(load.acked) >= 100, "acknowledged sends", timeout=60)
        cluster.brokers[replica].kill()
        wait_until(
            lambda: replica_id not in cluster.replica_info()["syncStateSet"],
            "the dead replica to leave the SyncStateSet",
            timeout=30,
            why=lambda: str(cluster.replica_info()),
        )
        shrunk_at = time.time()
        wait_until(lambda: load.acked_since(shrunk_at) >= 100, "sends acknowledged without it", timeout=30)
        cluster.start_broker(replica)
        cluster.wait_in_sync(3)
        joined_at = time.time()
        wait_until(lambda: load.acked_since(joined_at) >= 100, "sends acknowledged with it again", timeout=30)
    finally:
        load.stop()
    acked = {a.id for a in load.acked}
    assert not acked - set(stored_ids(cluster.brokers[master].addr, "FailoverSet"))
    assert cluster.master() == cluster.brokers[master].addr


def test_controller_leader_kill_leaves_sends_alone(cluster: FailoverCluster) -> None:
    master = cluster.wait_master()
    load = PythonLoad(cluster.namesrv_addr, "FailoverCtl", "ctl").start()
    try:
        wait_until(lambda: len(load.acked) >= 100, "acknowledged sends", timeout=60)
        leader = cluster.leader()
        assert leader is not None
        failures_before = len(load.failures) + len(load.not_ok)
        cluster.controllers[leader].kill()
        killed_at = time.time()
        wait_until(lambda: cluster.leader() not in (None, leader), "another controller leader", timeout=30)
        wait_until(
            lambda: load.acked_since(killed_at) >= 300, "sends after the controller leader died", timeout=60
        )
    finally:
        load.stop()
    assert len(load.failures) + len(load.not_ok) == failures_before, load.failures[-5:] + load.not_ok[-5:]
    assert cluster.master() == cluster.brokers[master].addr
    cluster.start_controller(int(leader[1:]))


def test_controller_state_survives_full_restart(cluster: FailoverCluster) -> None:
    before = cluster.replica_info()
    for p in cluster.controllers.values():
        p.stop()
    for i in range(len(cluster.controller_ports)):
        cluster.start_controller(i)
    wait_until(lambda: cluster.leader() is not None, "a controller leader", timeout=60)
    after = cluster.replica_info()
    for key in ("masterId", "epoch", "syncStateSet", "syncStateSetEpoch", "masterAddr", "nextId"):
        assert after[key] == before[key], key
    # The group still fails over with the restarted controllers.
    old = cluster.wait_master()
    cluster.brokers[old].kill()
    new = cluster.wait_master(not_addr=cluster.brokers[old].addr)
    assert cluster.replica_info()["epoch"] == before["epoch"] + 1
    cluster.start_broker(old)
    assert_rejoined_identical(cluster, old, new)


def commitlog_end(store: Path) -> int:
    """Where the written part of a (stopped) broker's CommitLog ends: past the last non-zero byte
    of its last file."""
    files = sorted((store / "commitlog").iterdir())
    last = files[-1]
    data = last.read_bytes().rstrip(b"\0")
    return int(last.name) + len(data)


def test_controller_inside_name_servers(tmp_path: Path) -> None:
    """enableControllerInNamesrv: three name servers, each a controller node on its own port; the
    brokers use them for both; a killed master is replaced and no acknowledged send is lost."""
    cluster = start_cluster(tmp_path, embedded=True)
    try:
        old = cluster.wait_master()
        old_addr = cluster.brokers[old].addr
        load = PythonLoad(cluster.namesrv_addr, "FailoverEmbedded", "emb").start()
        try:
            wait_until(lambda: len(load.acked) >= 100, "acknowledged sends", timeout=60)
            killed_at = time.time()
            cluster.brokers[old].kill()
            new = cluster.wait_master(not_addr=old_addr)
            new_addr = cluster.brokers[new].addr
            wait_until(
                lambda: load.acked_since(killed_at, new_addr) >= 100, "sends on the new master", timeout=90
            )
        finally:
            load.stop()
        acked = {a.id for a in load.acked}
        assert not acked - set(stored_ids(new_addr, "FailoverEmbedded"))
    finally:
        cluster.stop_all()


def test_elected_replica_takes_the_role_once_its_ha_port_is_free(tmp_path: Path) -> None:
    """The replica the controllers elect cannot listen on its HA port (held by another socket, as a
    replica's own connect attempt can hold it for a moment): it is not the master meanwhile, and it
    takes the role on a later view once the port is free."""
    cluster = start_cluster(tmp_path, brokers=2)
    try:
        old = cluster.wait_master()
        old_addr = cluster.brokers[old].addr
        heir = next(n for n in cluster.brokers if n != old)
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", int(cluster.broker_confs[heir]["haListenPort"])))
            holder.listen()
            cluster.brokers[old].kill()
            wait_until(
                lambda: cluster.brokers[heir].logged("cannot listen for slaves"),
                f"{heir} to fail to listen as the elected master",
                timeout=60,
            )
            assert cluster.role_of(heir) != "master"
        assert cluster.wait_master(not_addr=old_addr) == heir
    finally:
        cluster.stop_all()


INNER = '{"accessKey": "innerBroker", "secretKey": "innerSecret1"}'


def test_forged_heartbeats_cannot_hold_off_an_election(tmp_path: Path) -> None:
    """Issue 41: a process with no credentials sent heartbeats in a dead master's name to every
    controller, and no election happened until it stopped. With authenticationEnabled on the
    controllers and innerClientAuthenticationCredentials on the brokers, the forged heartbeats are
    refused (NO_PERMISSION) and a master's kill -9 is followed by an election as usual."""
    cluster = start_cluster(tmp_path, brokers=2, inner_credentials=INNER)
    try:
        old = cluster.wait_master()
        old_addr = cluster.brokers[old].addr
        forged = forged_heartbeat(cluster.replica_info(), old_addr)
        stop = threading.Event()
        answers: list[int] = []

        def forge() -> None:
            while not stop.is_set():
                for p in list(cluster.controllers.values()):
                    with contextlib.suppress(OSError, TimeoutError):
                        answers.append(ask(p.addr, ControllerCode.BROKER_HEARTBEAT, forged).code)
                stop.wait(0.2)

        forger = threading.Thread(target=forge, daemon=True)
        forger.start()
        try:
            wait_until(lambda: len(answers) >= 3, "forged heartbeats answered", timeout=30)
            cluster.brokers[old].kill()
            cluster.wait_master(not_addr=old_addr, timeout=60)
        finally:
            stop.set()
            forger.join(10)
        assert set(answers) == {ResponseCode.NO_PERMISSION}, answers
    finally:
        cluster.stop_all()
