"""A controller-mode cluster across hosts (network namespaces of `ferromq.testing.hosts`), each server
bound to its host's address with the authentication leaving loopback requires, a load and an
orderly consumer on a client host, faults, and the checker's verdict. Used by tests/cluster and
benches/partition_bench.py.

    h0  name server (plain ACL), controller n0
    h1  name server (plain ACL), controller n1
    h2  controller n2
    h3  broker b0 } one group in controller mode (SYNC_MASTER, allAckInSyncStateSet): the
    h4  broker b1 } controllers pick its master
    h5  client: the SYNC load (`load.py send`), an orderly push consumer, a forger

Controllers take only signed requests (authenticationEnabled + innerClientAuthenticationCredentials;
brokers sign); name servers take registrations only with the ACL's admin keys.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ferromq.testing.checker import Attempt, Copy, Delivery, Outcome, Report, check
from ferromq.testing.hosts import Hosts
from ferromq.testing.process import write_conf
from ferromq.testing.waiting import WaitTimeout, wait_until
from tests.interop.failover_kit import BROKER_CONF, GROUP, forged_heartbeat

ROOT = Path(__file__).resolve().parents[2]
FERROMQ = str(Path(sys.executable).with_name("ferromq"))
LOAD = [sys.executable, str(ROOT / "tests" / "cluster" / "load.py")]
ENV = {"PYTHONPATH": f"{ROOT}:{ROOT / 'tools'}"}
DEPLOY_PAGE = ROOT / "docs" / "deploying-a-cluster.md"
TOPIC = "PartitionTopic"
CONSUMER_GROUP = "CG_partition_check"
HOSTS = 6
# How often a wait asks the controllers again (each time a process on the client host).
ASK_INTERVAL = 0.5
NAMESRV_HOSTS = (0, 1)
CONTROLLER_HOSTS = (0, 1, 2)
BROKERS = {"b0": 3, "b1": 4}  # broker -> host
CLIENT = 5
# A broker silent this long is dead to the controllers (Java's default is 10 s; a test's faults
# should not wait for it, and a loaded 2-core machine must not fail a master over by itself).
HEARTBEAT_TIMEOUT_MS = 4000
# Each broker's store is a file system of its own this big (a tmpfs: RAM only as it fills), so
# that a fault can fill one replica's disk.
DISK_MB = 1024


def deploy_page_files() -> dict[str, str]:
    """The files docs/deploying-a-cluster.md shows, by the name the line before each names. The
    cluster is made of them (addresses, paths and the tests' timings put in), so that a page that
    stops working fails the cluster tests."""
    text = DEPLOY_PAGE.read_text()
    blocks = re.finditer(r"`([^`\s]+\.(?:conf|yml))`[^\n]*\n\n```\w+\n(.*?)```", text, re.S)
    return {found[1]: found[2] for found in blocks}


def properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@dataclass
class Fault:
    """One fault injected, and when: the window the checker measures its cost in."""

    kind: str
    start: float
    end: float
    target: str


class Cluster:
    def __init__(self, hosts: Hosts) -> None:
        self.hosts = hosts
        self.work = hosts.workdir
        self.namesrv = ";".join(f"{hosts.addr(i)}:9876" for i in NAMESRV_HOSTS)
        self.controllers = [f"{hosts.addr(i)}:9878" for i in CONTROLLER_HOSTS]
        self.attempts = self.work / "attempts.jsonl"
        self.deliveries = self.work / "deliveries.jsonl"
        self.stop_load = self.work / "stop-load"
        self.stop_consumer = self.work / "stop-consumer"
        self.faults: list[Fault] = []

    # -- layout ------------------------------------------------------------------------------

    def broker_addr(self, name: str) -> str:
        return f"{self.hosts.addr(BROKERS[name])}:10911"

    def start(self) -> None:
        h, w, page = self.hosts, self.work, deploy_page_files()
        home = w / "home"
        (home / "conf").mkdir(parents=True)
        (home / "conf" / "plain_acl.yml").write_text(page["/etc/ferromq/conf/plain_acl.yml"])
        ns_conf = {**properties(page["namesrv.conf"]), "rocketmqHome": str(home)}
        ns_path = write_conf(w / "namesrv.conf", ns_conf)
        for i in NAMESRV_HOSTS:
            argv = [FERROMQ, "namesrv", "-c", str(ns_path), "--host", h.addr(i), "--port", "9876"]
            h.spawn(i, f"namesrv-{i}", argv)
        peers = ";".join(f"n{i}-{h.addr(i)}:9877" for i in CONTROLLER_HOSTS)
        for i in CONTROLLER_HOSTS:
            conf = write_conf(
                w / f"controller-n{i}.conf",
                {
                    **properties(page["controller-n0.conf"]),
                    "controllerDLegerPeers": peers,
                    "controllerDLegerSelfId": f"n{i}",
                    "controllerStorePath": str(w / f"controller-n{i}"),
                    "controllerHeartBeatTimeoutMills": HEARTBEAT_TIMEOUT_MS,
                    "scanNotActiveBrokerInterval": 200,
                },
            )
            h.spawn(i, f"controller-n{i}", [FERROMQ, "controller", "-c", str(conf)])
        for name in BROKERS:
            self.hosts.small_disk(self.store_root(name), DISK_MB)
            self.start_broker(name)
        self.wait_in_sync()

    def store_root(self, name: str) -> Path:
        return self.work / name

    def start_broker(self, name: str) -> None:
        conf = write_conf(
            self.work / f"{name}.conf",
            {
                **BROKER_CONF,  # the tests' small store and short intervals
                **properties(deploy_page_files()["broker.conf"]),
                "brokerName": GROUP,
                "brokerIP1": self.hosts.addr(BROKERS[name]),
                "storePathRootDir": str(self.store_root(name)),
                "namesrvAddr": self.namesrv,
                "controllerAddr": ";".join(self.controllers),
                "controllerHeartBeatTimeoutMills": HEARTBEAT_TIMEOUT_MS,
            },
        )
        self.hosts.spawn(BROKERS[name], name, [FERROMQ, "broker", "-c", str(conf)])

    def wait_in_sync(self, timeout: float = 90) -> None:
        def in_sync() -> bool:
            members = self.replica().get("syncStateSet")
            return isinstance(members, list) and len(members) == 2

        wait_until(in_sync, "both brokers in sync", timeout, interval=ASK_INTERVAL)

    def _ask_controllers(self, *args: str) -> list[dict[str, object]]:
        """`load.py replica|metadata ...` on the client host, one process asking every controller
        (a Python process costs about a CPU second: one per controller per poll kept two cores
        busy); {} for each controller when the process failed."""
        r = self.hosts.run(CLIENT, [*LOAD, *args, *self.controllers], timeout=30, env=ENV)
        if r.returncode != 0 or not r.stdout.strip():
            return [{} for _ in self.controllers]
        answers: list[dict[str, object]] = json.loads(r.stdout)
        return answers

    def replica(self) -> dict[str, object]:
        """The group as the controllers' leader sees it (another controller's view if none
        answers as leader)."""
        known = [v for v in self._ask_controllers("replica", GROUP) if v.get("known")]
        return next((v for v in known if v.get("isLeader")), known[0] if known else {})

    def controller_leader(self, other_than: int | None = None) -> int:
        """The host of the controller that answers as the Raft leader (waits for one)."""

        def leader() -> list[int]:  # [host], or [] while none answers as leader
            views = self._ask_controllers("metadata")
            for host, view in zip(CONTROLLER_HOSTS, views, strict=True):
                if host != other_than and view.get("isLeader") == "true":
                    return [host]
            return []

        found: list[int] = wait_until(leader, "a controller leader", 60, interval=ASK_INTERVAL)
        return found[0]

    # -- clients -----------------------------------------------------------------------------

    def start_clients(self) -> None:
        """The SYNC load and the orderly consumer on the client host; returns once sends are
        acknowledged."""
        argv = [*LOAD, "send", self.namesrv, TOPIC, "part", str(self.attempts), str(self.stop_load)]
        self.hosts.spawn(CLIENT, "load", argv, env=ENV)
        out, stop = str(self.deliveries), str(self.stop_consumer)
        argv = [*LOAD, "consume", self.namesrv, TOPIC, CONSUMER_GROUP, out, stop]
        self.hosts.spawn(CLIENT, "consumer", argv, env=ENV)

        def log() -> str:
            return self.hosts.log("load")[-2000:]

        wait_until(lambda: len(self.acks()) >= 100, "acknowledged sends", 90, why=log)

    def read_attempts(self) -> list[Attempt]:
        if not self.attempts.exists():
            return []
        rows = [json.loads(line) for line in self.attempts.read_text().splitlines() if line.endswith("}")]
        return [
            Attempt(
                id=r["id"],
                start=r["start"],
                end=r["end"],
                outcome=Outcome(r["outcome"]),
                group=r.get("group", ""),
                queue=r.get("queue", -1),
                offset=r.get("offset", -1),
            )
            for r in rows
        ]

    def acks(self) -> list[Attempt]:
        return [a for a in self.read_attempts() if a.outcome is Outcome.OK]

    def read_deliveries(self) -> list[Delivery]:
        if not self.deliveries.exists():
            return []
        rows = [json.loads(line) for line in self.deliveries.read_text().splitlines() if line.endswith("}")]
        return [Delivery(r["id"], r["group"], r["queue"], r["offset"], r["at"]) for r in rows]

    def acked_since(self, t: float) -> int:
        return sum(1 for a in self.acks() if a.start > t)

    def master(self) -> str:
        """The broker the controllers name master."""
        addr = str(self.replica().get("masterAddr") or "")
        return next(name for name in BROKERS if self.broker_addr(name) == addr)

    # -- faults ------------------------------------------------------------------------------

    def recovered(self, since: float, timeout: float = 120) -> None:
        """Waits for 50 sends acknowledged after `since` (the group takes writes again)."""
        wait_until(lambda: self.acked_since(since) >= 50, "sends acknowledged after the fault", timeout)

    def kill_master(self) -> Fault:
        old = self.master()
        start = time.time()
        self.hosts.kill(old)
        self.recovered(start)
        return self._done("kill -9 master", start, old)

    def restart(self, name: str) -> None:
        """A killed broker back, as a slave of the new master."""
        self.start_broker(name)
        self.wait_in_sync()

    def partition_host(self, kind: str, host: int, seconds: float) -> Fault:
        start = time.time()
        self.hosts.partition(host)
        try:
            time.sleep(seconds)  # the fault itself lasts this long (not a wait for something)
        finally:
            self.hosts.heal(host)
        self.recovered(time.time())
        return self._done(kind, start, self.hosts.names[host])

    def slave(self) -> str:
        return next(name for name in BROKERS if name != self.master())

    def partition_slave(self, seconds: float = 15) -> Fault:
        return self.partition_host("partition slave", BROKERS[self.slave()], seconds)

    def fill_slave_disk(self, seconds: float = 15) -> Fault:
        """The slave's disk full to the last block for `seconds`, then freed."""
        name = self.slave()
        start = time.time()
        filler = self.hosts.fill(self.store_root(name))
        try:
            time.sleep(seconds)  # the fault itself lasts this long
        finally:
            filler.unlink()
        self.recovered(time.time())
        return self._done("disk full slave", start, name)

    def reset_slave_replication(self) -> Fault:
        """The slave's HA connection to the master aborted (`ss -K`, as a reset by a middlebox
        would): the slave connects again within a second, from another port."""
        slave, master = self.slave(), self.master()
        start = time.time()
        argv = ["ss", "-K", "dst", self.hosts.addr(BROKERS[master]), "dport", "=", "10912"]
        done = self.hosts.run(BROKERS[slave], argv, timeout=30)
        assert done.returncode == 0, done.stderr
        self.recovered(start)
        return self._done("reset slave replication", start, slave)

    def kill_controller_leader(self) -> Fault:
        """kill -9 of the controllers' leader, then its restart (it rejoins as a follower)."""
        host = self.controller_leader()
        name = f"controller-n{host}"
        start = time.time()
        self.hosts.kill(name)
        self.controller_leader(other_than=host)  # the other two elect one
        self.restart_controller(host)
        self.recovered(start)
        return self._done("kill -9 controller leader", start, name)

    def cut_master_from_controllers(self, seconds: float = 15) -> Fault:
        """Only the links between the master's host and the controllers' hosts cut (clients, name
        servers on other links and the slave still reach the master): the controllers hear no
        heartbeat and elect the slave while the old master still takes requests."""
        old = self.master()
        host = BROKERS[old]
        start = time.time()
        for controller in CONTROLLER_HOSTS:
            self.hosts.cut(host, controller)
        try:
            time.sleep(seconds)  # the fault itself lasts this long
        finally:
            for controller in CONTROLLER_HOSTS:
                self.hosts.uncut(host, controller)
        self.recovered(time.time())
        return self._done("cut master from controllers", start, old)

    def restart_controller(self, host: int) -> None:
        conf = self.work / f"controller-n{host}.conf"
        self.hosts.spawn(host, f"controller-n{host}", [FERROMQ, "controller", "-c", str(conf)])

    def partition_master(self, seconds: float = 15) -> Fault:
        return self.partition_host("partition master", BROKERS[self.master()], seconds)

    def partition_controller_leader(self, seconds: float = 15) -> Fault:
        return self.partition_host("partition controller leader", self.controller_leader(), seconds)

    def pause_master(self, seconds: float = 15) -> Fault:
        old = self.master()
        start = time.time()
        self.hosts.pause(old)
        try:
            time.sleep(seconds)  # the pause itself lasts this long
        finally:
            self.hosts.resume(old)
        self.recovered(time.time())
        return self._done("SIGSTOP master", start, old)

    def forge_heartbeats(self) -> Path:
        """Starts a process on the client host that sends unsigned heartbeats in the master's name
        to every controller; returns the file of the answers' codes (the stop file ends it)."""
        forged = forged_heartbeat(self.replica(), self.broker_addr(self.master()))
        answers = self.work / "forged.jsonl"
        argv = [*LOAD, "forge", json.dumps(forged), str(answers), str(self.stop_load), *self.controllers]
        self.hosts.spawn(CLIENT, "forger", argv, env=ENV)

        def answered() -> bool:
            return answers.exists() and len(answers.read_text().splitlines()) >= 3

        wait_until(answered, "forged heartbeats answered", 30)
        return answers

    def _done(self, kind: str, start: float, target: str) -> Fault:
        fault = Fault(kind, start, time.time(), target)
        self.faults.append(fault)
        return fault

    # -- verdict -----------------------------------------------------------------------------

    def verdict(self, consumer_timeout: float = 120) -> Report:
        """Stops the load, waits for the consumer to have every acknowledged message (bounded),
        reads what the brokers hold, and checks it all."""
        self.stop_load.touch()
        wait_until(lambda: self.hosts.procs["load"].poll() is not None, "the load to stop", 60)
        acked = {a.id for a in self.acks()}
        try:
            wait_until(
                lambda: acked <= {d.id for d in self.read_deliveries()},
                "the consumer to have every acknowledged message",
                consumer_timeout,
            )
        except WaitTimeout:
            pass  # the report names what was not delivered
        self.stop_consumer.touch()
        brokers = [self.broker_addr(n) for n in BROKERS]
        r = self.hosts.run(CLIENT, [*LOAD, "stored", TOPIC, *brokers], timeout=180, env=ENV)
        assert r.returncode == 0, r.stderr
        held = json.loads(r.stdout)
        copies = [Copy(c["id"], GROUP, c["queue"], c["offset"]) for rows in held.values() for c in rows]
        return check(self.read_attempts(), copies, self.read_deliveries())

    def gap_during(self, fault: Fault) -> float:
        """The longest time without an acknowledgement that overlaps the fault."""
        ends = sorted(a.end for a in self.acks())
        gaps = [b - a for a, b in itertools.pairwise(ends) if b >= fault.start and a <= fault.end]
        return max(gaps, default=0.0)
