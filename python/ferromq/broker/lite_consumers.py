"""Lite consumers (RocketMQ 5.5): who subscribes which lite topic, which of them has messages for whom,
and the lite pop that hands them out, one lite topic in order at a time.

5.5.0 splits this into LiteSubscriptionRegistry (clients' subscriptions, quotas, exclusive groups, offset
resets, expiry of silent clients), LiteEventDispatcher (per client, the lite topics with messages to pop:
"events"), PopLiteMessageProcessor (POP_LITE_MESSAGE) and the lite branches of the ack and
change-invisible-time processors. ferromq keeps them in one class, as they share every table:

* a client subscribes light message queues (`%LMQ%$<parent>$<lite>`) with LITE_SUBSCRIPTION_CTL (its
  proxy sends it for SyncLiteSubscription): a partial add or remove of some, a complete set (sent every
  30 s by the client, which also keeps it alive), or a complete remove (it went away);
* a message stored in a light message queue, an ack that lets its queue go on, a subscription and a client
  that goes away each give the queue to one client of each subscribing group (its event set);
* a lite pop takes the client's events in order and pops each queue as an orderly pop does: the group's
  next messages of that queue, which block it until they are acked or visible again; the order state is
  kept in memory (MemoryConsumerOrderInfoManager), the offsets in the offset table;
* a queue left blocked is given again when its messages turn visible (5.5.0 relies on the client's next
  complete sync for that; ferromq keeps the time);
* a client not heard of for `liteSubscriptionCheckTimeoutMills` is dropped; a lite topic deleted by
  expiration loses its subscribers (unnotified, as in 5.5.0).

A wildcard group (`lite.sub.wildcard`, 5.5's #10204) subscribes every lite topic of its bind topic: its
clients name no lite topic (a partial add is refused), their complete sync registers them, and every lite
topic with messages goes to one of them. While a wildcard client is registered the broker watches every
arrival, and its first client is given every lite topic with messages once."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ferromq.broker.pop.formats import ORDER_REVIVE_QUEUE
from ferromq.broker.pop.order import ConsumerOrderInfoManager
from ferromq.broker.pop.service import split_records
from ferromq.broker.subscriptions import (
    LITE_SUB_CLIENT_MAX_EVENT_COUNT,
    LITE_SUB_MODEL,
    LITE_SUB_RESET_OFFSET_EXCLUSIVE,
    LITE_SUB_RESET_OFFSET_UNSUBSCRIBE,
    LITE_SUB_WILDCARD,
)
from ferromq.broker.topics import LITE_MESSAGE_TYPE, LMQ_PREFIX
from ferromq.errors import BrokerError
from ferromq.protocol.codes import ResponseCode

if TYPE_CHECKING:
    from ferromq.broker.config import BrokerConfig
    from ferromq.broker.offsets import ConsumerOffsetManager
    from ferromq.broker.pop.service import PopService
    from ferromq.broker.subscriptions import SubscriptionGroupManager
    from ferromq.broker.topics import BooleanAttribute, TopicConfigManager
    from ferromq.store import MessageStore

logger = logging.getLogger(__name__)

LITE_PREFIX = f"{LMQ_PREFIX}$"
# POP_LITE_MESSAGE's batch bound (PopLiteMessageProcessor.preCheck).
MAX_LITE_POP_NUMS = 32
# OffsetOption.POLICY_* values (common/lite/OffsetOption).
POLICY_LAST, POLICY_MIN, POLICY_MAX = 0, 1, 2
# How often the broker looks for blocked queues turned visible and for silent clients.
SCAN_INTERVAL_S = 0.5
# A client that has not popped for this long while lite topics wait for it, or for this long at all
# (a long poll and then some), has its lite topics given to the group's others, and is passed over for
# a while (LiteEventDispatcher's CLIENT_INACTIVE_INTERVAL, CLIENT_LONG_POLLING_INTERVAL, blacklist).
INACTIVE_WITH_EVENTS_MS = 10_000
INACTIVE_MS = 35_000
PASSED_OVER_MS = 10_000
# How long arrivals are still watched after the last lite pop stopped waiting: consumers pop again right
# after each answer, and a watch that stopped in between would have each of them look at all of its
# lite topics again (`full_dispatch`) on its next wait.
WATCH_LINGER_S = 5.0
# A client remembers at most this many times its event bound of lite topics it had no room for (more
# wait for liteEventFullDispatchDelayTime).
NO_ROOM_PER_MAX_EVENTS = 20

Notifier = Callable[[str, str, str], None]
"""Tells a client to forget a lite topic: (client id, group, lite topic) (NOTIFY_UNSUBSCRIBE_LITE)."""


def lmq_name(parent: str, lite_topic: str) -> str:
    """The light message queue of a lite topic (LiteUtil.toLmqName)."""
    return f"{LITE_PREFIX}{parent}${lite_topic}"


def lite_topic_of(lmq: str) -> str:
    """The lite topic of a light message queue's name (LiteUtil.getLiteTopic)."""
    return lmq.rsplit("$", 1)[-1]


