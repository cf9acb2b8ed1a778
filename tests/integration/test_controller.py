"""The controller's elections on real sockets, with a one-node Raft group in this process and
brokers played by bare protocol requests: the first replica of a new group becomes master, a dead
master is replaced by the in-sync replica with the longest CommitLog, never by a replica outside
the SyncStateSet (the group then has no master) unless enableElectUncleanMaster, and a SyncStateSet
change is accepted only from the current master at the current epochs. Its Raft port: bound to the
node's own address, a pickle that would run code is refused (logged, the controller keeps working),
and a `ferromq controller` process with a password closes a connection whose first frame claims
2 GiB without buffering it."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import pickle
import shlex
import socket
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from ferromq.acl.signing import Credentials
from ferromq.broker.config import ConfigError
from ferromq.controller.codes import NO_MASTER, ControllerCode
from ferromq.controller.config import ControllerConfig, load_controller_config
from ferromq.controller.server import Controller
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import Connection, open_connection
from ferromq.testing.process import ferromq_command, free_port, write_conf
from ferromq.testing.waiting import until, wait_until
from tests.interop.replication_kit import spawn

GROUP = "broker-c"
TIMEOUT_MS = 600


class FakeBroker:
    """One replica's side of the conversation: registration and heartbeats."""

    def __init__(self, conn: Connection, addr: str) -> None:
        self.conn, self.addr = conn, addr
        self.broker_id = 0
        self.max_offset = 0

    def ext(self) -> dict[str, str]:
        return {"clusterName": "C", "brokerName": GROUP, "brokerAddr": self.addr, "haAddr": self.addr + "1"}

    async def call(self, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
        return await self.conn.request(RemotingCommand(code=code, ext=ext, body=body), 5.0)

    async def register(self) -> dict[str, Any]:
        reply = await self.call(ControllerCode.CONTROLLER_REGISTER_BROKER, self.ext())
        assert reply.code == ResponseCode.SUCCESS, reply.remark
        view: dict[str, Any] = orjson.loads(reply.body)
        self.broker_id = int(view["brokerId"])
        return view

    async def beat(self) -> dict[str, Any]:
        ext = {
            **self.ext(),
            "brokerId": str(self.broker_id),
            "maxOffset": str(self.max_offset),
            "heartbeatTimeoutMills": str(TIMEOUT_MS),
        }
        reply = await self.call(ControllerCode.BROKER_HEARTBEAT, ext)
        assert reply.code == ResponseCode.SUCCESS
        view: dict[str, Any] = orjson.loads(reply.body)
        return view


def make_controller(tmp_path: Path, unclean: bool, **settings: Any) -> Controller:
    cfg = ControllerConfig(
        listen_port=0,
        peers={"n0": f"127.0.0.1:{free_port()}"},
        self_id="n0",
        store_path=str(tmp_path / "controller"),
        enable_elect_unclean_master=unclean,
        heartbeat_timeout_ms=TIMEOUT_MS,
        scan_interval_ms=50,
        **settings,
    )
    return Controller(cfg)


@pytest.mark.parametrize("unclean", [False, True], ids=["clean", "unclean"])
def test_elections(tmp_path: Path, unclean: bool) -> None:
    asyncio.run(asyncio.wait_for(elections(make_controller(tmp_path, unclean)), 90))


async def elections(controller: Controller) -> None:
    await controller.start()
    conn = await open_connection("127.0.0.1", controller.port)
    try:
        a, b, c = (FakeBroker(conn, f"127.0.0.1:{10_000 + i}") for i in range(3))
        await until(_true(lambda: controller.is_leader), "a Raft leader")
        for broker, offset in ((a, 500), (b, 400), (c, 300)):
            broker.max_offset = offset
            await broker.register()
            await broker.beat()

        async def first_master() -> dict[str, Any] | None:
            await b.beat()
            await c.beat()
            return await _mastered(a)

        view = await until(first_master, "a first master")
        assert view["masterId"] == a.broker_id and view["epoch"] == 1

        # Only the current master at the current epochs changes the SyncStateSet.
        async def alter(by: FakeBroker, members: list[int], epoch: int, set_epoch: int) -> RemotingCommand:
            ext = {
                **by.ext(),
                "masterBrokerId": str(by.broker_id),
                "masterEpoch": str(epoch),
                "syncStateSetEpoch": str(set_epoch),
            }
            return await by.call(
                ControllerCode.CONTROLLER_ALTER_SYNC_STATE_SET, ext, orjson.dumps({"syncStateSet": members})
            )

        stale = await alter(b, [b.broker_id, c.broker_id], 1, view["syncStateSetEpoch"])
        assert stale.code == ResponseCode.SYSTEM_ERROR and "is not the master" in (stale.remark or "")
        ok = await alter(a, [a.broker_id, b.broker_id], 1, view["syncStateSetEpoch"])
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        again = await alter(a, [a.broker_id, c.broker_id], 1, view["syncStateSetEpoch"])
        assert again.code == ResponseCode.SYSTEM_ERROR and "SyncStateSet epoch" in (again.remark or "")

        # The master dies; b (in sync) and c (not) keep beating: b is elected.
        async def beat_others() -> dict[str, Any] | None:
            await c.beat()
            v = await b.beat()
            return v if v["masterId"] != a.broker_id else None

        view = await until(beat_others, "a new master")
        assert (
            view["masterId"] == b.broker_id and view["epoch"] == 2 and view["syncStateSet"] == [b.broker_id]
        )

        # b dies too; only c, never in sync with b, is alive.
        async def beat_c() -> dict[str, Any] | None:
            v = await c.beat()
            return v if v["masterId"] != b.broker_id else None

        view = await until(beat_c, "the controller to give up on b")
        if controller.config.enable_elect_unclean_master:
            assert view["masterId"] == c.broker_id, view
        else:
            assert view["masterId"] == NO_MASTER and view["syncStateSet"] == [b.broker_id], view
            # b comes back: as the only in-sync replica, it is master again, in a new epoch.
            await b.beat()
            view = await until(lambda: _mastered(b), "b elected again")
            assert view["epoch"] == 4
    finally:
        await conn.close()
        await controller.stop()


async def _mastered(broker: FakeBroker) -> dict[str, Any] | None:
    view = await broker.beat()
    return view if view["masterId"] == broker.broker_id else None


def _true(cond: Any) -> Any:
    async def check() -> bool:
        return bool(cond())

    return check


# -- the Raft port ------------------------------------------------------------------------------------


class RunsOnLoad:
    """Unpickling this calls `func(*args)` (what an attacker sends)."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, ...]:
        return self.func, self.args


def raft_frame(message: Any) -> bytes:
    """A PySyncObj frame without a password: length, then zlib-compressed pickle."""
    data = zlib.compress(pickle.dumps(message))
    return struct.pack("i", len(data)) + data


def raft_port(controller: Controller) -> tuple[str, int]:
    host, _, port = controller.config.self_raft_addr.rpartition(":")
    return host, int(port)


def test_a_pickle_that_runs_code_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    asyncio.run(asyncio.wait_for(hostile_pickle(make_controller(tmp_path, False), tmp_path, caplog), 90))


async def hostile_pickle(controller: Controller, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    marker = tmp_path / "pwned"
    await controller.start()
    conn = await open_connection("127.0.0.1", controller.port)
    try:
        await until(_true(lambda: controller.is_leader), "a Raft leader")
        reader, writer = await asyncio.open_connection(*raft_port(controller))
        writer.write(raft_frame(RunsOnLoad(os.system, f"touch {shlex.quote(str(marker))}")))
        await writer.drain()
        try:
            assert await asyncio.wait_for(reader.read(), 10) == b"", "the connection stayed open"
        except ConnectionResetError:
            pass
        writer.close()
        assert not marker.exists(), "the controller ran the pickle's code"

        def refused() -> bool:
            return any(
                r.levelno == logging.WARNING
                and "refused 127.0.0.1:" in r.getMessage()
                and "system" in r.getMessage()
                for r in caplog.records
            )

        await until(_true(refused), "the refusal in the log")
        # The controller keeps working.
        broker = FakeBroker(conn, "127.0.0.1:10100")
        assert (await broker.register())["known"]
        reply = await broker.call(ControllerCode.CONTROLLER_GET_METADATA_INFO, {})
        assert reply.code == ResponseCode.SUCCESS and reply.ext["isLeader"] == "true"
        assert not marker.exists()
    finally:
        await conn.close()
        await controller.stop()


def listening_addresses(port: int) -> set[str]:
    """The addresses of the TCP sockets listening on `port` (/proc/net/tcp and tcp6)."""
    found: set[str] = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            ip_hex, _, port_hex = fields[1].partition(":")
            if fields[3] != "0A" or int(port_hex, 16) != port:  # 0A: LISTEN
                continue
            # Each 32-bit word of the address is in host (little-endian) order.
            raw = b"".join(bytes.fromhex(ip_hex[i : i + 8])[::-1] for i in range(0, len(ip_hex), 8))
            found.add(str(ipaddress.ip_address(raw)))
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net/tcp (Linux)")
def test_the_raft_port_listens_on_its_own_address_only(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(raft_listener(make_controller(tmp_path, False)), 60))


async def raft_listener(controller: Controller) -> None:
    await controller.start()
    try:
        _, port = raft_port(controller)

        async def bound() -> set[str]:
            return listening_addresses(port)

        assert await until(bound, "the Raft port to listen") == {"127.0.0.1"}
    finally:
        await controller.stop()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/<pid>/status (Linux)")
def test_a_huge_frame_is_refused_before_authentication(tmp_path: Path) -> None:
    raft, listen = free_port(), free_port()
    conf = write_conf(
        tmp_path / "controller.conf",
        {
            "listenPort": str(listen),
            "controllerDLegerPeers": f"n0-127.0.0.1:{raft}",
            "controllerDLegerSelfId": "n0",
            "controllerStorePath": str(tmp_path / "store"),
            "controllerRaftPassword": "s3cret",
        },
    )
    argv = [*ferromq_command(), "controller", "-c", str(conf), "--host", "127.0.0.1"]
    p = spawn("controller", argv, tmp_path / "controller.log", "ferromq controller", f"127.0.0.1:{listen}")
    try:

        def raft_listens() -> bool:
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", raft)) == 0

        wait_until(raft_listens, "the Raft port", timeout=20, why=p.log)
        before = peak = rss_bytes(p.proc.pid)
        sent, chunk, closed_after = 0, b"\0" * (1 << 20), None
        with socket.create_connection(("127.0.0.1", raft), timeout=5) as s:
            s.sendall(struct.pack("i", (1 << 31) - 1))  # "2 GiB follow"
            start = time.monotonic()
            try:
                while sent < 64 << 20 and time.monotonic() - start < 30:
                    s.sendall(chunk)
                    sent += len(chunk)
                    peak = max(peak, rss_bytes(p.proc.pid))
                s.settimeout(5)
                closed = s.recv(1) == b""
            except (BrokenPipeError, ConnectionResetError):
                closed = True
            except TimeoutError:
                closed = False
            closed_after = time.monotonic() - start
        peak = max(peak, rss_bytes(p.proc.pid))
        growth = (peak - before) >> 20
        assert closed and closed_after < 5, (
            f"open after {sent >> 20} MiB, {closed_after:.1f} s; RSS +{growth} MiB"
        )
        assert sent < 64 << 20 and growth < 32, f"{sent >> 20} MiB sent, RSS +{growth} MiB"
        wait_until(
            lambda: p.logged("Raft port refused 127.0.0.1:") and p.logged("a frame of 2147483647 bytes"),
            "the refusal in the log",
            timeout=10,
            why=p.log,
        )

        async def metadata() -> RemotingCommand:
            conn = await open_connection("127.0.0.1", listen)
            try:
                return await conn.request(
                    RemotingCommand(code=ControllerCode.CONTROLLER_GET_METADATA_INFO), 5.0
                )
            finally:
                await conn.close()

        assert asyncio.run(asyncio.wait_for(metadata(), 10)).code == ResponseCode.SUCCESS
    finally:
        code = p.stop()
    assert code == 0 and "Traceback" not in p.log(), p.log()


INNER = ("innerBroker", "innerSecret1")


def test_a_controller_with_authentication_takes_a_brokers_word_only_signed(tmp_path: Path) -> None:
    """Issue 41: anyone who reached a controller could send heartbeats in a master's name and hold
    off the election after its death. With authenticationEnabled, registrations, heartbeats and
    SyncStateSet changes must be signed with the brokers' innerClientAuthenticationCredentials;
    reads stay open to admin tools."""
    controller = make_controller(
        tmp_path,
        False,
        authentication_enabled=True,
        inner_client_authentication_credentials=f'{{"accessKey": "{INNER[0]}", "secretKey": "{INNER[1]}"}}',
    )
    asyncio.run(asyncio.wait_for(signed_only(controller), 90))


async def signed_only(controller: Controller) -> None:
    await controller.start()
    conn = await open_connection("127.0.0.1", controller.port)
    try:
        await until(_true(lambda: controller.is_leader), "a Raft leader")
        broker = FakeBroker(conn, "127.0.0.1:10911")
        refused = "must be signed with the brokers' innerClientAuthenticationCredentials"
        for keys in (None, (INNER[0], "not-the-secret"), ("someoneElse", INNER[1])):
            cmd = RemotingCommand(code=ControllerCode.CONTROLLER_REGISTER_BROKER, ext=broker.ext())
            if keys is not None:
                Credentials(*keys).apply(cmd.ext, cmd.body)
            reply = await conn.request(cmd, 5.0)
            assert reply.code == ResponseCode.NO_PERMISSION and refused in (reply.remark or ""), keys
        assert not controller.table.groups
        signed = Credentials(*INNER)
        cmd = RemotingCommand(code=ControllerCode.CONTROLLER_REGISTER_BROKER, ext=broker.ext())
        signed.apply(cmd.ext, cmd.body)
        reply = await conn.request(cmd, 5.0)
        assert reply.code == ResponseCode.SUCCESS, reply.remark
        # A forged heartbeat in the registered broker's name is refused; the signed one is taken.
        beat = {**broker.ext(), "brokerId": "1", "maxOffset": "0", "heartbeatTimeoutMills": str(TIMEOUT_MS)}
        reply = await conn.request(RemotingCommand(code=ControllerCode.BROKER_HEARTBEAT, ext=dict(beat)), 5.0)
        assert reply.code == ResponseCode.NO_PERMISSION
        cmd = RemotingCommand(code=ControllerCode.BROKER_HEARTBEAT, ext=dict(beat))
        signed.apply(cmd.ext, cmd.body)
        assert (await conn.request(cmd, 5.0)).code == ResponseCode.SUCCESS
        # Reads need no signature.
        reply = await conn.request(
            RemotingCommand(code=ControllerCode.CONTROLLER_GET_REPLICA_INFO, ext={"brokerName": GROUP}), 5.0
        )
        assert reply.code == ResponseCode.SUCCESS, reply.remark
    finally:
        await conn.close()
        await controller.stop()


def test_controller_authentication_needs_the_inner_credentials(tmp_path: Path) -> None:
    conf = write_conf(
        tmp_path / "controller.conf",
        {"controllerDLegerPeers": "n0-127.0.0.1:9877", "authenticationEnabled": True},
    )
    with pytest.raises(
        ConfigError, match="authenticationEnabled=true needs innerClientAuthenticationCredentials"
    ):
        load_controller_config(conf)
