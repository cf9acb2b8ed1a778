"""PULL_MESSAGE, with long polling: a pull that finds nothing new is held (no reply) until a
matching message is stored or its suspend time is up."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ferromq.broker.clients import Subscription, parse_subscription
from ferromq.broker.processors.context import PullContext
from ferromq.broker.sql92 import compile_sql92
from ferromq.broker.state import HasConfig
from ferromq.errors import BrokerError, NoPermissionError, SubscriptionGroupNotExistError, TopicNotExistError
from ferromq.jsonutil import dumps
from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import (
    OFFSET_MOVED_EVENT_TOPIC,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
)
from ferromq.protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler, ImmediateHandler
from ferromq.store import PropertyEdits

if TYPE_CHECKING:
    from ferromq.store import GetResult
    from ferromq.tiered.reader import TieredRead
    from ferromq.tiered.service import TieredService

logger = logging.getLogger(__name__)

# Statuses whose next offset the store corrects (to the queue's min or max), except on a slave
# without offsetCheckInSlave (`DefaultMessageStore.nextOffsetCorrection`).
_CORRECTED = frozenset(
    {
        "NO_MESSAGE_IN_QUEUE",
        "OFFSET_TOO_SMALL",
        "OFFSET_OVERFLOW_ONE",
        "OFFSET_OVERFLOW_BADLY",
        "OFFSET_FOUND_NULL",
    }
)
# What the local store answers for an offset it no longer holds, which the tiered store may hold
# (below the queue's local min, or a queue whose local files are all gone).
_NOT_LOCAL = _CORRECTED | {"NO_MATCHED_LOGIC_QUEUE"}


def as_int32(code: int) -> int:
    """The low 32 bits of a tags code, signed: what subscriptions compare with."""
    return ((code + 2**31) % 2**32) - 2**31


def handlers(broker: PullContext) -> dict[int, Handler]:
    return {}  # PULL_MESSAGE is an immediate handler (see `immediate_handlers`)


def immediate_handlers(broker: PullContext) -> dict[int, ImmediateHandler]:
    """A pull that finds messages (or is not to be held) is answered without a task; one to be
    held answers with a coroutine that waits in the hold service."""

    def pull(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        return pull_message(broker, conn, cmd)

    # 5.x's lite pull consumer pulls with LITE_PULL_MESSAGE: the same request, the same answer.
    return {RequestCode.PULL_MESSAGE: pull, RequestCode.LITE_PULL_MESSAGE: pull}


def _subscription(broker: PullContext, h: PullMessageRequestHeader) -> Subscription:
    group, topic = h.consumer_group, h.topic
    if h.sys_flag & PULL_FLAG_SUBSCRIPTION:
        sub = parse_subscription(topic, h.subscription, h.expression_type, h.sub_version)
    else:
        info = broker.clients.consumers.get(group)
        found = info.subscriptions.get(topic) if info else None
        if found is None:
            raise BrokerError(
                f"the consumer's subscription not exist, group: {group}", ResponseCode.SUBSCRIPTION_NOT_EXIST
            )
        if found.sub_version < h.sub_version:
            raise BrokerError(
                f"the consumer's subscription not latest, group: {group}",
                ResponseCode.SUBSCRIPTION_NOT_LATEST,
            )
        sub = found
    if sub.expression_type == "SQL92":
        check_sql92(broker, sub.sub_string)
    return sub


def check_sql92(broker: HasConfig, expression: str) -> Callable[[dict[str, str]], bool]:
    """The compiled filter, or the refusal RocketMQ gives (filtering disabled, or a bad expression)."""
    if not broker.config.enable_property_filter:
        raise BrokerError(
            "The broker does not support consumer to filter message by SQL92", ResponseCode.SYSTEM_ERROR
        )
    return compile_sql92(expression)


def _filter_records(body: bytes, predicate: Callable[[dict[str, str]], bool]) -> tuple[bytes, int]:
    """The records of a pull body whose properties the predicate accepts, and their count."""
    out = bytearray()
    count = at = 0
    for m in decode_messages(body):
        size = int.from_bytes(body[at : at + 4], "big")
        if predicate(m.properties):
            out += body[at : at + size]
            count += 1
        at += size
    return bytes(out), count


def pull_message(
    broker: PullContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand | Awaitable[RemotingCommand]:
    h = PullMessageRequestHeader.from_ext(cmd.ext)
    group, topic, queue_id, offset = h.consumer_group, h.topic, h.queue_id, h.queue_offset
    max_msgs, sys_flag = max(1, h.max_msg_nums), h.sys_flag

    if not broker.config.broker_permission & 4:
        raise NoPermissionError(f"the broker[{broker.config.broker_ip1}] pulling message is forbidden")
    cfg = broker.groups.find_or_create(group)
    if cfg is None:
        raise SubscriptionGroupNotExistError(f"subscription group [{group}] does not exist")
    if not cfg.consume_enable:
        raise NoPermissionError(f"subscription group no permission, {group}")
    tc = broker.topics.get(topic)
    if tc is None:
        raise TopicNotExistError(f"topic[{topic}] not exist, apply first please!")
    if not tc.readable:
        raise NoPermissionError(f"the topic[{topic}] pulling message is forbidden")
    if queue_id < 0 or queue_id >= tc.read_queue_nums:
        raise BrokerError(
            f"queueId[{queue_id}] is illegal, topic:[{topic}] "
            f"topicConfig.readQueueNums:[{tc.read_queue_nums}]",
            ResponseCode.SYSTEM_ERROR,
        )
    sub = _subscription(broker, h)
    sql = check_sql92(broker, sub.sub_string) if sub.expression_type == "SQL92" else None
    result = broker.store.pull(topic, queue_id, offset, max_msgs, tag_codes=sub.codes)
    tiered = broker.tiered
    if tiered is not None and result.status in _NOT_LOCAL and tiered.covers(topic, queue_id, offset):
        _commit(broker, group, topic, queue_id, sys_flag, h.commit_offset)
        return _pull_tiered(broker, tiered, cmd, h, max_msgs, sub, sql, result)
    code = result.pull_code(offset)  # the data plane's mapping
    if code != ResponseCode.PULL_NOT_FOUND or not sys_flag & PULL_FLAG_SUSPEND:
        broker.stats.got(
            group, topic, queue_id, result.next_begin_offset, result.message_count, len(result.body)
        )
    # The offset commit happens once, on the first processing.
    _commit(broker, group, topic, queue_id, sys_flag, h.commit_offset)
    if code == ResponseCode.PULL_NOT_FOUND and sys_flag & PULL_FLAG_SUSPEND:
        timeout = (
            h.suspend_timeout_millis
            if broker.config.long_polling_enable
            else broker.config.short_polling_time_mills
        )
        return _pull_after_hold(broker, conn, cmd, h, max_msgs, sub, sql, timeout / 1000.0)
    code, next_begin = _offset_moved(broker, group, topic, queue_id, offset, result, code)
    return _pull_reply(cmd, result, code, sql, next_begin, suggest_broker_id(broker, group, result))


async def _pull_tiered(
    broker: PullContext,
    tiered: TieredService,
    cmd: RemotingCommand,
    h: PullMessageRequestHeader,
    max_msgs: int,
    sub: Subscription,
    sql: Callable[[dict[str, str]], bool] | None,
    local: GetResult,
) -> RemotingCommand:
    """A pull of messages local retention deleted, read from the bucket (off the event loop)."""
    group, topic, queue_id, offset = h.consumer_group, h.topic, h.queue_id, h.queue_offset
    try:
        read = await tiered.run(
            tiered.read_queue, topic, queue_id, offset, max_msgs, sub.codes, local.max_offset
        )
    except OSError as e:  # the bucket cannot be read now: the consumer stays where it is
        logger.warning(
            "pull of %s queue %d offset %d waits for the tiered storage bucket: %s",
            topic,
            queue_id,
            offset,
            e,
        )
        return cmd.reply(
            ResponseCode.PULL_RETRY_IMMEDIATELY,
            remark="the tiered storage bucket cannot be read now",
            ext=PullMessageResponseHeader(
                suggest_which_broker_id=0,
                next_begin_offset=offset,
                min_offset=offset,
                max_offset=local.max_offset,
            ).to_ext(),
        )
    if read is None:  # the bucket's file expired meanwhile: answered as the local store read it
        code, next_begin = _offset_moved(
            broker, group, topic, queue_id, offset, local, local.pull_code(offset)
        )
        return _pull_reply(cmd, local, code, sql, next_begin)
    broker.stats.got(group, topic, queue_id, read.next_begin_offset, read.message_count, len(read.body))
    return _pull_reply(cmd, read, read.pull_code(offset), sql)


def _offset_moved(
    broker: PullContext, group: str, topic: str, queue_id: int, offset: int, result: GetResult, code: int
) -> tuple[int, int]:
    """PullMessageProcessor's PULL_OFFSET_MOVED: a master (or a slave with offsetCheckInSlave) answers
    it with the corrected next offset (the queue's min for an offset below it, as after retention) and
    records an OffsetMovedEvent in OFFSET_MOVED_EVENT; a slave without the check leaves the offset as
    it is and answers PULL_RETRY_IMMEDIATELY."""
    cfg = broker.config
    if cfg.broker_role == "SLAVE" and not cfg.offset_check_in_slave:
        next_begin = offset if result.status in _CORRECTED else result.next_begin_offset
        return (
            ResponseCode.PULL_RETRY_IMMEDIATELY if code == ResponseCode.PULL_OFFSET_MOVED else code
        ), next_begin
    next_begin = result.next_begin_offset
    tiered = broker.tiered
    if tiered is not None and result.status == "OFFSET_TOO_SMALL":
        # Below the bucket's first message too: the queue starts there, not at its local min.
        next_begin = tiered.queue_min(topic, queue_id, next_begin)
    if code == ResponseCode.PULL_OFFSET_MOVED:
        event = {
            "consumerGroup": group,
            "messageQueue": {"brokerName": cfg.broker_name, "queueId": queue_id, "topic": topic},
            "offsetNew": next_begin,
            "offsetRequest": offset,
        }
        try:
            broker.store.send(
                OFFSET_MOVED_EVENT_TOPIC,
                0,
                dumps(event),
                "",
                PropertyEdits([("set", PROPERTY_TAGS, group), ("set", PROPERTY_KEYS, group)]),
                born_timestamp=int(time.time() * 1000),
                born_host=cfg.broker_addr,
            )
        except Exception:  # as in RocketMQ, the event is best effort: the answer goes anyway
            logger.warning("storing the OffsetMovedEvent of %s failed", group, exc_info=True)
        logger.warning(
            "PULL_OFFSET_MOVED: correction offset. topic=%s, group=%s, queue=%d, requestOffset=%d, "
            "newOffset=%d",
            topic,
            group,
            queue_id,
            offset,
            next_begin,
        )
    return code, next_begin


async def _pull_after_hold(
    broker: PullContext,
    conn: Connection,
    cmd: RemotingCommand,
    h: PullMessageRequestHeader,
    max_msgs: int,
    sub: Subscription,
    sql: Callable[[dict[str, str]], bool] | None,
    timeout: float,
) -> RemotingCommand:
    """A pull that found nothing new: held until a matching message is stored (or a re-check,
    or the timeout), then read once more and answered whatever it finds."""
    topic, queue_id, offset = h.topic, h.queue_id, h.queue_offset
    codes = set(sub.codes) if sub.codes is not None else None

    def matches(tags_code: int) -> bool:
        return codes is None or as_int32(tags_code) in codes

    await broker.hold.hold(topic, queue_id, offset, timeout, matches)
    # Many held pulls woken at once by one large message: each reads it only when the peer has
    # taken the replies before (a peer that reads nothing does not make the broker hold them all).
    await conn.replies_drained()
    result = broker.store.pull(topic, queue_id, offset, max_msgs, tag_codes=sub.codes)
    group = h.consumer_group
    broker.stats.got(group, topic, queue_id, result.next_begin_offset, result.message_count, len(result.body))
    code = result.pull_code(offset)  # the data plane's mapping
    code, next_begin = _offset_moved(broker, group, topic, queue_id, offset, result, code)
    return _pull_reply(cmd, result, code, sql, next_begin, suggest_broker_id(broker, group, result))


def _pull_reply(
    cmd: RemotingCommand,
    result: GetResult | TieredRead,
    code: int,
    sql: Callable[[dict[str, str]], bool] | None,
    next_begin: int | None = None,
    suggest: int = 0,
) -> RemotingCommand:
    body, status = result.body, result.status
    if sql is not None and code == ResponseCode.SUCCESS:
        body, matched = _filter_records(body, sql)
        if not matched:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
            status = "NO_MATCHED_MESSAGE"
    return cmd.reply(
        code,
        remark=status,
        ext=PullMessageResponseHeader(
            suggest_which_broker_id=suggest,
            next_begin_offset=result.next_begin_offset if next_begin is None else next_begin,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
        ).to_ext(),
        body=body if code == ResponseCode.SUCCESS else b"",
    )


def suggest_broker_id(broker: PullContext, group: str, result: GetResult) -> int:
    """PullMessageProcessor's `suggestWhichBrokerId`: the master (0) unless slaveReadEnable; then
    the group's `whichBrokerWhenConsumeSlowly` when the consumer reads further behind the CommitLog
    end than accessMessageInMemoryMaxRatio percent of the memory (its data is no longer in the page
    cache: let a slave serve it; the store decides it as it applies the on-disk transfer caps),
    else the group's `brokerId`."""
    cfg = broker.config
    if not cfg.slave_read_enable:
        return 0
    group_cfg = broker.groups.groups.get(group)
    if group_cfg is None:
        return 0
    if result.suggest_pulling_from_slave:  # the store's reading of where the records lie
        return group_cfg.which_broker_when_consume_slowly
    return group_cfg.broker_id


def _commit(
    broker: PullContext, group: str, topic: str, queue_id: int, sys_flag: int, commit_offset: int
) -> None:
    if sys_flag & PULL_FLAG_COMMIT_OFFSET and commit_offset >= 0 and broker.config.broker_role != "SLAVE":
        broker.offsets.commit(group, topic, queue_id, commit_offset)