def parent_of(lmq: str) -> str:
    """The parent topic of a light message queue's name (LiteUtil.getParentTopic)."""
    return lmq[len(LITE_PREFIX) :].rsplit("$", 1)[0]


def is_lite_queue(name: str) -> bool:
    return name.startswith(LITE_PREFIX)


def _now() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class OffsetOption:
    """Where a new subscription starts (common/lite/OffsetOption): POLICY (LAST, MIN, MAX), OFFSET, TAIL_N
    or TIMESTAMP (which 5.5.0 ignores, and so does ferromq)."""

    type: str
    value: int

    @classmethod
    def from_json(cls, raw: Any) -> OffsetOption | None:
        if not isinstance(raw, dict) or raw.get("type") is None:
            return None
        return cls(str(raw["type"]), int(raw.get("value", 0)))


@dataclass
class ClientSubscription:
    """One client's lite subscription (common/lite/LiteSubscription)."""

    group: str
    topic: str
    lmqs: set[str] = field(default_factory=set)
    updated: int = field(default_factory=_now)


@dataclass
class ClientEvents:
    """The light message queues with messages for one client, in the order they came (deduplicated)."""

    group: str
    queues: dict[str, None] = field(default_factory=dict)
    last_access: int = field(default_factory=_now)
    last_consume: int = field(default_factory=_now)
    waker: asyncio.Event = field(default_factory=asyncio.Event)
    epoch: int = -1
    """The watch epoch in which its lite topics were last looked at."""
    no_room: dict[str, None] = field(default_factory=dict)
    """Lite topics with messages it (and every other client of the group) had no room for: given
    again as soon as its pops make room (else after liteEventFullDispatchDelayTime)."""


@dataclass
class LitePopped:
    """What a lite pop found: the records (a pull body) and each one's order count."""

    body: bytes
    counts: list[int]
    pop_time: int
    invisible_time: int

    @property
    def found(self) -> bool:
        return bool(self.counts)

    def header(self) -> dict[str, str]:
        """POP_LITE_MESSAGE's reply fields (PopLiteMessageResponseHeader)."""
        return {
            "popTime": str(self.pop_time),
            "invisibleTime": str(self.invisible_time),
            "reviveQid": str(ORDER_REVIVE_QUEUE),
            "orderCountInfo": ";".join(str(c) for c in self.counts),
        }


class LiteContext(Protocol):
    @property
    def config(self) -> BrokerConfig: ...
    @property
    def store(self) -> MessageStore: ...
    @property
    def offsets(self) -> ConsumerOffsetManager: ...
    @property
    def topics(self) -> TopicConfigManager: ...
    @property
    def groups(self) -> SubscriptionGroupManager: ...
    @property
    def pop(self) -> PopService: ...


def order_counts(entries: list[str], count: int) -> list[int]:
    """Each popped message's consume count from an orderly pop's orderCountInfo entries, as 5.5.0's
    broker writes them (transformOrderCountInfo) and its client reads them (parseLiteOrderCountInfo): one
    per message when every message is a redelivered one, else the queue's count for all, else 0."""
    if len(entries) > 1:
        per_offset = entries[:-1]
        if len(per_offset) == count:
            return [_count_of(e) for e in per_offset]
        return [0] * count
    if entries:
        parts = entries[0].split(" ")
        return [int(parts[2]) if len(parts) == 3 else 0] * count
    return [0] * count


def _count_of(entry: str) -> int:
    parts = entry.split(" ")
    return int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else 0


