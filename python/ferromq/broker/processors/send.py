"""SEND_MESSAGE (V1 header), SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (short header) and
CONSUMER_SEND_MSG_BACK."""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ferromq import _store
from ferromq.broker.processors.context import SendContext
from ferromq.broker.topics import NOT_ALLOWED_SEND, TopicConfig, topic_problem
from ferromq.errors import (
    BrokerError,
    NoPermissionError,
    SubscriptionGroupNotExistError,
    TopicNotExistError,
)
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import FLAG_RESPONSE, RemotingCommand
from ferromq.protocol.constants import (
    DLQ_PREFIX,
    PROPERTY_CLUSTER,
    PROPERTY_DELAY,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TRAN_MSG,
    PROPERTY_WAIT,
    RETRY_PREFIX,
    SYSFLAG_MULTI_TAGS,
    TRANS_HALF_TOPIC,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_TYPE_MASK,
)
from ferromq.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
)
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler, ImmediateHandler
from ferromq.store import PropertyEdits

logger = logging.getLogger(__name__)

# Clients from this version on may set maxReconsumeTimes themselves (MQVersion V3_4_9).
VERSION_WITH_MAX_RECONSUME = 121


def handlers(broker: SendContext) -> dict[int, Handler]:
    async def send_back(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return await consumer_send_msg_back(broker, conn, cmd)

    return {RequestCode.CONSUMER_SEND_MSG_BACK: send_back}


def immediate_handlers(broker: SendContext) -> dict[int, ImmediateHandler]:
    """The sends, answered without a task: at once in ASYNC_FLUSH mode, through a shared flush
    wait in SYNC_FLUSH mode and a shared slave wait in SYNC_MASTER mode."""
    waiter = StoreWaits(OffsetWaiter(broker.store.flushed), OffsetWaiter(broker.replication.replicated))

    def send(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        return send_message(broker, waiter, conn, cmd)

    return {
        RequestCode.SEND_MESSAGE: send,
        RequestCode.SEND_MESSAGE_V2: send,
        RequestCode.SEND_BATCH_MESSAGE: send,
    }


class OffsetWaiter:
    """Sends waiting for an offset (on disk in SYNC_FLUSH, on a slave in SYNC_MASTER) share
    callbacks: at most one per loop iteration asks `ask` for the highest offset waited for, and
    its answer releases every send at or below that offset. (A callback per send costs a
    thread-to-loop wakeup per send.)"""

    def __init__(self, ask: Callable[[int], asyncio.Future[bool]]) -> None:
        self._ask_for = ask
        # (end offset, what to call with "flushed in time") in append order, hence offset order.
        self._waiting: collections.deque[tuple[int, Callable[[bool], None]]] = collections.deque()
        self._asked = 0
        self._ask_scheduled = False

    def wait(self, end_offset: int, then: Callable[[bool], None]) -> None:
        self._waiting.append((end_offset, then))
        if end_offset > self._asked and not self._ask_scheduled:
            self._ask_scheduled = True
            asyncio.get_running_loop().call_soon(self._ask)

    def _ask(self) -> None:
        self._ask_scheduled = False
        if not self._waiting:
            return
        target = self._waiting[-1][0]
        if target <= self._asked:
            return
        self._asked = target
        self._ask_for(target).add_done_callback(functools.partial(self._answered, target))

    def _answered(self, target: int, done: asyncio.Future[bool]) -> None:
        ok = not done.cancelled() and done.exception() is None and done.result()
        waiting = self._waiting
        while waiting and waiting[0][0] <= target:
            _, then = waiting.popleft()
            try:
                then(ok)
            except Exception:
                logger.exception("answering a send after the flush failed")
        if not ok and waiting and self._asked <= target:
            # Ask again for the sends this timed-out wait did not cover.
            self._asked = 0
            if not self._ask_scheduled:
                self._ask_scheduled = True
                asyncio.get_running_loop().call_soon(self._ask)


@dataclass(slots=True)
class StoreWaits:
    flush: OffsetWaiter
    replica: OffsetWaiter


# Java 4.9.7's remark for a put the store refuses (a slave among the reasons it gives).
SERVICE_NOT_AVAILABLE_REMARK = (
    "service not available now. It may be caused by one of the following reasons: the broker's disk "
    "is full, messages are put to the slave, message store has been shut down, etc."
)


def refuse_on_slave(broker: SendContext) -> None:
    """A slave stores only what its master streams (DefaultMessageStore.checkStoreStatus)."""
    if broker.config.is_slave:
        raise BrokerError(SERVICE_NOT_AVAILABLE_REMARK, ResponseCode.SERVICE_NOT_AVAILABLE)


# topic_problem is pure; producers send to few topics, so its regex runs once per name.
_topic_problem = functools.lru_cache(maxsize=4096)(topic_problem)


def _check_topic_for_send(broker: SendContext, h: SendMessageRequestHeader) -> TopicConfig:
    problem = _topic_problem(h.topic)
    if problem:
        raise BrokerError(problem, ResponseCode.SYSTEM_ERROR)
    if h.topic in NOT_ALLOWED_SEND:
        # NO_PERMISSION, as TopicValidator.isNotAllowedSendTopic answers in Java 4.9.7.
        raise NoPermissionError(f"Sending message to topic[{h.topic}] is forbidden.")
    if not broker.config.broker_permission & 2:
        raise NoPermissionError(f"the broker[{broker.config.broker_ip1}] sending message is forbidden")
    tc = broker.topics.get(h.topic)
    if tc is None:
        if h.topic.startswith(RETRY_PREFIX):
            tc = broker.topics.create_system_topic(h.topic, 1)
        else:
            tc = broker.topics.create_in_send(h.topic, h.default_topic, h.default_topic_queue_nums)
        if tc is None:
            raise TopicNotExistError(f"topic[{h.topic}] not exist, apply first please!")
        broker.registration_changed()
    if not tc.writable:
        raise NoPermissionError(f"the topic[{h.topic}] sending message is forbidden")
    return tc


# (topic, queue id, next queue offset, tags code or None) for `Broker.message_arrived`.
Arrived = tuple[str, int, int, int | None]


@functools.lru_cache(maxsize=16)
def _send_edits(cluster: str, batch: bool) -> PropertyEdits:
    """A send's edits: CLUSTER set; a single message loses WAIT unless delayed (4.9.7 keeps it only
    where it re-encodes the properties: delayed messages and the shared properties of a batch)."""
    return PropertyEdits([("set", PROPERTY_CLUSTER, cluster)], drop_wait=not batch)


def _is_transaction(properties: str) -> bool:
    """TRAN_MSG parses as true (Java's Boolean.parseBoolean). The substring test spares most sends
    the lookup."""
    if PROPERTY_TRAN_MSG not in properties:
        return False
    value = _store.get_property(properties, PROPERTY_TRAN_MSG)
    return value is not None and value.lower() == "true"


def send_message(
    broker: SendContext, waiter: StoreWaits, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand | Awaitable[RemotingCommand]:
    """Stores the message(s) of a send and answers; in SYNC_FLUSH or SYNC_MASTER mode (unless
    the message says WAIT=false) the answer is an awaitable that completes once the bytes are on
    disk and on a slave. Python decides where the message goes and how its properties change;
    one store call applies that to the raw properties, appends and dispatches."""
    refuse_on_slave(broker)
    h = SendMessageRequestHeader.from_ext(cmd.ext)
    tc = _check_topic_for_send(broker, h)
    queue_id = h.queue_id
    if queue_id < 0:
        queue_id = random.randrange(tc.write_queue_nums)
    if queue_id >= max(tc.write_queue_nums, tc.read_queue_nums):
        raise BrokerError(
            f"request queueId[{queue_id}] is illegal, {tc.topic_name} Producer: {conn.peer}",
            ResponseCode.SYSTEM_ERROR,
        )
    # The answer names the queue the producer asked for, as Java's does, even when the message is stored
    # elsewhere (a delay level's schedule queue, the transaction half queue, a DLQ).
    requested_queue_id = queue_id
    topic, sys_flag = h.topic, h.sys_flag
    if tc.topic_filter_type == "MULTI_TAG":
        sys_flag |= SYSFLAG_MULTI_TAGS
    cluster = broker.config.broker_cluster_name
    started = time.perf_counter_ns()
    if h.batch:
        result = broker.store.send_batch(
            topic,
            queue_id,
            cmd.body,
            h.properties,
            _send_edits(cluster, True),
            sys_flag=sys_flag,
            born_timestamp=h.born_timestamp,
            born_host=conn.peer,
        )
        broker.stats.put(result.topic, len(result), result.wrote_bytes, started)
        # Batches may mix tags: a held pull is woken whatever its filter (tags code None).
        batch_arrived: Arrived = (
            result.topic,
            result.queue_id,
            result.first_queue_offset + len(result),
            None,
        )
        reply_ext = SendMessageResponseHeader.broker_ext(
            ",".join(result.msg_ids),
            requested_queue_id,
            result.first_queue_offset,
            str(broker.config.region_id),
            broker.config.trace_on,
        )
        return _answer(broker, waiter, result.wait, result.end_offset, cmd, batch_arrived, reply_ext)

    edits = _send_edits(cluster, False)
    dead_letter = topic.startswith(RETRY_PREFIX) and _dead_letter(broker, cmd, h, topic)
    half = _is_transaction(h.properties)
    if dead_letter or half:
        changes = [("set", PROPERTY_CLUSTER, cluster)]
        if dead_letter:
            topic, queue_id = DLQ_PREFIX + topic[len(RETRY_PREFIX) :], 0
            broker.topics.create_system_topic(topic, 1)
            broker.registration_changed()
            changes.append(("remove", PROPERTY_DELAY, ""))
        if half:
            if broker.config.reject_transaction_message:
                raise NoPermissionError(
                    f"the broker[{broker.config.broker_ip1}] sending transaction message is forbidden"
                )
            # Checks of this transaction go to a producer of PGROUP: this connection is one, even
            # before (or without) a heartbeat on it.
            group = _store.get_property(h.properties, PROPERTY_PRODUCER_GROUP) or h.producer_group
            broker.clients.producer_seen(group, conn, cmd.language, cmd.version)
            changes += [
                ("set", PROPERTY_REAL_TOPIC, topic),
                ("set", PROPERTY_REAL_QID, str(queue_id)),
                ("default", PROPERTY_PRODUCER_GROUP, h.producer_group),
            ]
            topic, queue_id = TRANS_HALF_TOPIC, 0
            sys_flag &= ~TRANSACTION_TYPE_MASK
            broker.topics.create_system_topic(TRANS_HALF_TOPIC, 1)
        # A half message keeps WAIT, as 4.9.7 (which re-encodes its properties) does.
        edits = PropertyEdits(changes, drop_wait=not half)
    elif sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_PREPARED_TYPE:
        # A prepared flag without TRAN_MSG is not a transaction ferromq can finish: store it plainly.
        sys_flag &= ~TRANSACTION_TYPE_MASK
    r = broker.store.send(
        topic,
        queue_id,
        cmd.body,
        h.properties,
        edits,
        flag=h.flag,
        sys_flag=sys_flag,
        born_timestamp=h.born_timestamp,
        born_host=conn.peer,
        reconsume_times=h.reconsume_times,
    )
    broker.stats.put(r.topic, 1, r.wrote_bytes, started)
    arrived: Arrived = (r.topic, r.queue_id, r.queue_offset + 1, r.tags_code)
    reply_ext = SendMessageResponseHeader.broker_ext(
        r.msg_id, requested_queue_id, r.queue_offset, str(broker.config.region_id), broker.config.trace_on
    )
    return _answer(broker, waiter, r.wait, r.end_offset, cmd, arrived, reply_ext)


def _dead_letter(broker: SendContext, cmd: RemotingCommand, h: SendMessageRequestHeader, topic: str) -> bool:
    """A send to a retry topic that has been consumed too often goes to the group's DLQ."""
    group = topic[len(RETRY_PREFIX) :]
    cfg = broker.groups.find_or_create(group)
    if cfg is None:
        raise SubscriptionGroupNotExistError(f"subscription group not exist, {group}")
    max_times = cfg.retry_max_times
    if (cmd.version or 0) >= VERSION_WITH_MAX_RECONSUME and h.max_reconsume_times is not None:
        max_times = h.max_reconsume_times
    return h.reconsume_times >= max_times


def _reply(cmd: RemotingCommand, code: int, ext: dict[str, str]) -> RemotingCommand:
    return RemotingCommand(code, cmd.opaque, FLAG_RESPONSE, ext=ext, serialize_type=cmd.serialize_type)


def _answer(
    broker: SendContext,
    waiter: StoreWaits,
    wait: bool,
    end_offset: int,
    cmd: RemotingCommand,
    arrived: Arrived,
    reply_ext: dict[str, str],
) -> RemotingCommand | asyncio.Future[RemotingCommand]:
    """The reply: at once, or (WAIT) a future completed once the message is on disk in SYNC_FLUSH
    and on a slave in SYNC_MASTER, without a task. As CommitLog.asyncPutMessage combines them, a
    flush failure answers FLUSH_DISK_TIMEOUT and a replication failure, which takes precedence,
    SLAVE_NOT_AVAILABLE (no slave within haSlaveFallbehindMax, decided at once) or
    FLUSH_SLAVE_TIMEOUT (not reported within slaveTimeout)."""
    flush = wait and broker.sync_flush
    replica = wait and broker.config.broker_role == "SYNC_MASTER"
    replica_code = ResponseCode.SUCCESS
    if replica and not broker.replication.slave_ok(end_offset):
        replica, replica_code = False, ResponseCode.SLAVE_NOT_AVAILABLE
    if not flush:
        broker.message_arrived(*arrived)
        if not replica:
            return _reply(cmd, replica_code, reply_ext)
    out: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
    codes = {"flush": ResponseCode.SUCCESS, "replica": replica_code}
    pending = {"flush"} if flush else set()
    if replica:
        pending.add("replica")

    def done(kind: str, ok: bool) -> None:
        if kind == "flush":
            broker.message_arrived(*arrived)
            codes[kind] = ResponseCode.SUCCESS if ok else ResponseCode.FLUSH_DISK_TIMEOUT
        else:
            codes[kind] = ResponseCode.SUCCESS if ok else ResponseCode.FLUSH_SLAVE_TIMEOUT
        pending.discard(kind)
        if not pending and not out.done():
            code = codes["replica"] if codes["replica"] != ResponseCode.SUCCESS else codes["flush"]
            out.set_result(_reply(cmd, code, reply_ext))

    # Asked now, so the callbacks are requested in this loop iteration.
    if flush:
        waiter.flush.wait(end_offset, functools.partial(done, "flush"))
    if replica:
        waiter.replica.wait(end_offset, functools.partial(done, "replica"))
    return out


async def consumer_send_msg_back(
    broker: SendContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    """A consumer failed a message: store it again in the group's retry topic (with a delay) or,
    after too many attempts, in its dead-letter topic."""
    if broker.config.is_slave:
        # Java's send-back answers a store refusal as SYSTEM_ERROR with the status as remark.
        raise BrokerError("SERVICE_NOT_AVAILABLE", ResponseCode.SYSTEM_ERROR)
    h = ConsumerSendMsgBackRequestHeader.from_ext(cmd.ext)
    group, offset, delay_level = h.group, h.offset, h.delay_level
    cfg = broker.groups.find_or_create(group)
    if cfg is None:
        raise SubscriptionGroupNotExistError(f"subscription group not exist, {group}")
    if not broker.config.broker_permission & 2:
        raise NoPermissionError(f"the broker[{broker.config.broker_ip1}] sending message is forbidden")
    if cfg.retry_queue_nums <= 0:
        return cmd.reply(ResponseCode.SUCCESS)
    msg = broker.store.read(offset)
    if msg is None:
        raise BrokerError(f"look message by offset failed, {offset}", ResponseCode.SYSTEM_ERROR)
    max_times = cfg.retry_max_times
    if (cmd.version or 0) >= VERSION_WITH_MAX_RECONSUME and h.max_reconsume_times is not None:
        max_times = h.max_reconsume_times
    if msg.reconsume_times >= max_times or delay_level < 0:
        topic, queue_id = DLQ_PREFIX + group, 0
        broker.topics.create_system_topic(topic, 1)
        # As Java 4.9.7 (setDelayTimeLevel(0)): the dead letter keeps DELAY=0, which delays nothing.
        delay = "0"
    else:
        topic = RETRY_PREFIX + group
        broker.topics.create_system_topic(topic, cfg.retry_queue_nums)
        queue_id = random.randrange(cfg.retry_queue_nums)
        delay = str(delay_level if delay_level > 0 else 3 + msg.reconsume_times)
    edits = PropertyEdits(
        [
            ("default", PROPERTY_RETRY_TOPIC, msg.topic),
            ("set", PROPERTY_WAIT, "false"),
            ("set", PROPERTY_DELAY, delay),
            ("default", PROPERTY_ORIGIN_MESSAGE_ID, msg.msg_id),
        ]
    )
    broker.registration_changed()
    started = time.perf_counter_ns()
    r = broker.store.send_copy(msg, topic, queue_id, edits, reconsume_times=msg.reconsume_times + 1)
    broker.stats.put(r.topic, 1, r.wrote_bytes, started)
    broker.stats.sent_back(group, msg.topic, topic.startswith(DLQ_PREFIX))
    broker.message_arrived(r.topic, r.queue_id, r.queue_offset + 1, r.tags_code)
    return cmd.reply(ResponseCode.SUCCESS)
