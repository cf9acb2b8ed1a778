"""A broker in controller mode (RocketMQ 5.x's `enableControllerMode`): it registers with the
controllers, heartbeats its CommitLog end and epoch to each of them, and takes the role they
decide. As master it keeps the group's SyncStateSet (a replica leaves it after
`haMaxTimeSlaveNotCatchup` without catching up, joins when it caught up) and, with
`allAckInSyncStateSet`, acknowledges a SYNC send only once every in-sync replica has it. Before it
follows a (new) master it cuts its CommitLog after the last epoch it shares with that master.

A master that was paused while another was elected cannot acknowledge what would be lost: the new
master was in its SyncStateSet and no longer replicates from it, and only the current master at
the current epoch may change that set. Its next heartbeat tells it to step down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from ferromq import _store
from ferromq.auth.setup import inner_credentials
from ferromq.broker.epochs import EpochEntry, EpochFile, consistent_point
from ferromq.controller.codes import NO_MASTER, ControllerCode
from ferromq.errors import FerroMQError
from ferromq.jsonutil import dumps, loads_lenient
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import Connection, open_connection
from ferromq.remoting.dispatch import Handler

if TYPE_CHECKING:
    from ferromq.broker.config import BrokerConfig
    from ferromq.broker.replication import ReplicationService
    from ferromq.broker.roles import BrokerRoles
    from ferromq.store import MessageStore

logger = logging.getLogger(__name__)


class ControllerLinkContext(Protocol):
    """What the controller link uses of the broker: its settings and store, its HA service, and
    the role changes it decides."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def store(self) -> MessageStore: ...
    @property
    def replication(self) -> ReplicationService: ...
    @property
    def roles(self) -> BrokerRoles: ...


REQUEST_TIMEOUT = 3.0
# How long a starting broker waits for a controller to answer its registration.
START_TIMEOUT = 30.0
# A replica that caught up this recently (seconds) may join the SyncStateSet.
JOIN_WITHIN = 1.0
# How often a replica copies the master's topics, offsets and groups (4.x: every 10 s): what it
# lacks when elected is what consumers see again (offsets) or what routes miss (topics).
METADATA_SYNC_INTERVAL = 2.0


class ControllerUnavailableError(FerroMQError):
    """No controller answered a starting broker's registration."""


