"""PushConsumer (RocketMQ's DefaultMQPushConsumer): subscribes to topics, pulls the queues the
group assigns it with long polling, and hands messages to a listener, concurrently or in order.

    async with PushConsumer("OrderGroup", "127.0.0.1:9876") as consumer:   # or start() / stop()
        ...

`subscribe()` and `register_listener()` come before `start()`:

    consumer = PushConsumer("OrderGroup", "127.0.0.1:9876")
    consumer.subscribe("Orders", "TagA || TagB")

    async def on_messages(msgs: list[ReceivedMessage]) -> ConsumeStatus:
        ...
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.register_listener(on_messages)
    await consumer.start()

Delivery is at least once. In CLUSTERING mode a failed message (RECONSUME_LATER, or an exception)
goes back to the broker and returns through `%RETRY%<group>` after a delay, with `reconsume_times`
one higher; after `max_reconsume_times` retries it goes to `%DLQ%<group>`. An orderly listener sees
a queue's messages one batch at a time, in queue order; a suspended batch is retried in place.

This module pulls and keeps the group's state; `consume_concurrently` and `consume_orderly` hand the
pulled messages to the listener (Java's ConsumeMessageConcurrentlyService and
ConsumeMessageOrderlyService), with what they share in `consume_service`.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson

from ferromq import _store
from ferromq.acl.signing import credentials_of

# The constants re-exported `as` themselves moved from here to the consume services.
from ferromq.client.consume_concurrently import LOCAL_RETRY_DELAY as LOCAL_RETRY_DELAY
from ferromq.client.consume_concurrently import (
    ConcurrentListener,
    ConsumeMessageConcurrentlyService,
    ConsumeStatus,
)
from ferromq.client.consume_orderly import (
    ORDERLY_LOCK_WAIT,
    ConsumeMessageOrderlyService,
    ConsumeOrderlyStatus,
    OrderlyListener,
)
from ferromq.client.consume_service import DEFAULT_MAX_RECONSUME_TIMES as DEFAULT_MAX_RECONSUME_TIMES
from ferromq.client.consume_service import ConsumeService, log_crash
from ferromq.client.instance import ClientInstance
from ferromq.client.lifecycle import AsyncLifecycle
from ferromq.client.message import MessageQueue, ReceivedMessage, decode_received
from ferromq.client.offset_store import (
    NETWORK_ERRORS,
    LocalFileOffsetStore,
    OffsetStore,
    RemoteBrokerOffsetStore,
    broker_addr,
)
from ferromq.client.rebalance import (
    AllocateMessageQueueAveragely,
    AllocateStrategy,
    ConsumeFromWhere,
    MessageModel,
    ProcessQueue,
    Rebalancer,
    allocate_function,
)
from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    RETRY_PREFIX,
)
from ferromq.protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader

logger = logging.getLogger(__name__)

# Client-side wait beyond the broker's hold time before a pull counts as lost.
PULL_TIMEOUT_MARGIN = 15.0
# Back-off after a pull the broker refused, and after one that failed on the network.
PULL_BACKOFF_REFUSED = 1.0
PULL_BACKOFF_ERROR = 3.0
# The longest flow control waits before looking again (it also wakes when messages are consumed).
FLOW_CONTROL_WAIT = 1.0


class ExpressionType(StrEnum):
    """How a subscription expression filters: by tag (`TagA || TagB`, `*`) or by SQL92 over the
    properties (the broker must have `enablePropertyFilter`)."""

    TAG = "TAG"
    SQL92 = "SQL92"


@dataclass(frozen=True)
class SubscriptionData:
    """One topic's subscription as heartbeats and pulls carry it."""

    topic: str
    sub_string: str
    expression_type: ExpressionType = ExpressionType.TAG
    tags: tuple[str, ...] = ()
    codes: tuple[int, ...] = ()
    sub_version: int = 0

    @classmethod
    def build(
        cls,
        topic: str,
        expression: str | None = "*",
        expression_type: ExpressionType | str = ExpressionType.TAG,
    ) -> SubscriptionData:
        """Parses a TAG expression (`*`, `TagA || TagB`) into tags and their Java hash codes."""
        etype = ExpressionType(str(expression_type).upper())
        version = int(time.time() * 1000)
        text = (expression or "").strip()
        if etype == ExpressionType.SQL92:
            if not text:
                raise ValueError("an SQL92 subscription needs an expression")
            return cls(topic, text, etype, sub_version=version)
        if text in ("", "*"):
            return cls(topic, "*", etype, sub_version=version)
        tags = tuple(dict.fromkeys(t.strip() for t in text.split("||") if t.strip()))
        if not tags:
            raise ValueError(f"subscription {expression!r} has no tags")
        if "*" in tags:
            return cls(topic, "*", etype, sub_version=version)
        codes = tuple(_store.java_hash(t) for t in tags)
        return cls(topic, text, etype, tags, codes, version)

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": False,
            "topic": self.topic,
            "subString": self.sub_string,
            "tagsSet": list(self.tags),
            "codeSet": list(self.codes),
            "subVersion": self.sub_version,
            "expressionType": self.expression_type.value,
        }

    def matches(self, msg: ReceivedMessage) -> bool:
        """The client-side check after the broker's hash filter: the exact tag."""
        if self.expression_type != ExpressionType.TAG or not self.tags:
            return True
        return msg.tags in self.tags


