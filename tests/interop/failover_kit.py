"""Helpers of the automatic-failover tests and bench: a name server, a 3-node controller group and a
broker group in controller mode, each a ferromq process on free 127.0.0.1 ports (killed, paused and
restarted by PID when a test says so), and questions to the controllers."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ferromq import _store
from ferromq.client.instance import ClientInstance
from ferromq.client.message import Message, ReceivedMessage, SendStatus, decode_received
from ferromq.client.producer import Producer
from ferromq.client.push_consumer import ConsumeStatus, PushConsumer
from ferromq.client.rebalance import ConsumeFromWhere
from ferromq.controller.codes import ControllerCode
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import open_connection
from ferromq.testing.process import ferromq_command, free_port, port_taken, write_conf
from ferromq.testing.waiting import wait_until
from tests.interop.javabuild import JAR
from tests.interop.replication_kit import STORE_CONF, Process, spawn

CPP_SCENARIOS = Path(__file__).with_name("cpp_scenarios.py")
GROUP = "broker-f"
# Failure detection for tests: a broker silent 4 s is dead (2 s in the bench; a loaded 2-core
# machine can stall a broker for a second or two, which must not cause a failover in a test that
# expects none); brokers beat every 300 ms.
HEARTBEAT_TIMEOUT_MS = 4000
# A broker's start on ports another process took between free_port and the start: tried anew.
PORT_ATTEMPTS = 3
BROKER_CONF = {
    **STORE_CONF,
    "brokerName": GROUP,
    "brokerRole": "SYNC_MASTER",
    "enableControllerMode": "true",
    "allAckInSyncStateSet": "true",
    "haMaxTimeSlaveNotCatchup": "3000",
    "brokerHeartbeatInterval": "300",
    "haSendHeartbeatInterval": "500",
    "haHousekeepingInterval": "4000",
    "slaveTimeout": "3000",
}


def ask(addr: str, code: int, ext: dict[str, str] | None = None, timeout: float = 3.0) -> RemotingCommand:
    """One request to a controller or broker, from synchronous test code."""

    async def go() -> RemotingCommand:
        host, _, port = addr.rpartition(":")
        conn = await open_connection(host, int(port), timeout=timeout)
        try:
            return await conn.request(RemotingCommand(code=code, ext=ext or {}), timeout)
        finally:
            await conn.close()

    return asyncio.run(go())


@dataclass
class FailoverCluster:
    workdir: Path
    namesrv: Process | None
    """The name server; None when the controllers run inside name servers (`embedded`)."""
    controller_ports: list[int]
    raft_ports: list[int]
    embedded: bool = False
    heartbeat_timeout_ms: int = HEARTBEAT_TIMEOUT_MS
    controllers: dict[str, Process] = field(default_factory=dict)
    brokers: dict[str, Process] = field(default_factory=dict)
    broker_confs: dict[str, dict[str, str]] = field(default_factory=dict)
    inner_credentials: str | None = None
    """With it, the controllers take the brokers' word only signed with these keys
    (authenticationEnabled, innerClientAuthenticationCredentials on both sides)."""

    @property
    def controller_addr(self) -> str:
        return ";".join(f"127.0.0.1:{p}" for p in self.controller_ports)

    @property
    def namesrv_addr(self) -> str:
        return self.controller_addr if self.namesrv is None else self.namesrv.addr

    # -- controllers -------------------------------------------------------------------------------

    def start_controller(self, i: int) -> Process:
        node = f"n{i}"
        root = self.workdir / f"controller-{node}"
        conf = {
            "listenPort": str(self.controller_ports[i]),
            "controllerDLegerGroup": "group1",
            "controllerDLegerPeers": ";".join(f"n{j}-127.0.0.1:{p}" for j, p in enumerate(self.raft_ports)),
            "controllerDLegerSelfId": node,
            "controllerStorePath": str(root / "store"),
            "controllerHeartBeatTimeoutMills": str(self.heartbeat_timeout_ms),
            "scanNotActiveBrokerInterval": "200",
            "controllerRaftPassword": "failover-test",
        }
        if self.inner_credentials is not None:
            conf["authenticationEnabled"] = "true"
            conf["innerClientAuthenticationCredentials"] = self.inner_credentials
        if self.embedded:
            # A name server with the controller inside, on its port (enableControllerInNamesrv).
            path = write_conf(root / "namesrv.conf", {**conf, "enableControllerInNamesrv": "true"})
            argv = [*ferromq_command(), "-v", "namesrv", "-c", str(path), "--port", conf["listenPort"]]
            ready = "ferromq name server listening"
        else:
            path = write_conf(root / "controller.conf", conf)
            argv = [*ferromq_command(), "-v", "controller", "-c", str(path), "--host", "127.0.0.1"]
            ready = "ferromq controller"
        p = spawn(f"controller {node}", argv, root / "controller.log", ready, conf["listenPort"])
        p.addr = f"127.0.0.1:{self.controller_ports[i]}"
        self.controllers[node] = p
        return p

    def metadata(self, node: str) -> dict[str, str]:
        return ask(self.controllers[node].addr, ControllerCode.CONTROLLER_GET_METADATA_INFO).ext

    def leader(self) -> str | None:
        """The controller node that says it leads (None while they elect)."""
        for node, p in self.controllers.items():
            if p.proc.poll() is None:
                try:
                    if self.metadata(node).get("isLeader") == "true":
                        return node
                except (OSError, TimeoutError):
                    continue
        return None

    def replica_info(self) -> dict[str, Any]:
        """The group as the most advanced live controller node sees it."""
        views = []
        for p in self.controllers.values():
            if p.proc.poll() is not None:
                continue
            try:
                reply = ask(p.addr, ControllerCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP})
            except (OSError, TimeoutError):
                continue
            views.append(orjson.loads(reply.body or b"{}"))
        views = [v for v in views if v.get("known")]
        if not views:
            return {"known": False, "epoch": 0, "masterAddr": "", "syncStateSet": [], "members": {}}
        return max(views, key=lambda v: (v["epoch"], v["syncStateSetEpoch"]))

    def master(self) -> str:
        return str(self.replica_info().get("masterAddr", ""))

    def wait_master(self, not_addr: str | None = None, timeout: float = 60.0) -> str:
        """Waits for a master (other than `not_addr`) that the controllers chose and that took the
        role; returns its name in `brokers`."""
        holder: dict[str, str] = {}

        def ready() -> bool:
            addr = self.master()
            name = next((n for n, p in self.brokers.items() if p.addr == addr), None)
            if not addr or addr == not_addr or name is None:
                return False
            holder["name"] = name
            return self.role_of(name) == "master"

        wait_until(ready, "a master", timeout=timeout, why=lambda: str(self.replica_info()))
        return holder["name"]

    def role_of(self, name: str) -> str:
        """What the broker's log last said it became in this run: master, replica or none."""
        p = self.brokers[name]
        with open(p.log_path, "rb") as f:
            f.seek(p.log_start)
            text = f.read().decode("utf-8", errors="replace")
        marks = {"master": "is now the master", "replica": " follows master ", "none": "is no longer master"}
        last = {role: text.rfind(mark) for role, mark in marks.items()}
        role, at = max(last.items(), key=lambda kv: kv[1])
        return role if at >= 0 else "none"

    def wait_in_sync(self, count: int, timeout: float = 60.0) -> None:
        wait_until(
            lambda: len(self.replica_info().get("syncStateSet", [])) >= count,
            f"{count} replicas in the SyncStateSet",
            timeout=timeout,
            why=lambda: str(self.replica_info()),
        )

    # -- brokers -----------------------------------------------------------------------------------

    def add_broker(self, name: str, **extra: str) -> Process:
        """A new broker on free ports (new ones when another process took one meanwhile)."""
        for attempt in range(PORT_ATTEMPTS):
            self.broker_confs[name] = {
                **BROKER_CONF,
                "listenPort": str(free_port()),
                "haListenPort": str(free_port()),
                "controllerAddr": self.controller_addr,
                "controllerHeartBeatTimeoutMills": str(self.heartbeat_timeout_ms),
                **(
                    {"innerClientAuthenticationCredentials": self.inner_credentials}
                    if self.inner_credentials is not None
                    else {}
                ),
                **extra,
            }
            try:
                return self.start_broker(name)
            except AssertionError as e:
                if attempt == PORT_ATTEMPTS - 1 or not port_taken(str(e)):
                    raise
        raise AssertionError(f"{name}: no free ports in {PORT_ATTEMPTS} attempts")

    def start_broker(self, name: str) -> Process:
        root = self.workdir / name
        conf = {
            **self.broker_confs[name],
            "storePathRootDir": str(root / "store"),
            "namesrvAddr": self.namesrv_addr,
        }
        path = write_conf(root / "broker.conf", conf)
        argv = [*ferromq_command(), "-v", "broker", "-c", str(path), "--host", "127.0.0.1"]
        p = spawn(name, argv, root / "broker.log", "ferromq broker", f"127.0.0.1:{conf['listenPort']}")
        self.brokers[name] = p
        return p

    def store(self, name: str) -> Path:
        return self.workdir / name / "store"

    def pause(self, name: str) -> None:
        os.kill(self.brokers[name].proc.pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        os.kill(self.brokers[name].proc.pid, signal.SIGCONT)

    def stop_all(self) -> None:
        for p in [
            *self.brokers.values(),
            *self.controllers.values(),
            *([self.namesrv] if self.namesrv else []),
        ]:
            if p.proc.poll() is None:
                os.kill(p.proc.pid, signal.SIGCONT)
            p.kill()


def start_cluster(
    workdir: Path,
    brokers: int = 3,
    *,
    embedded: bool = False,
    heartbeat_timeout_ms: int = HEARTBEAT_TIMEOUT_MS,
    inner_credentials: str | None = None,
    **broker_extra: str,
) -> FailoverCluster:
    """A name server, three controllers and `brokers` brokers of one group (the first one started
    becomes the master); `embedded`: three name servers with a controller inside each instead."""
    from tests.interop.replication_kit import start_namesrv

    cluster = FailoverCluster(
        workdir,
        None if embedded else start_namesrv(workdir),
        [free_port() for _ in range(3)],
        [free_port() for _ in range(3)],
        embedded,
        heartbeat_timeout_ms,
        inner_credentials=inner_credentials,
    )
    try:
        for i in range(3):
            cluster.start_controller(i)
        wait_until(lambda: cluster.leader() is not None, "a controller leader", timeout=60.0)
        cluster.add_broker("b0", **broker_extra)
        cluster.wait_master()
        for i in range(1, brokers):
            cluster.add_broker(f"b{i}", **broker_extra)
        cluster.wait_in_sync(brokers)
    except BaseException:
        cluster.stop_all()
        raise
    return cluster


def commitlog_bytes(store: Path, end: int) -> bytes:
    """The CommitLog's bytes from offset 0 (files of STORE_CONF's size) up to `end`."""
    size = int(STORE_CONF["mappedFileSizeCommitLog"])
    out = bytearray()
    at = 0
    while at < end:
        data = (store / "commitlog" / f"{at:020d}").read_bytes()
        out += data[: min(size, end - at)]
        at += size
    return bytes(out)


# -- load and read-back --------------------------------------------------------------------------


@dataclass
class Ack:
    id: str
    at: float
    """time.time() when the send was acknowledged (SEND_OK)."""
    store: str
    """The broker (host:port) that stored it, from its offset message id."""


class PythonLoad:
    """SYNC sends of the ferromq Python client in a thread, one after another, until stopped;
    the acknowledged (SEND_OK) ids, and the failures. Routes are refreshed every second (as a
    Java client with pollNameServerInterval=1000)."""

    def __init__(self, namesrv: str, topic: str, prefix: str) -> None:
        self.namesrv, self.topic, self.prefix = namesrv, topic, prefix
        self.acked: list[Ack] = []
        self.failures: list[str] = []
        self.not_ok: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name=f"load-{prefix}")

    def __repr__(self) -> str:
        return f"Python client load {self.prefix}"

    def start(self) -> PythonLoad:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the Python load did not stop"

    async def _run(self) -> None:
        instance = ClientInstance(self.namesrv, instance_name=self.prefix, timeout=3.0, route_interval=1.0)
        producer = Producer("PG_" + self.prefix, self.namesrv, instance=instance, send_timeout=3.0)
        await producer.start()
        try:
            i = 0
            while not self._stop.is_set():
                msg_id = f"{self.prefix}-{i}"
                i += 1
                try:
                    r = await producer.send(Message(self.topic, f"{msg_id}|".encode()))
                except Exception as e:  # a failed send is recorded, the load goes on
                    self.failures.append(f"{msg_id}: {e}")
                    await asyncio.sleep(0.05)
                    continue
                if r.status == SendStatus.SEND_OK:
                    host, _ = _store.decode_offset_msg_id(r.offset_msg_id)
                    self.acked.append(Ack(msg_id, time.time(), host))
                else:
                    self.not_ok.append(f"{msg_id}: {r.status.name}")
        finally:
            await producer.stop()
            await instance.stop()

    def acked_since(self, t: float, store: str | None = None) -> int:
        return sum(1 for a in self.acked if a.at >= t and (store is None or a.store == store))


