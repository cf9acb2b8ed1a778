"""Rebalancing (RocketMQ's RebalanceImpl / RebalancePushImpl): which queues of its subscribed
topics a consumer pulls, the queue allocation strategies, and the per-queue state of pulled
messages (`ProcessQueue`).

CLUSTERING: the readable queues of a topic and the client ids of the group (GET_CONSUMER_LIST_BY_GROUP
from a broker of the topic) are sorted and split by the allocation strategy, so every member
computes the same split. BROADCASTING: every member takes every queue. A new queue starts at the
stored offset, or where `consume_from_where` says for a group that has none; a queue given up has its
offset persisted first. Orderly consumers lock a queue on its broker before taking it and unlock it
when they let it go.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import Any, Protocol, cast

import orjson

from ferromq.client.instance import ClientInstance
from ferromq.client.message import MessageQueue, ReceivedMessage
from ferromq.client.offset_store import (
    NETWORK_ERRORS,
    OFFSET_UNKNOWN,
    OffsetStore,
    max_offset,
    search_offset,
)
from ferromq.client.route import MASTER_ID
from ferromq.jsonutil import loads_lenient
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import RETRY_PREFIX
from ferromq.protocol.headers import GetConsumerListByGroupRequestHeader

logger = logging.getLogger(__name__)

# A lock the client has not renewed for this long may have expired on the broker (which keeps
# locks 60 s): consumption of the queue pauses until a renewal succeeds.
LOCK_MAX_LIVE_SECONDS = 30.0


class MessageModel(StrEnum):
    """How a group's members share messages: CLUSTERING (each message to one member) or
    BROADCASTING (each message to every member)."""

    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeFromWhere(StrEnum):
    """Where a group that has no stored offset for a queue starts."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


# -- allocation strategies ---------------------------------------------------------------------


AllocateFunction = Callable[[str, str, list[MessageQueue], list[str]], list[MessageQueue]]


class AllocateMessageQueueStrategy(ABC):
    """Splits a topic's queues among a group's clients. Every client runs it with the same sorted
    inputs and takes its own share; the shares must not overlap and must cover every queue."""

    name: str = ""

    @abstractmethod
    def allocate(
        self, group: str, current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]
    ) -> list[MessageQueue]:
        """The queues of `mq_all` that `current_cid` takes (empty when it is not in `cid_all`)."""

    def __call__(
        self, group: str, current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]
    ) -> list[MessageQueue]:
        return self.allocate(group, current_cid, mq_all, cid_all)


def _check(current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]) -> bool:
    if not current_cid:
        raise ValueError("current client id is empty")
    if not mq_all:
        raise ValueError("no message queue to allocate")
    if not cid_all:
        raise ValueError("no client id to allocate to")
    if current_cid not in cid_all:
        logger.info("client %s is not in the consumer list %s yet", current_cid, cid_all)
        return False
    return True


class AllocateMessageQueueAveragely(AllocateMessageQueueStrategy):
    """Consecutive ranges: with 8 queues and 3 clients, 3 + 3 + 2 (RocketMQ's default)."""

    name = "AVG"

    def allocate(
        self, group: str, current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]
    ) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        n_mq, n_cid = len(mq_all), len(cid_all)
        mod = n_mq % n_cid
        if n_mq <= n_cid:
            average = 1
        elif mod > 0 and index < mod:
            average = n_mq // n_cid + 1
        else:
            average = n_mq // n_cid
        start = index * average if mod > 0 and index < mod else index * average + mod
        count = min(average, n_mq - start)
        return [mq_all[(start + i) % n_mq] for i in range(count)]


class AllocateMessageQueueAveragelyByCircle(AllocateMessageQueueStrategy):
    """Round robin: client i takes queues i, i + n, i + 2n, ..."""

    name = "AVG_BY_CIRCLE"

    def allocate(
        self, group: str, current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]
    ) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        return [mq for i, mq in enumerate(mq_all) if i % len(cid_all) == index]


AllocateStrategy = AllocateMessageQueueStrategy | type[AllocateMessageQueueStrategy] | AllocateFunction


