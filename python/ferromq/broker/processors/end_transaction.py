"""END_TRANSACTION: a producer commits or rolls back a half message (facts sheet §4.17, §12).

Java clients send it one-way, so the reply is dropped by the connection; the C++ client's
"one-way" requests carry flag 0 and get an answer (which it ignores).
"""

from __future__ import annotations

import logging

from ferromq.broker.processors.context import ContextHandler, EndTransactionContext, bind
from ferromq.errors import BrokerError
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from ferromq.protocol.headers import EndTransactionRequestHeader
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

logger = logging.getLogger(__name__)


async def end(ctx: EndTransactionContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return end_transaction(ctx, conn, cmd)


HANDLERS: dict[int, ContextHandler[EndTransactionContext]] = {RequestCode.END_TRANSACTION: end}


def handlers(ctx: EndTransactionContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)


def end_transaction(ctx: EndTransactionContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    if ctx.config.broker_role == "SLAVE":
        logger.warning("END_TRANSACTION from %s refused: this broker is a slave", conn.peer)
        return cmd.reply(ResponseCode.SLAVE_NOT_AVAILABLE)
    h = EndTransactionRequestHeader.of(cmd)
    if h.commit_or_rollback == TRANSACTION_NOT_TYPE and cmd.remark:
        logger.debug("transaction %s: state unknown (%s)", h.msg_id, cmd.remark)
    finish_transaction(ctx, h, conn.peer)
    return cmd.reply(ResponseCode.SUCCESS)


def finish_transaction(ctx: EndTransactionContext, h: EndTransactionRequestHeader, peer: str) -> None:
    """Commits or rolls back the half message `h` names, whichever protocol brought it (an unknown
    state changes nothing: the checks ask again)."""
    group, queue_offset, commit_log_offset = h.producer_group, h.tran_state_table_offset, h.commit_log_offset
    kind, from_check = h.commit_or_rollback, h.from_transaction_check
    what = (
        f"transaction {h.msg_id} of group {group} (half queue offset {queue_offset}, "
        f"commit log offset {commit_log_offset}) from {peer}{' after a check' if from_check else ''}"
    )
    if kind == TRANSACTION_NOT_TYPE:
        # RocketMQ ignores it (and answers nothing); answering only reaches a C++ client.
        logger.debug("%s: state unknown", what)
        return
    if kind not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
        raise BrokerError(f"commitOrRollback {kind} is not 0, 8 or 12", ResponseCode.SYSTEM_ERROR)
    service = ctx.transactions
    half = service.prepared_message(commit_log_offset, group, queue_offset)
    if kind == TRANSACTION_COMMIT_TYPE:
        service.commit(half)
        logger.debug("%s: committed", what)
    else:
        service.rollback(half)
        logger.debug("%s: rolled back", what)
