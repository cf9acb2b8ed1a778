"""GET_CONSUMER_LIST_BY_GROUP, QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET."""

from __future__ import annotations

import os

from ferromq.broker.processors.context import ConsumerManageContext, ContextHandler, bind
from ferromq.errors import BrokerError
from ferromq.jsonutil import dumps
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

# A message further behind the CommitLog end than this share of RAM counts as "on disk"
# (accessMessageInMemoryMaxRatio): a new group then starts at the end instead of offset 0.
IN_MEMORY_RATIO = 0.40


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


async def consumer_list(
    ctx: ConsumerManageContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    group = GetConsumerListByGroupRequestHeader.of(cmd).consumer_group
    info = ctx.clients.consumers.get(group)
    if info is None or not info.channels:
        raise BrokerError(f"no consumer for this group, {group}", ResponseCode.SYSTEM_ERROR)
    return cmd.reply(ResponseCode.SUCCESS, body=dumps({"consumerIdList": info.client_ids()}))


async def query_offset(ctx: ConsumerManageContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = QueryConsumerOffsetRequestHeader.of(cmd)
    group, topic, queue_id = h.consumer_group, h.topic, h.queue_id
    offset = ctx.offsets.query(group, topic, queue_id)
    if offset >= 0:
        return cmd.reply(ResponseCode.SUCCESS, ext=OffsetResponseHeader(offset=offset).to_ext())
    # A group that never committed: start at 0 while the queue's first message is still
    # at hand (in memory, as Java's broker judges it); otherwise the client decides (the end).
    store = ctx.store
    if store.min_offset(topic, queue_id) <= 0:
        first = store.get_messages(topic, queue_id, 0, 1)
        behind = store.max_physical_offset - first[0].physical_offset if first else 0
        if behind < _ram_bytes() * IN_MEMORY_RATIO:
            return cmd.reply(ResponseCode.SUCCESS, ext=OffsetResponseHeader(offset=0).to_ext())
    return cmd.reply(
        ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
    )


async def update_offset(
    ctx: ConsumerManageContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    h = UpdateConsumerOffsetRequestHeader.of(cmd)
    ctx.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
    return cmd.reply(ResponseCode.SUCCESS)


HANDLERS: dict[int, ContextHandler[ConsumerManageContext]] = {
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: consumer_list,
    RequestCode.QUERY_CONSUMER_OFFSET: query_offset,
    RequestCode.UPDATE_CONSUMER_OFFSET: update_offset,
}


def handlers(ctx: ConsumerManageContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)
