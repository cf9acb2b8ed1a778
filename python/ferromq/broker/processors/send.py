"""SEND_MESSAGE (V1 header), SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (short header) and
CONSUMER_SEND_MSG_BACK."""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import threading
import time
from collections.abc import Awaitable
from dataclasses import dataclass

from ferromq import _store
from ferromq.broker.clients import ClientConnection
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
    PROPERTY_DELAY,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TRAN_MSG,
    PROPERTY_WAIT,
    RETRY_PREFIX,
    TRANS_HALF_TOPIC,
)
from ferromq.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
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
    """The sends, answered without a task: at once, or (SYNC_FLUSH, SYNC_MASTER) by a future
    the send rules complete from the flush or HA thread."""

    def send(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        return send_message(broker, conn, cmd)

    return {
        RequestCode.SEND_MESSAGE: send,
        RequestCode.SEND_MESSAGE_V2: send,
        RequestCode.SEND_BATCH_MESSAGE: send,
    }


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


def _is_transaction(properties: str) -> bool:
    """TRAN_MSG parses as true (Java's Boolean.parseBoolean). The substring test spares most sends
    the lookup."""
    if PROPERTY_TRAN_MSG not in properties:
        return False
    value = _store.get_property(properties, PROPERTY_TRAN_MSG)
    return value is not None and value.lower() == "true"


def send_message(
    broker: SendContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand | Awaitable[RemotingCommand]:
    """A send the broker decides (the data plane serves the plain ones to known topics); see
    `store_send`. In SYNC_FLUSH or SYNC_MASTER mode (unless the message says WAIT=false) the
    answer is an awaitable completed once the bytes are on disk and on a slave."""
    h = SendMessageRequestHeader.from_ext(cmd.ext)
    stored = store_send(broker, h, cmd.body, conn.peer, Producer(conn, cmd.language, cmd.version or 0))
    code = stored.code
    if isinstance(code, int):
        return _reply(cmd, code, stored.reply_ext)
    return _reply_when(cmd, code, stored.reply_ext)


async def _reply_when(cmd: RemotingCommand, code: Awaitable[int], ext: dict[str, str]) -> RemotingCommand:
    return _reply(cmd, await code, ext)


@dataclass(frozen=True)
class Producer:
    """Who sends: the connection a transaction's checks go to (a remoting connection, or a 5.x
    client's telemetry stream), and the client's language and version."""

    conn: ClientConnection
    language: str
    version: int


@dataclass(frozen=True)
class Stored:
    """A send the rules stored: where, and its response code (an awaitable while the disk or a
    slave is waited for)."""

    outcome: _store.SendOutcome
    code: int | Awaitable[int]

    @property
    def reply_ext(self) -> dict[str, str]:
        return self.outcome.reply_fields


def store_send(
    broker: SendContext, h: SendMessageRequestHeader, body: bytes, born_host: str, producer: Producer
) -> Stored:
    """A send the broker decides, whichever protocol brought it (remoting, the 5.x clients' gRPC):
    whether the topic may be sent to (or created), whether a retry is a dead letter, whether a half
    message is accepted. The send rules (`broker.sender`, in Rust, as on the data plane) store it
    and say when it is answered."""
    refuse_on_slave(broker)
    tc = _check_topic_for_send(broker, h)
    dead_letter_topic = None
    half = False
    if not h.batch:
        if h.topic.startswith(RETRY_PREFIX) and _dead_letter(broker, producer.version, h, h.topic):
            dead_letter_topic = DLQ_PREFIX + h.topic[len(RETRY_PREFIX) :]
            broker.topics.create_system_topic(dead_letter_topic, 1)
            broker.registration_changed()
        elif _is_transaction(h.properties):
            if broker.config.reject_transaction_message:
                raise NoPermissionError(
                    f"the broker[{broker.config.broker_ip1}] sending transaction message is forbidden"
                )
            # Checks of this transaction go to a producer of PGROUP: this connection is one, even
            # before (or without) a heartbeat on it.
            group = _store.get_property(h.properties, PROPERTY_PRODUCER_GROUP) or h.producer_group
            broker.clients.producer_seen(group, producer.conn, producer.language, producer.version)
            broker.topics.create_system_topic(TRANS_HALF_TOPIC, 1)
            half = True
    sender = broker.sender
    started = time.perf_counter_ns()
    out = sender.send(
        tc.route,
        h.producer_group,
        h.topic,
        h.queue_id,
        body,
        h.properties,
        flag=h.flag,
        sys_flag=h.sys_flag,
        born_timestamp=h.born_timestamp,
        born_host=born_host,
        reconsume_times=h.reconsume_times,
        batch=h.batch,
        dead_letter_topic=dead_letter_topic,
        half=half,
    )
    broker.stats.put(out.topic, out.messages, out.wrote_bytes, started)

    # A batch may mix tags: a held pull is woken whatever its filter (tags code None).
    def arrived() -> None:
        broker.message_arrived(out.topic, out.queue_id, out.next_offset, out.tags_code)
        # A lite message's light message queue (queue 0) too.
        for lmq, next_offset in out.lmq_arrivals:
            broker.message_arrived(lmq, 0, next_offset, out.tags_code)

    loop = asyncio.get_running_loop()
    answer: asyncio.Future[int] = loop.create_future()
    loop_thread = threading.get_ident()

    # Called on this thread when nothing is waited for, else on the flush or HA thread.
    def on_arrived() -> None:
        if threading.get_ident() == loop_thread:
            arrived()
        else:
            loop.call_soon_threadsafe(arrived)

    def on_answered(code: int) -> None:
        loop.call_soon_threadsafe(_complete, answer, code)

    code = sender.settle(out, on_arrived, on_answered)
    return Stored(out, answer if code is None else code)


def _complete(answer: asyncio.Future[int], code: int) -> None:
    if not answer.done():
        answer.set_result(code)


def _dead_letter(broker: SendContext, version: int, h: SendMessageRequestHeader, topic: str) -> bool:
    """A send to a retry topic that has been consumed too often goes to the group's DLQ."""
    group = topic[len(RETRY_PREFIX) :]
    cfg = broker.groups.find_or_create(group)
    if cfg is None:
        raise SubscriptionGroupNotExistError(f"subscription group not exist, {group}")
    max_times = cfg.retry_max_times
    if version >= VERSION_WITH_MAX_RECONSUME and h.max_reconsume_times is not None:
        max_times = h.max_reconsume_times
    return h.reconsume_times >= max_times


def _reply(cmd: RemotingCommand, code: int, ext: dict[str, str]) -> RemotingCommand:
    return RemotingCommand(code, cmd.opaque, FLAG_RESPONSE, ext=ext, serialize_type=cmd.serialize_type)


async def consumer_send_msg_back(
    broker: SendContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    """A consumer failed a message: store it again in the group's retry topic (with a delay) or,
    after too many attempts, in its dead-letter topic."""
    if broker.config.is_slave:
        # Java's send-back answers a store refusal as SYSTEM_ERROR with the status as remark.
        raise BrokerError("SERVICE_NOT_AVAILABLE", ResponseCode.SYSTEM_ERROR)
    h = ConsumerSendMsgBackRequestHeader.from_ext(cmd.ext)
    max_times = None
    if (cmd.version or 0) >= VERSION_WITH_MAX_RECONSUME and h.max_reconsume_times is not None:
        max_times = h.max_reconsume_times
    send_back(broker, h.group, h.offset, h.delay_level, max_times)
    return cmd.reply(ResponseCode.SUCCESS)


def send_back(
    broker: SendContext, group: str, offset: int, delay_level: int, max_reconsume_times: int | None
) -> None:
    """The message at CommitLog `offset` again in the group's retry topic (after `delay_level`,
    or its reconsume count's), or past the group's retryMaxTimes (`max_reconsume_times` when the
    client says) or with a negative level, in its dead letter topic; whichever protocol brought it."""
    cfg = broker.groups.find_or_create(group)
    if cfg is None:
        raise SubscriptionGroupNotExistError(f"subscription group not exist, {group}")
    if not broker.config.broker_permission & 2:
        raise NoPermissionError(f"the broker[{broker.config.broker_ip1}] sending message is forbidden")
    if cfg.retry_queue_nums <= 0:
        return
    msg = broker.store.read(offset)
    if msg is None:
        raise BrokerError(f"look message by offset failed, {offset}", ResponseCode.SYSTEM_ERROR)
    max_times = cfg.retry_max_times if max_reconsume_times is None else max_reconsume_times
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
