"""Table topics: the broker appends chosen topics to Delta Lake tables (`ferromq.tables`).

broker.conf chooses the topics (`tableTopics`: comma-separated names, or `regex:` and a regular
expression over whole topic names, internal topics left out) and where the tables go
(`tableTopicPath`, default `<storePathRootDir>/tables`, one table per topic under it). Every
`tableTopicIntervalSeconds` the service looks at each chosen topic's queues. A queue goes in once
it holds a whole file's worth of rows (`tableTopicTargetFileBytes`, estimated from what the topic's
rows weigh in its files), or once its oldest waiting row was stored `tableTopicMaxDelaySeconds` ago.
Whole files are never rewritten by compaction, which on a busy topic would otherwise cost the
broker more than tiering itself: every row read, decoded and encoded twice. `tableTopicMinRows` > 0
restores commits of whatever waits once that many rows do (small files, merged by compaction).
The rows are read from the store (decoded into Arrow in Rust, as the Spark source reads them; the
bodies stay in the CommitLog's mapped files), written as Parquet files and committed with each
queue's next offset as a Delta app transaction (see `ferromq.tables.writer` for why that is exactly
once). One queue reads at most `tableTopicMaxCommitBytes` of records per commit; a topic further
behind is committed again at once. On start, each table says where it ended.

Every `tableTopicCompactionIntervalSeconds` each table's small files are merged (Delta optimize),
days older than `tableTopicRetentionDays` are deleted, and files no version of the last
`tableTopicVacuumRetentionHours` uses are removed (vacuum, which also removes files a crash left
uncommitted). Between those, a partition (a day of a queue) is compacted as soon as
`tableTopicCompactionFiles` files smaller than a whole one were added to it since its last
compaction: commits of small files every few seconds would otherwise leave readers thousands of
them until the schedule's next run.

Offsets retention deleted before they were tiered are skipped, logged, counted (`rows_lost`) and
recorded as passed in the next commit. The work runs on one thread of its own: the store's reads
and the Parquet encoding release the GIL, and the event loop never waits for it.

Runs on a master not in controller mode (a slave's store holds the same messages; in controller
mode the role moves, which this first version does not follow).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Protocol

from ferromq import _store
from ferromq.tables.columns import BATCH_BYTES, QueueRows, read_queue
from ferromq.tables.config import TableTopicConfig
from ferromq.tables.layout import table_root, table_uri
from ferromq.tables.writer import TopicTable, WrittenFile

logger = logging.getLogger(__name__)

# tableTopicMinRows=0: a queue's rows go in as whole files of about tableTopicTargetFileBytes, which
# compaction then never rewrites. What a row weighs in a file is learnt from the topic's files
# (a few rows tell little: their footer weighs as much); until then it is assumed. FILE_FILL aims a
# little past the target, so that a whole file is not just under it (and merged after all).
ASSUMED_ROW_BYTES = 1024
MIN_ROWS_TO_LEARN = 1000
FILE_FILL = 1.05

# Test hook, off unless set: the path of a file the service creates after writing a commit's files
# and before committing them; it commits once the file is removed (and gives the commit up if the
# broker stops first). Tests kill the broker while the file exists: the crash lands between the
# two steps every time.
PAUSE_ENV = "FERROMQ_TEST_TIERING_PAUSE_BEFORE_COMMIT"

# Every broker's system topics (the store's list): never tiered by a `regex:` selection.
_SYSTEM_TOPICS = frozenset(_store.SYSTEM_TOPICS)


@dataclass(frozen=True)
class TieringSettings:
    """The tableTopic* keys of broker.conf, as the service uses them."""

    root: str
    names: tuple[str, ...]
    pattern: str | None
    interval: float
    min_rows: int
    max_delay_ms: int
    max_commit_bytes: int
    compaction_interval: float
    compaction_files: int
    target_file_bytes: int
    retention_days: int
    vacuum_retention_hours: int
    compression: str
    storage_options: dict[str, str] = field(default_factory=dict)
    """An s3:// root's tableTopicS3* keys, as AWS_* options over the environment's."""

    @classmethod
    def of(cls, cfg: TableTopicConfig, store_root: str) -> TieringSettings:
        """The settings of broker.conf's table-topic keys, for the store at `store_root`."""
        names, pattern = cfg.table_topic_selection
        return cls(
            root=table_root(store_root, cfg.table_topic_path),
            names=names,
            pattern=pattern,
            interval=float(cfg.table_topic_interval_seconds),
            min_rows=cfg.table_topic_min_rows,
            max_delay_ms=cfg.table_topic_max_delay_seconds * 1000,
            max_commit_bytes=cfg.table_topic_max_commit_bytes,
            compaction_interval=float(cfg.table_topic_compaction_interval_seconds),
            compaction_files=cfg.table_topic_compaction_files,
            target_file_bytes=cfg.table_topic_target_file_bytes,
            retention_days=cfg.table_topic_retention_days,
            vacuum_retention_hours=cfg.table_topic_vacuum_retention_hours,
            compression=cfg.table_topic_compression,
            storage_options=cfg.table_topic_s3_options,
        )

    def wants(self, topic: str) -> bool:
        if self.pattern is None:
            return topic in self.names
        internal = topic in _SYSTEM_TOPICS or topic.lower().startswith("rmq_sys_")
        return not internal and re.fullmatch(self.pattern, topic) is not None


