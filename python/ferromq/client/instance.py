"""The client instance shared by a process's producers and consumers (RocketMQ's MQClientInstance):
connections to name servers and brokers, the route cache, heartbeats, and requests brokers send
to clients."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson

from ferromq.acl.signing import Credentials
from ferromq.client.admin_results import parse_reset_offsets
from ferromq.client.route import TopicRoute
from ferromq.errors import BrokerError, ConnectionClosedError, RequestTimeoutError
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import GetRouteInfoRequestHeader, UnregisterClientRequestHeader
from ferromq.remoting.connection import Connection, open_connection
from ferromq.remoting.tls import client_context

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 3.0
HEARTBEAT_INTERVAL = 30.0
ROUTE_INTERVAL = 30.0
CLIENT_LANGUAGE = "PYTHON"
# The client version ferromq reports: V4_9_7, so brokers honour maxReconsumeTimes etc.
CLIENT_VERSION = 407


class ProducerMember(Protocol):
    """What the instance needs from a producer."""

    group: str

    async def check_transaction_state(self, broker_addr: str, cmd: RemotingCommand) -> None: ...


class ConsumerMember(Protocol):
    """What the instance needs from a consumer."""

    group: str

    def heartbeat_data(self) -> dict[str, Any]: ...

    def subscribed_topics(self) -> list[str]: ...

    def on_consumer_ids_changed(self) -> None: ...


def local_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class ClientInstance:
    def __init__(
        self,
        namesrv: str,
        *,
        instance_name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        route_interval: float = ROUTE_INTERVAL,
        tls: bool | ssl.SSLContext = False,
        credentials: Credentials | None = None,
    ) -> None:
        """`tls`: connect to name servers and brokers over TLS, as a Java client with
        `-Dtls.enable=true`: True does not check the server's certificate (Java's default), an
        `ssl.SSLContext` (see `ferromq.remoting.tls.client_context`) decides itself.
        `credentials`: sign every request (brokers with aclEnable=true check it)."""
        self._ssl = client_context() if tls is True else tls or None
        self.credentials = credentials
        self.namesrv_addrs = [a.strip() for a in namesrv.split(";") if a.strip()]
        if not self.namesrv_addrs:
            raise ValueError("no name server address")
        self.client_id = f"{local_ip()}@{instance_name or os.getpid()}"
        self.timeout = timeout
        self._heartbeat_interval = heartbeat_interval
        self._route_interval = route_interval
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Lock] = {}
        self.routes: dict[str, TopicRoute] = {}
        self.producers: dict[str, ProducerMember] = {}
        self.consumers: dict[str, ConsumerMember] = {}
        self.on_unsubscribe_lite: Callable[[str, str, str], None] | None = None
        """A broker dropped a lite topic of a client this instance relays for (a proxy's):
        (client id, group, lite topic) of NOTIFY_UNSUBSCRIBE_LITE."""
        self._ns_index = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self._route_interval, self.refresh_routes), name="client-routes"),
            loop.create_task(
                self._every(self._heartbeat_interval, self.heartbeat_all), name="client-heartbeat"
            ),
        ]

    async def stop(self) -> None:
        """Unregisters every member from every broker and closes all connections."""
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for group in list(self.producers):
            await self.unregister_group(producer_group=group)
        for group in list(self.consumers):
            await self.unregister_group(consumer_group=group)
        for conn in list(self._conns.values()):
            await conn.close()
        self._conns.clear()
        self._started = False

    async def unregister_group(self, *, producer_group: str = "", consumer_group: str = "") -> None:
        """UNREGISTER_CLIENT for one group on every known broker (its consumers re-balance)."""
        header = UnregisterClientRequestHeader(
            client_id=self.client_id, producer_group=producer_group, consumer_group=consumer_group
        )
        for addr in sorted(self.broker_addrs()):
            try:
                await self.invoke(
                    addr, RemotingCommand(code=RequestCode.UNREGISTER_CLIENT, ext=header.to_ext())
                )
            except Exception as e:
                logger.debug("unregistering from %s failed: %s", addr, e)

    async def _every(self, interval: float, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await job()
            except Exception:
                logger.exception("client background job %s failed", getattr(job, "__name__", job))

    # -- connections and requests --------------------------------------------------------------

    async def connection(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        lock = self._connecting.setdefault(addr, asyncio.Lock())
        async with lock:
            conn = self._conns.get(addr)
            if conn is None or conn.closed:
                host, _, port = addr.rpartition(":")
                conn = await open_connection(
                    host, int(port), self._on_server_request, timeout=self.timeout, ssl=self._ssl
                )
                self._conns[addr] = conn
        return conn

    def _command(self, cmd: RemotingCommand) -> RemotingCommand:
        cmd.language, cmd.version = CLIENT_LANGUAGE, CLIENT_VERSION
        if self.credentials is not None:
            self.credentials.apply(cmd.ext, cmd.body)
        return cmd

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """Sends a request to `addr` and returns the reply (any code)."""
        conn = await self.connection(addr)
        return await conn.request(self._command(cmd), timeout or self.timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.connection(addr)
        await conn.oneway(self._command(cmd))

    async def namesrv_invoke(self, cmd: RemotingCommand) -> RemotingCommand:
        """Asks the name servers in turn until one answers."""
        last: Exception | None = None
        for _ in range(len(self.namesrv_addrs)):
            addr = self.namesrv_addrs[next(self._ns_index) % len(self.namesrv_addrs)]
            try:
                return await self.invoke(
                    addr, RemotingCommand(code=cmd.code, ext=dict(cmd.ext), body=cmd.body)
                )
            except (OSError, ConnectionClosedError, RequestTimeoutError) as e:
                last = e
        raise ConnectionClosedError(f"no name server answered: {last}")

    # -- routes --------------------------------------------------------------------------------

    async def route(self, topic: str, *, refresh: bool = False) -> TopicRoute | None:
        """The topic's route (cached; None when the name server knows no route)."""
        if not refresh and topic in self.routes:
            return self.routes[topic]
        reply = await self.namesrv_invoke(
            RemotingCommand(
                code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext=GetRouteInfoRequestHeader(topic=topic).to_ext()
            )
        )
        if reply.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if reply.code != ResponseCode.SUCCESS:
            raise BrokerError(reply.remark or f"route of {topic} failed", ResponseCode(reply.code))
        route = TopicRoute.from_json(topic, orjson.loads(reply.body))
        new_brokers = route.brokers() - self.broker_addrs()
        self.routes[topic] = route
        if new_brokers and (self.producers or self.consumers):
            await self.heartbeat_all()
        return route

    async def refresh_routes(self) -> None:
        topics = set(self.routes)
        for consumer in self.consumers.values():
            topics.update(consumer.subscribed_topics())
        for topic in topics:
            try:
                await self.route(topic, refresh=True)
            except Exception as e:
                logger.debug("route refresh of %s failed: %s", topic, e)

    def broker_addrs(self) -> set[str]:
        out: set[str] = set()
        for route in self.routes.values():
            out |= route.brokers()
        return out

    def master_addr(self, broker_name: str) -> str | None:
        for route in self.routes.values():
            addr = route.master(broker_name)
            if addr:
                return addr
        return None

    # -- membership and heartbeats -------------------------------------------------------------

    def heartbeat_body(self) -> bytes:
        return orjson.dumps(
            {
                "clientID": self.client_id,
                "producerDataSet": [{"groupName": g} for g in self.producers],
                "consumerDataSet": [c.heartbeat_data() for c in self.consumers.values()],
            }
        )

    async def heartbeat_all(self) -> None:
        if not (self.producers or self.consumers):
            return
        body = self.heartbeat_body()
        for addr in self.broker_addrs():
            try:
                reply = await self.invoke(addr, RemotingCommand(code=RequestCode.HEART_BEAT, body=body))
                if reply.code != ResponseCode.SUCCESS:
                    logger.warning("heartbeat to %s refused: %s", addr, reply.remark)
            except Exception as e:
                logger.debug("heartbeat to %s failed: %s", addr, e)

    # -- requests from brokers -----------------------------------------------------------------

    async def _on_server_request(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            consumer = self.consumers.get(cmd.ext.get("consumerGroup", ""))
            if consumer is not None:
                consumer.on_consumer_ids_changed()
            return None
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            group = _producer_group_of(cmd.body)
            producer = self.producers.get(group or "")
            if producer is not None:
                await producer.check_transaction_state(conn.peer, cmd)
            return None
        if cmd.code == RequestCode.NOTIFY_UNSUBSCRIBE_LITE:
            if self.on_unsubscribe_lite is not None:
                e = cmd.ext
                self.on_unsubscribe_lite(
                    e.get("clientId", ""), e.get("consumerGroup", ""), e.get("liteTopic", "")
                )
            return None
        if cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            await self._reset_offsets(cmd)
            return cmd.reply(ResponseCode.SUCCESS)
        if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            consumer = self.consumers.get(cmd.ext.get("consumerGroup", ""))
            running_info = getattr(consumer, "running_info", None)
            if running_info is None:  # a pull consumer: Java's lite pull consumers say little too
                return cmd.reply(
                    ResponseCode.SUCCESS, body=orjson.dumps({"properties": {"language": "PYTHON"}})
                )
            return cmd.reply(ResponseCode.SUCCESS, body=running_info())
        return cmd.reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request type {cmd.code} not supported")

    async def _reset_offsets(self, cmd: RemotingCommand) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: a broker relays an offset reset to a push consumer of the
        group (as Java's client, other consumers ignore it)."""
        group = cmd.ext.get("group", "")
        reset = getattr(self.consumers.get(group), "reset_offsets", None)
        if reset is None:
            logger.info("offset reset for group %s ignored: no push consumer of it here", group)
            return
        try:
            offsets = dict(parse_reset_offsets(cmd.body))
        except (ValueError, KeyError, TypeError) as e:
            logger.warning("offset reset for group %s: bad body: %s", group, e)
            return
        await reset(cmd.ext.get("topic", ""), offsets)


def _producer_group_of(record: bytes) -> str | None:
    from ferromq.message import decode_messages

    try:
        (m,) = decode_messages(record)
    except Exception:
        return None
    return m.properties.get("PGROUP")
