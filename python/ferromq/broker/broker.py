"""The broker: owns the store, the managers, the services and the server, and starts and stops
them in order. The gRPC port of RocketMQ 5.x clients is the proxy's (`ferromq.proxy.server`), above
the broker: whoever composes the two (`ferromq.app.make_broker`) hands the broker a `GrpcPortFactory`,
so the broker never imports the proxy."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ferromq import _store
from ferromq.acl.guard import AclGuard
from ferromq.acl.plain import PlainAcl
from ferromq.acl.watch import AclFileWatcher
from ferromq.auth import setup as auth_setup
from ferromq.auth.evaluator import Auth
from ferromq.auth.guard import AuthGuard
from ferromq.auth.metadata import AuthMetadata, AuthMetadataError
from ferromq.broker import lite
from ferromq.broker.clients import ClientManager, ConsumerGroupInfo
from ferromq.broker.config import BrokerConfig, ConfigError, runtime_changes
from ferromq.broker.controller_link import ControllerLink
from ferromq.broker.dataplane import DataPlanes
from ferromq.broker.lite_consumers import LiteConsumers
from ferromq.broker.locks import RebalanceLockManager
from ferromq.broker.long_polling import PullRequestHoldService
from ferromq.broker.metrics import (
    AuthCollector,
    GrpcFrontCollector,
    MetricsExporter,
    TieredStoreCollector,
    TieringCollector,
)
from ferromq.broker.offsets import ConsumerOffsetManager
from ferromq.broker.pop.modes import RequestModeManager
from ferromq.broker.pop.order import ConsumerOrderInfoManager
from ferromq.broker.pop.service import PopService
from ferromq.broker.processors import build_registry, pop, pull, send
from ferromq.broker.registration import NameServerRegistration
from ferromq.broker.replication import ReplicationService
from ferromq.broker.roles import BrokerRoles
from ferromq.broker.schedule import ScheduleMessageService
from ferromq.broker.stats import RPC_LATENCY_BUCKETS_MS, BrokerStats
from ferromq.broker.store_sizes import check_store_sizes
from ferromq.broker.subscriptions import SubscriptionGroupManager
from ferromq.broker.timer import TimerMessageService
from ferromq.broker.topics import TopicConfigManager
from ferromq.broker.transaction import TransactionalMessageService
from ferromq.errors import FerroMQError, StoreIOError
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import SCHEDULE_TOPIC, TIMER_TOPIC
from ferromq.protocol.headers import (
    NotifyConsumerIdsChangedRequestHeader,
)
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Dispatcher, Guard
from ferromq.remoting.plane import PlaneServer
from ferromq.remoting.server import ServerLimits
from ferromq.store import FlushDiskType, MessageStore

if TYPE_CHECKING:
    from ferromq.tables.process import TieringProcess
    from ferromq.tables.tiering import TieringService
    from ferromq.tiered.service import TieredService

logger = logging.getLogger(__name__)

# One step of starting or stopping the broker's parts.
Step = Callable[[], Awaitable[None]]

HOUSEKEEPING_INTERVAL = 10.0


class GrpcPort(Protocol):
    """The gRPC port the broker starts and stops with its services (ferromq.proxy.server.GrpcServer)."""

    port: int
    """The bound port once started (0 before)."""

    @property
    def front(self) -> _store.GrpcFront | None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


# Makes the gRPC port over a broker, at its host and the configured port.
GrpcPortFactory = Callable[["Broker", str, int], GrpcPort]


class Broker:
    def __init__(
        self, config: BrokerConfig, host: str = "0.0.0.0", grpc_port: GrpcPortFactory | None = None
    ) -> None:
        """`grpc_port` makes the gRPC port when grpcServerPort is set (`ferromq.app.make_broker`
        passes the proxy's); without it such a configuration stops the start with `ConfigError`."""
        self.config = config
        self._host = host
        self._grpc_port = grpc_port
        self.store: MessageStore
        self.server: PlaneServer | None = None
        """None until `start` has bound the listening port."""
        self.vip_server: PlaneServer | None = None
        self._outgoing_ssl: ssl.SSLContext | None = None
        """RocketMQ's "VIP channel" on listenPort - 2, the port a Java slave syncs metadata through."""
        self._tasks: list[asyncio.Task[None]] = []
        self.registration = NameServerRegistration(self, self.outgoing_ssl)
        self._registry: Dispatcher | None = None
        self._offsets_persisting: asyncio.Future[None] | None = None
        self._started = False
        # What `start` started, each stop declared where its service starts; `stop` runs them in
        # reverse: the services (with `_services`), then the ports, then the storage.
        self._services: list[tuple[str, Step]] = []
        self._storage: list[tuple[str, Step]] = []
        self.acl: PlainAcl | None = None
        """The plain ACL when aclEnable=true."""
        self.auth: Auth | None = None
        """ACL 2.0 when authenticationEnabled=true (its users and ACLs: `auth.metadata`)."""
        self.planes = DataPlanes(self, self._planes)
        """What the data planes may serve, kept told (ferromq.broker.dataplane)."""
        self.acl_watcher: AclFileWatcher | None = None
        self.metrics: MetricsExporter | None = None
        self.grpc: GrpcPort | None = None
        """The RocketMQ 5.x clients' gRPC port, when `grpc_server_port` is set."""
        self.controller: ControllerLink | None = None
        """Controller mode (enableControllerMode): the link that decides this broker's role."""
        """The /metrics endpoint when metricsExporterType=PROM."""
        self.tiering: TieringService | TieringProcess | None = None
        self.tiered: TieredService | None = None
        """Table topics (tableTopics): appends chosen topics to Delta tables."""
        # GET_BROKER_CONFIG's dataVersion: bumped by each UPDATE_BROKER_CONFIG.
        self.config_version = 0
        self.config_timestamp = int(time.time() * 1000)

    @property
    def sync_flush(self) -> bool:
        return self.config.flush_disk_type == FlushDiskType.SYNC_FLUSH

    @property
    def sender(self) -> _store.Sender:
        """The send rules for the broker's settings now (shared with the data planes)."""
        return self.planes.sender()

    @property
    def port(self) -> int:
        return self.config.listen_port

    async def start(self) -> None:
        """Binds the port, opens the store and starts the services. If a step fails, what the
        earlier steps started is stopped again before the error propagates: a bind error
        (`OSError`) leaves `server` None; a store that does not fit the configuration raises
        `StoreMismatchError`, an unusable store directory `StoreIOError`, a store in use
        `StoreLockedError`."""
        if self.config.grpc_server_port is not None and self._grpc_port is None:
            raise ConfigError(
                "grpcServerPort is set but this broker was built without a gRPC port: "
                "build it with ferromq.app.make_broker"
            )
        server = self._server_on(self.config.listen_port)
        await server.start()
        self.server = server
        try:
            await self._start_vip_channel()
            await self._start_after_bind(server)
        except BaseException:
            await self.stop()
            raise

    async def _start_vip_channel(self) -> None:
        """Java brokers also serve on listenPort - 2 and Java brokers ask each other there
        (SlaveSynchronize): served when listenPort is set, skipped with a warning if taken."""
        port = self.config.listen_port - 2
        if port <= 0:
            return
        vip = self._server_on(port)
        try:
            await vip.start()
        except OSError as e:
            logger.warning("the VIP channel (listenPort - 2 = %d) is not served: %s", port, e)
            return
        self.vip_server = vip

    def _server_on(self, port: int) -> PlaneServer:
        """The data plane: the broker's one server (TLS included). With dataPlane=python it
        serves nothing itself: every request is Python's."""
        cfg = self.config
        plane = PlaneServer(
            self._dispatch,
            self._host,
            port,
            limits=server_limits(cfg),
            tls=cfg.tls_settings(),
            threads=cfg.server_io_threads,
            rpc_buckets_ms=RPC_LATENCY_BUCKETS_MS,
        )
        self.planes.attach(plane)
        return plane

    def _planes(self) -> list[PlaneServer]:
        return [s for s in (self.server, self.vip_server) if s is not None]

    def update_data_plane(self) -> None:
        """Tells the data planes what they may serve themselves (a configuration change)."""
        self.planes.update()

    def sync_plane_stats(self) -> None:
        """Adds what the data planes counted to the broker's statistics."""
        self.planes.sync_stats()

    @property
    def started_serving(self) -> bool:
        """The services are up and requests reach their processors."""
        return self._registry is not None

    async def _start_after_bind(self, server: PlaneServer) -> None:
        if self.config.listen_port == 0:
            # Any free port for the HA service too, unless haListenPort says which.
            ha_port = 0 if self.config.ha_listen_port is None else self.config.ha_listen_port
            self.config = self.config.replace(listen_port=server.port, ha_listen_port=ha_port)
        cfg = self.config
        root = Path(cfg.store_path_root_dir)
        loop = asyncio.get_running_loop()
        guard: Guard | None = None
        if cfg.acl_enable:
            guard = await self._start_acl()
        elif cfg.authentication_enabled:
            guard = self._start_auth(root / "config")
        else:
            logger.info("access control: none (aclEnable and authenticationEnabled are off)")
        _prepare_store_dirs(root, Path(cfg.store_path_commit_log) if cfg.store_path_commit_log else None)
        check_store_sizes(cfg)
        # Opening may run crash recovery: keep the loop free meanwhile.
        self.store = await loop.run_in_executor(None, MessageStore, cfg.store_config())
        self._storage.append(("store", self._close_store))
        # Before any service that stores messages: each append wakes the streams to slaves.
        self.replication = ReplicationService(self, self._host)
        conf_dir = root / "config"
        self.topics = TopicConfigManager(cfg, conf_dir / "topics.json")
        self.topics.persist()
        self.groups = SubscriptionGroupManager(
            conf_dir / "subscriptionGroup.json", cfg.auto_create_subscription_group
        )
        self.offsets = ConsumerOffsetManager(conf_dir / "consumerOffset.json")
        self.request_modes = RequestModeManager(conf_dir / "messageRequestMode.json")
        self._storage.append(("configs", self._persist_configs))
        self.clients = ClientManager(self._consumers_changed)
        self.locks = RebalanceLockManager()
        self.stats = BrokerStats(cfg.broker_cluster_name, cfg.stats_log_interval_seconds)
        await self._start_service("statistics", self.stats.start, self._stop_stats)
        interval = 5.0 if cfg.long_polling_enable else cfg.short_polling_time_mills / 1000.0
        self.hold = PullRequestHoldService(self.store.max_offset, interval)
        await self._start_service("held pulls", self.hold.start, self.hold.stop)
        self.schedule = ScheduleMessageService(
            self.store,
            cfg.message_delay_level,
            conf_dir / "delayOffset.json",
            cfg.flush_delay_offset_interval / 1000.0,
            self._delivered,
        )
        self.timer: TimerMessageService | None = None
        if cfg.timer_wheel_enable:
            self.timer = TimerMessageService(
                self.store,
                self.store.config.timer_precision_ms,
                cfg.timer_flush_interval_ms,
                self._delivered,
                is_master=lambda: not self.config.is_slave,
                stop_enqueue=lambda: self.config.timer_stop_enqueue,
                stop_dequeue=lambda: self.config.timer_stop_dequeue,
            )
            self._services.append(("timer messages", self.timer.stop))
            # On masters and slaves alike (a slave's only builds its wheel; see broker/timer.py).
            await self.timer.start()
        self.pop = PopService(self, ConsumerOrderInfoManager(conf_dir / "consumerOrderInfo.json"))
        await self._start_service("pop revive", self.pop.start, self.pop.stop)
        self.lite_consumers = LiteConsumers(self)
        await self._start_service("lite consumers", self.lite_consumers.start, self.lite_consumers.stop)
        self.transactions = TransactionalMessageService(
            self.store, self.offsets, self.topics, self.clients, cfg, self.message_arrived
        )
        # Started here on a master, by role changes in controller mode; stopping is idempotent.
        self._services.append(("delayed delivery", self.schedule.stop))
        self._services.append(("transaction checks", self.transactions.stop))
        self._services.append(("replication", self.replication.stop))
        # A slave writes nothing of its own: delayed delivery and transaction checks run on the master.
        if cfg.enable_controller_mode:
            # The controllers decide the role (and start the master's services).
            self.roles = BrokerRoles(self)
            self.controller = ControllerLink(self)
            await self._start_service("controller link", self.controller.start, self.controller.stop)
            cfg = self.config
        else:
            if not cfg.is_slave:
                await self.schedule.start()
                await self.transactions.start()
            await self.replication.start()
        if self.replication.ha_port not in (None, cfg.ha_port):
            self.config = cfg = cfg.replace(ha_listen_port=self.replication.ha_port)
        self._registry = Dispatcher(
            {**build_registry(self), **(self.controller.handlers() if self.controller else {})},
            f"broker {cfg.broker_name}",
            immediate={
                **send.immediate_handlers(self),
                **pull.immediate_handlers(self),
                **pop.immediate_handlers(self),
            },
            guard=guard,
            on_reply=self.stats.rpc_done,
        )
        if cfg.metrics_exporter_type == "PROM":
            metrics = MetricsExporter(self, cfg.metrics_prom_exporter_host, cfg.metrics_prom_exporter_port)
            self.metrics = metrics
            await self._start_service("metrics", metrics.start, metrics.stop)
            if self.auth is not None:
                metrics.registry.register(AuthCollector(self.auth, self))
        await self._start_tiering()
        await self._start_tiered_store()
        self._tasks = [
            loop.create_task(self._persist_offsets_loop(), name="persist-offsets"),
            loop.create_task(self._housekeeping_loop(), name="client-housekeeping"),
            loop.create_task(self._lite_ttl_loop(), name="lite-ttl"),
        ]
        self._services.append(("background tasks", self._stop_tasks))
        self.planes.start()
        if cfg.grpc_server_port is not None and self._grpc_port is not None:
            grpc_server = self._grpc_port(self, self._host, cfg.grpc_server_port)
            self.grpc = grpc_server
            await self._start_service("gRPC port", grpc_server.start, grpc_server.stop)
            if self.metrics is not None:
                self.metrics.registry.register(GrpcFrontCollector(lambda: grpc_server.front, self))
        self.topics.on_created = self.registration_changed
        self.registration.start()
        self._services.append(("name server registration", self.registration.stop))
        logger.info(
            "broker %s (cluster %s) listening on %s:%d, store %s (profile %s)",
            cfg.broker_name,
            cfg.broker_cluster_name,
            self._host,
            cfg.listen_port,
            cfg.store_path_root_dir,
            cfg.profile,
        )
        self._started = True

    async def _start_acl(self) -> AclGuard:
        """Loads the ACL files (an unusable file stops the start with `AclError`) and watches them."""
        cfg = self.config
        acl = plain_acl_of(cfg)
        acl.load()
        self.acl = acl
        acl.on_change(self.planes.acl_changed)
        watcher = AclFileWatcher(acl)
        self.acl_watcher = watcher
        await self._start_service("ACL file watcher", watcher.start, watcher.stop)
        logger.info("access control: the plain ACL of 4.x (aclEnable=true), %s", acl.default_file)
        return AclGuard(acl)

    def _start_auth(self, conf_dir: Path) -> AuthGuard:
        """ACL 2.0: the users and ACLs under the store root (an unreadable file stops the start),
        the users broker.conf names, the plain ACL's accounts imported when asked."""
        cfg = self.config
        values = cfg.auth_values()
        metadata = AuthMetadata(conf_dir)
        try:
            metadata.load()
        except AuthMetadataError as e:
            raise ConfigError(str(e)) from None
        auth_setup.create_start_users(metadata, values)
        if cfg.migrate_auth_from_v1_enabled:
            plain = plain_acl_of(cfg)
            done = auth_setup.migrate_plain_acl(metadata, plain)
            logger.info("ACL 2.0: %d accounts of %s imported", done, plain.default_file)
        auth = Auth(auth_setup.settings_of(values, cfg.broker_cluster_name), metadata)
        self.auth = auth
        metadata.on_change(self.planes.acl_changed)
        logger.info(
            "access control: ACL 2.0 (authentication on, authorization %s), %d users and %d ACLs in %s",
            "on" if cfg.authorization_enabled else "off",
            len(metadata.users),
            len(metadata.acls),
            conf_dir,
        )
        if not metadata.users:
            logger.warning(
                "ACL 2.0 is on and there is no user: every request is refused; set "
                'initAuthenticationUser={"username":"...","password":"..."} in broker.conf'
            )
        return AuthGuard(auth)

    async def _start_tiering(self) -> None:
        """Table topics, when tableTopics names any, outside controller mode: on the master, or on
        its slaves with tableTopicRole=SLAVE (they hold the same messages)."""
        cfg = self.config
        if not cfg.table_topics.strip():
            return
        if cfg.enable_controller_mode:
            logger.warning("tableTopics is set but table topics do not run in controller mode")
            return
        if cfg.is_slave != (cfg.table_topic_role == "SLAVE"):
            where = cfg.table_topic_role.lower()
            logger.info("table topics: tiered by the %s (tableTopicRole), not here", where)
            return
        # deltalake and pyarrow only where tables are written.
        from ferromq.tables.process import TieringProcess
        from ferromq.tables.tiering import TieringService

        tiering: TieringService | TieringProcess
        if cfg.table_topic_process:
            store = self.store.config
            view = {
                "root": store.root,
                "commitlog_dir": store.commitlog_dir,
                "mapped_file_size_commitlog": store.mapped_file_size_commitlog,
                "mapped_file_size_consume_queue": store.mapped_file_size_consume_queue,
            }
            tiering = TieringProcess.of(self.store.raw, cfg, cfg.store_path_root_dir, view)
        else:
            tiering = TieringService.of(self.store.raw, cfg, cfg.store_path_root_dir)
        self.tiering = tiering
        await self._start_service("table topics", tiering.start, tiering.stop)
        if self.metrics is not None:
            self.metrics.registry.register(TieringCollector(tiering, self))

    async def _start_tiered_store(self) -> None:
        """Tiered storage (tieredStorageLevel), on a master outside controller mode."""
        cfg = self.config
        if not cfg.tiered_enabled:
            return
        if cfg.enable_controller_mode or cfg.is_slave:
            logger.warning(
                "tieredStorageLevel is set but tiered storage runs only on a master outside controller mode"
            )
            return
        # pyarrow's file systems only where a broker tiers.
        from ferromq.tiered.service import TieredService

        tiered = TieredService(self.store, cfg, cfg.broker_cluster_name, cfg.broker_name)
        self.tiered = tiered
        await self._start_service("tiered storage", tiered.start, tiered.stop)
        if self.metrics is not None:
            self.metrics.registry.register(TieredStoreCollector(tiered, self))

    async def _start_service(self, name: str, start: Step, stop: Step) -> None:
        """Starts a service; `stop` stops it again when the broker stops (or a later step of
        `start` fails)."""
        await start()
        self._services.append((name, stop))

    async def _stop_stats(self) -> None:
        self.sync_plane_stats()
        await self.stats.stop()

    async def _stop_tasks(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._offsets_persisting is not None:
            await asyncio.gather(self._offsets_persisting, return_exceptions=True)

    async def _persist_configs(self) -> None:
        self.offsets.persist(force=True)
        self.pop.orders.persist()
        self.topics.persist()
        self.groups.persist()

    async def _close_store(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.store.close)

    def _dispatch(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand | None] | None:
        registry = self._registry
        if registry is None:
            return cmd.reply(ResponseCode.SYSTEM_BUSY, "the broker is starting")
        return registry(conn, cmd)

    async def stop(self) -> None:
        """Clean shutdown: unregister, stop services, persist offsets and configs, close the store.
        Undoes only what `start` did (all of it, or the steps before one failed); idempotent."""
        if self.server is None:
            return
        # Every request through Python from here: the store and the HA service close below.
        self.planes.stop_serving()
        while self._services:
            name, stop = self._services.pop()
            await _logged(name, stop)
        # The ports after the services that answer requests, before the configs are saved and
        # the store is closed.
        if self.vip_server is not None:
            await self.vip_server.stop()
            self.vip_server = None
        await self.server.stop()
        while self._storage:
            name, close = self._storage.pop()
            await _logged(name, close)
        if self._started:
            self._started = False
            logger.info("broker %s stopped", self.config.broker_name)

    # -- events --------------------------------------------------------------------------------

    def tags_code_of(self, props: dict[str, str]) -> int:
        return int(_store.tags_code(props.get("TAGS")))

    def message_arrived(self, topic: str, queue_id: int, next_offset: int, tags_code: int | None) -> None:
        """A message is in the store (and on disk, in SYNC_FLUSH): wake who waits for it."""
        self.replication.notify_appended()
        if topic == SCHEDULE_TOPIC:
            self.schedule.wake(queue_id + 1)
            return
        if topic == TIMER_TOPIC:
            if self.timer is not None:
                self.timer.arrived()
            return
        self._wake_pulls(topic, queue_id, next_offset, tags_code)

    def _delivered(self, topic: str, queue_id: int, next_offset: int, tags_code: int | None) -> None:
        self.replication.notify_appended()
        self._wake_pulls(topic, queue_id, next_offset, tags_code)

    def _wake_pulls(self, topic: str, queue_id: int, next_offset: int, tags_code: int | None) -> None:
        """Pulls held here and on the data planes, and a lite topic's consumers."""
        self.hold.notify(topic, queue_id, next_offset, tags_code)
        self.planes.notify_arrival(topic, queue_id, next_offset, tags_code)
        self.lite_consumers.arrived(topic)

    @property
    def registration_refusals(self) -> dict[str, str]:
        """Name servers that refused this broker's last registration, and why."""
        return self.registration.refusals

    @property
    def held_pulls(self) -> int:
        """Pulls waiting for messages, here and on the data planes."""
        return self.hold.held_count + self.planes.held_pulls

    def _consumers_changed(self, group: str, info: ConsumerGroupInfo) -> None:
        self.notify_consumers(group)

    def notify_consumers(self, group: str, client_ids: Collection[str] | None = None) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED (a client rebalances on it) to the group's consumers, or to
        those of `client_ids` still in it, unless the broker or the group turned it off."""
        if not self.config.notify_consumer_ids_changed_enable:
            return
        cfg = self.groups.groups.get(group)
        info = self.clients.consumers.get(group)
        if info is None or (cfg is not None and not cfg.notify_consumer_ids_changed_enable):
            return
        for client_id, ch in list(info.channels.items()):
            if client_ids is not None and client_id not in client_ids:
                continue
            ext = NotifyConsumerIdsChangedRequestHeader(consumer_group=group).to_ext()
            cmd = RemotingCommand(code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext=ext)
            task = asyncio.get_running_loop().create_task(ch.conn.oneway(cmd))
            self._tasks.append(task)
            task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)

    def update_config(self, text: str) -> list[str]:
        """Applies an UPDATE_BROKER_CONFIG body (only keys the broker reads at run time; see
        `runtime_changes`); the fields changed. Raises `ConfigError` and changes nothing on a problem."""
        changes = runtime_changes(text)
        updated = self.config.replace(**changes)
        updated.validate()
        changed = [n for n, v in changes.items() if getattr(self.config, n) != v]
        self.config = updated
        self.config_version += 1
        self.config_timestamp = int(time.time() * 1000)
        if "broker_permission" in changed:
            self.registration_changed()
        self.update_data_plane()
        return changed

    def registration_changed(self) -> None:
        """Topics changed: register with the name servers right away."""
        self.registration.changed()

    async def register_all(self) -> None:
        await self.registration.register_all()

    # -- background services -------------------------------------------------------------------

    async def _persist_offsets_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.flush_consumer_offset_interval / 1000.0)
            # On a thread: its fsync takes milliseconds (tens under SYNC_FLUSH load), which on the
            # event loop would hold every request meanwhile. `stop` waits for it.
            self._offsets_persisting = loop.run_in_executor(None, self._persist_offsets)
            try:
                await asyncio.shield(self._offsets_persisting)
            except OSError:
                logger.exception("persisting consumer offsets failed")

    def _persist_offsets(self) -> None:
        self.offsets.persist()
        self.pop.orders.persist()

    async def _lite_ttl_loop(self) -> None:
        """Deletes expired lite topics (broker/lite.py), once the broker has run minLiteTTl."""
        started = time.monotonic()
        while True:
            await asyncio.sleep(self.config.lite_ttl_check_interval / 1000.0)
            cfg = self.config
            if not cfg.enable_lmq or cfg.is_slave or time.monotonic() - started < cfg.min_lite_ttl / 1000.0:
                continue
            try:
                now_ms = int(time.time() * 1000)
                # Off the event loop: a million lite topics take the store a second or two to look at.
                deleted = await asyncio.to_thread(
                    lite.expire, self.store, self.topics, self.offsets, now_ms, cfg.min_lite_ttl
                )
                for name in deleted:
                    self.lite_consumers.clean_queue(name)
            except FerroMQError:
                logger.exception("lite topics: expiration check failed")

    async def _housekeeping_loop(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL)
            now = time.monotonic()
            self.clients.expire(now, self.config.channel_expired_timeout / 1000.0)
            # Queues whose owner died holding them: those refused them take them now, not at
            # their next periodic rebalance.
            for group, waiters in self.locks.take_expired_waiters(now):
                self.notify_consumers(group, waiters)

    def outgoing_ssl(self) -> ssl.SSLContext | None:
        """tls.enable: the broker's own connections (to name servers, a slave's to its master) use
        TLS, as Java's BrokerOuterAPI does, with the tls.client.* settings."""
        if not self.config.tls_enable:
            return None
        if self._outgoing_ssl is None:
            self._outgoing_ssl = self.config.tls_settings().outgoing_context()
        return self._outgoing_ssl


def plain_acl_of(cfg: BrokerConfig) -> PlainAcl:
    """The ACL files of this configuration (rocketmqHome, else ROCKETMQ_HOME; aclPlainFile), not
    loaded yet."""
    return PlainAcl.locate(cfg.rocketmq_home or os.environ.get("ROCKETMQ_HOME"), cfg.acl_plain_file)


def server_limits(cfg: BrokerConfig) -> ServerLimits:
    """The remoting bounds a broker.conf sets (also used for the name server of `serve`)."""
    return ServerLimits(
        idle_timeout=cfg.server_channel_max_idle_time_seconds or None,
        read_timeout=cfg.server_read_timeout_seconds or None,
        max_connections=cfg.server_max_connections,
        max_connections_per_address=cfg.server_max_connections_per_address,
        request_buffer_bytes=cfg.server_request_buffer_bytes,
        reply_buffer_bytes=cfg.server_reply_buffer_bytes,
        total_reply_buffer_bytes=cfg.server_total_reply_buffer_bytes,
        max_inflight_requests=cfg.server_max_inflight_requests,
    )


def _prepare_store_dirs(*dirs: Path | None) -> None:
    """Creates the store directories, or raises `StoreIOError` saying why they cannot be used."""
    for d in dirs:
        if d is None:
            continue
        if d.exists() and not d.is_dir():
            raise StoreIOError(f"store directory {d} is a file, not a directory")
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreIOError(f"cannot create store directory {d}: {e.strerror}") from e
        if not os.access(d, os.W_OK | os.X_OK):
            raise StoreIOError(f"store directory {d} is not writable")


async def _logged(name: str, step: Step) -> None:
    """One step of a stop: a failure is logged and the next step still runs."""
    try:
        await step()
    except Exception:
        logger.exception("stopping the %s failed", name)
