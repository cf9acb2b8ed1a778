"""A controller node: one member of the Raft group (PySyncObj) and a remoting server for brokers.

Brokers send heartbeats to every controller node, so every node knows who is alive without
replicating it; only the Raft leader elects. An election is a compare-and-set on the group's
epoch in the Raft log, so two leaders of different terms cannot both elect for the same epoch.

The Raft port listens on this node's own address in controllerDLegerPeers, and PySyncObj is
patched (`raft_safety`) so that nothing a peer sends is unpickled into code and no frame is
buffered beyond a bound; without controllerRaftPassword the Raft addresses must all be loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pysyncobj import SyncObj, SyncObjConf

from ferromq.acl.signing import Credentials
from ferromq.auth.setup import inner_credentials
from ferromq.controller import raft_safety
from ferromq.controller.codes import NO_MASTER, ControllerCode
from ferromq.controller.config import ControllerConfig, exposed_without_password
from ferromq.controller.state import GroupTable
from ferromq.errors import BrokerError, ConfigError
from ferromq.jsonutil import dumps, loads_lenient
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import ext_int, ext_str
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Dispatcher, Handler
from ferromq.remoting.server import RemotingServer

logger = logging.getLogger(__name__)

# How long a change may wait for the Raft log (no leader: it fails, the broker asks again).
RAFT_TIMEOUT = 5.0


@dataclass
class Liveness:
    """What this node last heard from one broker."""

    seen: float
    timeout: float
    max_offset: int = 0
    epoch: int = 0
    ha_client_addr: str = ""
    conn: Connection | None = None
    """The connection its last heartbeat came over: its closing is the broker's end."""