def allocate_function(strategy: AllocateStrategy) -> AllocateFunction:
    """A strategy object, a strategy class (instantiated) or a plain callable
    `(group, current_cid, mq_all, cid_all) -> queues`, as one callable."""
    if isinstance(strategy, type) and issubclass(strategy, AllocateMessageQueueStrategy):
        instance: AllocateMessageQueueStrategy = strategy()
        return instance
    if isinstance(strategy, AllocateMessageQueueStrategy):
        return strategy
    allocate = getattr(strategy, "allocate", None)
    if callable(allocate):
        return cast(AllocateFunction, allocate)
    if callable(strategy):
        return cast(AllocateFunction, strategy)
    raise TypeError(f"not an allocation strategy: {strategy!r}")


# -- per-queue state ---------------------------------------------------------------------------


class ProcessQueue:
    """One assigned queue: the pull position and the messages pulled but not yet consumed
    (RocketMQ's ProcessQueue). The offset the group may commit is the smallest offset still in
    flight, or the next pull offset when nothing is (filtered units are skipped that way too)."""

    def __init__(self, mq: MessageQueue, offset: int) -> None:
        self.mq = mq
        self.next_offset = offset
        """Where the next pull starts."""
        self.msgs: dict[int, ReceivedMessage] = {}
        """Pulled and not yet consumed, by queue offset (ascending: offsets only grow)."""
        self.waiting: deque[ReceivedMessage] = deque()
        """Orderly consumption: pulled and not yet handed to the listener, in order."""
        self.dropped = False
        self.locked = False
        self.last_lock = 0.0
        self.last_pull = time.monotonic()
        self.last_consume = 0.0
        """Wall-clock time (s) messages of the queue were last consumed (0: never)."""
        self.consume_lock = asyncio.Lock()
        """Held by orderly consumption while a batch is in the listener; taken by removal."""
        self.has_waiting = asyncio.Event()
        self.has_space = asyncio.Event()
        self.has_space.set()
        self.pull_task: asyncio.Task[None] | None = None
        self.consume_task: asyncio.Task[None] | None = None
        """Orderly consumption: the task that hands this queue's messages to the listener."""

    def __repr__(self) -> str:
        return f"ProcessQueue({self.mq}, next={self.next_offset}, cached={len(self.msgs)})"

    @property
    def count(self) -> int:
        return len(self.msgs)

    @property
    def span(self) -> int:
        """Offsets between the oldest and the newest cached message."""
        if not self.msgs:
            return 0
        return next(reversed(self.msgs)) - next(iter(self.msgs))

    def add(self, msgs: list[ReceivedMessage], next_offset: int, *, orderly: bool) -> None:
        for m in msgs:
            self.msgs[m.queue_offset] = m
        if orderly and msgs:
            self.waiting.extend(msgs)
            self.has_waiting.set()
        self.next_offset = next_offset

    def remove(self, msgs: Iterable[ReceivedMessage]) -> None:
        """Consumed messages leave the cache."""
        for m in msgs:
            self.msgs.pop(m.queue_offset, None)
        self.last_consume = time.time()
        self.has_space.set()

    def commit_offset(self) -> int:
        return next(iter(self.msgs)) if self.msgs else self.next_offset

    def take(self, n: int) -> list[ReceivedMessage]:
        """Orderly: the next `n` waiting messages, in order."""
        out: list[ReceivedMessage] = []
        while self.waiting and len(out) < n:
            out.append(self.waiting.popleft())
        if not self.waiting:
            self.has_waiting.clear()
        return out

    def put_back(self, msgs: list[ReceivedMessage]) -> None:
        """Orderly: returns messages to the front (to be consumed again before any later one)."""
        for m in reversed(msgs):
            self.waiting.appendleft(m)
            self.msgs[m.queue_offset] = m
        if msgs:
            self.has_waiting.set()

    def lock_valid(self, now: float) -> bool:
        return self.locked and now - self.last_lock <= LOCK_MAX_LIVE_SECONDS


