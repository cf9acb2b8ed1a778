"""`MessageStore`: the RocketMQ 4.x store (CommitLog, ConsumeQueue, IndexFile) from Python.

A thin layer over the Rust extension `ferromq._store`: it turns dicts into properties strings,
tag expressions into hash codes and records into `StoredMessage`s. File I/O, scans and flush
waits run in Rust without the GIL.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from types import TracebackType
from typing import Self

from ferromq import _store
from ferromq.errors import FlushDiskTimeoutError
from ferromq.message import StoredMessage, decode_messages, encode_properties
from ferromq.message import tag_codes as _tag_codes

DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


class FlushDiskType(StrEnum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


@dataclass(frozen=True)
class StoreConfig:
    """Store settings; names follow RocketMQ's `MessageStoreConfig` in snake_case, and so do defaults."""

    root: str = os.path.join(os.path.expanduser("~"), "store")
    commitlog_dir: str | None = None
    mapped_file_size_commitlog: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * 20
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commitlog_ms: int = 500
    flush_commitlog_least_pages: int = 4
    flush_commitlog_thorough_interval_ms: int = 10_000
    flush_interval_consume_queue_ms: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval_ms: int = 60_000
    sync_flush_timeout_ms: int = 5000
    max_message_size: int = 4 * 1024 * 1024
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    store_host: str = "127.0.0.1:10911"
    check_crc_on_recover: bool = True
    enable_lmq: bool = False
    """RocketMQ's enableLmq: a record naming light message queues (`%LMQ%...`, 5.5's lite topics) in
    INNER_MULTI_DISPATCH gets its offset in each at append."""
    enable_multi_dispatch: bool = False
    """RocketMQ's enableMultiDispatch: such a record is dispatched into those queues."""
    warm_mapped_file_enable: bool = True
    read_only: bool = False
    # Retention (RocketMQ's CleanCommitLogService / CleanConsumeQueueService; see `clean_expired_files`).
    file_reserved_time_hours: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    disk_space_warning_level_ratio: int = 90
    """Above this percent of a store partition, writes are refused until space returns."""
    clean_file_forcibly_enable: bool = True
    delete_commitlog_files_interval_ms: int = 100
    delete_consume_queue_files_interval_ms: int = 100
    destroy_mapped_file_interval_forcibly_ms: int = 120_000
    clean_resource_interval_ms: int = 10_000
    # What one pull answer carries (RocketMQ's isTheBatchFull; see `pull`).
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    access_message_in_memory_max_ratio: int = 40
    # Timer messages (RocketMQ 5.x's TimerMessageStore; see `timer_enqueue`, `timer_dequeue`).
    timer_wheel_enable: bool = True
    timer_precision_ms: int = 1000
    timer_max_delay_sec: int = 3 * 24 * 3600
    timer_roll_window_slot: int = 2 * 24 * 3600
    timer_congest_num_each_slot: int = 2**31 - 1
    mapped_file_size_timer_log: int = 100 * 1024 * 1024
    # Flushed pages of a file behind this many bytes before its write position are unmapped (they
    # stay in the page cache and on disk): RSS stays small with long files. None: keep all mapped.
    mapped_file_hot_window: int | None = 8 * 1024 * 1024


@dataclass(frozen=True)
class CleanReport:
    """What one retention round did."""

    time_up: bool
    """It was one of the `delete_when` hours."""
    space_full: bool
    """A disk was above `disk_max_used_space_ratio` (or its usage unknown)."""
    manual: bool
    """One of the rounds `execute_delete_files_manually` asked for."""
    clean_at_once: bool
    """Files went whatever their age (a disk above `disk_space_clean_forcibly_ratio`)."""
    commitlog_files_deleted: int
    consume_queue_files_deleted: int
    index_files_deleted: int
    min_physical_offset: int


@dataclass(frozen=True)
class RetentionStats:
    """Retention totals since the store was opened."""

    rounds: int
    commitlog_files_deleted: int
    consume_queue_files_deleted: int
    index_files_deleted: int
    consume_queues_destroyed: int


@dataclass(frozen=True)
class SpaceStatus:
    """The store's disks as writes see them."""

    disk_full: bool
    """Writes are refused (SERVICE_NOT_AVAILABLE) until usage falls under diskSpaceWarningLevelRatio."""
    used_ratio: float
    """Used fraction of the fuller store partition (CommitLog or consume queues); -1 unknown."""
    dispatch_behind: int | None
    """CommitLog offset from which stored records wait for their consume-queue units, if any."""