def _timestamp_ms(value: int | float | str | datetime.datetime | None) -> int:
    """`consume_timestamp`: milliseconds since the epoch, a datetime, or Java's `yyyyMMddHHmmss`
    (local time). None: half an hour ago, RocketMQ's default."""
    if value is None:
        return int((time.time() - 1800) * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, str):
        return int(time.mktime(time.strptime(value, "%Y%m%d%H%M%S")) * 1000)
    return int(value)


class PushConsumer(AsyncLifecycle):
    """Consumes subscribed topics with a listener (RocketMQ's DefaultMQPushConsumer).

    Options (timings in seconds unless named `_ms`):

    - `instance`: a shared ClientInstance (else the consumer owns one; `instance_name` names it,
      which two consumers of one group in one process need to get distinct client ids).
    - `message_model`: CLUSTERING (the group shares the queues; offsets on the brokers) or
      BROADCASTING (every member takes every queue; offsets in `offset_store_dir`, default
      `~/.ferromq/offsets/<client id>/<group>.json`).
    - `consume_from_where`, `consume_timestamp`: where a group without a stored offset starts:
      the end of each queue, its start, or the message stored closest to the timestamp.
    - `allocate`: how CLUSTERING members split queues (a strategy from `rebalance`, or a callable
      `(group, client_id, sorted_queues, sorted_client_ids) -> queues`).
    - `pull_batch_size`, `consume_batch_size`: messages per pull, per listener call.
    - `max_concurrency`: listener calls in flight at once (sync listeners run in a pool this big).
    - `max_reconsume_times`: retries before a message goes to `%DLQ%<group>` (-1: RocketMQ's
      default, 16 for concurrent and unlimited for orderly listeners).
    - `rebalance_interval`, `persist_interval`, `lock_interval`: background periods.
    - `suspend_timeout_ms`: how long the broker holds a pull that finds nothing.
    - `suspend_current_queue_ms`: orderly: pause after SUSPEND_CURRENT_QUEUE_A_MOMENT.
    - `pull_threshold_for_queue`, `consume_concurrently_max_span`: flow control per queue.
    - `shutdown_timeout`: how long `stop()` waits for listener calls in flight.
    """

    def __init__(
        self,
        group: str,
        namesrv: str,
        *,
        instance: ClientInstance | None = None,
        instance_name: str | None = None,
        message_model: MessageModel | str = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere | str = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: int | float | str | datetime.datetime | None = None,
        allocate: AllocateStrategy = AllocateMessageQueueAveragely,
        pull_batch_size: int = 32,
        consume_batch_size: int = 1,
        max_concurrency: int = 16,
        max_reconsume_times: int = 16,
        rebalance_interval: float = 20.0,
        persist_interval: float = 5.0,
        lock_interval: float = 20.0,
        suspend_timeout_ms: int = 15000,
        suspend_current_queue_ms: int = 1000,
        pull_threshold_for_queue: int = 1000,
        consume_concurrently_max_span: int = 2000,
        shutdown_timeout: float = 10.0,
        offset_store_dir: str | Path | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        if not group:
            raise ValueError("consumer group is empty")
        if pull_batch_size < 1 or consume_batch_size < 1 or max_concurrency < 1:
            raise ValueError("batch sizes and max_concurrency must be at least 1")
        self.group = group
        self._own_instance = instance is None
        self.instance = instance or ClientInstance(
            namesrv, instance_name=instance_name, credentials=credentials_of(access_key, secret_key)
        )
        self.message_model = MessageModel(str(message_model).upper())
        self.consume_from_where = ConsumeFromWhere(str(consume_from_where).upper())
        self.consume_timestamp_ms = _timestamp_ms(consume_timestamp)
        self._allocate = allocate_function(allocate)
        self.pull_batch_size = pull_batch_size
        self.consume_batch_size = consume_batch_size
        self.max_concurrency = max_concurrency
        self.max_reconsume_times = max_reconsume_times
        self.rebalance_interval = rebalance_interval
        self.persist_interval = persist_interval
        self.lock_interval = lock_interval
        self.suspend_timeout_ms = suspend_timeout_ms
        self.suspend_current_queue_ms = suspend_current_queue_ms
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.shutdown_timeout = shutdown_timeout
        self.offset_store_dir = offset_store_dir

        self._subscriptions: dict[str, SubscriptionData] = {}
        self._listener: Callable[[list[ReceivedMessage]], Any] | None = None
        self._listener_is_async = False
        self.orderly = False

        self._started = False
        self._stopping = False
        self._offsets: OffsetStore | None = None
        self._rebalancer: Rebalancer | None = None
        self._service: ConsumeService | None = None
        """Hands the pulled messages to the listener (made at start, as the listener says)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._side_tasks: set[asyncio.Task[None]] = set()
        self._wakeup = asyncio.Event()
        self._wake_handle: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return f"PushConsumer(group={self.group!r}, model={self.message_model}, started={self._started})"

    def __del__(self) -> None:
        if getattr(self, "_started", False):
            warnings.warn(f"PushConsumer {self.group!r} was never stopped", ResourceWarning, stacklevel=1)

    # -- configuration -------------------------------------------------------------------------

    def subscribe(
        self, topic: str, expression: str = "*", expression_type: ExpressionType | str = ExpressionType.TAG
    ) -> None:
        """Consumes `topic`, filtered by a TAG expression (`*`, `TagA || TagB`) or an SQL92 one.
        Subscribing again replaces the topic's expression."""
        if not topic:
            raise ValueError("topic is empty")
        self._subscriptions[topic] = SubscriptionData.build(topic, expression, expression_type)
        if self._started:
            self._after_subscription_change()

    def unsubscribe(self, topic: str) -> None:
        """Stops consuming `topic` (its queues are released at the next rebalance)."""
        self._subscriptions.pop(topic, None)
        if self._started:
            self._after_subscription_change()

    def register_listener(
        self, listener: ConcurrentListener | OrderlyListener, *, orderly: bool = False
    ) -> None:
        """Sets the listener: `(msgs) -> ConsumeStatus` (concurrent) or, with `orderly=True`,
        `(msgs) -> ConsumeOrderlyStatus`. Sync listeners run in a worker thread; an exception
        counts as RECONSUME_LATER (SUSPEND_CURRENT_QUEUE_A_MOMENT when orderly)."""
        if self._started:
            raise RuntimeError("register the listener before start()")
        self._listener = listener
        self._listener_is_async = inspect.iscoroutinefunction(listener) or (
            not inspect.isfunction(listener) and inspect.iscoroutinefunction(type(listener).__call__)
        )
        self.orderly = orderly

    def register_orderly_listener(self, listener: OrderlyListener) -> None:
        """`register_listener(listener, orderly=True)`."""
        self.register_listener(listener, orderly=True)

    @property
    def client_id(self) -> str:
        """`ip@instance`: how brokers and the other members of the group know this consumer."""
        return self.instance.client_id

    def subscriptions(self) -> dict[str, SubscriptionData]:
        """The subscriptions by topic (in CLUSTERING mode, after start, with `%RETRY%<group>`)."""
        return dict(self._subscriptions)

    def assigned_queues(self) -> list[MessageQueue]:
        """The queues this consumer pulls now, sorted."""
        if self._rebalancer is None:
            return []
        return sorted(self._rebalancer.process_queues)

    def cached_messages(self) -> dict[MessageQueue, int]:
        """Per assigned queue, the messages pulled and not consumed yet (flow control pauses a
        queue's pulls above `pull_threshold_for_queue`)."""
        if self._rebalancer is None:
            return {}
        return {mq: pq.count for mq, pq in sorted(self._rebalancer.process_queues.items())}

    @property
    def _clustering(self) -> bool:
        return self.message_model == MessageModel.CLUSTERING

    @property
    def _retry_topic(self) -> str:
        return RETRY_PREFIX + self.group

    # -- ClientInstance member -----------------------------------------------------------------

    def heartbeat_data(self) -> dict[str, Any]:
        """The group's entry of a HEART_BEAT body (`ConsumerData`, Java's enum names)."""
        return {
            "groupName": self.group,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            "unitMode": False,
            "subscriptionDataSet": [s.to_json() for s in self._subscriptions.values()],
        }

    def subscribed_topics(self) -> list[str]:
        """The topics whose routes the instance keeps fresh (with the retry topic once started)."""
        return list(self._subscriptions)

    def on_consumer_ids_changed(self) -> None:
        """The broker says the group changed: rebalance now."""
        if self._started:
            self._wakeup.set()

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Registers with the brokers, takes this consumer's share of the queues and starts
        pulling. Subscriptions and the listener must be set before."""
        if self._started:
            return
        if self._listener is None:
            raise RuntimeError("register a listener before start()")
        if not self._subscriptions:
            raise RuntimeError("subscribe to a topic before start()")
        existing = self.instance.consumers.get(self.group)
        if existing is not None and existing is not self:
            raise RuntimeError(f"the client instance already has a consumer of group {self.group}")
        if self._clustering:
            self._subscriptions[self._retry_topic] = SubscriptionData.build(self._retry_topic, "*")
            self._offsets = RemoteBrokerOffsetStore(self.instance, self.group)
        else:
            self._offsets = LocalFileOffsetStore.for_client(
                self.instance.client_id, self.group, self.offset_store_dir
            )
        await self._offsets.load()
        self._rebalancer = Rebalancer(
            self.instance,
            self.group,
            self,
            self._offsets,
            message_model=self.message_model,
            consume_from_where=self.consume_from_where,
            consume_timestamp_ms=self.consume_timestamp_ms,
            allocate=self._allocate,
            orderly=self.orderly,
        )
        service_type = ConsumeMessageOrderlyService if self.orderly else ConsumeMessageConcurrentlyService
        self._service = service_type(self)
        self._stopping = False
        self._wakeup = asyncio.Event()
        self.instance.consumers[self.group] = self
        self._started_at_ms = int(time.time() * 1000)
        self._started = True
        try:
            await self.instance.start()
            for topic in self.subscribed_topics():
                try:
                    await self.instance.route(topic, refresh=True)
                except Exception as e:
                    logger.warning("group %s: route of %s failed: %s", self.group, topic, e)
            await self.instance.heartbeat_all()
            await self._rebalance_once()
        except BaseException:
            await self.stop()  # cancelled or failed half-way: leave nothing behind
            raise
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._rebalance_loop(), name=f"rebalance-{self.group}")]
        self._tasks.append(loop.create_task(self._persist_loop(), name=f"persist-offsets-{self.group}"))
        self._tasks += self._service.start()  # orderly, CLUSTERING: lock renewal
        for t in self._tasks:
            t.add_done_callback(log_crash)
        logger.info("push consumer %s started as %s (%s)", self.group, self.client_id, self.message_model)

    async def stop(self) -> None:
        """Stops pulling, waits (up to `shutdown_timeout`) for listener calls in flight, persists
        the offsets, releases orderly locks and unregisters the group from the brokers."""
        if not self._started:
            return
        self._started = False
        rb, offsets, service = self._rebalancer, self._offsets, self._service
        assert rb is not None and offsets is not None and service is not None
        if self._wake_handle is not None:
            self._wake_handle.cancel()
        async with rb.round_lock:  # a rebalance round in progress ends first
            for t in self._tasks:
                t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self._stopping = True
        pqs = list(rb.process_queues.values())
        # 1. No more pulls, no more local retries.
        stopping = [pq.pull_task for pq in pqs if pq.pull_task is not None] + service.retry_tasks()
        for t in stopping:
            t.cancel()
        await asyncio.gather(*stopping, return_exceptions=True)
        # 2. Listener calls in flight finish; queued ones do not start (their offsets stay put).
        in_flight = service.stop_consuming(pqs)
        if in_flight:
            _, late = await asyncio.wait(in_flight, timeout=self.shutdown_timeout)
            if late:
                logger.warning(
                    "group %s: %d listener call(s) did not end within %.1fs",
                    self.group,
                    len(late),
                    self.shutdown_timeout,
                )
            for t in late:
                t.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)
        await rb.wait_released(self.shutdown_timeout)
        # 3. Offsets, then locks.
        for pq in pqs:
            offsets.update(pq.mq, pq.commit_offset(), increase_only=True)
        try:
            await offsets.persist([pq.mq for pq in pqs], wait=True)
        except Exception:
            logger.exception("group %s: persisting offsets at stop failed", self.group)
        await rb.unlock_all()
        rb.drop_all()
        if self._side_tasks:
            await asyncio.gather(*self._side_tasks, return_exceptions=True)
        # 4. Leave the group.
        if self._own_instance:
            await self.instance.stop()
            self.instance.consumers.pop(self.group, None)
        else:
            if self.instance.consumers.get(self.group) is self:
                del self.instance.consumers[self.group]
            await self._unregister()
        service.shutdown()
        if self._clustering:
            self._subscriptions.pop(self._retry_topic, None)
        logger.info("push consumer %s stopped", self.group)

    async def _unregister(self) -> None:
        """Leaves the group on every broker (a shared instance stays connected)."""
        await self.instance.unregister_group(consumer_group=self.group)

    def _after_subscription_change(self) -> None:
        async def refresh() -> None:
            for topic in self.subscribed_topics():
                try:
                    await self.instance.route(topic)
                except Exception as e:
                    logger.debug("route of %s failed: %s", topic, e)
            await self.instance.heartbeat_all()
            self._wakeup.set()

        self._spawn_side(refresh())

    def _spawn_side(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)
        task.add_done_callback(log_crash)

    def running_info(self) -> bytes:
        """GET_CONSUMER_RUNNING_INFO's answer (Java's ConsumerRunningInfo, for mqadmin
        consumerStatus and consumerProgress -s): properties, subscriptions and, per held queue,
        the ProcessQueueInfo. `mqTable` has MessageQueue keys written as objects, as fastjson does
        (the Java tools read it so); no statusTable, as this client keeps no consume RT/TPS."""
        props = {
            "PROP_NAMESERVER_ADDR": ";".join(self.instance.namesrv_addrs),
            "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
            "PROP_CONSUMEORDERLY": "true" if self.orderly else "false",
            "PROP_THREADPOOL_CORE_SIZE": str(self.max_concurrency),
            "PROP_CLIENT_VERSION": "V4_9_7",
            "PROP_CONSUMER_START_TIMESTAMP": str(getattr(self, "_started_at_ms", 0)),
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            "language": "PYTHON",
        }
        now_wall, now_mono = time.time(), time.monotonic()
        entries = []
        rb, offsets = self._rebalancer, self._offsets
        for mq, pq in sorted(rb.process_queues.items() if rb else []):
            cached = list(pq.msgs)
            info = {
                "commitOffset": offsets.read(mq) if offsets is not None else -1,
                "cachedMsgMinOffset": cached[0] if cached else 0,
                "cachedMsgMaxOffset": cached[-1] if cached else 0,
                "cachedMsgCount": len(cached),
                "cachedMsgSizeInMiB": sum(len(m.body) for m in pq.msgs.values()) // (1024 * 1024),
                "transactionMsgMinOffset": 0,
                "transactionMsgMaxOffset": 0,
                "transactionMsgCount": 0,
                "locked": pq.locked,
                "tryUnlockTimes": 0,
                "lastLockTimestamp": int((now_wall - (now_mono - pq.last_lock)) * 1000)
                if pq.last_lock
                else 0,
                "droped": pq.dropped,
                "lastPullTimestamp": _wall_ms(pq.last_pull, now_wall, now_mono),
                "lastConsumeTimestamp": int(pq.last_consume * 1000),
            }
            entries.append(orjson.dumps(mq.to_json()) + b":" + orjson.dumps(info))
        head: bytes = orjson.dumps(
            {"properties": props, "subscriptionSet": [s.to_json() for s in self._subscriptions.values()]}
        )
        return head[:-1] + b',"mqTable":{' + b",".join(entries) + b"}}"

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Moves this consumer's offsets on `topic` (a broker relays an operator's reset: mqadmin
        resetOffsetByTime, `ferromq admin reset-offset`). Held queues are dropped and committed at
        the new offsets; a rebalance round takes them again from there."""
        rb = self._rebalancer
        if rb is None or not self._started:
            return
        wanted = {mq: off for mq, off in offsets.items() if mq.topic == topic}
        done = await rb.reset_offsets(wanted)
        logger.info("group %s: %d queue(s) of %s reset by an operator", self.group, len(done), topic)
        self._wakeup.set()

    # -- background loops ----------------------------------------------------------------------

    async def rebalance(self) -> None:
        """Runs a rebalance round now (they also run every `rebalance_interval` and when the
        broker reports a group change)."""
        if self._started:
            await self._rebalance_once()

    async def _rebalance_once(self) -> None:
        rb = self._rebalancer
        assert rb is not None
        try:
            await rb.rebalance(self.subscribed_topics())
        except Exception:
            logger.exception("group %s: rebalance failed", self.group)
        if rb.lock_pending and self._wake_handle is None:
            # A queue is still locked by its previous owner (or being released): look again soon.
            def wake() -> None:
                self._wake_handle = None
                self._wakeup.set()

            delay = min(1.0, self.rebalance_interval)
            self._wake_handle = asyncio.get_running_loop().call_later(delay, wake)

    async def _rebalance_loop(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self.rebalance_interval):
                    await self._wakeup.wait()
            except TimeoutError:
                pass
            self._wakeup.clear()
            await self._rebalance_once()

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(self.persist_interval)
            try:
                await self.persist_offsets()
            except Exception:
                logger.exception("group %s: persisting offsets failed", self.group)

    async def persist_offsets(self, *, wait: bool = False) -> None:
        """Persists the offsets of the assigned queues (UPDATE_CONSUMER_OFFSET, or the local file)."""
        rb, offsets = self._rebalancer, self._offsets
        if rb is None or offsets is None:
            return
        now = time.monotonic()
        mqs = []
        for mq, pq in list(rb.process_queues.items()):
            if rb.needs_locks and not pq.lock_valid(now):
                continue
            offsets.update(mq, pq.commit_offset(), increase_only=True)
            mqs.append(mq)
        await offsets.persist(mqs, wait=wait)

    # -- RebalanceHost -------------------------------------------------------------------------

    def queue_added(self, pq: ProcessQueue) -> None:
        assert self._service is not None
        pq.pull_task = asyncio.get_running_loop().create_task(self._pull_loop(pq), name=f"pull-{pq.mq}")
        pq.pull_task.add_done_callback(log_crash)
        self._service.queue_added(pq)

    async def queue_removed(self, pq: ProcessQueue) -> None:
        assert self._service is not None
        if pq.pull_task is not None:
            pq.pull_task.cancel()
            await asyncio.gather(pq.pull_task, return_exceptions=True)
        await self._service.queue_removed(pq)

    # -- pulling -------------------------------------------------------------------------------

    def _subscription_of(self, topic: str) -> SubscriptionData | None:
        return self._subscriptions.get(topic)

    async def _pull_loop(self, pq: ProcessQueue) -> None:
        while not pq.dropped and not self._stopping:
            try:
                delay = await self._pull_once(pq)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("group %s: pulling %s failed", self.group, pq.mq)
                delay = PULL_BACKOFF_ERROR
            if delay:
                await asyncio.sleep(delay)

    def _flow_controlled(self, pq: ProcessQueue) -> bool:
        if pq.count > self.pull_threshold_for_queue:
            return True
        return not self.orderly and pq.span > self.consume_concurrently_max_span

    async def _pull_once(self, pq: ProcessQueue) -> float:
        """One pull of the queue; returns how long to wait before the next one."""
        mq = pq.mq
        assert self._offsets is not None and self._rebalancer is not None and self._service is not None
        if self._flow_controlled(pq):
            # Too much pulled and not consumed: wait until the listener catches up a little.
            pq.has_space.clear()
            try:
                async with asyncio.timeout(FLOW_CONTROL_WAIT):
                    await pq.has_space.wait()
            except TimeoutError:
                pass
            return 0.0
        if self._rebalancer.needs_locks and not pq.lock_valid(time.monotonic()):
            return ORDERLY_LOCK_WAIT
        sub = self._subscription_of(mq.topic)
        if sub is None:
            return PULL_BACKOFF_REFUSED  # unsubscribed: the next rebalance drops the queue
        addr = await broker_addr(self.instance, mq)
        if addr is None:
            logger.warning("group %s: no broker address for %s", self.group, mq)
            return PULL_BACKOFF_ERROR
        commit_offset = self._offsets.read(mq) if self._clustering else 0
        sys_flag = (
            PULL_FLAG_SUSPEND | PULL_FLAG_SUBSCRIPTION | (PULL_FLAG_COMMIT_OFFSET if commit_offset > 0 else 0)
        )
        cmd = RemotingCommand(
            code=RequestCode.PULL_MESSAGE,
            ext=PullMessageRequestHeader(
                consumer_group=self.group,
                topic=mq.topic,
                queue_id=mq.queue_id,
                queue_offset=pq.next_offset,
                max_msg_nums=self.pull_batch_size,
                sys_flag=sys_flag,
                commit_offset=max(commit_offset, 0),
                suspend_timeout_millis=self.suspend_timeout_ms,
                subscription=sub.sub_string,
                sub_version=sub.sub_version,
                expression_type=sub.expression_type.value,
            ).to_ext(),
        )
        timeout = self.suspend_timeout_ms / 1000.0 + PULL_TIMEOUT_MARGIN
        try:
            reply = await self.instance.invoke(addr, cmd, timeout)
        except NETWORK_ERRORS as e:
            logger.warning("group %s: pull of %s from %s failed: %s", self.group, mq, addr, e)
            return PULL_BACKOFF_ERROR
        pq.last_pull = time.monotonic()
        if pq.dropped or self._stopping:
            return 0.0
        next_begin = PullMessageResponseHeader.next_begin_offset_of(reply.ext, pq.next_offset)
        if reply.code == ResponseCode.SUCCESS:
            msgs = [m for m in self._decode(reply.body, mq) if sub.matches(m)]
            pq.add(msgs, next_begin, orderly=self.orderly)
            if msgs:
                self._service.submit(pq, msgs)
        elif reply.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            pq.next_offset = next_begin
        elif reply.code == ResponseCode.PULL_OFFSET_MOVED:
            logger.warning(
                "group %s: offset %d of %s is gone (%s); continuing at %d",
                self.group,
                pq.next_offset,
                mq,
                reply.remark,
                next_begin,
            )
            moved = next_begin != pq.next_offset
            pq.next_offset = next_begin
            self._offsets.update(mq, next_begin)
            await self._offsets.persist([mq])
            return 0.0 if moved else PULL_BACKOFF_REFUSED
        else:
            logger.warning(
                "group %s: broker refused the pull of %s at %d: code %d %s",
                self.group,
                mq,
                pq.next_offset,
                reply.code,
                reply.remark,
            )
            return PULL_BACKOFF_REFUSED
        self._offsets.update(mq, pq.commit_offset(), increase_only=True)
        return 0.0

    def _decode(self, body: bytes, mq: MessageQueue) -> list[ReceivedMessage]:
        try:
            return decode_received(body, mq.broker_name)
        except ValueError:
            pass
        out = []  # one record is unreadable (an unknown compression): skip only that one
        for stored in decode_messages(body):
            try:
                out.append(ReceivedMessage.from_stored(stored, mq.broker_name))
            except ValueError as e:
                logger.error(
                    "group %s: message at offset %d of %s is unreadable, skipped: %s",
                    self.group,
                    stored.queue_offset,
                    mq,
                    e,
                )
        return out


def _wall_ms(monotonic: float, now_wall: float, now_mono: float) -> int:
    """A time.monotonic() instant as wall-clock milliseconds."""
    return int((now_wall - (now_mono - monotonic)) * 1000)


__all__ = [
    "ConcurrentListener",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "ExpressionType",
    "MessageModel",
    "OrderlyListener",
    "PushConsumer",
    "SubscriptionData",
]
