"""The broker's side of the Rust data planes: what they may serve, pushed to them whenever the
state it depends on changes (topics, groups, subscriptions, the ACL, the role, the configuration),
and what they did, taken back (statistics, stored messages that wake pulls here). The consumer
offsets are one table the planes and Python share (`ConsumerOffsetManager.shared`).

Python decides; a plane serves only the sends, pulls, pops and acks it was told it may (every
other request, and every request it is unsure of, reaches the broker's dispatcher)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ferromq import _store
from ferromq.acl.dataplane import peer_decision, pull_rules, send_rules
from ferromq.auth import dataplane as auth_plane
from ferromq.broker.state import BrokerState
from ferromq.broker.subscriptions import PRIORITY_FACTOR
from ferromq.broker.topics import NOT_ALLOWED_SEND, PRIORITY_MESSAGE_TYPE, topic_problem
from ferromq.protocol.constants import RETRY_PREFIX, SCHEDULE_TOPIC, TIMER_TOPIC
from ferromq.remoting.connection import Connection
from ferromq.remoting.plane import Arrivals, PlaneServer

if TYPE_CHECKING:
    from ferromq.acl.plain import PlainAcl
    from ferromq.auth.evaluator import Auth
    from ferromq.broker.clients import ClientManager
    from ferromq.broker.lite_consumers import LiteConsumers
    from ferromq.broker.long_polling import PullRequestHoldService
    from ferromq.broker.pop.service import PopService
    from ferromq.broker.replication import ReplicationService
    from ferromq.broker.schedule import ScheduleMessageService
    from ferromq.broker.stats import BrokerStats
    from ferromq.broker.timer import TimerMessageService


class DataPlanesContext(BrokerState, Protocol):
    """What the data planes are told from: the broker's settings, managers and services."""

    @property
    def clients(self) -> ClientManager: ...
    @property
    def hold(self) -> PullRequestHoldService: ...
    @property
    def pop(self) -> PopService: ...
    @property
    def lite_consumers(self) -> LiteConsumers: ...
    @property
    def replication(self) -> ReplicationService: ...
    @property
    def schedule(self) -> ScheduleMessageService: ...
    @property
    def timer(self) -> TimerMessageService | None: ...
    @property
    def stats(self) -> BrokerStats: ...
    @property
    def acl(self) -> PlainAcl | None: ...
    @property
    def auth(self) -> Auth | None: ...
    @property
    def started_serving(self) -> bool: ...
    @property
    def sync_flush(self) -> bool: ...


