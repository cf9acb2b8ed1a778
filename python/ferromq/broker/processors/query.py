"""QUERY_MESSAGE (by key, through the IndexFile) and VIEW_MESSAGE_BY_ID (by CommitLog offset)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from ferromq.broker.broker import Broker

DEFAULT_QUERY_MAX_NUM = 32


def handlers(broker: Broker) -> dict[int, Handler]:
    async def query_message(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.of(cmd)
        max_num = DEFAULT_QUERY_MAX_NUM if h.max_num is None or h.unique_key_query else h.max_num
        max_num = max(1, min(max_num, broker.config.max_query_num))
        raw = broker.store.query_raw(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        if not raw:
            raise QueryNotFoundError("can not find message, maybe time range not correct")
        return cmd.reply(
            ResponseCode.SUCCESS,
            ext=QueryMessageResponseHeader(
                index_last_update_timestamp=int(time.time() * 1000),
                index_last_update_phyoffset=broker.store.max_physical_offset,
            ).to_ext(),
            body=b"".join(raw),
        )

    async def view_message(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        offset = ViewMessageRequestHeader.of(cmd).offset
        raw = broker.store.read_raw(offset)
        if raw is None:
            raise BrokerError(f"can not find message by the offset, {offset}", ResponseCode.SYSTEM_ERROR)
        return cmd.reply(ResponseCode.SUCCESS, body=raw)

    return {RequestCode.QUERY_MESSAGE: query_message, RequestCode.VIEW_MESSAGE_BY_ID: view_message}