class PythonConsumer:
    """A ferromq Python PushConsumer (from the first offset, routes refreshed every second) in a
    thread; the ids it consumed."""

    def __init__(self, namesrv: str, topic: str, group: str) -> None:
        self.namesrv, self.topic, self.group = namesrv, topic, group
        self.received: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name=f"consume-{group}")

    def start(self) -> PythonConsumer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the Python consumer did not stop"

    async def _run(self) -> None:
        instance = ClientInstance(self.namesrv, instance_name=self.group, route_interval=1.0)
        consumer = PushConsumer(
            self.group,
            self.namesrv,
            instance=instance,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            rebalance_interval=2.0,
        )
        consumer.subscribe(self.topic, "*")

        async def on_messages(msgs: list[ReceivedMessage]) -> ConsumeStatus:
            self.received.update(m.body.split(b"|", 1)[0].decode() for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        consumer.register_listener(on_messages)
        await consumer.start()
        try:
            while not self._stop.is_set():
                await asyncio.sleep(0.1)
        finally:
            await consumer.stop()
            await instance.stop()


def forged_heartbeat(view: dict[str, Any], master_addr: str) -> dict[str, str]:
    """A BROKER_HEARTBEAT's fields in the name of the master at `master_addr` (from a controller's
    view of its group), claiming it lives and leads by far: what a forger without credentials
    sends to hold an election off."""
    broker_id = next(bid for bid, m in view["members"].items() if m["addr"] == master_addr)
    return {
        "clusterName": "DefaultCluster",
        "brokerName": GROUP,
        "brokerAddr": master_addr,
        "brokerId": str(broker_id),
        "maxOffset": str(1 << 40),
        "epoch": str(view.get("epoch", 0)),
        "heartbeatTimeoutMills": "600000",
    }


def stored_ids(broker_addr: str, topic: str) -> list[str]:
    """Every message id (the body up to '|') of `topic` that `broker_addr` serves, read with pulls
    from offset 0 of each queue."""
    return [msg_id for msg_id, _, _ in stored_copies(broker_addr, topic)]


def stored_copies(broker_addr: str, topic: str) -> list[tuple[str, int, int]]:
    """(message id, queue id, queue offset) of every message of `topic` that `broker_addr` serves,
    read with pulls from offset 0 of each queue."""

    async def go() -> list[tuple[str, int, int]]:
        host, _, port = broker_addr.rpartition(":")
        conn = await open_connection(host, int(port), timeout=5.0)
        copies: list[tuple[str, int, int]] = []
        busy = 0
        try:
            for queue_id in range(64):
                ext = {"topic": topic, "queueId": str(queue_id)}
                reply = await conn.request(RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext=ext), 5.0)
                top = int(reply.ext.get("offset", 0)) if reply.code == ResponseCode.SUCCESS else 0
                offset = 0
                while offset < top:
                    pull = RemotingCommand(
                        code=RequestCode.PULL_MESSAGE,
                        ext={
                            "consumerGroup": "failover-check",
                            "topic": topic,
                            "queueId": str(queue_id),
                            "queueOffset": str(offset),
                            "maxMsgNums": "32",
                            "sysFlag": "4",  # FLAG_SUBSCRIPTION: the subscription comes with the pull
                            "commitOffset": "0",
                            "suspendTimeoutMillis": "0",
                            "subscription": "*",
                            "subVersion": "0",
                        },
                    )
                    reply = await conn.request(pull, 10.0)
                    if reply.code == ResponseCode.SYSTEM_BUSY and busy < 100:
                        busy += 1  # Java's pull flow control ("system busy"): asked again
                        await asyncio.sleep(0.1)
                        continue
                    moved_to = int(reply.ext.get("nextBeginOffset", -1))
                    moved = (ResponseCode.PULL_OFFSET_MOVED, ResponseCode.PULL_RETRY_IMMEDIATELY)
                    if reply.code in moved and moved_to > offset:
                        # The queue's start was deleted (retention on a full disk; a slave says
                        # OFFSET_TOO_SMALL with "retry"): read from where it starts now.
                        offset = moved_to
                        continue
                    if reply.code != ResponseCode.SUCCESS:
                        raise AssertionError(f"pull {topic}/{queue_id}@{offset}: {reply.code} {reply.remark}")
                    received = decode_received(reply.body or b"", "")
                    assert received, f"pull {topic}/{queue_id}@{offset} returned nothing below {top}"
                    for m in received:
                        copies.append((m.body.split(b"|", 1)[0].decode(), queue_id, m.queue_offset))
                    offset = int(reply.ext["nextBeginOffset"])
        finally:
            await conn.close()
        return copies

    return asyncio.run(go())