class DataPlanes:
    """The broker's data planes (its port's and the VIP channel's), kept told."""

    def __init__(self, broker: DataPlanesContext, servers: Callable[[], list[PlaneServer]]) -> None:
        self._broker = broker
        self._servers = servers
        self.acl_generation = 0
        """Counts the ACL's loads: the planes trust only decisions of the latest."""
        self._sender: tuple[tuple[_store.Store, dict[str, Any]], _store.Sender] | None = None
        self._watchers = {"pulls": False, "lite": False}
        """Who waits for arrivals on the planes: held pulls, lite pops."""

    def _planes(self) -> list[_store.DataPlane]:
        return [s.plane for s in self._servers() if s.plane is not None]

    def attach(self, server: PlaneServer) -> None:
        """Callbacks of a plane server the broker made (before it starts)."""
        server.on_arrivals = self.arrivals
        server.on_open = self.opened

    def start(self) -> None:
        """The broker's state is there: keep the planes told from now on."""
        b = self._broker
        if not self._servers():
            return
        b.topics.on_change = self.update
        b.groups.on_change = self.update_pulls
        b.clients.on_subscriptions_changed = self.update_pulls
        b.hold.on_watch = self.watch
        b.lite_consumers.on_watch = self.watch_lite
        b.stats.counted_elsewhere = self.sync_stats
        self.update()
        self.decide_open_peers()  # connections opened while the broker started

    def stop_serving(self) -> None:
        """Every request through Python from here (the broker stops)."""
        for plane in self._planes():
            plane.stop_serving_sends()
            plane.stop_serving_pulls()

    # -- what they may serve -------------------------------------------------------------------

    def update(self) -> None:
        """Tells the planes what they may serve themselves (sends and pulls)."""
        self.update_sends()
        self.update_pulls()

    def _off(self) -> bool:
        """dataPlane=python, a slave, a broker in controller mode (its role may change) or one
        still starting: every request to Python."""
        b = self._broker
        cfg = b.config
        return cfg.data_plane != "rust" or not b.started_serving or cfg.is_slave or cfg.enable_controller_mode

    def sender(self) -> _store.Sender:
        """The send rules (`ferromq_broker::sender`) for the broker's settings now, shared by
        the planes and Python's own sends; made anew when a setting changes (the role, the flush
        mode, the HA service, ...)."""
        b = self._broker
        cfg = b.config
        settings: dict[str, Any] = {
            "ha": b.replication.master,
            "sync_flush": b.sync_flush,
            "sync_master": cfg.broker_role == "SYNC_MASTER",
            "ack_alone": b.replication.ack_alone,
            "slave_timeout_ms": cfg.slave_timeout,
            "cluster": cfg.broker_cluster_name,
            "broker_name": cfg.broker_name,
            "region": str(cfg.region_id),
            "trace_on": cfg.trace_on,
            "reads_wait_for_replicas": b.replication.reads_wait_for_replicas,
        }
        key = (b.store.raw, settings)
        if self._sender is None or self._sender[0] != key:
            self._sender = (key, _store.Sender(b.store.raw, **settings))
        return self._sender[1]

    def update_sends(self) -> None:
        """Plain sends to the writable topics a send may name, on a master that is not in
        controller mode (those decisions stay Python's: every such send comes here). With the
        ACL, only sends the ACL allows (see `ferromq.acl.dataplane`: Python decides, the plane
        checks signatures)."""
        planes = self._planes()
        if not planes:
            return
        b = self._broker
        cfg = b.config
        if self._off() or not cfg.broker_permission & 2:
            for plane in planes:
                plane.stop_serving_sends()
            return
        # The broker's own system topics (its cluster, its name, its reply topic) are Python's:
        # remoting sends to them are served there, and 5.x clients are refused them there.
        reserved = b.topics.reserved
        topics = [
            t
            for t in b.topics.topics.values()
            if t.writable and _may_send(t.topic_name) and t.topic_name not in reserved
        ]
        acl = None
        if b.acl is not None:
            acl = (self.acl_generation, send_rules(b.acl, (t.topic_name for t in topics)))
        elif b.auth is not None:
            rules = auth_plane.send_rules(b.auth, (t.topic_name for t in topics))
            acl = (self.acl_generation, rules)
        sender = self.sender()
        routes = {t.topic_name: t.route for t in topics}
        for plane in planes:
            plane.serve_sends(sender, routes, acl)

    def update_pulls(self) -> None:
        """Pulls from readable topics by existing groups that may consume, with TAG subscriptions
        (given in the pull or registered by heartbeat), on a master without slaveReadEnable; with
        the ACL only those its accounts may make (as for sends); every other pull comes here
        (SQL92, unknown groups and subscriptions, offsets to correct). Pops, acks and changes of
        invisible time by the same rules once the timer wheel is on and the revive topic exists
        (the first pop, here, makes it); orderly and SQL92 pops and pops that wait come here."""
        planes = self._planes()
        if not planes:
            return
        b = self._broker
        cfg = b.config
        readable = cfg.broker_permission & 4
        if self._off() or not readable or cfg.slave_read_enable:
            for plane in planes:
                plane.stop_serving_pulls()
            return
        topics = [(t.topic_name, t.read_queue_nums) for t in b.topics.topics.values() if t.readable]
        groups = [name for name, g in b.groups.groups.items() if g.consume_enable]
        subscriptions = [
            (group, topic, sub.sub_version, None if sub.codes is None else list(sub.codes))
            for group, info in b.clients.consumers.items()
            for topic, sub in info.subscriptions.items()
            if sub.expression_type == "TAG"
        ]
        short_polling = None if cfg.long_polling_enable else cfg.short_polling_time_mills
        pop_service = b.pop
        popper = None
        if cfg.timer_wheel_enable and b.topics.get(pop_service.revive_topic) is not None:
            popper = pop_service.rules
        acl = None
        if b.acl is not None:
            acl = (self.acl_generation, pull_rules(b.acl, (t for t, _ in topics), groups))
        elif b.auth is not None:
            acl = (self.acl_generation, auth_plane.pull_rules(b.auth, (t for t, _ in topics), groups))
        priority_topics = [
            t.topic_name
            for t in b.topics.topics.values()
            if t.readable and t.message_type == PRIORITY_MESSAGE_TYPE
        ]
        priority_factors = [
            (name, g.priority_factor)
            for name, g in b.groups.groups.items()
            if g.priority_factor != PRIORITY_FACTOR.default
        ]
        for plane in planes:
            plane.serve_pulls(
                b.store.raw,
                topics=topics,
                groups=groups,
                subscriptions=subscriptions,
                short_polling_ms=short_polling,
                check_interval_ms=int(b.hold.interval * 1000),
                offsets=b.offsets.shared,
                acl=acl,
                popper=popper,
                priority_topics=priority_topics,
                priority_factors=priority_factors,
            )

    # -- the ACL -------------------------------------------------------------------------------

    def opened(self, plane: _store.DataPlane, conn_id: int, conn: Connection) -> None:
        """With the ACL: tell the plane what the new connection's address decides (until then
        its sends come here)."""
        acl = self._broker.acl
        if acl is not None:
            plane.set_peer_acl(conn_id, self.acl_generation, *peer_decision(acl, conn.peer_host))
        elif self._broker.auth is not None:  # ACL 2.0: no address is white
            plane.set_peer_acl(conn_id, self.acl_generation, False, [])

    def acl_changed(self) -> None:
        """The ACL reloaded: new rules for the planes, and every open connection's address
        decided again (a decision of the older load is not trusted by the plane meanwhile)."""
        self.acl_generation += 1
        self.update()
        self.decide_open_peers()

    def decide_open_peers(self) -> None:
        """Tells the planes what the ACL decides for each open connection's address."""
        for server in self._servers():
            plane = server.plane
            if plane is not None:
                for conn_id, conn in server.plane_connections():
                    self.opened(plane, conn_id, conn)

    # -- what they did -------------------------------------------------------------------------

    def sync_stats(self) -> None:
        """Adds what the planes counted to the broker's statistics."""
        for plane in self._planes():
            self._broker.stats.add_plane(*plane.take_stats())

    def arrivals(self, arrivals: Arrivals) -> None:
        """Messages the planes stored: wake held pulls and delayed delivery."""
        b = self._broker
        if not b.started_serving:
            return
        for topic, queue_id, next_offset, tags_codes in arrivals:
            if topic == SCHEDULE_TOPIC:
                b.schedule.wake(queue_id + 1)
            elif topic == TIMER_TOPIC:
                if b.timer is not None:
                    b.timer.arrived()
            elif tags_codes is None:
                b.hold.notify(topic, queue_id, next_offset, None)
            else:
                for tags_code in tags_codes:
                    b.hold.notify(topic, queue_id, next_offset, tags_code)
            if queue_id == 0:
                b.lite_consumers.arrived(topic)

    def watch(self, on: bool) -> None:
        """Held pulls wait (or no longer do): arrivals on the planes wake the loop (or not).
        Turning it on takes what arrived meanwhile, so no pull misses a message stored between
        its read and its hold."""
        self._watch("pulls", on)

    def watch_lite(self, on: bool) -> None:
        """Lite pops wait (or no longer do), as `watch`."""
        self._watch("lite", on)

    def _watch(self, who: str, on: bool) -> None:
        was = any(self._watchers.values())
        self._watchers[who] = on
        now = any(self._watchers.values())
        if was == now:
            return
        for plane in self._planes():
            plane.set_watching(now)
            if now:
                self.arrivals(plane.take_arrivals())

    def notify_arrival(self, topic: str, queue_id: int, next_offset: int, tags_code: int | None) -> None:
        """A message Python stored: pulls held on the planes may take it."""
        for plane in self._planes():
            plane.notify_arrival(topic, queue_id, next_offset, tags_code)

    @property
    def held_pulls(self) -> int:
        return sum(plane.held_pulls for plane in self._planes())

    @property
    def waiting_pops(self) -> int:
        """Pops waiting on the planes for a message (remoting pops, the gRPC front's receives)."""
        return sum(plane.waiting_pops for plane in self._planes())


def _may_send(topic: str) -> bool:
    """Topics whose plain sends follow the plain rule only (retry topics may turn a send into a
    dead letter; system topics refuse sends)."""
    if topic in NOT_ALLOWED_SEND or topic.startswith(RETRY_PREFIX):
        return False
    return topic_problem(topic) is None
