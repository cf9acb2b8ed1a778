"""Receipt handles the broker keeps invisible for a push consumer while it consumes (a 5.x client's
ReceiveMessage with `auto_renew`), as Apache RocketMQ's proxy renews them
(DefaultReceiptHandleManager): a message received with auto-renew is invisible for
`defaultInvisibleTimeMills` (60 s); shortly before that runs out (`renewAheadTimeMillis`) its
invisible time is changed again, for 1, 3, 5, 10 and 30 minutes, then an hour at a time, until the
client acks it, nacks it, sends it to the dead letter queue, or goes away (its messages then become
visible again a second later), or three hours passed.

Each renewal is a change of invisible time: a checkpoint of the message alone and an ack of the
one before. So the client's own handle names a checkpoint that is acked already: its ack (or
change) is made with the newest handle instead."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ferromq.broker.pop.formats import ExtraInfo

logger = logging.getLogger(__name__)

# Renewal n (from 0) makes the message invisible for this long (RenewStrategyPolicy).
RENEW_STEPS_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)
MAX_RENEW_MS = 3 * 3600 * 1000
# A client gone: its messages are visible again this soon.
INVISIBLE_WHEN_CLEARED_MS = 1000
MAX_RENEW_FAILURES = 3


@dataclass
class Held:
    """A message a push consumer holds: its newest receipt handle and where it lies."""

    group: str
    topic: str
    """The topic it lies in (a retry topic for a retried message)."""
    handle: str
    """The broker's receipt (8 fields), the newest."""
    commit_log_offset: int
    received_ms: int
    renewals: int = 0
    failures: int = 0
    lite_topic: str | None = None
    """A lite message's lite topic (its order state is what a renewal changes)."""

    @property
    def receipt(self) -> ExtraInfo:
        return ExtraInfo.parse(self.handle)

    @property
    def visible_at(self) -> int:
        r = self.receipt
        return r.pop_time + r.invisible_time


# (popTime, invisibleTime, reviveQid) of a change of invisible time (a broker's answer: awaited) of
# (group, topic, receipt, invisible ms, lite topic).
Change = Callable[[str, str, ExtraInfo, int, str | None], Awaitable[tuple[int, int, int]]]


class Renewals:
    """The held messages by (client id, group, message id), renewed by a background task."""

    def __init__(self, change: Change, ahead_ms: int, period_s: float) -> None:
        self._change = change
        self._ahead_ms = ahead_ms
        self._period_s = period_s
        self.held: dict[tuple[str, str, str], Held] = {}
        self.renewed = 0
        """Renewals made since start."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="grpc-renew")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def hold(self, client_id: str, message_id: str, held: Held) -> None:
        self.held[(client_id, held.group, message_id)] = held

    def release(self, client_id: str, group: str, message_id: str, handle: str) -> str:
        """The newest receipt handle of a message the client acks or changes (its own when it is
        not held); the message is no longer held."""
        held = self.held.pop((client_id, group, message_id), None)
        if held is None:
            return handle
        return f"{held.handle} {held.commit_log_offset}"

    async def client_gone(self, client_id: str) -> None:
        """The client's held messages become visible again soon."""
        for key in [k for k in self.held if k[0] == client_id]:
            held = self.held.pop(key)
            try:
                await self._change(
                    held.group, held.topic, held.receipt, INVISIBLE_WHEN_CLEARED_MS, held.lite_topic
                )
            except Exception as e:
                logger.debug("releasing %s of %s: %s", key[2], client_id, e)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._period_s)
            try:
                await self.renew_due(int(time.time() * 1000))
            except Exception:
                logger.exception("renewing receipt handles failed; retrying")

    async def renew_due(self, now_ms: int) -> None:
        for key, held in list(self.held.items()):
            if held.visible_at - now_ms > self._ahead_ms:
                continue
            if now_ms - held.received_ms >= MAX_RENEW_MS:
                del self.held[key]  # consumed too long: let it come back
                continue
            invisible = RENEW_STEPS_MS[min(held.renewals, len(RENEW_STEPS_MS) - 1)]
            receipt = held.receipt
            try:
                pop_time, invisible_time, revive_qid = await self._change(
                    held.group, held.topic, receipt, invisible, held.lite_topic
                )
            except Exception as e:
                held.failures += 1
                logger.debug("renewing %s failed (%d): %s", key[2], held.failures, e)
                if held.failures >= MAX_RENEW_FAILURES:
                    del self.held[key]
                continue
            renewed = receipt.changed(pop_time, invisible_time, revive_qid)
            held.handle = str(renewed)
            held.renewals += 1
            self.renewed += 1
            held.failures = 0
