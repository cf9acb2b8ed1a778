"""PullConsumer: RocketMQ's DefaultLitePullConsumer for asyncio. The application calls `poll()`;
the consumer keeps a position per queue, pulls (long-polling when nothing is there), filters by
tag and commits positions to the broker.

Two modes, as in Java: `subscribe(topic, expression)` lets the group's consumers share the
topic's queues (allocated averagely, re-balanced every 20 s and whenever the broker reports a
change of members), `assign(queues)` reads exactly the given queues.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ferromq.acl.signing import credentials_of
from ferromq.client.admin import check_reply, queue_master_addr, queue_offset_request
from ferromq.client.instance import ClientInstance
from ferromq.client.lifecycle import AsyncLifecycle
from ferromq.client.message import MessageQueue, ReceivedMessage, decode_received
from ferromq.client.rebalance import AllocateMessageQueueAveragely, ConsumeFromWhere
from ferromq.errors import FerroMQError, TopicNotExistError
from ferromq.jsonutil import loads_lenient
from ferromq.message import tag_codes
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import PULL_FLAG_LITE_PULL, PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND
from ferromq.protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

logger = logging.getLogger(__name__)

CONSUME_FROM_WHERE = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP")

REBALANCE_INTERVAL = 20.0
# How long the broker may hold a pull, and how long the client waits for its answer (Java's
# lite pull consumer: BROKER_SUSPEND_MAX_TIME_MILLIS, consumerTimeoutMillisWhenSuspend).
BROKER_SUSPEND_MAX_TIME = 20.0
TIMEOUT_WHEN_SUSPEND = 30.0
# A queue whose pull failed is left alone this long.
PULL_ERROR_BACKOFF = 1.0
# An empty answer faster than this was not held: pause before asking again.
HELD_AT_LEAST = 0.1
# CONSUME_FROM_TIMESTAMP without a timestamp starts this far back (Java: half an hour).
DEFAULT_TIMESTAMP_AGO = 30 * 60


@dataclass(frozen=True)
class _Subscription:
    topic: str
    expression: str
    tags: frozenset[str] | None
    """None: every tag."""
    version: int

    @classmethod
    def parse(cls, topic: str, expression: str) -> _Subscription:
        text = (expression or "*").strip() or "*"
        tags = frozenset(t.strip() for t in text.split("||") if t.strip())
        if not tags:
            raise ValueError(f"subscription expression {expression!r} has no tags")
        return cls(topic, text, None if "*" in tags else tags, int(time.time() * 1000))

    def matches(self, msg: ReceivedMessage) -> bool:
        return self.tags is None or (msg.tags is not None and msg.tags in self.tags)

    def to_json(self) -> dict[str, Any]:
        tags = sorted(self.tags) if self.tags is not None else []
        return {
            "topic": self.topic,
            "subString": self.expression,
            "tagsSet": tags,
            "codeSet": tag_codes(tags) or [],
            "subVersion": self.version,
            "expressionType": "TAG",
            "classFilterMode": False,
        }


@dataclass
class _QueueState:
    position: int | None = None
    """The next offset to read; None until resolved from the broker."""
    dirty: bool = False
    """The position moved (poll or seek) since the last commit."""
    version: int = 0
    """Bumped by seeks: what a pull issued before brings is dropped."""
    retry_at: float = 0.0
    """After a failed pull: no new pull before this (loop time)."""
    task: asyncio.Task[_Outcome] | None = None
    """The queue's pull in flight (held by the broker until messages come), or its result
    waiting for the next poll."""


@dataclass
class _Outcome:
    version: int
    next_offset: int
    messages: list[ReceivedMessage] = field(default_factory=list)


_AVERAGELY = AllocateMessageQueueAveragely()


class PullConsumer(AsyncLifecycle):
    """Reads messages with `await poll()`. Use `async with PullConsumer(...)` or `await start()`
    / `await stop()`; call `subscribe()` or `assign()` before or after starting.

    Positions (the next offset to read of each queue) start from the group's committed offset;
    when the broker has none, from `consume_from_where`: the queue's end (LAST), its first
    message (FIRST) or the first message stored at or after `consume_timestamp` (ms; TIMESTAMP,
    default half an hour ago). Note that a broker also reports offset 0 for a group that never
    committed while the queue's first message is still in memory, as RocketMQ's does.
    """

    def __init__(
        self,
        group: str,
        namesrv: str,
        *,
        instance: ClientInstance | None = None,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        pull_batch_size: int = 32,
        poll_timeout: float = 5.0,
        consume_from_where: ConsumeFromWhere | str = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: int | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        if consume_from_where not in CONSUME_FROM_WHERE:
            raise ValueError(f"consume_from_where must be one of {', '.join(CONSUME_FROM_WHERE)}")
        if pull_batch_size < 1:
            raise ValueError("pull_batch_size must be at least 1")
        self.group = group
        self._own_instance = instance is None
        # Consumers of one group in one process need distinct client ids to share queues.
        self.instance = instance or ClientInstance(
            namesrv,
            instance_name=f"{os.getpid()}#{id(self):x}",
            credentials=credentials_of(access_key, secret_key),
        )
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval
        self.pull_batch_size = pull_batch_size
        self.poll_timeout = poll_timeout
        self.consume_from_where = ConsumeFromWhere(consume_from_where)
        self.consume_timestamp = consume_timestamp
        self._mode: Literal["subscribe", "assign"] | None = None
        self._subscriptions: dict[str, _Subscription] = {}
        self._assign_expression = "*"
        self._queues: dict[MessageQueue, _QueueState] = {}
        self._to_commit: dict[MessageQueue, int] = {}
        self._wake = asyncio.Event()
        """Set by seeks, assignment changes and stop: a waiting poll looks again."""
        self._rebalance_now = asyncio.Event()
        self._poll_lock = asyncio.Lock()
        self._dropped: set[asyncio.Task[_Outcome]] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Registers with the client instance (heartbeats as a CONSUME_ACTIVELY consumer), runs
        the first rebalance (subscribe mode) and starts the rebalance and auto-commit tasks."""
        if self._started:
            return
        other = self.instance.consumers.get(self.group)
        if other is not None and other is not self:
            raise ValueError(f"the client instance already has a consumer of group {self.group}")
        self.instance.consumers[self.group] = self
        await self.instance.start()
        self._started = True
        loop = asyncio.get_running_loop()
        if self._mode == "subscribe":
            try:
                await self._rebalance()
            except (FerroMQError, OSError) as e:
                logger.warning("first rebalance of group %s failed (retried): %s", self.group, e)
        self._tasks.append(loop.create_task(self._rebalance_loop(), name=f"rebalance-{self.group}"))
        if self.auto_commit:
            self._tasks.append(loop.create_task(self._auto_commit_loop(), name=f"auto-commit-{self.group}"))

    async def stop(self) -> None:
        """Commits (with auto-commit), leaves the group (UNREGISTER_CLIENT, so the others
        re-balance) and disconnects (an instance this consumer created)."""
        if not self._started:
            return
        self._started = False
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for st in self._queues.values():
            self._drop_pull(st)
        self._wake.set()  # a poll in progress returns
        async with self._poll_lock:
            await asyncio.gather(*self._dropped, return_exceptions=True)
            if self.auto_commit:
                try:
                    await self.commit()
                except (FerroMQError, OSError) as e:
                    logger.warning("final commit of group %s failed: %s", self.group, e)
            if self._own_instance:
                await self.instance.stop()  # unregisters this group from every broker
                self.instance.consumers.pop(self.group, None)
            else:
                self.instance.consumers.pop(self.group, None)
                await self._unregister()

    async def _unregister(self) -> None:
        """Leaves the group on every broker (a shared instance stays connected)."""
        await self.instance.unregister_group(consumer_group=self.group)

    # -- ConsumerMember (what ClientInstance asks) ---------------------------------------------

    def heartbeat_data(self) -> dict[str, Any]:
        """This consumer in a HEART_BEAT body: pull (CONSUME_ACTIVELY), clustering."""
        return {
            "groupName": self.group,
            "consumeType": "CONSUME_ACTIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": self.consume_from_where,
            "unitMode": False,
            "subscriptionDataSet": [s.to_json() for s in self._subscriptions.values()],
        }

    def subscribed_topics(self) -> list[str]:
        """Topics whose routes the instance keeps fresh for this consumer."""
        return sorted(set(self._subscriptions) | {mq.topic for mq in self._queues})

    def on_consumer_ids_changed(self) -> None:
        """The broker says the group's members changed: re-balance now."""
        self._rebalance_now.set()

    # -- subscriptions and assignment ----------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consumes `topic` (messages whose tag is one of `TagA || TagB`, or `*` for all) on the
        queues the group's rebalance gives this consumer."""
        if self._mode == "assign":
            raise RuntimeError("subscribe and assign cannot be mixed")
        self._mode = "subscribe"
        self._subscriptions[topic] = _Subscription.parse(topic, expression)
        self._rebalance_now.set()

    def unsubscribe(self, topic: str) -> None:
        """Stops consuming `topic` (its queues go at the next rebalance)."""
        self._subscriptions.pop(topic, None)
        self._rebalance_now.set()

    def assign(self, queues: Iterable[MessageQueue], expression: str = "*") -> None:
        """Consumes exactly these queues (no rebalance), keeping the positions of queues that
        were already assigned. `expression` filters by tag as in `subscribe`."""
        if self._mode == "subscribe":
            raise RuntimeError("subscribe and assign cannot be mixed")
        self._mode = "assign"
        wanted = sorted(set(queues))
        for mq in wanted:
            _Subscription.parse(mq.topic, expression)  # validates
        self._assign_expression = expression
        self._set_queues(wanted)

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer reads now."""
        return list(self._queues)

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues, from its route (refreshed)."""
        route = await self.instance.route(topic, refresh=True)
        if route is None:
            raise TopicNotExistError(f"No route info of this topic: {topic}")
        return route.subscribe_queues()

    def _subscription(self, topic: str) -> _Subscription:
        return self._subscriptions.get(topic) or _Subscription.parse(topic, self._assign_expression)

    def _set_queues(self, wanted: list[MessageQueue]) -> None:
        """Replaces the assignment. Positions of dropped queues are kept for the next commit
        (with auto-commit; otherwise what was not committed is read again by the next owner)."""
        removed = [mq for mq in self._queues if mq not in set(wanted)]
        for mq in removed:
            st = self._queues.pop(mq)
            self._drop_pull(st)
            if self.auto_commit and st.dirty and st.position is not None:
                self._to_commit[mq] = st.position
        added = False
        for mq in wanted:
            if mq not in self._queues:
                self._queues[mq] = _QueueState()
                added = True
        if removed or added:
            self._queues = {mq: self._queues[mq] for mq in sorted(self._queues)}
            logger.info("group %s now reads %d queue(s): %s", self.group, len(self._queues), self._queues)
            self._wake.set()

    def _drop_pull(self, st: _QueueState) -> None:
        """Abandons the queue's pull (what it brings is not delivered; the position stays)."""
        task, st.task = st.task, None
        if task is None:
            return
        if task.done():
            if not task.cancelled():
                task.exception()  # retrieved: nothing to report for an abandoned pull
            return
        task.cancel()
        self._dropped.add(task)
        task.add_done_callback(self._dropped.discard)

    # -- rebalance -----------------------------------------------------------------------------

    async def _rebalance_loop(self) -> None:
        while True:
            try:
                async with asyncio.timeout(REBALANCE_INTERVAL):
                    await self._rebalance_now.wait()
            except TimeoutError:
                pass
            self._rebalance_now.clear()
            if self._mode != "subscribe":
                continue
            try:
                await self._rebalance()
            except (FerroMQError, OSError) as e:
                logger.warning("rebalance of group %s failed: %s", self.group, e)
            except Exception:
                logger.exception("rebalance of group %s failed", self.group)

    async def _consumer_ids(self, addr: str) -> list[str] | None:
        reply = await self.instance.invoke(
            addr,
            RemotingCommand(
                code=RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                ext=GetConsumerListByGroupRequestHeader(consumer_group=self.group).to_ext(),
            ),
        )
        if reply.code != ResponseCode.SUCCESS:
            logger.debug("consumer list of %s from %s: %s", self.group, addr, reply.remark)
            return None
        data = loads_lenient(reply.body) if reply.body else {}
        return [str(c) for c in data.get("consumerIdList") or []]

    async def _rebalance(self) -> None:
        """Allocates each subscribed topic's readable queues averagely among the group's
        consumers (as the broker lists them)."""
        wanted: list[MessageQueue] = []
        heartbeat_sent = False
        for topic in list(self._subscriptions):
            route = await self.instance.route(topic)
            if route is None:
                logger.info("group %s: no route for subscribed topic %s yet", self.group, topic)
                continue
            mqs = route.subscribe_queues()
            masters = [a for a in (route.master(n) for n in sorted(route.broker_addrs)) if a]
            cids = await self._consumer_ids(masters[0]) if masters else None
            if masters and (cids is None or self.instance.client_id not in cids) and not heartbeat_sent:
                # The broker has not heard from us yet (new broker, or first start).
                await self.instance.heartbeat_all()
                heartbeat_sent = True
                cids = await self._consumer_ids(masters[0])
            if not cids:
                # Keep what we have: better than dropping queues on a transient failure.
                wanted += [mq for mq in self._queues if mq.topic == topic]
                continue
            if self.instance.client_id in cids and mqs:
                wanted += _AVERAGELY(self.group, self.instance.client_id, sorted(mqs), sorted(cids))
        if set(wanted) == set(self._queues):
            return
        self._set_queues(wanted)
        if self._to_commit:
            try:
                await self.commit({})
            except (FerroMQError, OSError) as e:
                logger.warning("committing released queues of group %s failed: %s", self.group, e)

    # -- positions -----------------------------------------------------------------------------

    async def _query_committed(self, mq: MessageQueue) -> int | None:
        addr = await queue_master_addr(self.instance, mq)
        ext = QueryConsumerOffsetRequestHeader(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id
        ).to_ext()
        reply = await self.instance.invoke(
            addr, RemotingCommand(code=RequestCode.QUERY_CONSUMER_OFFSET, ext=ext)
        )
        if reply.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return OffsetResponseHeader.of(check_reply(reply, f"QUERY_CONSUMER_OFFSET of {mq}")).offset

    async def _initial_position(self, mq: MessageQueue) -> int:
        committed = await self._query_committed(mq)
        if committed is not None and committed >= 0:
            return committed
        if self.consume_from_where == "CONSUME_FROM_FIRST_OFFSET":
            return await queue_offset_request(self.instance, RequestCode.GET_MIN_OFFSET, mq)
        if self.consume_from_where == "CONSUME_FROM_TIMESTAMP":
            ts = self.consume_timestamp
            if ts is None:
                ts = int((time.time() - DEFAULT_TIMESTAMP_AGO) * 1000)
            return await queue_offset_request(
                self.instance, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, timestamp=ts
            )
        return await queue_offset_request(self.instance, RequestCode.GET_MAX_OFFSET, mq)

    def _state(self, queue: MessageQueue) -> _QueueState:
        st = self._queues.get(queue)
        if st is None:
            raise ValueError(f"{queue} is not assigned to this consumer")
        return st

    async def seek(self, queue: MessageQueue, offset: int) -> None:
        """Makes `offset` the next offset `poll` reads from the (assigned) queue. Raises
        ValueError outside the queue's [min offset, max offset]."""
        st = self._state(queue)
        low = await queue_offset_request(self.instance, RequestCode.GET_MIN_OFFSET, queue)
        high = await queue_offset_request(self.instance, RequestCode.GET_MAX_OFFSET, queue)
        if not low <= offset <= high:
            raise ValueError(f"offset {offset} of {queue} outside [{low}, {high}]")
        self._seek(queue, st, offset)

    def _seek(self, queue: MessageQueue, st: _QueueState, offset: int) -> None:
        if self._queues.get(queue) is not st:
            raise ValueError(f"{queue} is no longer assigned to this consumer")
        self._drop_pull(st)
        st.position, st.dirty, st.retry_at = offset, True, 0.0
        st.version += 1
        self._wake.set()

    async def seek_to_begin(self, queue: MessageQueue) -> None:
        """Reads the queue from its first stored message on."""
        st = self._state(queue)
        self._seek(queue, st, await queue_offset_request(self.instance, RequestCode.GET_MIN_OFFSET, queue))

    async def seek_to_end(self, queue: MessageQueue) -> None:
        """Reads only messages stored from now on."""
        st = self._state(queue)
        self._seek(queue, st, await queue_offset_request(self.instance, RequestCode.GET_MAX_OFFSET, queue))

    def position(self, queue: MessageQueue) -> int | None:
        """The next offset `poll` reads from the queue (None until the first poll resolves it)."""
        return self._state(queue).position

    async def committed(self, queue: MessageQueue) -> int | None:
        """The group's offset for the queue as the broker has it (QUERY_CONSUMER_OFFSET); None
        when it has none."""
        return await self._query_committed(queue)

    async def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """Commits positions (UPDATE_CONSUMER_OFFSET to each queue's broker): `offsets` (queue ->
        next offset to read), or, when None, the position of every queue that poll or seek
        moved since the last commit."""
        todo = dict(self._to_commit)
        self._to_commit.clear()
        cleaned: list[_QueueState] = []
        if offsets is None:
            for mq, st in self._queues.items():
                if st.dirty and st.position is not None:
                    todo[mq] = st.position
                    cleaned.append(st)
                    st.dirty = False
        else:
            todo.update(offsets)
        try:
            # One after the other, as Java's offset store does: Apache RocketMQ 4.9.7 creates a
            # group's offset table on its first commit without a lock (ConsumerOffsetManager.
            # commitOffset), so concurrent first commits of several queues lose all but one.
            for mq, offset in todo.items():
                await self._commit_one(mq, offset)
        except BaseException:
            for st in cleaned:
                st.dirty = True
            raise

    async def _commit_one(self, mq: MessageQueue, offset: int) -> None:
        addr = await queue_master_addr(self.instance, mq)
        ext = UpdateConsumerOffsetRequestHeader(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, commit_offset=offset
        ).to_ext()
        reply = await self.instance.invoke(
            addr, RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, ext=ext)
        )
        check_reply(reply, f"UPDATE_CONSUMER_OFFSET of {mq}")

    async def _auto_commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.auto_commit_interval)
            try:
                await self.commit()
            except (FerroMQError, OSError) as e:
                logger.warning("auto-commit of group %s failed: %s", self.group, e)

    # -- polling -------------------------------------------------------------------------------

    async def poll(self, timeout: float | None = None) -> list[ReceivedMessage]:
        """The messages that arrived on the assigned queues (up to `pull_batch_size` per queue),
        waiting up to `timeout` seconds (default `poll_timeout`) for some. Returns [] when none
        came in time. Positions move past what is returned (and past messages the tag filter
        drops).

        Each queue has one pull in flight, which the broker holds until a message comes: a
        poll returns as soon as one answers, and a pull that answers between polls waits for
        the next one (so `poll(0)` returns only what has already arrived)."""
        if not self._started:
            raise RuntimeError("the consumer is not started")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.poll_timeout if timeout is None else timeout)
        async with self._poll_lock:
            while self._started:
                self._wake.clear()
                now = loop.time()
                pulls: list[asyncio.Future[Any]] = []
                for mq, st in self._queues.items():
                    if st.task is None and st.retry_at <= now:
                        st.task = loop.create_task(self._pull(mq, st, st.version), name=f"pull {mq}")
                    if st.task is not None:
                        pulls.append(st.task)
                found = self._harvest(now)
                if found:
                    return found
                if now >= deadline:
                    return []
                # Until the deadline, a queue's backoff ends, or a pull answers.
                wait = min(
                    [deadline - now, *(st.retry_at - now for st in self._queues.values() if st.task is None)]
                )
                waker = loop.create_task(self._wake.wait())
                try:
                    await asyncio.wait(
                        [*pulls, waker], timeout=max(wait, 0.0), return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    waker.cancel()
                    await asyncio.gather(waker, return_exceptions=True)
        return []

    def _harvest(self, now: float) -> list[ReceivedMessage]:
        """The messages of the pulls that have answered; their positions move past them."""
        out: list[ReceivedMessage] = []
        for mq, st in self._queues.items():
            task = st.task
            if task is None or not task.done():
                continue
            st.task = None
            if task.cancelled():
                continue
            error = task.exception()
            if error is None:
                outcome = task.result()
                if outcome.version == st.version:
                    if st.position != outcome.next_offset:
                        st.position, st.dirty = outcome.next_offset, True
                    out += outcome.messages
            elif isinstance(error, FerroMQError | OSError):
                logger.warning("group %s: pull from %s failed: %s", self.group, mq, error)
                st.retry_at = now + PULL_ERROR_BACKOFF
            else:
                raise error
        return out

    def _skip(self, st: _QueueState, version: int, old: int, new: int) -> None:
        """A pull moved on without messages to deliver (all filtered out, or the broker
        corrected the offset): the position follows."""
        if st.version == version and st.position == old:
            st.position, st.dirty = new, True

    async def _pull(self, mq: MessageQueue, st: _QueueState, version: int) -> _Outcome:
        """The queue's pull: finds the start position if needed, then pulls (held by the broker
        when nothing is there) until messages pass the tag filter."""
        loop = asyncio.get_running_loop()
        if st.position is None:
            position = await self._initial_position(mq)
            if st.version != version:
                return _Outcome(version, position)
            if st.position is None:
                st.position = position
        offset = st.position
        sub = self._subscription(mq.topic)
        addr = await queue_master_addr(self.instance, mq)
        while True:
            ext = PullMessageRequestHeader(
                consumer_group=self.group,
                topic=mq.topic,
                queue_id=mq.queue_id,
                queue_offset=offset,
                max_msg_nums=self.pull_batch_size,
                sys_flag=PULL_FLAG_SUBSCRIPTION | PULL_FLAG_SUSPEND | PULL_FLAG_LITE_PULL,
                commit_offset=0,
                suspend_timeout_millis=int(BROKER_SUSPEND_MAX_TIME * 1000),
                subscription=sub.expression,
                sub_version=sub.version,
                expression_type="TAG",
            ).to_ext()
            sent = loop.time()
            reply = await self.instance.invoke(
                addr, RemotingCommand(code=RequestCode.PULL_MESSAGE, ext=ext), TIMEOUT_WHEN_SUSPEND
            )
            next_offset = PullMessageResponseHeader.next_begin_offset_of(reply.ext, offset)
            if reply.code == ResponseCode.SUCCESS:
                msgs = [m for m in decode_received(reply.body, mq.broker_name) if m.queue_offset >= offset]
                kept = [m for m in msgs if sub.matches(m)]
                if kept:
                    return _Outcome(version, next_offset, kept)
            elif reply.code == ResponseCode.PULL_OFFSET_MOVED:
                logger.warning(
                    "group %s: offset %d of %s is illegal (%s); moving to %d",
                    self.group,
                    offset,
                    mq,
                    reply.remark,
                    next_offset,
                )
            elif reply.code not in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                check_reply(reply, f"PULL_MESSAGE from {mq}")
            if next_offset != offset:
                self._skip(st, version, offset, next_offset)
                offset = next_offset
            elif reply.code != ResponseCode.SUCCESS and loop.time() - sent < HELD_AT_LEAST:
                await asyncio.sleep(PULL_ERROR_BACKOFF)