class Controller:
    def __init__(self, config: ControllerConfig, host: str = "127.0.0.1", *, serve: bool = True) -> None:
        """`serve=False`: no server of its own; `handlers()` go on another (a name server's, as
        RocketMQ 5.x's enableControllerInNamesrv)."""
        self.config = config
        self.table = GroupTable()
        self._host = host
        self._raft: SyncObj | None = None
        self._live: dict[tuple[str, str], Liveness] = {}
        self._started_at = time.monotonic()
        self._scan_now = asyncio.Event()
        self._scan_task: asyncio.Task[None] | None = None
        self.elections = 0
        self.server = (
            RemotingServer(Dispatcher(self.handlers(), "controller"), host, config.listen_port)
            if serve
            else None
        )

    def handlers(self) -> dict[int, Handler]:
        """The requests served; with authenticationEnabled those that change a group's state
        (registration, heartbeats, SyncStateSet changes) only signed with the brokers'
        innerClientAuthenticationCredentials (reads stay open to admin tools)."""
        writes: dict[int, Handler] = {
            ControllerCode.CONTROLLER_REGISTER_BROKER: self._register,
            ControllerCode.BROKER_HEARTBEAT: self._heartbeat,
            ControllerCode.CONTROLLER_ALTER_SYNC_STATE_SET: self._alter_sync_state_set,
        }
        credentials = inner_credentials(self.config.inner_client_authentication_credentials)
        if self.config.authentication_enabled and credentials is not None:
            writes = {code: _signed_only(handler, credentials) for code, handler in writes.items()}
        return {
            **writes,
            ControllerCode.CONTROLLER_GET_REPLICA_INFO: self._replica_info,
            ControllerCode.CONTROLLER_GET_METADATA_INFO: self._metadata,
        }

    @property
    def port(self) -> int:
        return self.server.port if self.server is not None else self.config.listen_port

    @property
    def is_leader(self) -> bool:
        return self._raft is not None and bool(self._raft._isLeader())

    @property
    def leader_id(self) -> str | None:
        if self._raft is None:
            return None
        leader = self._raft._getLeader()
        if leader is None:
            return None
        addr = getattr(leader, "address", str(leader))
        return next((node for node, a in self.config.peers.items() if a == addr), addr)

    async def start(self) -> None:
        """Raises ConfigError for Raft addresses that are not loopback without a password (as
        `load_controller_config` does: a hand-made ControllerConfig must not expose the port)."""
        cfg = self.config
        exposed = exposed_without_password(cfg)
        if exposed:
            raise ConfigError(
                f"Raft addresses {', '.join(exposed)} are not loopback: set controllerRaftPassword"
            )
        if not cfg.raft_password:
            logger.warning(
                "controllerRaftPassword is not set: any process on this host can speak Raft to %s",
                cfg.self_raft_addr,
            )
        raft_safety.install()
        Path(cfg.store_path).mkdir(parents=True, exist_ok=True)
        conf = SyncObjConf(
            journalFile=str(cfg.journal_file),
            fullDumpFile=str(cfg.dump_file),
            # The state is a few dicts: no fork (this process has threads) for a snapshot.
            useFork=False,
            appendEntriesUseBatch=False,
            connectionRetryTime=1.0,
            bindRetryTime=0.2,
            # PySyncObj binds 0.0.0.0 (or ::) by default: only this node's own address.
            bindAddress=cfg.self_raft_addr,
            password=cfg.raft_password or None,
        )
        loop = asyncio.get_running_loop()
        self._raft = await loop.run_in_executor(
            None, lambda: SyncObj(cfg.self_raft_addr, cfg.other_raft_addrs, conf, consumers=[self.table])
        )
        if self.server is not None:
            await self.server.start()
        self._started_at = time.monotonic()
        self._scan_task = loop.create_task(self._scan_loop(), name="controller-scan")
        logger.info(
            "controller %s listening on %s:%d (Raft %s, peers %s)",
            cfg.self_id,
            self._host,
            self.port,
            cfg.self_raft_addr,
            ", ".join(cfg.other_raft_addrs),
        )

    async def stop(self) -> None:
        if self._scan_task is not None:
            self._scan_task.cancel()
            await asyncio.gather(self._scan_task, return_exceptions=True)
            self._scan_task = None
        if self.server is not None:
            await self.server.stop()
        raft, self._raft = self._raft, None
        if raft is not None:
            await asyncio.get_running_loop().run_in_executor(None, raft.destroy_synchronous)

    # -- the Raft log --------------------------------------------------------------------------

    async def _commit(self, method: Callable[..., Any], *args: Any) -> dict[str, Any]:
        """Runs a `@replicated` change through the Raft log; its result once committed."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[dict[str, Any]] = loop.create_future()

        def done(result: Any, error: Any) -> None:
            loop.call_soon_threadsafe(_settle, fut, result, error)

        method(*args, callback=done)
        try:
            async with asyncio.timeout(RAFT_TIMEOUT):
                return await fut
        except TimeoutError:
            raise BrokerError(
                "the controller group has no leader (is a majority of its nodes up?)",
                ResponseCode.SYSTEM_BUSY,
            ) from None

    # -- requests ------------------------------------------------------------------------------

    def _touch(self, conn: Connection, cmd: RemotingCommand) -> tuple[str, str]:
        name, addr = ext_str(cmd, "brokerName"), ext_str(cmd, "brokerAddr")
        timeout = ext_int(cmd, "heartbeatTimeoutMills", 0) or self.config.heartbeat_timeout_ms
        live = self._live.get((name, addr))
        if live is None:
            live = self._live[(name, addr)] = Liveness(seen=0.0, timeout=timeout / 1000.0)
        live.seen = time.monotonic()
        live.timeout = timeout / 1000.0
        live.max_offset = ext_int(cmd, "maxOffset", live.max_offset)
        live.epoch = ext_int(cmd, "epoch", live.epoch)
        live.ha_client_addr = cmd.ext.get("haClientAddr", "") or ""
        if live.conn is not conn:
            live.conn = conn
            conn.on_close(lambda closed: self._connection_closed(name, addr, closed))
        return name, addr

    def _connection_closed(self, name: str, addr: str, conn: Connection) -> None:
        """A broker whose heartbeat connection closed is inactive at once, as Java's controller
        takes a closed channel (a killed master's connections close with its process; one cut off
        by the network waits for its heartbeat timeout)."""
        live = self._live.get((name, addr))
        if live is None or live.conn is not conn:
            return  # it beats over another connection by now
        live.seen = float("-inf")
        logger.info("%s: the connection of broker %s closed; it is inactive", name, addr)
        self._scan_now.set()

    async def _register(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name, addr = self._touch(conn, cmd)
        result = await self._commit(
            self.table.register, ext_str(cmd, "clusterName"), name, addr, ext_str(cmd, "haAddr", "")
        )
        self._scan_now.set()
        return cmd.reply(
            ResponseCode.SUCCESS, body=dumps({**self.view(name), "brokerId": result["brokerId"]})
        )

    async def _heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name, _ = self._touch(conn, cmd)
        return cmd.reply(ResponseCode.SUCCESS, body=dumps(self.view(name)))

    async def _replica_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.reply(ResponseCode.SUCCESS, body=dumps(self.view(ext_str(cmd, "brokerName"))))

    async def _alter_sync_state_set(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name = ext_str(cmd, "brokerName")
        body = loads_lenient(cmd.body or b"{}")
        members = [int(m) for m in (body.get("syncStateSet") or [])] if isinstance(body, dict) else []
        result = await self._commit(
            self.table.alter_sync_state_set,
            name,
            ext_int(cmd, "masterBrokerId"),
            ext_int(cmd, "masterEpoch"),
            members,
            ext_int(cmd, "syncStateSetEpoch"),
        )
        if not result["ok"]:
            logger.info("SyncStateSet change of %s refused: %s", name, result["error"])
            return cmd.reply(ResponseCode.SYSTEM_ERROR, remark=result["error"], body=dumps(self.view(name)))
        logger.info("%s: SyncStateSet %s (epoch %d)", name, members, result["group"]["syncStateSetEpoch"])
        return cmd.reply(ResponseCode.SUCCESS, body=dumps(self.view(name)))

    async def _metadata(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        leader = self.leader_id
        return cmd.reply(
            ResponseCode.SUCCESS,
            ext={
                "group": self.config.group,
                "leaderId": leader or "",
                "isLeader": str(self.is_leader).lower(),
                "peers": ";".join(f"{n}-{a}" for n, a in sorted(self.config.peers.items())),
                "selfId": self.config.self_id,
            },
        )

    def view(self, name: str) -> dict[str, Any]:
        """A group as brokers see it: the replicated state plus this node's view of each replica
        (alive, reported offset and epoch, the address its HA connection comes from)."""
        group = self.table.snapshot(name)
        if group is None:
            return {"brokerName": name, "known": False, "isLeader": self.is_leader}
        now = time.monotonic()
        members: dict[str, dict[str, Any]] = {}
        master_addr = master_ha = ""
        for addr, b in group.pop("brokers").items():
            live = self._live.get((name, addr))
            members[str(b["id"])] = {
                "addr": addr,
                "haAddr": b["haAddr"],
                "alive": self._alive(name, addr, now),
                "maxOffset": live.max_offset if live else 0,
                "epoch": live.epoch if live else 0,
                "haClientAddr": live.ha_client_addr if live else "",
            }
            if b["id"] == group["masterId"]:
                master_addr, master_ha = addr, b["haAddr"]
        return {
            **group,
            "brokerName": name,
            "known": True,
            "masterAddr": master_addr,
            "masterHaAddr": master_ha,
            "members": members,
            "isLeader": self.is_leader,
        }

    # -- elections -----------------------------------------------------------------------------

    def _alive(self, name: str, addr: str, now: float) -> bool:
        live = self._live.get((name, addr))
        if live is None:
            # Not heard of since this node started: give it one timeout to show up.
            return now - self._started_at <= self.config.heartbeat_timeout_ms / 1000.0
        return now - live.seen <= live.timeout

    async def _scan_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.scan_interval_ms / 1000.0):
                    await self._scan_now.wait()
            self._scan_now.clear()
            if not self.is_leader:
                continue
            for name in self.table.names():
                try:
                    await self._check_master(name)
                except (BrokerError, KeyError, ValueError) as e:
                    logger.warning("election check of %s failed: %s", name, e)

    async def _check_master(self, name: str) -> None:
        group = self.table.snapshot(name)
        if group is None:
            return
        now = time.monotonic()
        addr_of = {b["id"]: addr for addr, b in group["brokers"].items()}
        master = group["masterId"]
        if master != NO_MASTER and self._alive(name, addr_of.get(master, ""), now):
            return

        def alive(bid: int) -> bool:
            return bid in addr_of and self._alive(name, addr_of[bid], now)

        if master == NO_MASTER and group["epoch"] == 0:
            candidates = [b for b in addr_of if alive(b)]  # a new group: any replica
        else:
            candidates = [b for b in group["syncStateSet"] if b != master and alive(b)]
            if not candidates and self.config.enable_elect_unclean_master:
                candidates = [b for b in addr_of if b != master and alive(b)]
        if not candidates and master == NO_MASTER:
            return

        def offset(bid: int) -> int:
            live = self._live.get((name, addr_of[bid]))
            return live.max_offset if live else 0

        new_master = max(candidates, key=lambda b: (offset(b), -b)) if candidates else NO_MASTER
        result = await self._commit(self.table.elect, name, new_master, group["epoch"])
        if result["ok"]:
            self.elections += 1
            logger.warning(
                "%s: %s; elected %s (epoch %d)",
                name,
                f"master {addr_of[master]} lost" if master in addr_of else "no master",
                addr_of.get(new_master, "no master: no in-sync replica is alive"),
                result["group"]["epoch"],
            )


def _settle(fut: asyncio.Future[dict[str, Any]], result: Any, error: Any) -> None:
    if fut.done():
        return
    if error:
        fut.set_exception(BrokerError(f"the Raft log refused the change ({error})", ResponseCode.SYSTEM_BUSY))
    else:
        fut.set_result(result)


def _signed_only(handler: Handler, credentials: Credentials) -> Handler:
    """`handler`, for requests signed with `credentials` (as 4.x clients sign: the AccessKey field
    and HmacSHA1 of the other fields and the body); others are refused with NO_PERMISSION."""

    async def checked(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if not credentials.signed(cmd.ext, cmd.body):
            logger.warning(
                "controller request %d from %s refused: not signed with innerClientAuthenticationCredentials",
                cmd.code,
                conn.peer,
            )
            return cmd.reply(
                ResponseCode.NO_PERMISSION,
                "a request that changes a broker group's state must be signed with the brokers' "
                "innerClientAuthenticationCredentials",
            )
        return await handler(conn, cmd)

    return checked
