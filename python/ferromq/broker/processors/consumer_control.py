"""Admin requests that move a group's offsets or go to its consumers, as `mqadmin` (rocketmq-tools
4.9.7) sends them: offset resets (INVOKE_BROKER_TO_RESET_OFFSET, sent on to every consumer of the
group), group offsets cloned, and the requests the broker passes to one consumer and answers with
its reply (consumer running info, consume a message directly)."""

from __future__ import annotations

import logging

from ferromq.broker.processors.broker_status import mq_key, mq_keyed_map
from ferromq.broker.processors.context import ConsumerControlContext, ContextHandler, bind
from ferromq.errors import BrokerError, ConnectionClosedError
from ferromq.jsonutil import dumps_sorted
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import (
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    ResetOffsetRequestHeader,
)
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

logger = logging.getLogger(__name__)

CONSUMER_CALL_TIMEOUT = 5.0


async def clone_group_offset(
    ctx: ConsumerControlContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    """CLONE_GROUP_OFFSET (mqadmin cloneGroupOffset): the source group's committed offsets of the
    topic (or of all its topics) become the destination group's."""
    h = CloneGroupOffsetRequestHeader.of(cmd)
    src, dest, only, offline = h.src_group, h.dest_group, h.topic, h.offline
    info = ctx.clients.consumers.get(src)
    for topic in [only] if only else sorted(ctx.offsets.offsets_of_group(src)):
        if ctx.topics.get(topic) is None:
            continue
        if not offline and info is not None and info.subscriptions and topic not in info.subscriptions:
            continue
        for queue_id, offset in sorted(ctx.offsets.offsets_of_group(src).get(topic, {}).items()):
            ctx.offsets.commit(dest, topic, queue_id, offset)
    return cmd.reply(ResponseCode.SUCCESS)


async def reset_offset(
    ctx: ConsumerControlContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    """INVOKE_BROKER_TO_RESET_OFFSET: the offsets at `timestamp` (-1: the queues' ends) are sent to
    every consumer of the group (RESET_CONSUMER_CLIENT_OFFSET), which moves to them and commits
    them; the broker answers the table it sent. Offsets only move back unless `isForce`."""
    h = ResetOffsetRequestHeader.of(cmd)
    topic, group, timestamp, force = h.topic, h.group, h.timestamp, h.is_force
    tc = ctx.topics.get(topic)
    if tc is None:
        raise BrokerError(
            f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}",
            ResponseCode.SYSTEM_ERROR,
        )
    # Java checks the group's offsets first; asked first here, "not online" sends tools (mqadmin,
    # ferromq's Admin) to their fallback, which writes the offsets of an offline group directly,
    # also of one that never committed any.
    info = ctx.clients.consumers.get(group)
    if info is None or not info.channels:
        raise BrokerError(
            f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
            f"Timestamp: {timestamp}",
            ResponseCode.CONSUMER_NOT_ONLINE,
        )
    store = ctx.store
    table: list[tuple[int, int]] = []
    for queue_id in range(tc.write_queue_nums):
        committed = ctx.offsets.query(group, topic, queue_id)
        if committed == -1:
            raise BrokerError(f"THe consumer group <{group}> not exist", ResponseCode.SYSTEM_ERROR)
        if timestamp == -1:
            target = store.max_offset(topic, queue_id)
        else:
            target = store.offset_by_time(topic, queue_id, timestamp)
        target = max(0, target)
        table.append((queue_id, target if force or target < committed else committed))
    java_body = (
        b'{"offsetTable":'
        + mq_keyed_map((mq_key(topic, ctx.config.broker_name, q), o) for q, o in table)
        + b"}"
    )
    for ch in list(info.channels.values()):
        if ch.language == "CPP":
            entries = [{**mq_key(topic, ctx.config.broker_name, q), "offset": o} for q, o in table]
            body = dumps_sorted({"offsetTable": entries})
        else:
            body = java_body
        request = RemotingCommand(
            code=RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            ext=ResetOffsetRequestHeader(topic=topic, group=group, timestamp=timestamp).to_ext(),
            body=body,
        )
        try:
            await ch.conn.oneway(request)
            logger.info("[reset-offset] sent to %s: topic=%s group=%s", ch.client_id, topic, group)
        except Exception as e:
            logger.warning("[reset-offset] to %s failed: %s", ch.client_id, e)
    return cmd.reply(ResponseCode.SUCCESS, body=java_body)


async def _call_consumer(ctx: ConsumerControlContext, cmd: RemotingCommand, body: bytes) -> RemotingCommand:
    """The request passed on to the client `clientId` of `consumerGroup`, its answer passed back
    as is (Java's Broker2Client.callClient)."""
    h = GetConsumerRunningInfoRequestHeader.of(cmd)
    group, client_id = h.consumer_group, h.client_id
    info = ctx.clients.consumers.get(group)
    ch = info.channels.get(client_id) if info is not None else None
    if ch is None or ch.conn.closed:
        raise BrokerError(f"The Consumer <{group}> <{client_id}> not online", ResponseCode.SYSTEM_ERROR)
    forward = RemotingCommand(code=cmd.code, ext=dict(cmd.ext), body=body)
    try:
        answer = await ch.conn.request(forward, CONSUMER_CALL_TIMEOUT)
    except (TimeoutError, OSError, ConnectionClosedError) as e:
        raise BrokerError(
            f"invoke consumer <{group}> <{client_id}> Exception: {type(e).__name__} {e}",
            ResponseCode.SYSTEM_ERROR,
        ) from None
    return cmd.reply(answer.code, remark=answer.remark, ext=dict(answer.ext), body=answer.body)


async def consumer_running_info(
    ctx: ConsumerControlContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    """GET_CONSUMER_RUNNING_INFO (mqadmin consumerStatus): asked of the consumer."""
    return await _call_consumer(ctx, cmd, cmd.body)


async def consume_message_directly(
    ctx: ConsumerControlContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    """CONSUME_MESSAGE_DIRECTLY (mqadmin queryMsgById -g G -d CLIENT): the stored message `msgId`
    (an offsetMsgId) goes to the consumer, which consumes it and says how that went."""
    msg_id = ConsumeMessageDirectlyResultRequestHeader.of(cmd).msg_id
    offset = physical_offset_of(msg_id)
    record = None if offset is None else ctx.store.read_raw(offset)
    if record is None:
        raise BrokerError(f"no message with offsetMsgId {msg_id}", ResponseCode.SYSTEM_ERROR)
    cmd.ext["brokerName"] = ctx.config.broker_name
    return await _call_consumer(ctx, cmd, record)


def physical_offset_of(msg_id: str) -> int | None:
    """The CommitLog offset an offsetMsgId names (MessageDecoder.decodeMessageId): 16 hex digits
    after the store host (IPv4 and port: 16 digits; IPv6 and port: 40)."""
    host = {32: 16, 56: 40}.get(len(msg_id))
    if host is None:
        return None
    try:
        return int(msg_id[host : host + 16], 16)
    except ValueError:
        return None


HANDLERS: dict[int, ContextHandler[ConsumerControlContext]] = {
    RequestCode.CLONE_GROUP_OFFSET: clone_group_offset,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: reset_offset,
    RequestCode.GET_CONSUMER_RUNNING_INFO: consumer_running_info,
    RequestCode.CONSUME_MESSAGE_DIRECTLY: consume_message_directly,
}


def handlers(ctx: ConsumerControlContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)