PutResult = _store.PutResult
PutBatchResult = _store.PutBatchResult
GetResult = _store.GetResult
PropertyEdits = _store.PropertyEdits
KEEP_PROPERTIES = PropertyEdits()
"""No edits: the properties are stored as they are (a delayed message still goes to the schedule topic)."""


def _properties(
    properties: Mapping[str, str] | str | None, tags: str | None, keys: str | Iterable[str] | None
) -> str:
    if isinstance(properties, str):
        if tags is not None or keys is not None:
            raise ValueError("pass tags and keys inside a raw properties string")
        return properties
    props = dict(properties or {})
    if tags is not None:
        props["TAGS"] = tags
    if keys is not None:
        props["KEYS"] = keys if isinstance(keys, str) else " ".join(keys)
    return encode_properties(props)


class MessageStore:
    """A store directory: one writer at a time (it takes `{root}/lock`), any number of read-only views.

    Use it as a context manager, or call `close()`: a clean close flushes everything and removes
    the `abort` marker, so the next open skips crash recovery.
    """

    def __init__(self, config: StoreConfig | str | os.PathLike[str], **overrides: object) -> None:
        if not isinstance(config, StoreConfig):
            config = StoreConfig(root=os.fspath(config))
        if overrides:
            config = StoreConfig(**{**asdict(config), **overrides})
        self.config = config
        kwargs = asdict(config)
        root = kwargs.pop("root")
        kwargs["flush_disk_type"] = str(config.flush_disk_type)
        self._store = _store.Store(root, **kwargs)

    @property
    def raw(self) -> _store.Store:
        """The extension's store object (what `_store.HaMaster` / `_store.HaSlave` replicate)."""
        return self._store

    @classmethod
    def open_read_only(cls, root: str | os.PathLike[str], **overrides: object) -> MessageStore:
        """A view of a store another process may be writing; it reads a consistent prefix."""
        return cls(root, read_only=True, **overrides)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._store.close()

    def delete_topic(self, topic: str) -> None:
        """Drops the topic's consume queues (or the light message queue `%LMQ%...`): a topic created
        again starts at offset 0."""
        self._store.delete_topic(topic)

    def delete_lmqs(self, names: list[str], idle_until_ms: int | None = None) -> list[str]:
        """Drops the light message queues named, as `delete_topic` drops one, many in one pass; with
        `idle_until_ms`, only those with no message stored after it (judged under the put lock: a
        lite topic written since it was found idle stays). The names dropped."""
        return self._store.delete_lmqs(names, idle_until_ms)

    def idle_lmqs(self, prefix: str, cutoff_ms: int) -> list[str]:
        """The light message queues named `prefix...` that hold messages, none stored after
        `cutoff_ms` (one whose records retention took counts as idle), sorted by name."""
        return self._store.idle_lmqs(prefix, cutoff_ms)

    def lmq_count(self) -> int:
        """How many light message queues (`%LMQ%...`, RocketMQ 5.5's lite topics) the store holds;
        `queues()` leaves them out."""
        return self._store.lmq_count()

    def lmq_infos(self, prefix: str = "%LMQ%") -> list[tuple[str, int, int, int]]:
        """`(name, min_offset, max_offset, last_physical_offset)` of each light message queue whose name
        starts with `prefix`, sorted by name (`last_physical_offset` -1: no record left)."""
        return self._store.lmq_infos(prefix)

    def flush(self) -> None:
        """Writes CommitLog, consume queues, index and checkpoint to disk now."""
        self._store.flush()

    # -- retention -----------------------------------------------------------------------------

    def clean_expired_files(
        self,
        *,
        now_ms: int | None = None,
        hour: int | None = None,
        physic_used_ratio: float | None = None,
        logics_used_ratio: float | None = None,
    ) -> CleanReport:
        """One retention round now, as RocketMQ's store runs one every `clean_resource_interval_ms`
        (the store's own thread does too): CommitLog files last modified more than
        `file_reserved_time_hours` ago go at a `delete_when` hour or when a disk is above
        `disk_max_used_space_ratio`; any file but the one being written goes above
        `disk_space_clean_forcibly_ratio`; then consume-queue and index files that only point below
        the new CommitLog start. Unset arguments come from the system (clock, local hour, the used
        fraction 0.0-1.0 of the CommitLog's and consume queues' partitions). Blocks (without the
        GIL) for the pauses between deletions: from an event loop, run it in a thread."""
        return CleanReport(
            *self._store.clean_expired_files(
                now_ms=now_ms,
                hour=hour,
                physic_used_ratio=physic_used_ratio,
                logics_used_ratio=logics_used_ratio,
            )
        )

    def execute_delete_files_manually(self) -> None:
        """The next 20 rounds delete expired CommitLog files whatever the hour (RocketMQ's
        DELETE_EXPIRED_COMMITLOG admin request)."""
        self._store.execute_delete_files_manually()

    def clean_expired_consume_queues(self) -> int:
        """Drops the consume queues (but the schedule topic's) whose messages all lie below the
        CommitLog start; a queue written again starts at offset 0 (RocketMQ's
        CLEAN_EXPIRED_CONSUMEQUEUE). Returns how many went."""
        return self._store.clean_expired_consume_queues()

    @property
    def retention_stats(self) -> RetentionStats:
        return RetentionStats(*self._store.retention_stats)

    def space_status(self) -> SpaceStatus:
        """Measures the disks now (see `SpaceStatus`)."""
        return SpaceStatus(*self._store.space_status())

    def refresh(self) -> None:
        """Read-only views: forget files the writer deleted (reads of those ranges then find nothing)
        and map the files it added. Nothing to do for the writer."""
        self._store.refresh()

    # -- writing -------------------------------------------------------------------------------

    def put(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | str | None = None,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: str = "127.0.0.1:0",
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        wait: bool = True,
    ) -> _store.PutResult:
        """Appends one message. In SYNC_FLUSH mode (with `wait`) it returns once the message is on
        disk, and raises `FlushDiskTimeoutError` (with `.result`) if that took too long."""
        result = self._store.put(
            topic,
            queue_id,
            body,
            _properties(properties, tags, keys),
            flag=flag,
            sys_flag=sys_flag,
            born_timestamp=born_timestamp,
            born_host=born_host,
            reconsume_times=reconsume_times,
            prepared_transaction_offset=prepared_transaction_offset,
            wait=wait,
        )
        _check_flushed(result, f"message {result.msg_id}")
        return result

    def send(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: str,
        edits: PropertyEdits,
        *,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: str = "127.0.0.1:0",
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
    ) -> _store.PutResult:
        """The send pipeline in one Rust call: `edits` rewrite the raw `properties` string (a
        delayed message goes to the schedule topic), and the message is appended and dispatched
        without waiting for the disk. `result.wait` says whether the producer waits for it."""
        return self._store.send(
            topic,
            queue_id,
            body,
            properties,
            edits,
            flag=flag,
            sys_flag=sys_flag,
            born_timestamp=born_timestamp,
            born_host=born_host,
            reconsume_times=reconsume_times,
            prepared_transaction_offset=prepared_transaction_offset,
        )

    def send_batch(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: str,
        edits: PropertyEdits,
        *,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: str = "127.0.0.1:0",
    ) -> _store.PutBatchResult:
        """A client-encoded batch body (SEND_BATCH_MESSAGE) through the send pipeline: `edits`
        rewrite the batch's own `properties`, which are joined to each message's. A malformed
        body raises `MessageIllegalError`; nothing waits for the disk."""
        return self._store.send_batch(
            topic,
            queue_id,
            body,
            properties,
            edits,
            sys_flag=sys_flag,
            born_timestamp=born_timestamp,
            born_host=born_host,
        )

    def put_batch(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: Sequence[str] | str | None = None,
        flags: Sequence[int] | None = None,
        *,
        born_timestamp: int = 0,
        born_host: str = "127.0.0.1:0",
        wait: bool = True,
    ) -> _store.PutBatchResult:
        """Appends many messages of one queue as one unit (one lock, one CommitLog file).
        `properties` are raw properties strings: one for all bodies or one per body."""
        result = self._store.put_batch(
            topic,
            queue_id,
            bodies if isinstance(bodies, list) else list(bodies),
            properties,
            list(flags) if flags is not None else None,
            born_timestamp=born_timestamp,
            born_host=born_host,
            wait=wait,
        )
        _check_flushed(result, f"batch of {len(result)}")
        return result

    def send_copy(
        self,
        msg: StoredMessage,
        topic: str,
        queue_id: int,
        edits: PropertyEdits = KEEP_PROPERTIES,
        *,
        reconsume_times: int | None = None,
        sys_flag: int | None = None,
        prepared_transaction_offset: int = 0,
    ) -> _store.PutResult:
        """Stores a copy of a stored message under another topic and queue, its properties
        changed by `edits` (retries, dead letters, committed transactions, transaction checks).
        Body, flag, sysflag and born data are kept; it does not wait for the disk."""
        return self.send(
            topic,
            queue_id,
            msg.body,
            msg.properties_string,
            edits,
            flag=msg.flag,
            sys_flag=msg.sys_flag if sys_flag is None else sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            reconsume_times=msg.reconsume_times if reconsume_times is None else reconsume_times,
            prepared_transaction_offset=prepared_transaction_offset,
        )

    def deliver_due_delayed(
        self, level: int, from_offset: int, now_ms: int, max_count: int = 4096
    ) -> tuple[int, int | None, list[tuple[str, int, int, int]]]:
        """Moves the messages of delay level `level` that are due at `now_ms` from the schedule
        queue into their real topics, in Rust. Returns the schedule-queue offset to continue from,
        the deliver time of the next message not yet due (or None), and per delivered message
        (topic, queue id, queue offset, tags code), and so for each light message queue (queue 0)
        one was dispatched to (a lite message's lite topic)."""
        next_offset, next_due, delivered, _skipped = self._store.deliver_due_delayed(
            level, from_offset, now_ms, max_count
        )
        return next_offset, next_due, delivered

    # -- timer messages ------------------------------------------------------------------------

    def timer_enqueue(
        self, max_count: int = 4096, deliver_due: bool = True
    ) -> tuple[int, list[tuple[str, int, int, int]]]:
        """Takes up to `max_count` new messages of the timer topic into the timer wheel. Returns
        how many it took and (topic, queue id, queue offset, tags code) of the ones already due,
        which a master (`deliver_due`) puts back into their topics at once; a slave chains them
        into the wheel, for a promotion to deliver the ones its master had not."""
        return self._store.timer_enqueue(max_count, deliver_due)

    def timer_follow(self, read_time_ms: int, queue_offset: int) -> None:
        """A slave takes its master's timer progress (GET_TIMER_CHECK_POINT): the next slot the
        master delivers and its next timer-topic offset."""
        self._store.timer_follow(read_time_ms, queue_offset)

    def timer_progress(self) -> tuple[int, int, int]:
        """(next slot to deliver, next timer-topic offset to enqueue, timer log flushed end);
        zeros before the timer was first used."""
        return self._store.timer_progress()

    def timer_dequeue(
        self, now_ms: int, max_count: int = 4096
    ) -> tuple[list[tuple[str, int, int, int]], int, bool]:
        """Puts back the timer messages whose slot has passed at `now_ms`, at most `max_count`.
        Returns (topic, queue id, queue offset, tags code) of each delivered message (and of each
        light message queue one was dispatched to), how many went back into the timer topic for
        another round, and whether due slots are left."""
        return self._store.timer_dequeue(now_ms, max_count)

    def timer_checkpoint(self) -> None:
        """Flushes the timer log and wheel and saves the timer's progress (config/timercheck)."""
        self._store.timer_checkpoint()

    def timer_clean(self) -> int:
        """Deletes timer log files whose messages retention removed from the CommitLog."""
        return self._store.timer_clean()

    def timer_stats(self) -> dict[str, int]:
        """The timer's counters since the store opened and its backlog: enqueued, delivered,
        rolled, recalled, skipped, pending, enqueue_behind, dequeue_behind_ms, read_time_ms,
        queue_offset."""
        return self._store.timer_stats()

    def wait_flushed(self, offset: int, timeout_ms: int | None = None) -> bool:
        """Blocks until the CommitLog is on disk up to `offset` (a result's `end_offset`)."""
        return self._store.wait_flushed(offset, timeout_ms)

    def flushed(self, offset: int, timeout_ms: int | None = None) -> asyncio.Future[bool]:
        """A future of the running loop that completes once the CommitLog is on disk up to
        `offset` (True) or the wait timed out (False). The event loop never blocks on disk."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()

        def done(ok: bool) -> None:
            loop.call_soon_threadsafe(_resolve, fut, ok)

        self._store.on_flushed(offset, done, timeout_ms)
        return fut

    # -- reading -------------------------------------------------------------------------------

    def get(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = 256 * 1024,
        tags: str | Iterable[str] | None = None,
        *,
        tag_codes: Sequence[int] | None = None,
    ) -> _store.GetResult:
        """Stored records of one queue from `offset` (the bytes a pull answer carries).
        `tags` is a subscription expression such as `TagA || TagB`; None or `*` takes all.
        `tag_codes` gives the tag hashes directly instead."""
        codes = list(tag_codes) if tag_codes is not None else _tag_codes(tags)
        return self._store.get(topic, queue_id, offset, max_count, max_bytes, codes)

    def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        tag_codes: Sequence[int] | None = None,
    ) -> _store.GetResult:
        """A pull's read: up to `max_count` records of one queue from `offset`, under the
        store's `max_transfer_*` caps (the smaller `..._in_disk` ones for records further behind
        the CommitLog's end than `access_message_in_memory_max_ratio` percent of memory)."""
        return self._store.pull(
            topic, queue_id, offset, max_count, None if tag_codes is None else list(tag_codes)
        )

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        tags: str | Iterable[str] | None = None,
    ) -> list[StoredMessage]:
        """Like `get`, decoded."""
        return decode_messages(self.get(topic, queue_id, offset, max_count, 1 << 62, tags).body)

    def read(self, physical_offset: int) -> StoredMessage | None:
        """The message at a CommitLog offset."""
        raw = self._store.read(physical_offset)
        return decode_messages(raw)[0] if raw is not None else None

    def read_raw(self, physical_offset: int) -> bytes | None:
        """The stored bytes of the record at a CommitLog offset."""
        return self._store.read(physical_offset)

    def query_raw(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int = 2**63 - 1
    ) -> list[bytes]:
        """Like `query`, the stored bytes of each record."""
        return self._store.query(topic, key, max_num, begin, end)

    def read_range(self, physical_offset: int, max_bytes: int = 1 << 20) -> tuple[bytes, int]:
        """Raw records from a CommitLog offset: (bytes, next offset)."""
        return self._store.read_range(physical_offset, max_bytes)

    def look_message_by_id(self, msg_id: str) -> StoredMessage | None:
        """The message an offsetMsgId (the broker's message id) names."""
        raw = self._store.look_message_by_id(msg_id)
        return decode_messages(raw)[0] if raw is not None else None

    def query(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int = 2**63 - 1
    ) -> list[StoredMessage]:
        """Messages of `topic` with `key` among their KEYS (or as UNIQ_KEY), stored in [begin, end] ms,
        newest first."""
        return [decode_messages(r)[0] for r in self._store.query(topic, key, max_num, begin, end)]

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self._store.min_offset(topic, queue_id)

    def confirm_reads_by(self, ha: _store.HaMaster | None) -> None:
        """Readers see only what `ha`'s slaves acknowledged (None: everything stored)."""
        self._store.confirm_reads_by(ha)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self._store.max_offset(topic, queue_id)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset stored at or after `timestamp_ms` (the max offset if none)."""
        return self._store.offset_by_time(topic, queue_id, timestamp_ms)

    def store_time(self, topic: str, queue_id: int, offset: int) -> int | None:
        return self._store.store_time(topic, queue_id, offset)

    def earliest_store_time(self, topic: str, queue_id: int) -> int | None:
        return self._store.earliest_store_time(topic, queue_id)

    def queues(self) -> list[tuple[str, int, int, int]]:
        """`(topic, queue_id, min_offset, max_offset)` of every consume queue."""
        return self._store.queues()

    @property
    def min_physical_offset(self) -> int:
        return self._store.min_physical_offset

    @property
    def max_physical_offset(self) -> int:
        return self._store.max_physical_offset

    @property
    def flushed_physical_offset(self) -> int:
        return self._store.flushed_physical_offset

    @property
    def recovery(self) -> dict[str, int | bool]:
        """What the open found: abnormal_exit, commitlog_end, truncated_bytes, redispatched."""
        abnormal, end, truncated, redispatched = self._store.recovery
        return {
            "abnormal_exit": abnormal,
            "commitlog_end": end,
            "truncated_bytes": truncated,
            "redispatched": redispatched,
        }


def _check_flushed(result: _store.PutResult | _store.PutBatchResult, what: str) -> None:
    if not result.flush_ok:
        err = FlushDiskTimeoutError(f"{what} stored but not flushed in time")
        err.result = result  # type: ignore[attr-defined]
        raise err


def _resolve(fut: asyncio.Future[bool], ok: bool) -> None:
    if not fut.done():
        fut.set_result(ok)
