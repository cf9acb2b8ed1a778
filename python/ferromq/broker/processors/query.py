"""QUERY_MESSAGE (by key, through the IndexFile) and VIEW_MESSAGE_BY_ID (by CommitLog offset)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ferromq.errors import BrokerError, QueryNotFoundError
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import ext_bool, ext_int, ext_offset, ext_str
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

if TYPE_CHECKING:
    from ferromq.broker.broker import Broker

DEFAULT_QUERY_MAX_NUM = 32


def handlers(broker: Broker) -> dict[int, Handler]:
    async def query_message(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic, key = ext_str(cmd, "topic"), ext_str(cmd, "key")
        max_num = ext_int(cmd, "maxNum", DEFAULT_QUERY_MAX_NUM)
        if ext_bool(cmd, "_UNIQUE_KEY_QUERY"):
            max_num = DEFAULT_QUERY_MAX_NUM
        max_num = max(1, min(max_num, broker.config.max_query_num))
        raw = broker.store.query_raw(
            topic, key, max_num, ext_int(cmd, "beginTimestamp", 0), ext_int(cmd, "endTimestamp", 2**63 - 1)
        )
        if not raw:
            raise QueryNotFoundError("can not find message, maybe time range not correct")
        return cmd.reply(
            ResponseCode.SUCCESS,
            ext={
                "indexLastUpdateTimestamp": int(time.time() * 1000),
                "indexLastUpdatePhyoffset": broker.store.max_physical_offset,
            },
            body=b"".join(raw),
        )

    async def view_message(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        offset = ext_offset(cmd, "offset")
        raw = broker.store.read_raw(offset)
        if raw is None:
            raise BrokerError(f"can not find message by the offset, {offset}", ResponseCode.SYSTEM_ERROR)
        return cmd.reply(ResponseCode.SUCCESS, body=raw)

    return {RequestCode.QUERY_MESSAGE: query_message, RequestCode.VIEW_MESSAGE_BY_ID: view_message}