class LiteConsumers:
    def __init__(self, ctx: LiteContext) -> None:
        self._ctx = ctx
        self.orders = ConsumerOrderInfoManager(None)
        self.clients: dict[str, ClientSubscription] = {}
        self.subscribers: dict[str, dict[tuple[str, str], None]] = {}
        """Light message queue -> (client id, group) of its subscribers."""
        self.active = 0
        """(client, light message queue) subscriptions: what maxLiteSubscriptionCount bounds."""
        self.events: dict[str, ClientEvents] = {}
        self._notifiers: dict[str, Notifier] = {}
        self._blocked: list[tuple[int, str, str]] = []
        """(when it may be popped again, group, light message queue): blocked queues to give again."""
        self._due: dict[tuple[str, str], int] = {}
        """(group, light message queue) -> when `_blocked` looks at it next: one live entry each, so
        the heap stays as small as the lite topics in flight whatever clients change."""
        self._task: asyncio.Task[None] | None = None
        self._waiting = 0
        self._watching = False
        self._unwatched_since: float | None = None
        """When the last waiting lite pop stopped waiting while arrivals are still watched."""
        self.watch_linger_s = WATCH_LINGER_S
        self.wildcards: dict[str, dict[str, dict[str, None]]] = {}
        """Parent topic -> wildcard group -> its clients."""
        self.on_watch: Callable[[bool], None] | None = None
        """Told when lite pops start waiting for arrivals (True) and when none waits any more."""
        self._passed_over: dict[str, int] = {}
        """Clients found inactive -> until when dispatch prefers the group's others."""
        self._watch_epoch = 0
        """Counts the times watching started: the data planes tell no arrival in a lite topic while
        nobody watches, so a client that waits in a later epoch than it last looked at its lite
        topics looks again (`full_dispatch` of its own)."""

    # -- the group's settings ----------------------------------------------------------------------

    def _attribute(self, group: str, name: str) -> str | None:
        g = self._ctx.groups.groups.get(group)
        return None if g is None else g.attributes.get(name)

    def bind_topic(self, group: str) -> str | None:
        """The LITE topic a lite group consumes (`lite.bind.topic`), None for another group."""
        g = self._ctx.groups.groups.get(group)
        return None if g is None else g.lite_bind_topic

    def _flag(self, group: str, attribute: BooleanAttribute) -> bool:
        raw = self._attribute(group, attribute.name)
        return attribute.default if raw is None else raw.lower() == "true"

    def _exclusive(self, group: str) -> bool:
        return self._attribute(group, LITE_SUB_MODEL.name) == "Exclusive"

    def _wildcard(self, group: str) -> bool:
        g = self._ctx.groups.groups.get(group)
        return g is not None and LITE_SUB_WILDCARD.name in g.attributes

    # -- subscriptions (LITE_SUBSCRIPTION_CTL) -------------------------------------------------------

    def sync(self, entries: Iterable[dict[str, Any]], notifier: Notifier | None) -> None:
        """LITE_SUBSCRIPTION_CTL's entries (LiteSubscriptionDTO); `notifier` reaches the clients they name.
        Raises BrokerError with 5.5.0's codes."""
        for entry in entries:
            client_id = str(entry.get("clientId") or "").strip()
            group = str(entry.get("group") or "").strip()
            topic = str(entry.get("topic") or "").strip()
            if not (client_id and group and topic):
                logger.warning("lite subscription without client, group or topic: %s", entry)
                continue
            lites = entry.get("liteTopicSet") or []
            lmqs = {lmq_name(topic, str(t)) for t in lites if t}
            action = str(entry.get("action") or "")
            if action in ("PARTIAL_ADD", "COMPLETE_ADD"):
                self._check_consume_enable(group)
                if notifier is not None:
                    self._notifiers[client_id] = notifier
            if action == "PARTIAL_ADD":
                self.add_partial(
                    client_id, group, topic, lmqs, OffsetOption.from_json(entry.get("offsetOption"))
                )
            elif action == "PARTIAL_REMOVE":
                self.remove_partial(client_id, group, topic, lmqs)
            elif action == "COMPLETE_ADD":
                self.add_complete(client_id, group, topic, lmqs)
            elif action == "COMPLETE_REMOVE":
                self.remove_client(client_id)
            else:
                raise BrokerError(
                    f"unknown lite subscription action: {action}", ResponseCode.ILLEGAL_OPERATION
                )

    def _check_consume_enable(self, group: str) -> None:
        g = self._ctx.groups.groups.get(group)
        if g is None or not g.consume_enable:
            raise BrokerError(
                "java.lang.IllegalStateException: Consumer group is not allowed to consume.",
                ResponseCode.ILLEGAL_OPERATION,
            )

    def _subscription(self, client_id: str, group: str, topic: str) -> ClientSubscription:
        sub = self.clients.get(client_id)
        if sub is None:
            # Clients are bounded as subscriptions are: one that names none still takes room.
            self._check_quota(len(self.clients))
            sub = self.clients[client_id] = ClientSubscription(group, topic)
        sub.updated = _now()
        return sub

    def _check_quota(self, taken: int) -> None:
        """LiteQuotaException past `maxLiteSubscriptionCount` (`taken`: subscriptions or clients)."""
        limit = self._ctx.config.max_lite_subscription_count
        if taken >= limit:
            raise BrokerError(
                "org.apache.rocketmq.broker.lite.LiteQuotaException: "
                f"lite subscription quota exceeded {limit}",
                ResponseCode.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
            )

    def add_partial(
        self, client_id: str, group: str, topic: str, lmqs: set[str], option: OffsetOption | None
    ) -> None:
        self._check_quota(self.active)
        if self._wildcard(group):
            raise BrokerError(
                "java.lang.IllegalStateException: subscribe lite operation is not supported for this group",
                ResponseCode.ILLEGAL_OPERATION,
            )
        sub = self._subscription(client_id, group, topic)
        for lmq in lmqs:
            sub.lmqs.add(lmq)
            if self._exclusive(group):
                self._exclude_others(client_id, group, lmq)
            self._reset_offset(lmq, group, option)
            self._add_subscriber(client_id, group, lmq)

    def remove_partial(self, client_id: str, group: str, topic: str, lmqs: set[str]) -> None:
        sub = self._subscription(client_id, group, topic)
        reset = self._flag(group, LITE_SUB_RESET_OFFSET_UNSUBSCRIBE)
        for lmq in lmqs:
            sub.lmqs.discard(lmq)
            self._remove_subscriber(client_id, group, lmq, reset)

    def add_complete(self, client_id: str, group: str, topic: str, lmqs: set[str]) -> None:
        """The client's whole set: what it no longer names is dropped, what is new added (no offset
        reset); the client is alive. A wildcard group's client is registered for all of its topic."""
        sub = self._subscription(client_id, group, topic)
        if self._wildcard(group):
            clients = self.wildcards.setdefault(topic, {}).setdefault(group, {})
            if client_id not in clients:
                first = not clients
                clients[client_id] = None
                self.active += 1
                self._update_watch()
                if first:
                    self.full_dispatch(group, None)
            return
        for lmq in sub.lmqs - lmqs:
            sub.lmqs.discard(lmq)
            self._remove_subscriber(client_id, group, lmq, False)
        for lmq in lmqs - sub.lmqs:
            self._check_quota(self.active)  # 5.5.0 checks partial adds only; a complete one is bounded too
            sub.lmqs.add(lmq)
            self._add_subscriber(client_id, group, lmq)

    def remove_client(self, client_id: str) -> None:
        """The client went: its subscriptions go, its pending events to the group's other clients."""
        self._notifiers.pop(client_id, None)
        sub = self.clients.pop(client_id, None)
        if sub is not None:
            for lmq in sub.lmqs:
                self._remove_subscriber(client_id, sub.group, lmq, False)
            self._drop_wildcard_client(client_id, sub)
        events = self.events.pop(client_id, None)
        if events is not None:
            for lmq in events.queues:
                self.dispatch(lmq, events.group, exclude=client_id)

    def _drop_wildcard_client(self, client_id: str, sub: ClientSubscription) -> None:
        groups = self.wildcards.get(sub.topic, {})
        clients = groups.get(sub.group, {})
        if client_id not in clients:
            return
        del clients[client_id]
        self.active -= 1
        if not clients:
            del groups[sub.group]
        if not groups:
            del self.wildcards[sub.topic]
        self._update_watch()

    def clean_queue(self, lmq: str) -> None:
        """A lite topic deleted (expired): its subscribers forget it, unnotified (cleanSubscription)."""
        for _client_id, group in list(self.subscribers.get(lmq, {})):
            self.orders.clear(lmq, group, 0)
        for client_id, _group in list(self.subscribers.pop(lmq, {})):
            sub = self.clients.get(client_id)
            if sub is not None and lmq in sub.lmqs:
                sub.lmqs.discard(lmq)
                self.active -= 1

    def _add_subscriber(self, client_id: str, group: str, lmq: str) -> None:
        subscribers = self.subscribers.setdefault(lmq, {})
        if (client_id, group) in subscribers:
            return
        subscribers[(client_id, group)] = None
        self.active += 1
        if self._ctx.store.max_offset(lmq, 0) > 0:
            self.dispatch(lmq, group)

    def _remove_subscriber(self, client_id: str, group: str, lmq: str, reset: bool) -> None:
        subscribers = self.subscribers.get(lmq)
        if subscribers is None or (client_id, group) not in subscribers:
            return
        del subscribers[(client_id, group)]
        self.active -= 1
        if not subscribers:
            del self.subscribers[lmq]
        if reset:
            self._reset_offset(lmq, group, OffsetOption("POLICY", POLICY_MIN))

    def _exclude_others(self, client_id: str, group: str, lmq: str) -> None:
        """An exclusive group's lite topic has one subscriber: the others of the group are told to
        forget it (excludeClientByLmqName)."""
        reset = self._flag(group, LITE_SUB_RESET_OFFSET_EXCLUSIVE)
        for other, other_group in list(self.subscribers.get(lmq, {})):
            if other_group != group or other == client_id:
                continue
            sub = self.clients.get(other)
            if sub is not None:
                sub.lmqs.discard(lmq)
                if not sub.lmqs:
                    del self.clients[other]
            self._notify_unsubscribe(other, group, lmq)
            self._remove_subscriber(other, group, lmq, reset)

    def _notify_unsubscribe(self, client_id: str, group: str, lmq: str) -> None:
        notifier = self._notifiers.get(client_id)
        if notifier is None:
            logger.warning("cannot tell %s of group %s to forget %s: no channel", client_id, group, lmq)
            return
        try:
            notifier(client_id, group, lite_topic_of(lmq))
        except Exception:
            logger.warning("telling %s to forget %s failed", client_id, lmq, exc_info=True)

    def _reset_offset(self, lmq: str, group: str, option: OffsetOption | None) -> None:
        """Where a subscription starts (resetOffset): a policy, an offset, or N back from the group's."""
        if option is None:
            return
        offsets = self._ctx.offsets
        current = offsets.query(group, lmq, 0)
        target: int | None = None
        if option.type == "POLICY":
            if option.value == POLICY_MIN:
                target = 0
            elif option.value == POLICY_MAX:
                target = max(0, self._ctx.store.max_offset(lmq, 0))
        elif option.type == "OFFSET":
            target = option.value
        elif option.type == "TAIL_N" and current >= 0:
            target = max(0, current - option.value)
        if target is not None and target != current:
            offsets.commit(group, lmq, 0, target)
            self.orders.clear(lmq, group, 0)

    # -- events ------------------------------------------------------------------------------------

    def arrived(self, lmq: str) -> None:
        """A message is stored in a light message queue: one client of each subscribing group has it."""
        if is_lite_queue(lmq) and (lmq in self.subscribers or self.wildcards):
            self.dispatch(lmq, None)

    def dispatch(self, lmq: str, group: str | None, exclude: str | None = None) -> None:
        """Gives `lmq` to one client of `group` (of every subscribing group when None, wildcard ones
        included), another than `exclude` when there is one (selectAndDispatch)."""
        by_group: dict[str, list[str]] = {}
        for client_id, g in self.subscribers.get(lmq, {}):
            if group is None or g == group:
                by_group.setdefault(g, []).append(client_id)
        if self.wildcards:
            for g, wildcard_clients in self.wildcards.get(parent_of(lmq), {}).items():
                if group is None or g == group:
                    by_group.setdefault(g, []).extend(wildcard_clients)
        now = _now()
        for g, clients in by_group.items():
            # A random client first, then the others (those excluded or passed over last), until
            # one has room (selectAndDispatch); when none has, the group's lite topic is given
            # again after liteEventFullDispatchDelayTime.
            random.shuffle(clients)
            clients.sort(key=lambda c: c == exclude or self._passed_over.get(c, 0) > now)
            if not any(self._give(c, g, lmq) for c in clients):
                self._look_again(now + self._ctx.config.lite_event_full_dispatch_delay_time, g, lmq)
                remembered = NO_ROOM_PER_MAX_EVENTS * self._max_events(g)
                for c in clients:
                    events = self.events[c]  # `_give` made it
                    if len(events.no_room) < remembered:
                        events.no_room[lmq] = None

    def _max_events(self, group: str) -> int:
        """lite.sub.client.max.event.cnt, else maxClientEventCount (LiteMetadataUtil)."""
        value = self._attribute(group, LITE_SUB_CLIENT_MAX_EVENT_COUNT.name)
        count = int(value) if value and value.lstrip("-").isdigit() else 0
        return count if count > 0 else self._ctx.config.max_client_event_count

    def _give(self, client_id: str, group: str, lmq: str) -> bool:
        """Adds `lmq` to the client's lite topics with messages; False when those are full."""
        events = self.events.get(client_id)
        if events is None:
            events = self.events[client_id] = ClientEvents(group)
        if lmq not in events.queues:
            if len(events.queues) >= self._max_events(group):
                logger.debug(
                    "lite consumer %s: its %d lite topics with messages are full",
                    client_id,
                    len(events.queues),
                )
                return False
            events.queues[lmq] = None
        events.waker.set()
        return True

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._scan_loop(), name="lite-scan")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _scan_loop(self) -> None:
        last_expiry = time.monotonic()
        while True:
            await asyncio.sleep(SCAN_INTERVAL_S)
            try:
                self.give_unblocked(_now())
                self.pass_over_inactive(_now())
                self._update_watch()  # ends a watch that lingered WATCH_LINGER_S with nobody waiting
                cfg = self._ctx.config
                if time.monotonic() - last_expiry >= cfg.lite_subscription_check_interval / 1000.0:
                    last_expiry = time.monotonic()
                    self.expire_clients(_now(), cfg.lite_subscription_check_timeout_mills)
                    self.orders.persist()  # in memory: drops what nobody consumed for a day
            except Exception:
                logger.exception("lite consumers: scan failed")

    @property
    def watching(self) -> bool:
        """Whether the data planes tell arrivals in lite topics."""
        return self._watching

    @property
    def watch_starts(self) -> int:
        """How many times watching started (each makes a waiting client look at its lite topics)."""
        return self._watch_epoch

    @property
    def rechecks(self) -> int:
        """Lite topics in flight the broker looks at again when their messages turn visible."""
        return len(self._due)

    def _look_again(self, due: int, group: str, lmq: str) -> None:
        """`give_unblocked` looks at the group's `lmq` at `due` (or earlier, if it would already)."""
        key = (group, lmq)
        current = self._due.get(key)
        if current is not None and current <= due:
            return
        self._due[key] = due
        heapq.heappush(self._blocked, (due, group, lmq))
        if len(self._blocked) > 2 * len(self._due) + 1024:  # entries superseded by earlier ones
            self._blocked = [(d, g, q) for (g, q), d in self._due.items()]
            heapq.heapify(self._blocked)

    def give_unblocked(self, now: int) -> None:
        """Blocked queues whose messages turned visible again are given again; those still blocked
        (their invisible time changed meanwhile) are looked at when that runs out."""
        while self._blocked and self._blocked[0][0] <= now:
            due, group, lmq = heapq.heappop(self._blocked)
            if self._due.get((group, lmq)) != due:
                continue  # superseded
            del self._due[(group, lmq)]
            if self._ready(group, lmq):
                self.dispatch(lmq, group)
                continue
            info = self.orders.get(lmq, group, 0)
            free = info.free_at(0, now) if info is not None and info.blocks(None, 0, now) else None
            if free is not None:
                self._look_again(free, group, lmq)

    def pass_over_inactive(self, now: int) -> list[str]:
        """Clients that stopped popping (gone without a word, or stuck): their waiting lite topics go to
        the group's other clients, and dispatch passes them over for a while (LiteEventDispatcher.scan);
        the clients found."""
        self._passed_over = {c: t for c, t in self._passed_over.items() if t > now}
        found = []
        for client_id, events in list(self.events.items()):
            idle = now - events.last_access
            if idle <= INACTIVE_MS and not (events.queues and idle > INACTIVE_WITH_EVENTS_MS):
                continue
            found.append(client_id)
            del self.events[client_id]
            self._passed_over[client_id] = now + PASSED_OVER_MS
            logger.warning("lite client %s inactive for %d ms: its lite topics go to others", client_id, idle)
            for lmq in events.queues:
                self.dispatch(lmq, events.group, exclude=client_id)
        return found

    def expire_clients(self, now: int, timeout_ms: int) -> int:
        """Drops the clients not heard of for `timeout_ms` (cleanupExpiredSubscriptions); how many."""
        expired = [c for c, sub in self.clients.items() if now - sub.updated > timeout_ms]
        for client_id in expired:
            logger.info("lite subscription of %s expired", client_id)
            self.remove_client(client_id)
        return len(expired)

    def _ready(self, group: str, lmq: str) -> bool:
        """Whether the group has messages to pop in `lmq` now: some not acked, none in flight."""
        return self._backlog(group, lmq) > 0 and not self.orders.blocked(None, lmq, group, 0, 0)

    def _backlog(self, group: str, lmq: str) -> int:
        store = self._ctx.store
        return store.max_offset(lmq, 0) - max(self._ctx.offsets.query(group, lmq, 0), 0)

    # -- pop -----------------------------------------------------------------------------------------

    def _check_master(self) -> None:
        """Lite pops and acks move offsets: never on a slave's replica (as POP's, see PopService)."""
        if self._ctx.config.is_slave:
            raise BrokerError(
                "lite pops and acks are served by the master; this broker is a slave",
                ResponseCode.SERVICE_NOT_AVAILABLE,
            )

    def check_pop(self, group: str, topic: str, max_msgs: int) -> None:
        """PopLiteMessageProcessor.preCheck's refusals, with its codes and remarks."""
        self._check_master()
        cfg = self._ctx.config
        if not cfg.broker_permission & 4:
            raise BrokerError(
                f"the broker[{cfg.broker_ip1}] pop message is forbidden", ResponseCode.NO_PERMISSION
            )
        if max_msgs > MAX_LITE_POP_NUMS:
            raise BrokerError(
                f"the broker[{cfg.broker_ip1}] pop message's num is greater than 32",
                ResponseCode.INVALID_PARAMETER,
            )
        tc = self._ctx.topics.get(topic)
        if tc is None:
            raise BrokerError(
                f"topic [{topic}] not exist, apply first please! "
                "http://rocketmq.apache.org/docs/rmq-faq/#create-topic",
                ResponseCode.TOPIC_NOT_EXIST,
            )
        if not tc.readable:
            raise BrokerError(f"the topic [{topic}] peeking message is forbidden", ResponseCode.NO_PERMISSION)
        if tc.message_type != LITE_MESSAGE_TYPE:
            raise BrokerError(f"the topic [{topic}] message type not match", ResponseCode.INVALID_PARAMETER)
        g = self._ctx.groups.groups.get(group)
        if g is None:
            raise BrokerError(
                f"subscription group [{group}] not exist, "
                "http://rocketmq.apache.org/docs/rmq-faq/#subscription-group-not-exist",
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            )
        if not g.consume_enable:
            raise BrokerError(f"subscription group no permission, {group}", ResponseCode.NO_PERMISSION)
        if self.bind_topic(group) != topic:
            raise BrokerError(f"subscription bind topic not match, {group}", ResponseCode.INVALID_PARAMETER)

    def try_pop(
        self, client_id: str, group: str, max_msgs: int, invisible_time: int, attempt_id: str | None
    ) -> LitePopped:
        """One pass over the client's events (popByClientId): each queue's next messages, in order."""
        pop_time = _now()
        events = self.events.get(client_id)
        records: list[bytes] = []
        counts: list[int] = []
        if events is not None:
            events.last_access = pop_time
            while len(counts) < max_msgs and events.queues:
                lmq = next(iter(events.queues))
                del events.queues[lmq]
                got = self._pop_queue(
                    group, lmq, max_msgs - len(counts), pop_time, invisible_time, attempt_id
                )
                records += got[0]
                counts += got[1]
            if counts:
                events.last_consume = pop_time
            if events.no_room:
                self._refill(events)
            if not events.queues:
                events.waker.clear()
        return LitePopped(b"".join(records), counts, pop_time, invisible_time)

    def _refill(self, events: ClientEvents) -> None:
        """Once a client's lite topics with messages are down to half its room, those it had no
        room for are given again (to it, or to another client of the group with room), instead of
        waiting liteEventFullDispatchDelayTime as 5.5.0's full dispatch does."""
        bound = self._max_events(events.group)
        room = bound - len(events.queues)
        if room * 2 < bound:
            return
        for lmq in list(itertools.islice(events.no_room, room)):
            del events.no_room[lmq]
            if self._ready(events.group, lmq):
                self.dispatch(lmq, events.group)

    def _pop_queue(
        self, group: str, lmq: str, max_msgs: int, pop_time: int, invisible_time: int, attempt_id: str | None
    ) -> tuple[list[bytes], list[int]]:
        info = self.orders.get(lmq, group, 0)
        if info is not None and info.blocks(attempt_id, invisible_time, pop_time):
            free = info.free_at(invisible_time, pop_time)
            if free is not None:
                self._look_again(free, group, lmq)
            return [], []
        popped = self._ctx.pop.rules.pop(
            group, lmq, 0, max_msgs, invisible_time, 1, None, lambda _t: 1, order=True, blocked=[]
        )
        if popped.count <= 0:
            return [], []
        offsets = [o for _t, _q, _s, queue_offsets in popped.takes for o in queue_offsets]
        entries = self.orders.update(attempt_id, lmq, group, 0, pop_time, invisible_time, offsets)
        self._look_again(pop_time + invisible_time, group, lmq)
        records = split_records(popped.body)
        return records, order_counts(entries, len(records))

    async def wait(self, client_id: str, group: str, timeout: float) -> None:
        """Until the client has an event or `timeout` seconds pass (PopLiteLongPollingService)."""
        events = self.events.get(client_id)
        if events is None:
            if client_id not in self.clients:
                # Nothing is given to a client that subscribes nothing: it waits out its poll time,
                # and holds no table entry (client ids cost nothing to make up).
                await asyncio.sleep(timeout)
                return
            events = self.events[client_id] = ClientEvents(group)
        if events.queues:
            return
        events.waker.clear()
        self._waiting += 1
        self._update_watch()  # may give this client an event that arrived meanwhile
        if events.epoch < self._watch_epoch and not self._wildcard(group):
            events.epoch = self._watch_epoch
            self.full_dispatch(group, client_id)
        try:
            if not events.queues:
                await asyncio.wait_for(events.waker.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            self._waiting -= 1
            self._update_watch()

    def _update_watch(self) -> None:
        """The data planes tell arrivals in lite topics while a lite pop waits or a wildcard client is
        registered (it takes any lite topic's), and for WATCH_LINGER_S after (the scan loop ends a
        watch that lingered long enough)."""
        on = self._waiting > 0 or bool(self.wildcards)
        if on:
            self._unwatched_since = None
        elif self._watching:
            now = time.monotonic()
            if self._unwatched_since is None:
                self._unwatched_since = now
            if now - self._unwatched_since < self.watch_linger_s:
                return
        if on == self._watching:
            return
        self._unwatched_since = None
        self._watching = on
        if on:
            self._watch_epoch += 1
        if self.on_watch is not None:
            self.on_watch(on)

    async def pop(
        self,
        client_id: str,
        group: str,
        topic: str,
        max_msgs: int,
        invisible_time: int,
        poll_time: int,
        attempt_id: str | None,
    ) -> LitePopped:
        """POP_LITE_MESSAGE: the client's next messages, waiting up to `poll_time` ms for some."""
        self.check_pop(group, topic, max_msgs)
        self._ctx.pop.rules.check_invisible_time(invisible_time)
        deadline = time.monotonic() + poll_time / 1000.0
        while True:
            result = self.try_pop(client_id, group, max_msgs, invisible_time, attempt_id)
            remaining = deadline - time.monotonic()
            if result.found or remaining <= 0.01:
                return result
            await self.wait(client_id, group, remaining)
            await asyncio.sleep(0)  # whatever `wait` found, others run before the next pass

    # -- ack and change of invisible time ------------------------------------------------------------

    def _lite_receipt(
        self, group: str, topic: str, lite_topic: str, offset: int, queue_id: int, revive_qid: int
    ) -> str:
        """The light message queue a lite ack or change names, or the refusal 5.5.0 answers."""
        self._check_master()
        if self.bind_topic(group) != topic:
            raise BrokerError("group type or bind topic not match.", ResponseCode.INVALID_PARAMETER)
        lmq = lmq_name(topic, lite_topic)
        if offset > self._ctx.store.max_offset(lmq, 0):
            raise BrokerError("ack offset illegal.", ResponseCode.NO_MESSAGE)
        if queue_id != 0 or revive_qid != ORDER_REVIVE_QUEUE:
            raise BrokerError("ack queue illegal.", ResponseCode.INVALID_PARAMETER)
        return lmq

    def ack(
        self,
        group: str,
        topic: str,
        lite_topic: str,
        queue_id: int,
        offset: int,
        pop_time: int,
        revive_qid: int,
    ) -> None:
        """ACK_MESSAGE of a lite message (ackLite): the group goes on in that lite topic."""
        lmq = self._lite_receipt(group, topic, lite_topic, offset, queue_id, revive_qid)
        offsets = self._ctx.offsets
        if offset < offsets.query(group, lmq, 0):
            return  # acked before
        following = self.orders.commit_and_next(lmq, group, 0, offset, pop_time)
        if following == -1:
            raise BrokerError("ack offset illegal.", ResponseCode.MESSAGE_ILLEGAL)
        if following >= 0:
            offsets.commit(group, lmq, 0, following)
            if self._ready(group, lmq):
                self.dispatch(lmq, group)

    def change_invisible(
        self,
        group: str,
        topic: str,
        lite_topic: str,
        offset: int,
        pop_time: int,
        invisible_time: int,
        suspend: bool,
    ) -> tuple[int, int]:
        """CHANGE_MESSAGE_INVISIBLETIME of a lite message: visible again after `invisible_time`; with
        `suspend`, its whole lite topic waits that long (suspendQueue). Returns (popTime, invisibleTime)."""
        self._check_master()
        lmq = lmq_name(topic, lite_topic)
        if offset > self._ctx.store.max_offset(lmq, 0):
            raise BrokerError("", ResponseCode.NO_MESSAGE)
        if offset < self._ctx.offsets.query(group, lmq, 0):
            return 0, 0
        visible_at = _now() + invisible_time
        info = self.orders.get(lmq, group, 0)
        if info is not None and info.pop_time == pop_time:
            targets = [o for i, o in enumerate(info.offsets) if not info.acked(i)] if suspend else [offset]
            for o in targets:
                self.orders.change_invisible(lmq, group, 0, o, pop_time, visible_at)
        self._look_again(visible_at, group, lmq)
        return pop_time, visible_at - pop_time

    def full_dispatch(self, group: str, client_id: str | None) -> None:
        """TRIGGER_LITE_DISPATCH: every subscribed lite topic with messages for the group is given again
        (to `client_id`, or to each client of the group its own; a wildcard group's: every lite topic
        of its topic, each to one of its clients)."""
        if self._wildcard(group):
            topic = self.bind_topic(group)
            if topic is not None and self.wildcards.get(topic, {}).get(group):
                prefix = f"{LITE_PREFIX}{topic}$"
                for lmq, *_ in self._ctx.store.lmq_infos(prefix):
                    if self._ready(group, lmq):
                        self.dispatch(lmq, group)
            return
        for cid, sub in list(self.clients.items()):
            if sub.group != group or (client_id and cid != client_id):
                continue
            for lmq in sub.lmqs:
                if self._ready(group, lmq) and not self._give(cid, group, lmq):
                    self.dispatch(lmq, group)  # full: another client, or again later

    # -- what admin tools see ------------------------------------------------------------------------

    def client_info(self, client_id: str, max_count: int) -> tuple[int, list[str] | None, int]:
        """(how many lite topics the client subscribes, -1 for a client not known; at most `max_count`
        of their light message queues; when it last popped, -1 if never)."""
        sub = self.clients.get(client_id)
        events = self.events.get(client_id)
        last_access = events.last_access if events is not None else -1
        if sub is None:
            return -1, None, last_access
        return len(sub.lmqs), sorted(sub.lmqs)[: max(0, max_count)], last_access

    def subscribers_of(self, lmq: str) -> list[tuple[str, str]]:
        return list(self.subscribers.get(lmq, {}))
