"""The broker's registration with its name servers: REGISTER_BROKER with its topics at start, every
registerNameServerPeriod (10-60 s) and at once when its topics or role change; UNREGISTER_BROKER
when it stops. Requests are signed with namesrvAccessKey/namesrvSecretKey when set (a name server
with its ACL takes route changes only from its admin accounts)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ferromq.acl.signing import credentials_of
from ferromq.jsonutil import dumps, loads_lenient
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import MASTER_EPOCH
from ferromq.protocol.headers import (
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    UnRegisterBrokerRequestHeader,
)
from ferromq.remoting.connection import Connection, open_connection

if TYPE_CHECKING:
    from ferromq.broker.config import BrokerConfig
    from ferromq.broker.replication import ReplicationService
    from ferromq.broker.topics import TopicConfigManager

logger = logging.getLogger(__name__)

NAMESRV_TIMEOUT = 3.0


class HasEpoch(Protocol):
    """The controller link, for the master's epoch a registration carries."""

    @property
    def epoch(self) -> int: ...


class RegistrationContext(Protocol):
    """What the registration uses of the broker (its config is replaced at run time: read each time)."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def topics(self) -> TopicConfigManager: ...
    @property
    def replication(self) -> ReplicationService: ...
    @property
    def controller(self) -> HasEpoch | None: ...


class NameServerRegistration:
    def __init__(
        self, broker: RegistrationContext, outgoing_ssl: Callable[[], ssl.SSLContext | None]
    ) -> None:
        self._broker = broker
        self._outgoing_ssl = outgoing_ssl
        self._conns: dict[str, Connection] = {}
        self._now = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.refusals: dict[str, str] = {}
        """Name server address -> why it refused the last registration (clients that ask it do
        not find this broker); shown in the broker's runtime info until it registers."""

    def start(self) -> None:
        if self._broker.config.namesrv_addrs:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="namesrv-register")

    async def stop(self) -> None:
        """Unregisters (if it registered) and closes its connections."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        await self._unregister_all()

    def changed(self) -> None:
        """Topics or the role changed: register again right away."""
        self._now.set()

    async def _loop(self) -> None:
        period = min(max(self._broker.config.register_name_server_period, 10_000), 60_000) / 1000.0
        while True:
            self._now.clear()
            await self.register_all()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period):
                    await self._now.wait()

    async def _namesrv(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            host, _, port = addr.rpartition(":")
            conn = await open_connection(host, int(port), timeout=NAMESRV_TIMEOUT, ssl=self._outgoing_ssl())
            self._conns[addr] = conn
        return conn

    async def topic_route(self, topic: str) -> dict[str, Any] | None:
        """The topic's route as the name servers know it (GET_ROUTEINFO_BY_TOPIC): the first
        answer; None when none knows it or none answers."""
        for addr in self._broker.config.namesrv_addrs:
            ext = GetRouteInfoRequestHeader(topic=topic).to_ext()
            cmd = self._signed(RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext=ext))
            try:
                reply = await (await self._namesrv(addr)).request(cmd, NAMESRV_TIMEOUT)
            except Exception as e:
                logger.debug("route of %s from name server %s: %s", topic, addr, e)
                continue
            if reply.code == ResponseCode.SUCCESS and reply.body:
                route = loads_lenient(reply.body)
                if isinstance(route, dict):
                    return route
        return None

    def _signed(self, cmd: RemotingCommand) -> RemotingCommand:
        cfg = self._broker.config
        credentials = credentials_of(cfg.namesrv_access_key, cfg.namesrv_secret_key)
        if credentials is not None:
            credentials.apply(cmd.ext, cmd.body)
        return cmd

    async def register_all(self) -> None:
        broker = self._broker
        cfg = broker.config
        body = dumps(
            {"topicConfigSerializeWrapper": broker.topics.serialize_wrapper(), "filterServerList": []}
        )
        for addr in cfg.namesrv_addrs:
            ext = RegisterBrokerRequestHeader(
                broker_name=cfg.broker_name,
                broker_addr=cfg.broker_addr,
                cluster_name=cfg.broker_cluster_name,
                broker_id=cfg.broker_id,
                ha_server_addr=cfg.ha_server_addr,
                compressed=False,
                body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
            ).to_ext()
            controller = broker.controller
            if controller is not None and cfg.broker_id == 0:
                ext[MASTER_EPOCH] = str(controller.epoch)
            cmd = self._signed(RemotingCommand(code=RequestCode.REGISTER_BROKER, ext=ext, body=body))
            try:
                reply = await (await self._namesrv(addr)).request(cmd, NAMESRV_TIMEOUT)
                if reply.code != ResponseCode.SUCCESS:
                    self._refused(addr, reply.remark or f"code {reply.code}")
                else:
                    if self.refusals.pop(addr, None) is not None:
                        logger.info("registered with name server %s", addr)
                    broker.replication.registered(reply.ext)
            except Exception as e:
                logger.warning("registering with name server %s failed: %s", addr, e)

    def _refused(self, addr: str, remark: str) -> None:
        """Says once (and in the runtime info while it lasts) that a name server refused us, and
        which keys to set when it wants a signature."""
        cfg = self._broker.config
        text = f"name server {addr} refused this broker's registration: {remark}"
        if cfg.namesrv_access_key is None and (
            "AclException" in remark or "ACL" in remark or "account" in remark
        ):
            text += (
                "; set namesrvAccessKey and namesrvSecretKey in broker.conf to an admin account of the "
                "name server's ACL"
            )
        if self.refusals.get(addr) != text:
            logger.error("%s (clients asking it do not find this broker)", text)
        self.refusals[addr] = text

    async def _unregister_all(self) -> None:
        cfg = self._broker.config
        header = UnRegisterBrokerRequestHeader(
            broker_name=cfg.broker_name,
            broker_addr=cfg.broker_addr,
            cluster_name=cfg.broker_cluster_name,
            broker_id=cfg.broker_id,
        )
        for addr in cfg.namesrv_addrs:
            cmd = self._signed(RemotingCommand(code=RequestCode.UNREGISTER_BROKER, ext=header.to_ext()))
            try:
                await (await self._namesrv(addr)).request(cmd, NAMESRV_TIMEOUT)
            except Exception as e:
                logger.debug("unregistering from %s failed: %s", addr, e)
        for conn in self._conns.values():
            await conn.close()
        self._conns.clear()