class ProcessLoad:
    """A SYNC send load of an official client in a child process (the C++ client through
    cpp_scenarios.py, the Java client through FailoverLoad.java), appending one line per answer to a
    file, until a stop file appears."""

    def __init__(self, kind: str, workdir: Path, namesrv: str, topic: str, prefix: str) -> None:
        self.kind, self.prefix = kind, prefix
        workdir.mkdir(parents=True, exist_ok=True)
        self.out, self.stop_file = workdir / f"{prefix}.acks", workdir / f"{prefix}.stop"
        self.log_path = workdir / f"{prefix}.log"
        if kind == "cpp":
            argv = [
                sys.executable, str(CPP_SCENARIOS), "produce", namesrv, "--topic", topic,
                "--group", f"PG_{prefix}", "--prefix", prefix, "--mode", "sync", "--keep-going",
                "--count", "10000000", "--deadline", "600", "--send-timeout-ms", "3000",
                "--stop-file", str(self.stop_file), "--out", str(self.out),
            ]  # fmt: skip
            env = {**os.environ, "HOME": str(workdir), "PYTHONUNBUFFERED": "1"}
        else:
            argv = [
                "java", f"-Drocketmq.client.logRoot={workdir}", "-Xmx256m", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", "-cp", str(JAR), "io.ferromq.interop.FailoverLoad",
                f"namesrv={namesrv}", f"topic={topic}", f"group=PG_{prefix}", f"prefix={prefix}",
                f"out={self.out}", f"stop={self.stop_file}", "poll=1000", "timeout=600",
            ]  # fmt: skip
            env = dict(os.environ)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=workdir
            )

    def __repr__(self) -> str:
        return f"{self.kind} client load {self.prefix}"

    def _lines(self) -> list[list[str]]:
        try:
            text = self.out.read_text()
        except FileNotFoundError:
            return []
        return [line.split() for line in text.splitlines() if line.strip()]

    @property
    def acked(self) -> list[Ack]:
        out = []
        for parts in self._lines():
            if self.kind == "cpp" and len(parts) == 3 and parts[1] == "0":
                out.append(Ack(parts[0], float(parts[2]), ""))
            elif self.kind == "java" and len(parts) == 2 and parts[0] != "!":
                out.append(Ack(parts[0], int(parts[1]) / 1000.0, ""))
        return out

    @property
    def not_ok(self) -> list[str]:
        bad = [" ".join(p) for p in self._lines() if p[0] == "!" or (self.kind == "cpp" and p[1:2] != ["0"])]
        return bad

    def acked_since(self, t: float) -> int:
        return sum(1 for a in self.acked if a.at >= t)

    def stop(self) -> None:
        self.stop_file.touch()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)
            raise AssertionError(f"the {self.kind} load did not stop") from None
