"""The controller's elections on real sockets, with a one-node Raft group in this process and
brokers played by bare protocol requests: the first replica of a new group becomes master, a dead
master is replaced by the in-sync replica with the longest CommitLog, never by a replica outside
the SyncStateSet (the group then has no master) unless enableElectUncleanMaster, and a SyncStateSet
change is accepted only from the current master at the current epochs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from ferromq.controller.codes import NO_MASTER, ControllerCode
from ferromq.controller.config import ControllerConfig
from ferromq.controller.server import Controller
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import Connection, open_connection
from tests.interop.conftest import free_port

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


def make_controller(tmp_path: Path, unclean: bool) -> Controller:
    cfg = ControllerConfig(
        listen_port=0,
        peers={"n0": f"127.0.0.1:{free_port()}"},
        self_id="n0",
        store_path=str(tmp_path / "controller"),
        enable_elect_unclean_master=unclean,
        heartbeat_timeout_ms=TIMEOUT_MS,
        scan_interval_ms=50,
    )
    return Controller(cfg)


async def until(what: str, cond: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("unclean", [False, True], ids=["clean", "unclean"])
def test_elections(tmp_path: Path, unclean: bool) -> None:
    asyncio.run(asyncio.wait_for(elections(make_controller(tmp_path, unclean)), 90))


async def elections(controller: Controller) -> None:
    await controller.start()
    conn = await open_connection("127.0.0.1", controller.port)
    try:
        a, b, c = (FakeBroker(conn, f"127.0.0.1:{10_000 + i}") for i in range(3))
        await until("a Raft leader", _true(lambda: controller.is_leader))
        for broker, offset in ((a, 500), (b, 400), (c, 300)):
            broker.max_offset = offset
            await broker.register()
            await broker.beat()

        async def first_master() -> dict[str, Any] | None:
            await b.beat()
            await c.beat()
            return await _mastered(a)

        view = await until("a first master", first_master)
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

        view = await until("a new master", beat_others)
        assert (
            view["masterId"] == b.broker_id and view["epoch"] == 2 and view["syncStateSet"] == [b.broker_id]
        )

        # b dies too; only c, never in sync with b, is alive.
        async def beat_c() -> dict[str, Any] | None:
            v = await c.beat()
            return v if v["masterId"] != b.broker_id else None

        view = await until("the controller to give up on b", beat_c)
        if controller.config.enable_elect_unclean_master:
            assert view["masterId"] == c.broker_id, view
        else:
            assert view["masterId"] == NO_MASTER and view["syncStateSet"] == [b.broker_id], view
            # b comes back: as the only in-sync replica, it is master again, in a new epoch.
            await b.beat()
            view = await until("b elected again", lambda: _mastered(b))
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
