"""Master-slave replication, as RocketMQ 4.x brokers do it.

The CommitLog bytes travel on the HA port, in Rust (`_store.HaMaster` / `_store.HaSlave`); this
module decides roles and addresses: a master listens on `haListenPort`; a slave follows the
master's HA address (`haMasterAddress`, or the name server's REGISTER_BROKER reply) and, every
10 s as RocketMQ 4.9.7's `SlaveSynchronize` does (and, unlike it, as soon as it reaches a master),
copies topics, consumer offsets, delay offsets and subscription groups from the master through the
ordinary request port. Topics it replicated messages of before their configuration came are
configured from its consume queues: a slave serves every message it holds, also when the master
died before the next copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any, Protocol

from ferromq import _store
from ferromq.auth.setup import inner_credentials
from ferromq.broker.state import BrokerState
from ferromq.broker.subscriptions import SubscriptionGroupConfig
from ferromq.broker.timer import follow_checkpoint
from ferromq.broker.topics import TopicConfig
from ferromq.errors import FerroMQError
from ferromq.jsonutil import loads_lenient
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import Connection, open_connection

if TYPE_CHECKING:
    import ssl

    from ferromq.broker.schedule import ScheduleMessageService
    from ferromq.store import MessageStore

logger = logging.getLogger(__name__)


class ReplicationContext(BrokerState, Protocol):
    """The HA service (broker/replication.py): a master's streams, a slave's copy of its master's
    metadata (topics, groups, offsets, delay offsets)."""

    @property
    def schedule(self) -> ScheduleMessageService: ...
    def outgoing_ssl(self) -> ssl.SSLContext | None: ...
    def registration_changed(self) -> None: ...


# SlaveSynchronize runs 3 s after start, then every 10 s (BrokerController.handleSlaveSynchronize).
SYNC_FIRST_DELAY = 3.0
SYNC_INTERVAL = 10.0
SYNC_TIMEOUT = 3.0
# How often a slave looks for a new HA connection and for replicated topics it has no configuration for.
CHECK_INTERVAL = 1.0


class ReplicationService:
    """The broker's side of replication: the HA port of a master, or a slave's link to its master
    and its metadata synchronisation. `start`/`stop` like every broker service."""

    def __init__(self, broker: ReplicationContext, host: str) -> None:
        self._broker = broker
        self._host = host
        self.master: _store.HaMaster | None = None
        self.slave: _store.HaSlave | None = None
        self.master_addr: str | None = None
        """A slave's master (request port), from the name server's reply."""
        self._follow_namesrv = False
        self._sync_now = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: Connection | None = None
        self.syncs = 0
        self._known: dict[str, int] | None = None
        """Messages per topic when the master last listed its topics (None: it never did)."""
        self.ack_alone = False
        """Controller mode: the master is its SyncStateSet's only member; it acknowledges alone."""

    @property
    def ha_port(self) -> int | None:
        return self.master.port if self.master is not None else None

    async def start(self) -> None:
        cfg = self._broker.config
        raw = self._broker.store.raw
        if cfg.is_slave:
            # In controller mode the controllers name the master, not the name server.
            self._follow_namesrv = not cfg.ha_master_address and not cfg.enable_controller_mode
            self.slave = _store.HaSlave(
                raw,
                cfg.ha_master_address,
                heartbeat_interval_ms=cfg.ha_send_heartbeat_interval,
                housekeeping_interval_ms=cfg.ha_housekeeping_interval,
            )
            self._task = asyncio.get_running_loop().create_task(self._sync_loop(), name="slave-sync")
            self._task.add_done_callback(_log_death)
            return
        loop = asyncio.get_running_loop()

        def listen(port: int) -> _store.HaMaster:
            return _store.HaMaster(
                raw,
                f"{self._host}:{port}",
                heartbeat_interval_ms=cfg.ha_send_heartbeat_interval,
                housekeeping_interval_ms=cfg.ha_housekeeping_interval,
                transfer_batch_size=cfg.ha_transfer_batch_size,
                slave_fallbehind_max=cfg.ha_slave_fallbehind_max,
            )

        try:
            self.master = await loop.run_in_executor(None, listen, cfg.ha_port)
        except OSError as e:
            if cfg.ha_listen_port is not None:
                raise
            # listenPort + 1 was only a default: take any port; the name server tells slaves.
            self.master = await loop.run_in_executor(None, listen, 0)
            logger.warning(
                "%s; slaves find this master's HA port %d through the name server (or set haListenPort)",
                e,
                self.master.port,
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        loop = asyncio.get_running_loop()
        # A controller-mode master stepping down keeps its readers bound to what its replicas
        # acknowledged: what lies beyond may be cut when it follows the new master, and a consumer
        # that read it would skip what the new master stores at those offsets (Java never shows
        # it: its reput stops at the confirm offset). `release_reads` lifts the bound once the
        # CommitLog is the new master's.
        keep_bound = self.reads_wait_for_replicas
        # Set to None first: a controller-mode broker starts again in another role.
        slave, master, self.slave, self.master = self.slave, self.master, None, None
        self.ack_alone = False
        if not keep_bound:
            self.confirm_reads()
        if slave is not None:
            await loop.run_in_executor(None, slave.close)
        if master is not None:
            await loop.run_in_executor(None, master.close)

    # -- master ------------------------------------------------------------------------------------

    @property
    def reads_wait_for_replicas(self) -> bool:
        """Controller mode, on a master whose SyncStateSet holds replicas: consumers read only what
        the replicas acknowledged (RocketMQ's confirm offset), so none reads a message a failover
        to a replica would not have, and skips what the new master stores at those offsets.
        Anywhere else, readers see everything stored (on disk, in SYNC_FLUSH)."""
        return self.master is not None and self._broker.config.enable_controller_mode and not self.ack_alone

    def confirm_reads(self) -> None:
        """Bounds the store's readers as `reads_wait_for_replicas` says."""
        self._broker.store.confirm_reads_by(self.master if self.reads_wait_for_replicas else None)

    def release_reads(self) -> None:
        """Readers see the whole CommitLog again (a replica whose log now matches its master's)."""
        self._broker.store.confirm_reads_by(None)

    def notify_appended(self) -> None:
        """New CommitLog data: wake the streams to slaves."""
        if self.master is not None:
            self.master.notify_appended()

    def slave_ok(self, end_offset: int) -> bool:
        """RocketMQ's `isSlaveOK`: a slave is connected and within haSlaveFallbehindMax."""
        return self.master is not None and (self.ack_alone or self.master.is_slave_ok(end_offset))

    def replicated(self, offset: int) -> asyncio.Future[bool]:
        """Completes True once a slave reported `offset`, False after slaveTimeout."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        if self.master is None or self.ack_alone:
            fut.set_result(self.master is not None)
            return fut

        def done(ok: bool) -> None:
            loop.call_soon_threadsafe(_resolve, fut, ok)

        self.master.on_replicated(offset, done, self._broker.config.slave_timeout)
        return fut

    # -- slave -------------------------------------------------------------------------------------

    def registered(self, reply_ext: dict[str, str]) -> None:
        """A name server's REGISTER_BROKER reply: a slave learns its master's addresses there."""
        if self.slave is None:
            return
        ha_addr = reply_ext.get("haServerAddr")
        if self._follow_namesrv and ha_addr:
            self.slave.update_master_address(ha_addr)
        master = reply_ext.get("masterAddr") or None
        if master != self.master_addr:
            logger.info("slave %s: master is %s", self._broker.config.broker_addr, master or "unknown")
            self.master_addr = master
            self._sync_now.set()

    def sync_soon(self) -> None:
        """Copy the master's metadata now rather than at the next 10 s tick (controller mode keeps
        replicas fresher: one of them may be master any moment)."""
        self._sync_now.set()

    def status(self) -> dict[str, Any]:
        if self.slave is not None:
            addr, connected, reported, error = self.slave.status()
            return {
                "role": "SLAVE",
                "masterHaAddr": addr,
                "connected": connected,
                "reportedOffset": reported,
                "error": error,
            }
        assert self.master is not None
        return {
            "role": "MASTER",
            "haPort": self.master.port,
            "slaves": self.master.connections,
            "ackedOffset": self.master.acked_offset,
        }

    async def _sync_loop(self) -> None:
        """Copies the master's metadata when the HA connection to a master comes up, when asked, and
        every SYNC_INTERVAL; between copies, configures the topics of newer replicated messages."""
        loop = asyncio.get_running_loop()
        due = loop.time() + SYNC_FIRST_DELAY
        was_connected = tried = False
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CHECK_INTERVAL):
                    await self._sync_now.wait()
            connected = self.slave is not None and self.slave.status()[1]
            reached = connected and not was_connected
            was_connected = connected
            if connected and self.master_addr is None and (reached or loop.time() >= due):
                # Connected through haMasterAddress: the name server's reply names the master's
                # request port, which the copy needs; ask for it now rather than in 30 s.
                self._broker.registration_changed()
            if self._sync_now.is_set() or reached or loop.time() >= due:
                self._sync_now.clear()
                due = loop.time() + SYNC_INTERVAL
                await self.sync_all()
                tried = True
            if tried:
                # Messages newer than the master's last list of topics, whose topic may be new (the
                # master may have died before the next copy). A topic the master deleted has none.
                configure_replicated_topics(self._broker, self._known)

    async def sync_all(self) -> None:
        """RocketMQ's `SlaveSynchronize.syncAll`: each part on its own, a failure logged."""
        master = self.master_addr
        if master is None or master == self._broker.config.broker_addr:
            return
        for part, step in (
            ("topic config", self._sync_topics),
            ("consumer offsets", self._sync_offsets),
            ("delay offsets", self._sync_delay_offsets),
            ("timer checkpoint", self._sync_timer_checkpoint),
            ("subscription groups", self._sync_groups),
        ):
            try:
                await step(master)
            except (OSError, TimeoutError, FerroMQError, ValueError, TypeError, KeyError) as e:
                logger.warning("slave: syncing %s from master %s failed: %s", part, master, e)
        self.syncs += 1

    async def _ask(self, master: str, code: RequestCode) -> bytes:
        conn = self._conn
        if conn is None or conn.closed or conn.peer != master:
            if conn is not None:
                await conn.close()
            host, _, port = master.rpartition(":")
            ssl = self._broker.outgoing_ssl()
            conn = self._conn = await open_connection(host, int(port), timeout=SYNC_TIMEOUT, ssl=ssl)
        request = RemotingCommand(code=code)
        # A master with ACL 2.0 on takes only signed requests: a slave signs as Java's does, with
        # innerClientAuthenticationCredentials (a Super user both brokers create at start).
        credentials = inner_credentials(self._broker.config.inner_client_authentication_credentials)
        if credentials is not None:
            credentials.apply(request.ext, request.body)
        reply = await conn.request(request, SYNC_TIMEOUT)
        if reply.code != ResponseCode.SUCCESS:
            raise FerroMQError(f"{code.name} answered {reply.code}: {reply.remark}")
        return reply.body or b""

    async def _sync_topics(self, master: str) -> None:
        # Messages stored here before the master's answer are the master's, with their topics
        # configured there (unless deleted since).
        known = _stored(self._broker.store)[1]
        data = _object(await self._ask(master, RequestCode.GET_ALL_TOPIC_CONFIG))
        topics = self._broker.topics
        version = _version(data.get("dataVersion"))
        if version != topics.data_version:
            table = {
                str(n): TopicConfig.from_json(t) for n, t in (data.get("topicConfigTable") or {}).items()
            }
            topics.replace_all(table, version)
            topics.persist()
            logger.info("slave: topic config updated from master %s (%d topics)", master, len(table))
        self._known = known

    async def _sync_offsets(self, master: str) -> None:
        data = _object(await self._ask(master, RequestCode.GET_ALL_CONSUMER_OFFSET))
        offsets = self._broker.offsets
        for key, queues in (data.get("offsetTable") or {}).items():
            if isinstance(queues, dict):
                offsets.put_all(str(key), {int(q): int(o) for q, o in queues.items()})
        offsets.persist(force=True)

    async def _sync_delay_offsets(self, master: str) -> None:
        body = await self._ask(master, RequestCode.GET_ALL_DELAY_OFFSET)
        if not body.strip():
            return
        data = _object(body)
        self._broker.schedule.replace_offsets(
            {int(k): int(v) for k, v in (data.get("offsetTable") or {}).items()}
        )

    async def _sync_timer_checkpoint(self, master: str) -> None:
        if self._broker.config.timer_wheel_enable:
            follow_checkpoint(self._broker.store, await self._ask(master, RequestCode.GET_TIMER_CHECK_POINT))

    async def _sync_groups(self, master: str) -> None:
        data = _object(await self._ask(master, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        groups = self._broker.groups
        version = _version(data.get("dataVersion"))
        if version == groups.data_version:
            return
        table = {
            str(n): SubscriptionGroupConfig.from_json(g)
            for n, g in (data.get("subscriptionGroupTable") or {}).items()
        }
        groups.replace_all(table, version)
        logger.info("slave: subscription groups updated from master %s (%d groups)", master, len(table))


def configure_replicated_topics(broker: ReplicationContext, known: dict[str, int] | None = None) -> list[str]:
    """Configures the topics whose messages this broker replicated but whose configuration it has not
    copied from the master yet, with as many queues as were stored (at least defaultTopicQueueNums), so
    that pulls, consumer offsets and route registrations work for them; the names configured. With
    `known` (messages per topic at some point) only topics with messages since then."""
    queues, messages = _stored(broker.store)
    if known is not None:
        queues = {t: n for t, n in queues.items() if messages[t] > known.get(t, 0)}
    added = broker.topics.configure_missing(queues, broker.config.default_topic_queue_nums)
    if added:
        logger.info("topics configured from the replicated queues: %s", ", ".join(added))
        broker.registration_changed()
    return added


def _stored(store: MessageStore) -> tuple[dict[str, int], dict[str, int]]:
    """Per topic of the store: its number of queues, and of messages ever stored (the queues' ends)."""
    queues: dict[str, int] = {}
    messages: dict[str, int] = {}
    for topic, queue_id, _, max_offset in store.queues():
        queues[topic] = max(queues.get(topic, 0), queue_id + 1)
        messages[topic] = messages.get(topic, 0) + max_offset
    return queues, messages


def _object(body: bytes) -> dict[str, Any]:
    data = loads_lenient(body)
    if not isinstance(data, dict):
        raise ValueError("the master's answer is not a JSON object")
    return data


def _version(raw: Any) -> dict[str, int]:
    """A DataVersion as ferromq keeps it (the counter and timestamp that make it equal)."""
    raw = raw if isinstance(raw, dict) else {}
    counter = raw.get("counter", 0)
    if isinstance(counter, dict):  # Java's AtomicLong may come as {"value": n} from other writers
        counter = counter.get("value", 0)
    return {"counter": int(counter or 0), "timestamp": int(raw.get("timestamp", 0) or 0)}


def _resolve(fut: asyncio.Future[bool], ok: bool) -> None:
    if not fut.done():
        fut.set_result(ok)


def _log_death(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("slave synchronisation died", exc_info=task.exception())
