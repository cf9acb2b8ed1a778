"""Held pulls (RocketMQ's PullRequestHoldService). A pull that finds nothing new waits here until
a matching message is stored, a periodic re-check finds one, or its suspend time runs out."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


def _release(fut: asyncio.Future[None]) -> None:
    """Ends a hold. A hold may be released twice before it runs again (a hold on several queues
    shares one future; the arrivals taken when the first hold begins may release it before its
    own look at the queues does), and a timed-out hold's future is cancelled: only the first
    release counts."""
    if not fut.done():
        fut.set_result(None)


@dataclass(eq=False)
class HeldPull:
    offset: int
    deadline: float
    tag_filter: Callable[[int], bool]
    future: asyncio.Future[None] = field(repr=False)


class PullRequestHoldService:
    def __init__(self, max_offset: Callable[[str, int], int], check_interval: float) -> None:
        self._max_offset = max_offset
        self.interval = check_interval
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        self._task: asyncio.Task[None] | None = None
        self.on_watch: Callable[[bool], None] | None = None
        """Told True when the first pull is held, False when none is (the broker's data planes
        wake the loop on arrivals only while pulls wait)."""

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._check_loop(), name="pull-hold")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for pulls in self._held.values():
            for p in pulls:
                _release(p.future)
        self._held.clear()

    async def hold(
        self, topic: str, queue_id: int, offset: int, timeout: float, tag_filter: Callable[[int], bool]
    ) -> None:
        """Returns when the pull should run again (message arrived, re-check, or timeout)."""
        await self.hold_any([(topic, queue_id, offset)], timeout, tag_filter)

    async def hold_any(
        self, positions: list[tuple[str, int, int]], timeout: float, tag_filter: Callable[[int], bool]
    ) -> None:
        """Like `hold`, on several queues at once (a pop of every queue of a topic and its retry
        topic): returns when any of them has a message past its position."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        deadline = time.monotonic() + timeout
        held = [
            ((topic, queue_id), HeldPull(offset, deadline, tag_filter, fut))
            for topic, queue_id, offset in positions
        ]
        first = not self._held
        for key, pull in held:
            self._held.setdefault(key, []).append(pull)
        if first and held and self.on_watch is not None:
            self.on_watch(True)
        # A message stored between the pull's read and now (its arrival may have been handled
        # before this hold began) ends the hold at once, as the data plane's holds do.
        if any(self._max_offset(topic, queue_id) > offset for topic, queue_id, offset in positions):
            _release(fut)
        try:
            async with asyncio.timeout(timeout):
                await fut
        except TimeoutError:
            pass
        finally:
            for key, pull in held:
                pulls = self._held.get(key)
                if pulls is None:
                    continue
                try:
                    pulls.remove(pull)
                except ValueError:
                    pass
                if not pulls:
                    del self._held[key]
            if held and not self._held and self.on_watch is not None:
                self.on_watch(False)

    def notify(self, topic: str, queue_id: int, max_offset: int, tags_code: int | None = None) -> None:
        """A message was stored (max_offset is the queue's new max): wake the pulls it satisfies."""
        pulls = self._held.get((topic, queue_id))
        if not pulls:
            return
        for p in pulls:
            if max_offset > p.offset and (tags_code is None or p.tag_filter(tags_code)):
                _release(p.future)

    def wake(self, topic: str, queue_id: int) -> None:
        """Every pull (or pop) held on the queue looks again, whatever arrived (an orderly pop's
        queue may be unblocked by an ack)."""
        for p in self._held.get((topic, queue_id), ()):
            _release(p.future)

    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            for (topic, queue_id), pulls in list(self._held.items()):
                try:
                    max_offset = self._max_offset(topic, queue_id)
                except Exception:
                    logger.exception("checking held pulls of %s:%d failed", topic, queue_id)
                    continue
                for p in pulls:
                    if max_offset > p.offset:
                        _release(p.future)

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    def held_of(self, topic: str) -> int:
        """Pulls of one topic held here."""
        return sum(len(v) for (t, _), v in self._held.items() if t == topic)
