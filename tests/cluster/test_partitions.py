"""Faults in a controller-mode cluster across hosts (the layout in `harness.py`: two name servers
with their ACL, three controllers taking only signed requests, one group of two brokers, a client
host with a SYNC load and an orderly consumer). Each test injects one fault under load and then
checks the run with `ferromq.testing.checker`: nothing acknowledged lost or moved, no two
acknowledgements of one offset, offsets only growing, every duplicate explained by the client's
attempts, every acknowledged message delivered to the orderly consumer in offset order. The
longest time without an acknowledgement is printed (its goal is `benches/partition_bench.py`'s,
not a test's)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferromq.protocol.codes import ResponseCode
from ferromq.testing.checker import Report
from ferromq.testing.hosts import Hosts, available, cuts_available
from tests.cluster.harness import HOSTS, Cluster

pytestmark = [
    pytest.mark.skipif(available() is not None, reason=f"multi-host tests: {available()}"),
    pytest.mark.timeout(600),
]


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Hosts(HOSTS, tmp_path) as hosts:
        c = Cluster(hosts)
        try:
            c.start()
            c.start_clients()
            yield c
        except BaseException:
            for name in hosts.procs:
                print(f"--- {name} ---\n{hosts.log(name)[-3000:]}")
            raise


def holds(cluster: Cluster) -> Report:
    report = cluster.verdict()
    gaps = ", ".join(f"{f.kind}: {cluster.gap_during(f):.1f} s" for f in cluster.faults)
    print(f"\n{report.summary()}\nlongest time without an ack during {gaps}")
    assert report.acknowledged >= 100
    assert not report.violations, report.violations
    return report


def test_master_kill_9_while_a_forger_beats_in_its_name(cluster: Cluster) -> None:
    """A process on the client host sends unsigned heartbeats in the master's name to every
    controller; each is refused, and the master's kill -9 is followed by an election."""
    answers = cluster.forge_heartbeats()
    old = cluster.master()
    cluster.kill_master()
    assert cluster.master() != old
    holds(cluster)
    codes = {json.loads(line)["code"] for line in answers.read_text().splitlines() if line}
    assert codes == {ResponseCode.NO_PERMISSION}, codes


def test_master_partitioned_15_s(cluster: Cluster) -> None:
    cluster.partition_master(15)
    holds(cluster)


def test_master_paused_15_s(cluster: Cluster) -> None:
    """SIGSTOP: the master stops answering without closing a connection; the controllers elect
    the slave, and the old master, resumed, must not acknowledge anything on its own."""
    old = cluster.master()
    cluster.pause_master(15)
    cluster.wait_in_sync()
    assert cluster.master() != old
    holds(cluster)


def test_controller_leader_partitioned_15_s(cluster: Cluster) -> None:
    """The controllers' Raft leader cut off (with a name server, when it is on h0 or h1): the
    other two elect a leader, and the group's master goes on taking writes through the fault."""
    master = cluster.master()
    fault = cluster.partition_controller_leader(15)
    during = [a for a in cluster.acks() if fault.start < a.start and a.end < fault.end]
    assert during, "no send acknowledged while the controller leader was cut off"
    assert cluster.master() == master
    holds(cluster)


def test_slave_disk_full_15_s(cluster: Cluster) -> None:
    """The slave's disk full to the last block: the master stops waiting for it (the SyncStateSet
    shrinks) and goes on taking writes; freed, the slave catches up and is in sync again."""
    fault = cluster.fill_slave_disk(15)
    cluster.wait_in_sync()
    during = [a for a in cluster.acks() if fault.start < a.start and a.end < fault.end]
    assert during, "no send acknowledged while the slave's disk was full"
    holds(cluster)


@pytest.mark.skipif(cuts_available() is not None, reason=f"one-link cuts: {cuts_available()}")
def test_master_cut_from_the_controllers_only_15_s(cluster: Cluster) -> None:
    """Clients and the slave still reach the master, the controllers do not: they elect the
    slave while the old master, cut off from them, still answers. Nothing acknowledged may be
    lost to the two masters, and the group ends in sync."""
    old = cluster.master()
    cluster.cut_master_from_controllers(15)
    cluster.wait_in_sync()
    assert cluster.master() != old
    holds(cluster)


def test_slave_replication_reset(cluster: Cluster) -> None:
    """The slave's HA connection reset: it reconnects within a second from another port, and the
    master's sends must wait for that connection (they waited for the dead one, every send until
    slaveTimeout, while the slave looked caught up)."""
    cluster.reset_slave_replication()
    cluster.wait_in_sync()
    holds(cluster)