class RebalanceHost(Protocol):
    """What the rebalancer needs from its consumer."""

    def queue_added(self, pq: ProcessQueue) -> None:
        """Starts pulling (and, orderly, consuming) a newly assigned queue."""
        ...

    async def queue_removed(self, pq: ProcessQueue) -> None:
        """Stops the queue's tasks; returns once no batch of it is in the listener (orderly)."""
        ...


# -- the rebalancer ----------------------------------------------------------------------------


class Rebalancer:
    """Owns the table of assigned queues and keeps it in line with the group."""

    def __init__(
        self,
        instance: ClientInstance,
        group: str,
        host: RebalanceHost,
        offsets: OffsetStore,
        *,
        message_model: MessageModel,
        consume_from_where: ConsumeFromWhere,
        consume_timestamp_ms: int,
        allocate: AllocateFunction,
        orderly: bool,
    ) -> None:
        self.instance = instance
        self.group = group
        self.host = host
        self.offsets = offsets
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms
        self.allocate = allocate
        self.orderly = orderly
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._releasing: dict[MessageQueue, asyncio.Task[None]] = {}
        self.round_lock = asyncio.Lock()
        """Held by a rebalance round and by lock renewal: they change the table."""
        self.lock_pending = False
        """An allocated queue could not be locked (orderly): worth another round soon."""

    @property
    def needs_locks(self) -> bool:
        return self.orderly and self.message_model == MessageModel.CLUSTERING

    # -- one round ---------------------------------------------------------------------------

    async def rebalance(self, topics: Iterable[str]) -> None:
        """Recomputes the assignment of every subscribed topic and applies the changes."""
        async with self.round_lock:
            self.lock_pending = False
            wanted_topics = set(topics)
            for topic in sorted(wanted_topics):
                try:
                    assigned = await self._allocation(topic)
                except Exception:
                    logger.exception("rebalance of %s for group %s failed", topic, self.group)
                    continue
                if assigned is not None:
                    await self._apply(topic, assigned)
            # Topics no longer subscribed.
            for mq in [mq for mq in self.process_queues if mq.topic not in wanted_topics]:
                self._remove(mq)

    async def _allocation(self, topic: str) -> set[MessageQueue] | None:
        """This client's queues of `topic`, or None when that cannot be known now."""
        route = await self.instance.route(topic)
        if route is None:
            if not topic.startswith(RETRY_PREFIX):
                logger.warning("group %s: no route for topic %s", self.group, topic)
            return None
        mq_all = sorted(route.subscribe_queues())
        if self.message_model == MessageModel.BROADCASTING:
            return set(mq_all)
        cid_all = await self.consumer_ids(topic)
        if cid_all is None:
            return None
        if not mq_all or not cid_all:
            logger.warning("group %s, topic %s: no queue or no consumer (%s)", self.group, topic, cid_all)
            return set()
        mine = self.allocate(self.group, self.instance.client_id, mq_all, sorted(cid_all))
        return set(mine)

    async def consumer_ids(self, topic: str) -> list[str] | None:
        """GET_CONSUMER_LIST_BY_GROUP from a broker of the topic (None when no broker answers)."""
        route = self.instance.routes.get(topic)
        if route is None:
            return None
        addrs = []
        for addrs_by_id in route.broker_addrs.values():
            if addrs_by_id:
                addrs.append(addrs_by_id.get(MASTER_ID) or next(iter(addrs_by_id.values())))
        random.shuffle(addrs)
        for addr in addrs:
            cmd = RemotingCommand(
                code=RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                ext=GetConsumerListByGroupRequestHeader(consumer_group=self.group).to_ext(),
            )
            try:
                reply = await self.instance.invoke(addr, cmd)
            except NETWORK_ERRORS as e:
                logger.debug("consumer list of %s from %s failed: %s", self.group, addr, e)
                continue
            if reply.code != ResponseCode.SUCCESS:
                logger.info("consumer list of %s from %s refused: %s", self.group, addr, reply.remark)
                continue
            ids = loads_lenient(reply.body).get("consumerIdList") or []
            return [str(i) for i in ids]
        return None

    async def _apply(self, topic: str, assigned: set[MessageQueue]) -> None:
        for mq in [mq for mq in self.process_queues if mq.topic == topic and mq not in assigned]:
            self._remove(mq)
        new = sorted(mq for mq in assigned if mq not in self.process_queues and mq not in self._releasing)
        if len(new) < len(assigned - set(self.process_queues)):
            self.lock_pending = True  # a queue still being released: take it next round
        if not new:
            return
        locked: set[MessageQueue] = set(new)
        if self.needs_locks:
            locked = await self.lock_batch(new)
            if len(locked) < len(new):
                self.lock_pending = True
                logger.info(
                    "group %s: queues %s are locked by another client", self.group, sorted(set(new) - locked)
                )
        now = time.monotonic()
        for mq in new:
            if mq not in locked:
                continue
            offset = await self.pull_from_where(mq)
            if offset < 0:
                logger.warning("group %s: no start offset for %s; will retry", self.group, mq)
                if self.needs_locks:
                    await self.unlock_batch([mq])
                continue
            pq = ProcessQueue(mq, offset)
            pq.locked, pq.last_lock = self.needs_locks, now
            self.offsets.update(mq, offset)
            self.process_queues[mq] = pq
            logger.info("group %s: now pulling %s from offset %d", self.group, mq, offset)
            self.host.queue_added(pq)

    async def pull_from_where(self, mq: MessageQueue) -> int:
        """The offset a newly assigned queue starts at: the stored one, else per
        `consume_from_where` (retry topics from 0). Negative when it cannot be known now."""
        stored = await self.offsets.read_from_store(mq)
        if stored >= 0:
            return stored
        if stored != OFFSET_UNKNOWN:
            return stored
        if mq.topic.startswith(RETRY_PREFIX):
            return 0
        try:
            if self.consume_from_where == ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
                return 0
            if self.consume_from_where == ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
                return await search_offset(self.instance, mq, self.consume_timestamp_ms)
            return await max_offset(self.instance, mq)
        except Exception as e:
            logger.warning("group %s: start offset of %s failed: %s", self.group, mq, e)
            return -2

    # -- giving queues up --------------------------------------------------------------------

    def _remove(self, mq: MessageQueue, *, lost_lock: bool = False) -> None:
        pq = self.process_queues.pop(mq)
        pq.dropped = True
        pq.has_waiting.set()
        pq.has_space.set()
        logger.info("group %s: no longer pulling %s", self.group, mq)
        task = asyncio.get_running_loop().create_task(self._release(pq, lost_lock), name=f"release-{mq}")
        self._releasing[mq] = task
        task.add_done_callback(lambda t: self._release_done(mq, t))

    def _release_done(self, mq: MessageQueue, task: asyncio.Task[None]) -> None:
        if self._releasing.get(mq) is task:
            del self._releasing[mq]
        if not task.cancelled() and task.exception() is not None:
            logger.error("releasing %s failed", mq, exc_info=task.exception())

    async def _release(self, pq: ProcessQueue, lost_lock: bool) -> None:
        await self.host.queue_removed(pq)
        if lost_lock:
            # Someone else owns the queue now: our offset is no authority any more.
            self.offsets.remove(pq.mq)
            return
        self.offsets.update(pq.mq, pq.commit_offset(), increase_only=True)
        if self.message_model == MessageModel.CLUSTERING:
            await self.offsets.persist([pq.mq], wait=True)
            self.offsets.remove(pq.mq)
        else:
            await self.offsets.persist([pq.mq])
        if self.needs_locks:
            await self.unlock_batch([pq.mq])

    async def wait_released(self, timeout: float) -> None:
        tasks = list(self._releasing.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for t in pending:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- orderly locks -----------------------------------------------------------------------

    def _by_broker(self, mqs: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
        out: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            out.setdefault(mq.broker_name, []).append(mq)
        return out

    def _lock_body(self, mqs: list[MessageQueue]) -> bytes:
        return orjson.dumps(
            {
                "consumerGroup": self.group,
                "clientId": self.instance.client_id,
                "mqSet": [mq.to_json() for mq in mqs],
            }
        )

    async def lock_batch(self, mqs: Iterable[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ per broker: the queues this client holds afterwards."""
        held, _ = await self._lock_batch(mqs)
        return held

    async def _lock_batch(self, mqs: Iterable[MessageQueue]) -> tuple[set[MessageQueue], set[str]]:
        """(queues held, names of the brokers that answered)."""
        held: set[MessageQueue] = set()
        answered: set[str] = set()
        for broker_name, group in self._by_broker(mqs).items():
            addr = self.instance.master_addr(broker_name)
            if addr is None:
                continue
            cmd = RemotingCommand(code=RequestCode.LOCK_BATCH_MQ, body=self._lock_body(group))
            try:
                reply = await self.instance.invoke(addr, cmd)
            except NETWORK_ERRORS as e:
                logger.warning("locking queues of %s on %s failed: %s", self.group, addr, e)
                continue
            if reply.code != ResponseCode.SUCCESS:
                logger.warning("broker %s refused to lock queues of %s: %s", addr, self.group, reply.remark)
                continue
            answered.add(broker_name)
            data: Any = loads_lenient(reply.body) if reply.body else {}
            for q in data.get("lockOKMQSet") or []:
                held.add(MessageQueue(str(q["topic"]), str(q["brokerName"]), int(q["queueId"])))
        return held, answered

    async def unlock_batch(self, mqs: Iterable[MessageQueue]) -> None:
        """UNLOCK_BATCH_MQ per broker (failures are logged: the locks expire on their own)."""
        for broker_name, group in self._by_broker(mqs).items():
            addr = self.instance.master_addr(broker_name)
            if addr is None:
                continue
            cmd = RemotingCommand(code=RequestCode.UNLOCK_BATCH_MQ, body=self._lock_body(group))
            try:
                await self.instance.invoke(addr, cmd)
            except NETWORK_ERRORS as e:
                logger.warning("unlocking queues of %s on %s failed: %s", self.group, addr, e)

    async def lock_all(self) -> None:
        """Renews the locks of every assigned queue. A queue another client holds now is given up
        (without persisting its offset): a later round takes it again from the stored offset.
        A broker that does not answer changes nothing; the lock just ages (see `lock_valid`)."""
        if not self.needs_locks:
            return
        async with self.round_lock:
            mqs = list(self.process_queues)
            if not mqs:
                return
            held, answered = await self._lock_batch(mqs)
            now = time.monotonic()
            for mq in mqs:
                pq = self.process_queues.get(mq)
                if pq is None:
                    continue
                if mq in held:
                    pq.locked, pq.last_lock = True, now
                elif mq.broker_name in answered:
                    logger.warning("group %s lost the lock of %s", self.group, mq)
                    self._remove(mq, lost_lock=True)

    async def unlock_all(self) -> None:
        if self.needs_locks and self.process_queues:
            await self.unlock_batch(list(self.process_queues))

    # -- stop --------------------------------------------------------------------------------

    async def reset_offsets(self, offsets: Mapping[MessageQueue, int]) -> list[MessageQueue]:
        """An operator's offset reset (RESET_CONSUMER_CLIENT_OFFSET): each held queue named in
        `offsets` is dropped (its cached and in-flight messages are not committed), its offset set
        to the new one and persisted, and it is given up; the next rebalance takes it again from
        there. Returns the queues reset."""
        done = []
        for mq, offset in offsets.items():
            pq = self.process_queues.pop(mq, None)
            if pq is None:
                continue
            pq.dropped = True
            pq.has_waiting.set()
            pq.has_space.set()
            await self.host.queue_removed(pq)
            self.offsets.update(mq, offset)
            await self.offsets.persist([mq], wait=True)
            if self.message_model == MessageModel.CLUSTERING:
                self.offsets.remove(mq)
            if self.needs_locks:
                await self.unlock_batch([mq])
            logger.info("group %s: offset of %s reset to %d", self.group, mq, offset)
            done.append(mq)
        return done

    def drop_all(self) -> list[ProcessQueue]:
        """Marks every queue dropped and empties the table (the consumer is stopping)."""
        pqs = list(self.process_queues.values())
        for pq in pqs:
            pq.dropped = True
            pq.has_waiting.set()
            pq.has_space.set()
        self.process_queues.clear()
        return pqs
