"""Delivery of delayed messages (RocketMQ's ScheduleMessageService).

The store puts a message with DELAY=n into `SCHEDULE_TOPIC_XXXX` queue n-1. Within a queue,
messages are in store order and share one delay, so deliver times only grow: each level's task
sleeps exactly until its head is due, delivers everything due, and sleeps again. A put into an
empty level wakes it. Progress is kept in `config/delayOffset.json`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

from ferromq.broker.json_files import load_json_file, save_json_file
from ferromq.errors import DiskFullError, DispatchBehindError, StoreClosedError
from ferromq.protocol.constants import SCHEDULE_TOPIC
from ferromq.store import MessageStore

logger = logging.getLogger(__name__)

RETRY_AFTER_FAILURE_SECONDS = 1.0
# Messages moved per store call; between calls the event loop serves other requests.
DELIVER_BATCH = 4096
# Even with nothing due, look at each level this often (a safety net for missed wake-ups).
IDLE_RECHECK_SECONDS = 5.0


def parse_levels(spec: str) -> list[int]:
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    return [int(item[:-1]) * units[item[-1]] for item in spec.split()]


class ScheduleMessageService:
    def __init__(
        self,
        store: MessageStore,
        levels_spec: str,
        path: Path,
        persist_interval: float,
        delivered: Callable[[str, int, int, int | None], None],
    ) -> None:
        self._store = store
        self.levels = parse_levels(levels_spec)
        self._path = path
        self._persist_interval = persist_interval
        self._delivered = delivered
        self.offsets: dict[int, int] = {}
        self._wake = {level: asyncio.Event() for level in range(1, len(self.levels) + 1)}
        self._tasks: list[asyncio.Task[None]] = []
        data = load_json_file(path) or {}
        for level, offset in (data.get("offsetTable") or {}).items():
            self.offsets[int(level)] = int(offset)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for level in self._wake:
            q = level - 1
            lo, hi = self._store.min_offset(SCHEDULE_TOPIC, q), self._store.max_offset(SCHEDULE_TOPIC, q)
            self.offsets[level] = min(max(self.offsets.get(level, 0), lo), hi)
            self._tasks.append(loop.create_task(self._run_level(level), name=f"delay-level-{level}"))
        self._tasks.append(loop.create_task(self._persist_loop(), name="delay-persist"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self.persist()

    def wake(self, level: int) -> None:
        event = self._wake.get(level)
        if event is not None:
            event.set()

    def replace_offsets(self, offsets: dict[int, int]) -> None:
        """A slave takes its master's delivery progress (SlaveSynchronize) and keeps it on disk."""
        self.offsets = dict(offsets)
        self.persist()

    def encode(self) -> bytes:
        """`delayOffset.json` as the master serves it to slaves (GET_ALL_DELAY_OFFSET)."""
        inner = ",".join(f"{int(k)}:{int(v)}" for k, v in sorted(self.offsets.items()))
        return ('{"offsetTable":{' + inner + "}}").encode()

    def persist(self) -> None:
        save_json_file(self._path, {"offsetTable": dict(sorted(self.offsets.items()))})

    async def _persist_loop(self) -> None:
        last = dict(self.offsets)
        while True:
            await asyncio.sleep(self._persist_interval)
            # Unchanged offsets are not rewritten: the file's fsync holds the event loop meanwhile.
            if self.offsets != last:
                last = dict(self.offsets)
                self.persist()

    async def _run_level(self, level: int) -> None:
        event = self._wake[level]
        while True:
            event.clear()
            try:
                wait = self._deliver_due(level)
            except StoreClosedError:
                return
            except (DiskFullError, DispatchBehindError) as e:
                # The store logs the state change once; due messages wait in the schedule queue.
                logger.debug("delay level %d: delivery waits for space: %s", level, e)
                wait = RETRY_AFTER_FAILURE_SECONDS
            except Exception:
                logger.exception("delay level %d: delivery failed; retrying", level)
                wait = RETRY_AFTER_FAILURE_SECONDS
            try:
                async with asyncio.timeout(wait):
                    await event.wait()
            except TimeoutError:
                pass

    def _deliver_due(self, level: int) -> float:
        """Delivers what is due; returns how long to sleep before the next one is."""
        while True:
            now = int(time.time() * 1000)
            offset, next_due, delivered = self._store.deliver_due_delayed(
                level, self.offsets.get(level, 0), now, DELIVER_BATCH
            )
            self.offsets[level] = offset
            # Wake held pulls once per queue, with the newest offset.
            newest: dict[tuple[str, int], tuple[int, int]] = {}
            for topic, queue_id, queue_offset, tags_code in delivered:
                newest[(topic, queue_id)] = (queue_offset + 1, tags_code)
            for (topic, queue_id), (next_offset, tags_code) in newest.items():
                self._delivered(topic, queue_id, next_offset, tags_code)
            if len(delivered) < DELIVER_BATCH:
                if next_due is None:
                    return IDLE_RECHECK_SECONDS
                return min(max(next_due - now, 0) / 1000.0, IDLE_RECHECK_SECONDS)
