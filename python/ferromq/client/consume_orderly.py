"""Orderly consumption (Java's ConsumeMessageOrderlyService): one task per queue hands the queue's
messages to the listener a batch at a time, in queue order. In CLUSTERING mode it does so only
while the queue's lock on its broker is fresh, and the locks are renewed every `lock_interval`. A
suspended batch (SUSPEND_CURRENT_QUEUE_A_MOMENT, or an exception) goes back to the front of the
queue and is retried after `suspend_current_queue_ms`; past the retry limit it goes to the DLQ.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any

from ferromq.client.consume_service import ConsumeService, log_crash
from ferromq.client.message import ReceivedMessage
from ferromq.client.rebalance import ProcessQueue

logger = logging.getLogger(__name__)

# How often a queue whose lock is stale is looked at again.
ORDERLY_LOCK_WAIT = 0.5


class ConsumeOrderlyStatus(StrEnum):
    """What an orderly listener returns."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


OrderlyListener = Callable[[list[ReceivedMessage]], ConsumeOrderlyStatus | Awaitable[ConsumeOrderlyStatus]]
"""`(msgs) -> ConsumeOrderlyStatus`, sync (run in a worker thread) or async."""


class ConsumeMessageOrderlyService(ConsumeService):
    """Consumes each queue in order, one batch in the listener at a time."""

    default_max_reconsume = -1

    def start(self) -> list[asyncio.Task[None]]:
        """CLUSTERING: the task that renews the queue locks."""
        rb = self.consumer._rebalancer
        assert rb is not None
        if not rb.needs_locks:
            return []
        loop = asyncio.get_running_loop()
        return [loop.create_task(self._lock_loop(), name=f"lock-queues-{self.consumer.group}")]

    def queue_added(self, pq: ProcessQueue) -> None:
        pq.consume_task = asyncio.get_running_loop().create_task(
            self._consume_loop(pq), name=f"consume-orderly-{pq.mq}"
        )
        pq.consume_task.add_done_callback(log_crash)

    async def queue_removed(self, pq: ProcessQueue) -> None:
        if pq.consume_task is not None:
            async with pq.consume_lock:  # the batch in the listener ends first
                pq.consume_task.cancel()
            await asyncio.gather(pq.consume_task, return_exceptions=True)

    def submit(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        """Nothing to do: the queue's task takes them from `pq`, in order."""

    def stop_consuming(self, pqs: list[ProcessQueue]) -> list[asyncio.Task[Any]]:
        for pq in pqs:
            pq.has_waiting.set()  # an idle queue's task wakes up and ends
        return [pq.consume_task for pq in pqs if pq.consume_task is not None]

    async def _lock_loop(self) -> None:
        c = self.consumer
        rb = c._rebalancer
        assert rb is not None
        while True:
            await asyncio.sleep(c.lock_interval)
            try:
                await rb.lock_all()
            except Exception:
                logger.exception("group %s: renewing queue locks failed", c.group)

    async def _consume_loop(self, pq: ProcessQueue) -> None:
        c = self.consumer
        rb = c._rebalancer
        assert rb is not None
        while not pq.dropped and not c._stopping:
            await pq.has_waiting.wait()
            if pq.dropped or c._stopping:
                break
            if rb.needs_locks and not pq.lock_valid(time.monotonic()):
                await asyncio.sleep(ORDERLY_LOCK_WAIT)
                continue
            pause = 0.0
            async with pq.consume_lock:
                if pq.dropped or c._stopping:
                    break
                batch = pq.take(c.consume_batch_size)
                if not batch:
                    continue
                async with self.semaphore:
                    if pq.dropped or c._stopping:
                        pq.put_back(batch)
                        break
                    try:
                        result = await self.call_listener(batch)
                    except asyncio.CancelledError:
                        pq.put_back(batch)
                        raise
                    except Exception:
                        logger.exception(
                            "group %s: orderly listener failed on %d message(s) of %s",
                            c.group,
                            len(batch),
                            pq.mq,
                        )
                        result = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                pause = await self._result(pq, batch, self._status(result))
            if pause:
                await asyncio.sleep(pause)

    def _status(self, result: Any) -> ConsumeOrderlyStatus:
        try:
            return ConsumeOrderlyStatus(result)
        except ValueError:
            logger.warning(
                "group %s: orderly listener returned %r, not a ConsumeOrderlyStatus: suspending",
                self.consumer.group,
                result,
            )
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT

    async def _result(
        self, pq: ProcessQueue, batch: list[ReceivedMessage], status: ConsumeOrderlyStatus
    ) -> float:
        """Applies an orderly listener's answer; returns how long the queue pauses."""
        c = self.consumer
        assert c._offsets is not None
        done: list[ReceivedMessage] = []
        again: list[ReceivedMessage] = []
        if status == ConsumeOrderlyStatus.SUCCESS:
            done = batch
        else:
            limit = self.max_reconsume()
            for m in batch:
                if limit >= 0 and m.reconsume_times >= limit:
                    if not c._clustering:
                        logger.warning(
                            "group %s (broadcasting): message %s failed %d times and is dropped",
                            c.group,
                            m.msg_id,
                            m.reconsume_times + 1,
                        )
                        done.append(m)
                        continue
                    if await self.send_back(m, -1):
                        done.append(m)
                        continue
                again.append(dataclasses.replace(m, reconsume_times=m.reconsume_times + 1))
        pq.remove(done)
        pq.put_back(again)
        c._offsets.update(pq.mq, pq.commit_offset(), increase_only=True)
        return c.suspend_current_queue_ms / 1000.0 if again else 0.0