class ControllerLink:
    def __init__(self, broker: ControllerLinkContext) -> None:
        self._broker = broker
        cfg = broker.config
        # brokerRole only says whether the master waits for its replicas.
        self.master_role = (
            "SYNC_MASTER"
            if cfg.broker_role == "SYNC_MASTER" or cfg.all_ack_in_sync_state_set
            else "ASYNC_MASTER"
        )
        self.epochs = EpochFile(cfg.store_path_root_dir)
        self.broker_id: int | None = None
        self.role = "NONE"
        """MASTER, SLAVE (following `master_id`) or NONE (no master to follow yet)."""
        self.epoch = 0
        self.master_id = NO_MASTER
        self.sync_state_set: list[int] = []
        self.sync_state_set_epoch = 0
        self.view: dict[str, Any] = {}
        self.role_changes = 0
        self._conns: dict[str, Connection] = {}
        self._out_since: dict[int, float] = {}
        self._gated: list[str] | None = None
        """The replicas' HA connections the master's sends wait for (as last gated)."""
        self._task: asyncio.Task[None] | None = None
        self._synced_at = 0.0

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Registers (waiting up to START_TIMEOUT for a controller) and takes the role the
        controllers give; then heartbeats in the background."""
        broker = self._broker
        await broker.roles.start_as_replica()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                await self._register()
                break
            except (OSError, TimeoutError, FerroMQError) as e:
                if time.monotonic() > deadline:
                    raise ControllerUnavailableError(
                        f"no controller at {broker.config.controller_addr} answered the registration: {e}"
                    ) from e
                logger.info("registering with the controllers failed (%s); trying again", e)
                await asyncio.sleep(0.5)
        await self._beat()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="controller-heartbeat")
        self._task.add_done_callback(_log_death)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for conn in self._conns.values():
            await conn.close()
        self._conns.clear()

    def handlers(self) -> dict[int, Handler]:
        return {ControllerCode.GET_BROKER_EPOCH_CACHE: self._epoch_cache}

    def status(self) -> dict[str, Any]:
        return {
            "brokerId": self.broker_id,
            "role": self.role,
            "epoch": self.epoch,
            "masterId": self.master_id,
            "syncStateSet": self.sync_state_set,
            "epochs": [e.to_json() for e in self.epochs.entries],
        }

    # -- talking to controllers --------------------------------------------------------------------

    async def _ask(
        self, addr: str, cmd: RemotingCommand, timeout: float = REQUEST_TIMEOUT
    ) -> RemotingCommand:
        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            host, _, port = addr.rpartition(":")
            conn = self._conns[addr] = await open_connection(host, int(port), timeout=timeout)
        # Controllers with authenticationEnabled take a broker's word only signed with the key
        # they share with it (ferromq's; a Java controller ignores the fields).
        credentials = inner_credentials(self._broker.config.inner_client_authentication_credentials)
        if credentials is not None:
            credentials.apply(cmd.ext, cmd.body)
        return await conn.request(cmd, timeout)

    def _ext(self) -> dict[str, str]:
        cfg = self._broker.config
        return {
            "clusterName": cfg.broker_cluster_name,
            "brokerName": cfg.broker_name,
            "brokerAddr": cfg.broker_addr,
            "haAddr": cfg.ha_server_addr,
        }

    async def _register(self) -> None:
        last: Exception | None = None
        for addr in self._broker.config.controller_addrs:
            cmd = RemotingCommand(code=ControllerCode.CONTROLLER_REGISTER_BROKER, ext=self._ext())
            try:
                reply = await self._ask(addr, cmd)
            except (OSError, TimeoutError, FerroMQError) as e:
                last = e
                continue
            if reply.code != ResponseCode.SUCCESS:
                last = FerroMQError(f"controller {addr}: {reply.remark}")
                continue
            view = _object(reply.body)
            self.broker_id = int(view["brokerId"])
            logger.info("registered with controller %s as broker id %d", addr, self.broker_id)
            return
        raise last or FerroMQError("no controller address")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._broker.config.broker_heartbeat_interval / 1000.0)
            await self._beat()

    async def _beat(self) -> None:
        """One heartbeat to every controller; the newest view of the group decides the role."""
        broker = self._broker
        cfg = broker.config
        slave = broker.replication.slave
        ext = {
            **self._ext(),
            "brokerId": str(self.broker_id),
            "epoch": str(self.epochs.last_epoch),
            "maxOffset": str(broker.store.max_physical_offset),
            "haClientAddr": (slave.local_addr or "") if slave is not None and self.role == "SLAVE" else "",
            "heartbeatTimeoutMills": str(cfg.controller_heart_beat_timeout_mills),
        }
        beat_timeout = min(REQUEST_TIMEOUT, max(0.5, 2 * cfg.broker_heartbeat_interval / 1000.0))
        answers = await asyncio.gather(
            *(
                # A silent controller node must not hold back what the others say.
                self._ask(a, RemotingCommand(code=ControllerCode.BROKER_HEARTBEAT, ext=ext), beat_timeout)
                for a in cfg.controller_addrs
            ),
            return_exceptions=True,
        )
        views = [
            _object(a.body)
            for a in answers
            if isinstance(a, RemotingCommand) and a.code == ResponseCode.SUCCESS
        ]
        views = [v for v in views if v.get("known")]
        if not views:
            return
        view = max(views, key=lambda v: (v["epoch"], v["syncStateSetEpoch"], v.get("isLeader", False)))
        if str(self.broker_id) not in view["members"]:
            # The controllers lost this replica (a new controller group): register again.
            with contextlib.suppress(OSError, TimeoutError, FerroMQError):
                await self._register()
            return
        self.view = view
        try:
            await self._apply(view)
            if self.role == "MASTER":
                await self._maintain_sync_state_set(view)
            elif self.role == "SLAVE" and time.monotonic() - self._synced_at >= METADATA_SYNC_INTERVAL:
                self._synced_at = time.monotonic()
                broker.replication.sync_soon()
        except (OSError, TimeoutError, FerroMQError) as e:
            logger.warning("controller mode: %s", e)

    # -- roles -------------------------------------------------------------------------------------

    async def _apply(self, view: dict[str, Any]) -> None:
        epoch, master = int(view["epoch"]), int(view["masterId"])
        if epoch < self.epoch:
            return  # an older view than what this broker acted on
        if master == self.broker_id:
            if self.role != "MASTER" or self.epoch != epoch:
                await self._become_master(view)
            elif int(view["syncStateSetEpoch"]) > self.sync_state_set_epoch:
                self._set_sync_state_set(view["syncStateSet"], int(view["syncStateSetEpoch"]))
        elif master == NO_MASTER:
            if self.role == "MASTER":
                await self._step_down(epoch)
        elif self.role != "SLAVE" or self.epoch != epoch or self.master_id != master:
            await self._follow(view)

    async def _become_master(self, view: dict[str, Any]) -> None:
        broker = self._broker
        epoch = int(view["epoch"])
        await broker.roles.stop_master_services(self.broker_id)
        end = broker.store.max_physical_offset
        self.epochs.begin(epoch, end)
        self.role, self.epoch, self.master_id = "MASTER", epoch, self.broker_id or NO_MASTER
        self._out_since.clear()
        try:
            await broker.roles.become_master(self.master_role, self.broker_id)
        except OSError:
            # The HA port is taken (for a moment, e.g. by a socket a replica's connect attempt
            # bound): not a master yet, so that the next view from the controllers tries again.
            self.role = "NONE"
            raise
        self._set_sync_state_set(view["syncStateSet"], int(view["syncStateSetEpoch"]))
        await broker.roles.start_master_services()
        self.role_changes += 1
        logger.warning(
            "controller mode: %s is now the master of %s (epoch %d, CommitLog end %d)",
            broker.config.broker_addr,
            broker.config.broker_name,
            epoch,
            end,
        )

    async def _step_down(self, epoch: int) -> None:
        """No master any more (none of its in-sync replicas is alive, or this one was deposed):
        stop taking writes until the controllers choose."""
        await self._broker.roles.stop_master_services(self.broker_id)
        await self._broker.roles.follow(None)
        self.role, self.epoch, self.master_id = "NONE", epoch, NO_MASTER
        self.role_changes += 1
        logger.warning(
            "controller mode: %s is no longer master (epoch %d)", self._broker.config.broker_addr, epoch
        )

    async def _follow(self, view: dict[str, Any]) -> None:
        broker = self._broker
        epoch, master = int(view["epoch"]), int(view["masterId"])
        member = view["members"].get(str(master)) or {}
        master_addr, master_ha = member.get("addr", ""), member.get("haAddr", "")
        was_master = self.role == "MASTER"
        await broker.roles.stop_master_services(self.broker_id)
        self.role = "NONE"
        try:
            reply = await self._ask(
                master_addr, RemotingCommand(code=ControllerCode.GET_BROKER_EPOCH_CACHE, ext=self._ext())
            )
            if reply.code != ResponseCode.SUCCESS:
                raise FerroMQError(f"master {master_addr} answered {reply.code}: {reply.remark}")
            remote = _object(reply.body)
            if int(remote.get("epoch", 0)) < epoch:
                raise FerroMQError(f"master {master_addr} is not at epoch {epoch} yet")
            self._truncate_to_master(remote)
            broker.replication.release_reads()
        except BaseException:
            # Asked again at the next heartbeat; meanwhile a replica without master.
            await broker.roles.follow(None)
            raise
        await broker.roles.follow(master_ha)
        self.role, self.epoch, self.master_id = "SLAVE", epoch, master
        self.sync_state_set, self.sync_state_set_epoch = (
            list(view["syncStateSet"]),
            int(view["syncStateSetEpoch"]),
        )
        self.role_changes += 1
        logger.warning(
            "controller mode: %s follows master %s (epoch %d)%s",
            broker.config.broker_addr,
            master_addr,
            epoch,
            " after stepping down" if was_master else "",
        )

    def _truncate_to_master(self, remote: dict[str, Any]) -> None:
        """Cuts this CommitLog after the last point it shares with the master's, and takes the
        master's epochs as this replica's (its data is the master's from here on)."""
        store = self._broker.store
        remote_entries = [EpochEntry.from_json(e) for e in remote.get("epochList", [])]
        local_end = store.max_physical_offset
        point = consistent_point(self.epochs.entries, local_end, remote_entries, int(remote["maxOffset"]))
        if point is None:
            point = local_end if local_end == store.min_physical_offset else store.min_physical_offset
            if point < local_end:
                logger.error(
                    "controller mode: this CommitLog shares no epoch with the master's; dropping all of it "
                    "(%d bytes) to replicate from the master",
                    local_end - point,
                )
        if point < local_end:
            logger.warning(
                "controller mode: cutting the CommitLog from %d to %d (last point shared with the master)",
                local_end,
                point,
            )
            _store.truncate_commitlog(store.raw, point)
        self.epochs.replace(remote_entries)

    async def _epoch_cache(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_EPOCH_CACHE: this broker's epochs and CommitLog end (a replica about to follow
        it compares them with its own)."""
        body = {
            "epoch": self.epoch if self.role == "MASTER" else 0,
            "epochList": [e.to_json() for e in self.epochs.entries],
            "maxOffset": self._broker.store.max_physical_offset,
        }
        return cmd.reply(ResponseCode.SUCCESS, body=dumps(body))

    # -- the master's SyncStateSet -----------------------------------------------------------------

    def _ha_client(self, broker_id: int) -> str:
        member = self.view.get("members", {}).get(str(broker_id)) or {}
        # A replica whose HA connection is unknown can never acknowledge (never matches a slave).
        return member.get("haClientAddr") or f"unknown-replica-{broker_id}"

    def _set_sync_state_set(self, members: list[int], set_epoch: int, gate: list[int] | None = None) -> None:
        """Takes `members` as the SyncStateSet; sends wait for the replicas of `gate` (default:
        the set)."""
        self.sync_state_set, self.sync_state_set_epoch = sorted(members), set_epoch
        self._gate(gate if gate is not None else members)

    def _gate(self, members: list[int]) -> None:
        rep = self._broker.replication
        if rep.master is None:
            return
        others = [m for m in members if m != self.broker_id]
        cfg = self._broker.config
        rep.ack_alone = not others and len(members) >= cfg.min_in_sync_replicas
        self._gated = [self._ha_client(m) for m in others]
        if cfg.all_ack_in_sync_state_set:
            rep.master.set_ack_peers(self._gated)
        else:
            rep.master.set_ack_peers(None)
        rep.confirm_reads()

    async def _maintain_sync_state_set(self, view: dict[str, Any]) -> None:
        master = self._broker.replication.master
        if master is None or self.broker_id is None:
            return
        now = time.monotonic()
        limit = self._broker.config.ha_max_time_slave_not_catchup / 1000.0
        caught: dict[str, float | None] = {peer: since for peer, _, since in master.slaves()}
        epoch_start = self.epochs.entries[-1].start_offset if self.epochs.entries else 0
        offsets = {peer: off for peer, off, _ in master.slaves()}
        wanted = [self.broker_id]
        for bid in self.sync_state_set:
            if bid == self.broker_id:
                continue
            since = caught.get(self._ha_client(bid))
            if since is not None and since <= limit:
                self._out_since.pop(bid, None)
                wanted.append(bid)
            elif now - self._out_since.setdefault(bid, now) <= limit:
                wanted.append(bid)  # not caught up yet, within the grace time
        for key in view["members"]:
            bid = int(key)
            if bid in wanted:
                continue
            peer = self._ha_client(bid)
            since = caught.get(peer)
            if since is not None and since <= JOIN_WITHIN and offsets.get(peer, 0) >= epoch_start:
                wanted.append(bid)
        wanted.sort()
        if wanted == self.sync_state_set:
            # A replica that reconnected has another HA connection: the sends must wait for that
            # one (the old one never reports again, and every send would wait for slaveTimeout
            # while the replica looks caught up).
            if self._gated != [self._ha_client(m) for m in self.sync_state_set if m != self.broker_id]:
                self._gate(self.sync_state_set)
            return
        # Joining replicas count for acknowledgements before the controllers know of them.
        self._gate(sorted(set(wanted) | set(self.sync_state_set)))
        cmd = RemotingCommand(
            code=ControllerCode.CONTROLLER_ALTER_SYNC_STATE_SET,
            ext={
                **self._ext(),
                "masterBrokerId": str(self.broker_id),
                "masterEpoch": str(self.epoch),
                "syncStateSetEpoch": str(self.sync_state_set_epoch),
            },
            body=dumps({"syncStateSet": wanted}),
        )
        for addr in self._broker.config.controller_addrs:
            try:
                reply = await self._ask(addr, cmd)
            except (OSError, TimeoutError, FerroMQError):
                continue
            if reply.code == ResponseCode.SUCCESS:
                new = _object(reply.body)
                logger.info("controller mode: SyncStateSet %s -> %s", self.sync_state_set, wanted)
                self._set_sync_state_set(new["syncStateSet"], int(new["syncStateSetEpoch"]))
                return
            if reply.code == ResponseCode.SYSTEM_ERROR:
                # Refused (not the master at this epoch any more, or another change came first).
                logger.info("controller mode: SyncStateSet change refused by %s: %s", addr, reply.remark)
                self._gate(self.sync_state_set)
                return
        # No answer: the change may still be committed later, so joining replicas keep counting
        # until a heartbeat shows the controllers' set.


def _object(body: bytes | None) -> dict[str, Any]:
    data = loads_lenient(body or b"{}")
    if not isinstance(data, dict):
        raise FerroMQError("the controller's answer is not a JSON object")
    return data


def _log_death(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("controller heartbeat died", exc_info=task.exception())
