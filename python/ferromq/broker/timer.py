"""Delivery of timer messages (RocketMQ 5.x's TimerMessageStore services).

A send with TIMER_DELIVER_MS, TIMER_DELAY_SEC or TIMER_DELAY_MS is stored in `rmq_sys_wheel_timer`
queue 0 (the store's send rule). Three tasks move it on, each a call into the store that does the
work in Rust:

* enqueue: woken by arrivals in the timer topic, takes them into the timer wheel (the ones already
  due go back to their topics at once);
* dequeue: wakes at each slot boundary (`timerPrecisionMs`) and puts back the messages of the
  slots that have passed, waking the pulls held for them; rolled messages wake enqueue;
* checkpoint: every `timerFlushIntervalMs`, flushes the timer files and saves their progress
  (`config/timercheck`); a restart resumes from there.

`timerStopEnqueue` and `timerStopDequeue` pause the first two, as in Java. On a slave only
enqueue and checkpoint run, and nothing is delivered: its wheel is built from the replicated
timer topic and its read time follows the master's (replication's GET_TIMER_CHECK_POINT), so a
promotion delivers from where the master stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Callable

from ferromq.errors import DiskFullError, DispatchBehindError, StoreClosedError
from ferromq.store import MessageStore

logger = logging.getLogger(__name__)

# Messages moved per store call; between calls the event loop serves other requests.
BATCH = 4096
RETRY_AFTER_FAILURE_SECONDS = 1.0
# Even with no arrival seen, enqueue looks at the timer topic this often (a missed wake-up).
ENQUEUE_RECHECK_SECONDS = 1.0
# A paused service looks again this often whether it was resumed.
PAUSED_RECHECK_SECONDS = 0.1
# Timer log files whose messages retention deleted are removed this often (Java: 30 s).
CLEAN_INTERVAL_SECONDS = 30.0

Delivered = Callable[[str, int, int, int | None], None]

# GET_TIMER_CHECK_POINT's body (Java's TimerCheckpoint.encode): last read time, timer log flush
# position, timer queue offset, master timer queue offset, data version (state version,
# timestamp, counter), big-endian longs.
_CHECKPOINT = struct.Struct(">7q")


def encode_checkpoint(store: MessageStore) -> bytes:
    """The master's timer progress as it answers GET_TIMER_CHECK_POINT."""
    read_time_ms, queue_offset, flushed = store.timer_progress()
    return _CHECKPOINT.pack(read_time_ms, flushed, queue_offset, queue_offset, 0, int(time.time() * 1000), 0)


def follow_checkpoint(store: MessageStore, body: bytes) -> None:
    """A slave takes the master's timer progress from its GET_TIMER_CHECK_POINT answer."""
    if len(body) < 32:
        raise ValueError(f"a timer checkpoint of {len(body)} bytes (at least 32 expected)")
    read_time_ms, _flushed, _queue_offset, master_queue_offset = struct.unpack_from(">4q", body)
    store.timer_follow(read_time_ms, master_queue_offset)


class TimerMessageService:
    def __init__(
        self,
        store: MessageStore,
        precision_ms: int,
        flush_interval_ms: int,
        delivered: Delivered,
        is_master: Callable[[], bool] = lambda: True,
        stop_enqueue: Callable[[], bool] = lambda: False,
        stop_dequeue: Callable[[], bool] = lambda: False,
    ) -> None:
        self._store = store
        self._precision_ms = precision_ms
        self._flush_interval = flush_interval_ms / 1000.0
        self._delivered = delivered
        self._is_master = is_master
        self._stop_enqueue = stop_enqueue
        self._stop_dequeue = stop_dequeue
        self._enqueue_wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def running(self) -> bool:
        return bool(self._tasks)

    async def start(self) -> None:
        if self._tasks:
            return
        loop = asyncio.get_running_loop()
        self._enqueue_wake.set()  # what arrived while stopped
        self._tasks = [
            loop.create_task(self._run(self._enqueue, "enqueue", self._enqueue_wake), name="timer-enqueue"),
            loop.create_task(self._run(self._dequeue, "dequeue"), name="timer-dequeue"),
            loop.create_task(self._checkpoint_loop(), name="timer-checkpoint"),
        ]

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if tasks:
            try:
                self._store.timer_checkpoint()
            except StoreClosedError:
                pass

    def arrived(self) -> None:
        """A message was stored in the timer topic: enqueue it."""
        self._enqueue_wake.set()

    def stats(self) -> dict[str, int]:
        return self._store.timer_stats()

    # -- the tasks -----------------------------------------------------------------------------

    async def _run(self, step: Callable[[], float], what: str, wake: asyncio.Event | None = None) -> None:
        """Runs `step` (which returns how long to wait, or until `wake` is set) until cancelled,
        through store errors."""
        while True:
            try:
                wait = step()
            except StoreClosedError:
                return
            except (DiskFullError, DispatchBehindError) as e:
                # The store logs the state change once; timers wait in the wheel meanwhile.
                logger.debug("timer %s waits for space: %s", what, e)
                wait = RETRY_AFTER_FAILURE_SECONDS
            except Exception:
                logger.exception("timer %s failed; retrying", what)
                wait = RETRY_AFTER_FAILURE_SECONDS
            if wait <= 0:
                await asyncio.sleep(0)  # let other requests in between batches
            elif wake is None:
                await asyncio.sleep(wait)
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await wake.wait()

    def _enqueue(self) -> float:
        if self._stop_enqueue():
            return PAUSED_RECHECK_SECONDS
        self._enqueue_wake.clear()
        taken, delivered = self._store.timer_enqueue(BATCH, deliver_due=self._is_master())
        self._wake_pulls(delivered)
        return 0.0 if taken >= BATCH else ENQUEUE_RECHECK_SECONDS

    def _dequeue(self) -> float:
        if self._stop_dequeue() or not self._is_master():
            return PAUSED_RECHECK_SECONDS
        now_ms = int(time.time() * 1000)
        delivered, rolled, more = self._store.timer_dequeue(now_ms, BATCH)
        self._wake_pulls(delivered)
        if rolled:
            self._enqueue_wake.set()
        if more:
            return 0.0
        # Until just after the next slot boundary: the slot now current is due once it passes.
        p = self._precision_ms
        next_boundary = (now_ms // p + 1) * p
        return (next_boundary - time.time() * 1000 + 1) / 1000.0

    def _wake_pulls(self, delivered: list[tuple[str, int, int, int]]) -> None:
        # Once per queue, with the newest offset.
        newest: dict[tuple[str, int], tuple[int, int]] = {}
        for topic, queue_id, queue_offset, tags_code in delivered:
            newest[(topic, queue_id)] = (queue_offset + 1, tags_code)
        for (topic, queue_id), (next_offset, tags_code) in newest.items():
            self._delivered(topic, queue_id, next_offset, tags_code)

    async def _checkpoint_loop(self) -> None:
        last_clean = time.monotonic()
        while True:
            await asyncio.sleep(self._flush_interval)
            try:
                # Off the loop: it syncs files.
                await asyncio.to_thread(self._store.timer_checkpoint)
                if time.monotonic() - last_clean >= CLEAN_INTERVAL_SECONDS:
                    last_clean = time.monotonic()
                    deleted = await asyncio.to_thread(self._store.timer_clean)
                    if deleted:
                        logger.info("timer: deleted %d timer log files of expired messages", deleted)
            except StoreClosedError:
                return
            except Exception:
                logger.exception("timer checkpoint failed; retrying")
