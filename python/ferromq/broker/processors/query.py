"""QUERY_MESSAGE (by key, through the IndexFile) and VIEW_MESSAGE_BY_ID (by CommitLog offset), each
read through to the tiered store's bucket for what local retention deleted."""

from __future__ import annotations

import time

from ferromq.broker.processors.context import ContextHandler, QueryContext, bind
from ferromq.errors import BrokerError, QueryNotFoundError
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import (
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    ViewMessageRequestHeader,
)
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

DEFAULT_QUERY_MAX_NUM = 32


async def query_message(ctx: QueryContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = QueryMessageRequestHeader.of(cmd)
    max_num = DEFAULT_QUERY_MAX_NUM if h.max_num is None or h.unique_key_query else h.max_num
    max_num = max(1, min(max_num, ctx.config.max_query_num))
    raw = ctx.store.query_raw(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
    tiered = ctx.tiered
    if tiered is not None and len(raw) < max_num:
        # Files local retention deleted are searched in the bucket; a file still on disk is in both.
        local = set(raw)
        more = await tiered.run(tiered.query, h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        raw += [r for r in more if r not in local][: max_num - len(raw)]
    if not raw:
        raise QueryNotFoundError("can not find message, maybe time range not correct")
    return cmd.reply(
        ResponseCode.SUCCESS,
        ext=QueryMessageResponseHeader(
            index_last_update_timestamp=int(time.time() * 1000),
            index_last_update_phyoffset=ctx.store.max_physical_offset,
        ).to_ext(),
        body=b"".join(raw),
    )


async def view_message(ctx: QueryContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    offset = ViewMessageRequestHeader.of(cmd).offset
    raw = ctx.store.read_raw(offset)
    if raw is None and ctx.tiered is not None:
        raw = await ctx.tiered.run(ctx.tiered.read_record, offset)
    if raw is None:
        raise BrokerError(f"can not find message by the offset, {offset}", ResponseCode.SYSTEM_ERROR)
    return cmd.reply(ResponseCode.SUCCESS, body=raw)


HANDLERS: dict[int, ContextHandler[QueryContext]] = {
    RequestCode.QUERY_MESSAGE: query_message,
    RequestCode.VIEW_MESSAGE_BY_ID: view_message,
}


def handlers(ctx: QueryContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)
