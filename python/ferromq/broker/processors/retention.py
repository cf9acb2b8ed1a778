"""Retention admin requests, as AdminBrokerProcessor answers them: DELETE_EXPIRED_COMMITLOG makes
the store's next rounds delete expired CommitLog files whatever the hour
(`executeDeleteFilesManually`), CLEAN_EXPIRED_CONSUMEQUEUE drops the consume queues whose messages
are all gone (`cleanExpiredConsumerQueue`). Both answer SUCCESS."""

from __future__ import annotations

import asyncio
import logging

from ferromq.broker.processors.context import ContextHandler, RetentionContext, bind
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

logger = logging.getLogger(__name__)


async def delete_expired_commitlog(
    ctx: RetentionContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    logger.warning("deleteExpiredCommitLog requested by %s", conn.peer)
    ctx.store.execute_delete_files_manually()
    return cmd.reply(ResponseCode.SUCCESS)


async def clean_expired_consume_queue(
    ctx: RetentionContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    logger.warning("cleanExpiredConsumeQueue requested by %s", conn.peer)
    # Removes files: off the event loop.
    dropped = await asyncio.get_running_loop().run_in_executor(None, ctx.store.clean_expired_consume_queues)
    logger.warning("cleanExpiredConsumeQueue: %d consume queue(s) dropped", dropped)
    return cmd.reply(ResponseCode.SUCCESS)


HANDLERS: dict[int, ContextHandler[RetentionContext]] = {
    RequestCode.DELETE_EXPIRED_COMMITLOG: delete_expired_commitlog,
    RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE: clean_expired_consume_queue,
}


def handlers(ctx: RetentionContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)