@dataclass
class TopicProgress:
    """What the service did for one topic since the broker started, and where its table ends."""

    topic: str
    uri: str
    rows_tiered: int = 0
    commits: int = 0
    failures: int = 0
    rows_lost: int = 0
    version: int | None = None
    committed: dict[int, int] = field(default_factory=dict)
    """Per queue, the offset after the last row the table holds."""
    last_commit_ms: int | None = None
    last_error: str | None = None
    tier_cpu_seconds: float = 0.0
    """CPU time the service's thread spent reading, writing and committing the topic's rows."""
    maintain_cpu_seconds: float = 0.0
    """CPU time it spent compacting, expiring and vacuuming the topic's table."""


class TieringStatus(Protocol):
    """What the broker reads of its table tiering, in a thread (`TieringService`) or a process of
    its own (`ferromq.tables.process.TieringProcess`)."""

    def progress(self) -> list[TopicProgress]: ...
    def lags(self, progress: Iterable[TopicProgress]) -> dict[str, int]: ...


class TieringService:
    """Appends the chosen topics to their tables in the background (see the module's doc)."""

    def __init__(self, store: _store.Store, settings: TieringSettings) -> None:
        self._store = store
        self.settings = settings
        self._tables: dict[str, TopicTable] = {}
        self._progress: dict[str, TopicProgress] = {}
        self._lock = threading.Lock()  # `_progress`: written on the thread, read by scrapes
        self._stopping = threading.Event()
        self._executor: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self._running: asyncio.Future[bool] | None = None
        self._last_maintenance = time.monotonic()
        # Per topic, per partition (day, queue id): files smaller than a whole one added since it
        # was last compacted.
        self._added: dict[str, dict[tuple[str, int], int]] = {}
        # Per topic: the bytes one row takes in its data files (see `_rows_per_file`).
        self._row_bytes: dict[str, float] = {}
        self._pause_file = os.environ.get(PAUSE_ENV) or None

    @classmethod
    def of(cls, store: _store.Store, cfg: TableTopicConfig, store_root: str) -> TieringService:
        return cls(store, TieringSettings.of(cfg, store_root))

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        self._stopping.clear()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="table-topics")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="table-topics")
        self._task.add_done_callback(_log_death)
        s = self.settings
        chosen = ", ".join(s.names) if s.pattern is None else f"topics matching {s.pattern!r}"
        logger.info("table topics: %s, tables under %s", chosen, s.root)

    def stop_soon(self) -> None:
        """Makes the cycle in progress end early, without the commit it was about to make (from
        any thread)."""
        self._stopping.set()

    async def stop(self) -> None:
        """Stops after the commit in progress (if any); idempotent."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        # The thread may still be in a cycle: the store must outlive it.
        running, self._running = self._running, None
        if running is not None:
            await asyncio.gather(running, return_exceptions=True)
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._executor is not None
        while True:
            self._running = loop.run_in_executor(self._executor, self.run_once)
            try:
                # Shielded: cancelling the task must not forget a cycle the thread still runs.
                more = await asyncio.shield(self._running)
            except Exception:
                logger.exception("table topics: a cycle failed")
                more = False
            self._running = None
            await asyncio.sleep(0 if more else self.settings.interval)

    # -- one cycle (on the service's thread) ------------------------------------------------------

    def run_once(self) -> bool:
        """Tiers every chosen topic that is due, then compacts and vacuums when that is due;
        whether a topic has more waiting than one commit took."""
        by_topic: dict[str, list[tuple[int, int, int]]] = {}
        for topic, queue_id, lo, hi in self._store.queues():
            if self.settings.wants(topic):
                by_topic.setdefault(topic, []).append((queue_id, lo, hi))
        more = False
        for topic in sorted(by_topic):
            if self._stopping.is_set():
                return False
            with self._work(topic, "tiering", maintenance=False):
                more |= self._tier(topic, sorted(by_topic[topic]))
            self._compact_busy_partitions(topic)
        interval = self.settings.compaction_interval
        if interval > 0 and time.monotonic() - self._last_maintenance >= interval:
            # Also tables whose topic the log no longer holds: their retention still applies.
            with self._lock:
                known = set(self._progress)
            self.maintain(set(by_topic) | known)
            self._last_maintenance = time.monotonic()
        return more

    def _table(self, topic: str) -> TopicTable:
        table = self._tables.get(topic)
        if table is None:
            table = TopicTable(
                table_uri(self.settings.root, topic),
                topic,
                self.settings.compression,
                self.settings.storage_options,
            )
            self._tables[topic] = table
        return table

    def _tier(self, topic: str, queues: list[tuple[int, int, int]]) -> bool:
        s = self.settings
        table = self._table(topic)
        committed = table.committed(q for q, _, _ in queues)
        self._update(topic, committed=committed, version=table.version)
        # Where each queue continues; below the log's minimum, retention deleted offsets first.
        starts = {q: max(committed.get(q, lo), lo) for q, lo, _ in queues}
        gaps = {q: lo - committed[q] for q, lo, _ in queues if q in committed and committed[q] < lo}
        waiting = {q: hi - starts[q] for q, _, hi in queues if hi > starts[q]}
        if not waiting and not gaps:
            return False
        log_ends = {q: hi for q, _, hi in queues}
        ends = dict(log_ends)  # where each queue's read stops
        if s.min_rows > 0:
            share = max(BATCH_BYTES, s.max_commit_bytes // max(1, len(waiting)))
            if not gaps and sum(waiting.values()) < s.min_rows and not self._aged(topic, starts, waiting):
                return False
        else:
            # Whole files: a queue goes in once it holds a file's worth of rows (which then go in
            # alone) or its oldest waiting row is old enough.
            share = s.max_commit_bytes
            full = self._rows_per_file(topic, table)
            aged = self._aged(topic, starts, {q: n for q, n in waiting.items() if n < full})
            waiting = {q: n for q, n in waiting.items() if n >= full or q in aged}
            if not waiting and not gaps:
                return False
            ends.update({q: starts[q] + full for q, n in waiting.items() if n >= full})
        # One queue's rows in memory at a time: read, written to files, dropped (the commit's
        # bytes would otherwise all be held at once, and fresh pages cost more than reused ones).
        parts: list[QueueRows] = []
        files: list[WrittenFile] = []
        for q in sorted(waiting):
            part = read_queue(self._store, topic, q, starts[q], ends[q], share)
            files += table.write_files([part])
            parts.append(replace(part, batches=()))
        self._learn_row_size(topic, files)
        offsets = {q: starts[q] for q in gaps}
        offsets.update({p.queue_id: p.next_offset for p in parts if p.next_offset > starts[p.queue_id]})
        lost = sum(gaps.values()) + sum(p.lost for p in parts)
        if lost:
            logger.warning(
                "table topic %s: %d message(s) were deleted from the log before they were tiered", topic, lost
            )
        if not offsets:
            return False
        if not self._pause_before_commit(topic, [f.action.path for f in files]):
            return False
        version = table.commit(files, offsets)
        rows = sum(f.rows for f in files)
        added = self._added.setdefault(topic, {})
        for f in files:
            if f.action.size < s.target_file_bytes:  # compaction leaves whole files as they are
                added[f.day, f.queue_id] = added.get((f.day, f.queue_id), 0) + 1
        logger.debug("table topic %s: version %d, %d row(s) in %d file(s)", topic, version, rows, len(files))
        self._update(
            topic,
            rows_tiered=rows,
            commits=1,
            rows_lost=lost,
            committed=offsets,
            version=version,
            last_commit_ms=int(time.time() * 1000),
            last_error=None,
        )
        # Only a queue that moved and has more: one that cannot move must not spin the loop.
        return any(p.start < p.next_offset < log_ends[p.queue_id] for p in parts)

    def _aged(self, topic: str, starts: dict[int, int], waiting: dict[int, int]) -> set[int]:
        """The waiting queues whose oldest waiting row was stored `max_delay_ms` ago or more."""
        now = int(time.time() * 1000)
        return {
            q
            for q in waiting
            if (t := self._store.store_time(topic, q, starts[q])) is not None
            and now - t >= self.settings.max_delay_ms
        }

    def _rows_per_file(self, topic: str, table: TopicTable) -> int:
        """The rows that fill a file of `target_file_bytes`, from what the topic's rows weigh in
        its files (those of this run, else the table's), else `ASSUMED_ROW_BYTES`."""
        per_row = self._row_bytes.get(topic)
        if per_row is None:
            per_row = self._row_bytes[topic] = table.file_bytes_per_row() or ASSUMED_ROW_BYTES
        return max(1, math.ceil(self.settings.target_file_bytes * FILE_FILL / per_row))

    def _learn_row_size(self, topic: str, files: list[WrittenFile]) -> None:
        rows = sum(f.rows for f in files)
        if rows >= MIN_ROWS_TO_LEARN:  # a few rows weigh their file's footer as much as themselves
            self._row_bytes[topic] = sum(f.action.size for f in files) / rows

    def _compact_busy_partitions(self, topic: str) -> None:
        """Compacts the topic's partitions that reached `compaction_files` added files."""
        threshold = self.settings.compaction_files
        added = self._added.get(topic, {})
        busy = sorted(p for p, n in added.items() if threshold > 0 and n >= threshold)
        if not busy or self._stopping.is_set():
            return
        with self._work(topic, "compaction", maintenance=True):
            table = self._table(topic)
            for day, queue in busy:
                removed = table.compact(self.settings.target_file_bytes, partition=(day, queue))
                del added[day, queue]
                logger.debug(
                    "table topic %s: day %s of queue %d compacted, %d file(s)", topic, day, queue, removed
                )
            self._update(topic, version=table.version)

    def maintain(self, topics: Iterable[str]) -> None:
        """Compaction, the table's retention and vacuum of each topic's table."""
        s = self.settings
        for topic in sorted(topics):
            if self._stopping.is_set():
                return
            with self._work(topic, "compaction or vacuum", maintenance=True):
                table = self._table(topic)
                removed = table.compact(s.target_file_bytes)
                self._added.pop(topic, None)
                expired = table.expire(s.retention_days) if s.retention_days > 0 else 0
                vacuumed = table.vacuum(s.vacuum_retention_hours)
                self._update(topic, version=table.version)
                logger.info(
                    "table topic %s: %d file(s) compacted, %d row(s) past retention, %d file(s) vacuumed",
                    topic,
                    removed,
                    expired,
                    vacuumed,
                )

    @contextmanager
    def _work(self, topic: str, what: str, *, maintenance: bool) -> Iterator[None]:
        """Runs one piece of a topic's work on the service's thread. A failure is logged and
        counted, shown as the topic's last error, and the table is read again next time; the
        thread's CPU time goes to the topic's tiering or maintenance time."""
        cpu = time.thread_time()
        try:
            yield
        except Exception as e:
            logger.exception("table topic %s: %s failed; the table is read again next time", topic, what)
            self._tables.pop(topic, None)
            self._update(topic, failures=1, last_error=f"{type(e).__name__}: {e}")
        finally:
            spent = time.thread_time() - cpu
            if maintenance:
                self._update(topic, maintain_cpu_seconds=spent)
            else:
                self._update(topic, tier_cpu_seconds=spent)

    def _pause_before_commit(self, topic: str, files: list[str]) -> bool:
        """The test hook (`PAUSE_ENV`); False when the broker stopped during the pause."""
        path = self._pause_file
        if path is None:
            return True
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"topic": topic, "files": files}, f)
        while os.path.exists(path):
            if self._stopping.wait(0.05):
                return False
        return True

    # -- progress --------------------------------------------------------------------------------

    def _update(
        self,
        topic: str,
        *,
        rows_tiered: int = 0,
        commits: int = 0,
        failures: int = 0,
        rows_lost: int = 0,
        committed: dict[int, int] | None = None,
        version: int | None = None,
        last_commit_ms: int | None = None,
        last_error: str | None = "",
        tier_cpu_seconds: float = 0.0,
        maintain_cpu_seconds: float = 0.0,
    ) -> None:
        """Adds the counts and sets what is given ("" leaves `last_error` as it is)."""
        with self._lock:
            p = self._progress.get(topic)
            if p is None:
                p = self._progress[topic] = TopicProgress(topic, table_uri(self.settings.root, topic))
            p.rows_tiered += rows_tiered
            p.commits += commits
            p.failures += failures
            p.rows_lost += rows_lost
            p.tier_cpu_seconds += tier_cpu_seconds
            p.maintain_cpu_seconds += maintain_cpu_seconds
            if committed:
                p.committed.update(committed)
            if version is not None:
                p.version = version
            if last_commit_ms is not None:
                p.last_commit_ms = last_commit_ms
            if last_error != "":
                p.last_error = last_error

    def progress(self) -> list[TopicProgress]:
        """A copy of each topic's progress."""
        with self._lock:
            return [replace(p, committed=dict(p.committed)) for _, p in sorted(self._progress.items())]

    def lags(self, progress: Iterable[TopicProgress]) -> dict[str, int]:
        """Per topic, the messages the log holds that its table does not yet."""
        return self.lags_of(self._store, progress)

    @staticmethod
    def lags_of(store: _store.Store, progress: Iterable[TopicProgress]) -> dict[str, int]:
        """`lags` of the tables in `progress`, against `store`'s queues."""
        committed = {p.topic: p.committed for p in progress}
        out = dict.fromkeys(committed, 0)
        for topic, q, lo, hi in store.queues():
            done = committed.get(topic)
            if done is not None:
                out[topic] += max(0, hi - max(lo, done.get(q, lo)))
        return out


def _log_death(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("the table topics service stopped", exc_info=task.exception())
