"""Concurrent consumption (Java's ConsumeMessageConcurrentlyService): each pulled batch goes to the
listener in a task of its own, up to `max_concurrency` at once. A failed batch (RECONSUME_LATER, or
an exception) is sent back to the broker, which returns it through `%RETRY%<group>`; what cannot be
sent back is retried here after `LOCAL_RETRY_DELAY`. A queue's offset advances to its oldest
message still in flight.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any

from ferromq.client.consume_service import ConsumerState, ConsumeService, log_crash
from ferromq.client.message import ReceivedMessage
from ferromq.client.rebalance import ProcessQueue

logger = logging.getLogger(__name__)

# Local retry of a failed message that could not be sent back to the broker.
LOCAL_RETRY_DELAY = 5.0


class ConsumeStatus(StrEnum):
    """What a concurrent listener returns."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


ConcurrentListener = Callable[[list[ReceivedMessage]], ConsumeStatus | Awaitable[ConsumeStatus]]
"""`(msgs) -> ConsumeStatus`, sync (run in a worker thread) or async."""


class ConsumeMessageConcurrentlyService(ConsumeService):
    """Consumes batches of a queue side by side, in any order."""

    def __init__(self, consumer: ConsumerState) -> None:
        super().__init__(consumer)
        self._consume_tasks: set[asyncio.Task[None]] = set()
        self._in_listener: set[asyncio.Task[Any]] = set()
        """Consume tasks past the point of no return (the listener has the messages)."""
        self._retry_tasks: set[asyncio.Task[None]] = set()

    def queue_added(self, pq: ProcessQueue) -> None:
        """Nothing to start: the pulls submit the queue's messages."""

    async def queue_removed(self, pq: ProcessQueue) -> None:
        """Nothing to wait for: batches of a dropped queue leave their offsets alone."""

    def submit(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        """A task per `consume_batch_size` messages."""
        loop = asyncio.get_running_loop()
        batch_size = self.consumer.consume_batch_size
        for i in range(0, len(msgs), batch_size):
            batch = msgs[i : i + batch_size]
            task = loop.create_task(self._consume(pq, batch))
            self._consume_tasks.add(task)
            task.add_done_callback(self._consume_tasks.discard)
            task.add_done_callback(log_crash)

    def retry_tasks(self) -> list[asyncio.Task[None]]:
        return list(self._retry_tasks)

    def stop_consuming(self, pqs: list[ProcessQueue]) -> list[asyncio.Task[Any]]:
        for t in self._consume_tasks - self._in_listener:
            t.cancel()
        return list(self._consume_tasks)

    async def _consume(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        c = self.consumer
        task = asyncio.current_task()
        assert task is not None
        try:
            async with self.semaphore:
                if pq.dropped or c._stopping:
                    return  # still in flight: the offset stays before them
                self._in_listener.add(task)
                try:
                    result = await self.call_listener(msgs)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    logger.exception(
                        "group %s: listener failed on %d message(s) of %s", c.group, len(msgs), pq.mq
                    )
                    result = ConsumeStatus.RECONSUME_LATER
            await self._result(pq, msgs, result)
        finally:
            self._in_listener.discard(task)

    async def _result(self, pq: ProcessQueue, msgs: list[ReceivedMessage], result: Any) -> None:
        c = self.consumer
        status = self._status(result)
        if pq.dropped:
            return  # the queue has a new owner, which consumes these again
        done = msgs
        if status == ConsumeStatus.RECONSUME_LATER:
            if c._clustering:
                failed = [m for m in msgs if not await self.send_back(m, 0)]
                if failed:
                    self._retry_locally(pq, failed)
                    kept = {m.queue_offset for m in failed}
                    done = [m for m in msgs if m.queue_offset not in kept]
            else:
                for m in msgs:
                    logger.warning(
                        "group %s (broadcasting): message %s failed and is dropped", c.group, m.msg_id
                    )
        pq.remove(done)
        assert c._offsets is not None
        if not pq.dropped:
            c._offsets.update(pq.mq, pq.commit_offset(), increase_only=True)

    def _status(self, result: Any) -> ConsumeStatus:
        try:
            return ConsumeStatus(result)
        except ValueError:
            logger.warning(
                "group %s: listener returned %r, not a ConsumeStatus: reconsume later",
                self.consumer.group,
                result,
            )
            return ConsumeStatus.RECONSUME_LATER

    def _retry_locally(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        """Messages that could not go back to the broker: consume them again here, later (when
        stopping, they just stay uncommitted and come again after a restart)."""
        if self.consumer._stopping:
            return
        again = [dataclasses.replace(m, reconsume_times=m.reconsume_times + 1) for m in msgs]

        async def later() -> None:
            await asyncio.sleep(LOCAL_RETRY_DELAY)
            self.submit(pq, again)

        task = asyncio.get_running_loop().create_task(later())
        self._retry_tasks.add(task)
        task.add_done_callback(self._retry_tasks.discard)
