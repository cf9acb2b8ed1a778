"""Local mode: tasks open the store's files read-only where they run.

A read-only view never takes the writer's lock and checks every record against its consume queue
unit, so a broker may keep writing: a read sees a consistent prefix, never a torn record.

With the tiered storage options (`tieredStoreFilePath`, ...), offsets below a queue's local min
offset are read from the broker's bucket (`ferromq.spark.tiered`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from ferromq import _store
from ferromq.errors import NotAStoreError
from ferromq.spark.dataloss import report_loss
from ferromq.spark.options import ReadOptions
from ferromq.spark.planning import QueueBounds, QueueRange
from ferromq.spark.schema import record_batch

if TYPE_CHECKING:
    from ferromq.spark.tiered import TieredQueues

# One Arrow batch: at most this many rows or about this many bytes of records. Small batches
# decode faster (buffers stay in cache and in malloc's reused heap instead of fresh mmaps) and
# let Spark convert one while the next is decoded.
BATCH_ROWS = 65536
BATCH_BYTES = 2 << 20

# Where a walk skips offsets because their files are gone (the consume queue's or the CommitLog's).
LOSS_STATUSES = frozenset({"OFFSET_TOO_SMALL", "MESSAGE_WAS_REMOVING", "OFFSET_FOUND_NULL"})


def open_view(path: str) -> _store.Store:
    """A read-only view of the store at `path`, or a clear error when there is none."""
    if not os.path.isdir(path):
        raise NotAStoreError(f"ferromq data source: path {path!r} is not a directory")
    if not os.path.isdir(os.path.join(path, "commitlog")):
        raise NotAStoreError(
            f"ferromq data source: {path!r} is not a RocketMQ/ferromq store root "
            "(it has no commitlog/ directory)"
        )
    return _store.Store(path, read_only=True)


class LocalSource:
    """Queue bounds and timestamps from the store files, and from the tiered storage bucket when
    the options name one (used on the driver)."""

    def __init__(self, path: str, opts: ReadOptions | None = None) -> None:
        self._store = open_view(path)
        self._tiered: TieredQueues | None = None
        # Per queue, the first offset the local files hold (reads below it go to the bucket).
        self._local_min: dict[tuple[str, int], int] = {}
        self._bucket_only: set[tuple[str, int]] = set()
        if opts is not None and opts.tiered is not None:
            from ferromq.spark.tiered import TieredQueues

            try:
                self._tiered = TieredQueues(opts.tiered)
            except BaseException:
                self._store.close()
                raise

    def close(self) -> None:
        self._store.close()

    def queues(self) -> list[QueueBounds]:
        local = [QueueBounds(t, q, lo, hi) for t, q, lo, hi in self._store.queues()]
        if self._tiered is None:
            return local
        self._local_min = {(b.topic, b.queue_id): b.min_offset for b in local}
        bounds = self._tiered.bounds
        out = [
            b
            if (held := bounds.get((b.topic, b.queue_id))) is None or held[0] >= b.min_offset
            # Counting the bucket's messages, as the broker's GET_MIN_OFFSET does.
            else dataclasses.replace(b, min_offset=held[0], max_offset=max(b.max_offset, held[1]))
            for b in local
        ]
        for (t, q), (lo, hi) in sorted(bounds.items()):
            if (t, q) not in self._local_min:  # only the bucket holds the queue now
                self._local_min[(t, q)] = hi
                self._bucket_only.add((t, q))
                out.append(QueueBounds(t, q, lo, hi))
        return out

    def _cut(self, topic: str, queue_id: int) -> int:
        """The queue's local min offset: the bucket is read below it."""
        return self._local_min.get((topic, queue_id), 0)

    def offset_by_time(self, queue: QueueBounds, timestamp_ms: int, *, end: bool) -> int:
        # First offset stored at or after the time: exact for both ends of [start, end).
        found = self._store.offset_by_time(queue.topic, queue.queue_id, timestamp_ms)
        if self._tiered is not None:
            cut = self._cut(queue.topic, queue.queue_id)
            if found <= cut:  # the time is at or before the local files' first message
                below = self._tiered.offset_by_time(queue.topic, queue.queue_id, timestamp_ms, cut)
                if below is not None:
                    return below
                if (queue.topic, queue.queue_id) in self._bucket_only:
                    return queue.max_offset
        return found

    def expected_rows(self, r: QueueRange, tags: list[str] | None) -> int:
        """How many records of the range a read decodes: its units of these tags (any: all); all
        the offsets the bucket holds (the driver reads none of its units)."""
        start = r.start
        in_bucket = 0
        if self._tiered is not None:
            start = min(max(r.start, self._cut(r.topic, r.queue_id)), r.end)
            in_bucket = start - r.start
        if tags is None or start >= r.end:
            return in_bucket + r.end - start
        return in_bucket + self._store.count_units(r.topic, r.queue_id, start, r.end, tag_codes(tags))

    def with_segments(self, ranges: list[QueueRange]) -> list[QueueRange]:
        """The ranges, each that starts below its queue's local min offset carrying the summaries
        of the bucket's files that hold its offsets (its tasks read them without a listing)."""
        if self._tiered is None:
            return ranges
        tiered = self._tiered
        return [
            dataclasses.replace(r, tiered=tiered.segments_of(r.topic, r.queue_id, r.start, r.end))
            if r.table is None and r.start < r.end and r.start < self._cut(r.topic, r.queue_id)
            else r
            for r in ranges
        ]


def tag_codes(tags: list[str] | None) -> list[int] | None:
    """The consume queue's codes of these tags (String.hashCode), or None for any tag."""
    return None if tags is None else [_store.tags_code(t) for t in tags]


def read_local(
    opts: ReadOptions,
    parts: Sequence[QueueRange],
    schema: pa.Schema,
    rows: _store.RowFilter,
    tags: list[str] | None,
) -> Iterator[pa.RecordBatch]:
    """The rows of some queue ranges that pass `rows` (whose `tags` are given too: units whose
    tag code the consume queue shows to be another tag's are skipped without reading their
    record), decoded in Rust batch by batch straight from the mapped files."""
    assert opts.path is not None
    codes = tag_codes(tags)
    store = open_view(opts.path)
    try:
        if opts.tiered is not None:
            yield from _read_tiered(opts, store, parts, schema, rows, codes)
            return
        for part in parts:
            yield from _read_range(opts, store, part, schema, rows, codes)
    finally:
        store.close()


def _read_tiered(
    opts: ReadOptions,
    store: _store.Store,
    parts: Sequence[QueueRange],
    schema: pa.Schema,
    rows: _store.RowFilter,
    codes: list[int] | None,
) -> Iterator[pa.RecordBatch]:
    """The ranges, each read from the bucket below its queue's local min offset (as it is now:
    retention may have moved it since planning) and from the local files from there; offsets whose
    local files retention deletes during the read are read from the bucket too."""
    from ferromq.spark.tiered import TieredReader, read_bucket, tiered_reader

    assert opts.tiered is not None
    t = opts.tiered
    local = {(topic, q): lo for topic, q, lo, _ in store.queues()}
    # At most two a task: of the summaries its ranges carry, and of the bucket's listing for a range
    # planned without them (by a table stream, or above the local min offset at planning).
    readers: dict[bool, TieredReader] = {}

    def from_bucket(part: QueueRange, start: int, stop: int) -> Iterator[pa.RecordBatch]:
        carried = bool(part.tiered)
        if carried not in readers:
            readers[carried] = tiered_reader(t, [p for p in parts if p.tiered] if carried else [])
        yield from read_bucket(
            opts.fail_on_data_loss,
            readers[carried],
            dataclasses.replace(part, start=start),
            stop,
            schema,
            rows,
            codes,
            BATCH_ROWS,
            BATCH_BYTES,
        )

    for part in parts:
        # A queue the local files no longer hold at all: everything planned is in the bucket.
        stop = min(local.get((part.topic, part.queue_id), part.end), part.end)
        if part.start < stop:
            yield from from_bucket(part, part.start, stop)
        if stop < part.end:
            rest = dataclasses.replace(part, start=max(part.start, stop))
            yield from _read_range(
                opts, store, rest, schema, rows, codes, functools.partial(from_bucket, part)
            )


def _read_range(
    opts: ReadOptions,
    store: _store.Store,
    part: QueueRange,
    schema: pa.Schema,
    rows: _store.RowFilter,
    codes: list[int] | None,
    gone: Callable[[int, int], Iterator[pa.RecordBatch]] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The range's rows from the local files; offsets whose files retention deleted are read by
    `gone` (from the tiered storage bucket), else reported lost."""
    offset = part.start
    while offset < part.end:
        cols = store.read_columns(
            part.topic,
            part.queue_id,
            offset,
            part.end,
            rows,
            max_rows=BATCH_ROWS,
            max_bytes=BATCH_BYTES,
            tag_codes=codes,
        )
        if cols["rows"]:
            yield record_batch(cols, schema)
        reached = int(cols["next_offset"])
        if cols["status"] in LOSS_STATUSES and reached > offset and gone is not None:
            yield from gone(offset, min(reached, part.end))
        elif cols["status"] in LOSS_STATUSES and reached > offset:
            # The walk jumped over units whose files retention deleted.
            report_loss(
                opts.fail_on_data_loss, part.topic, part.queue_id, offset, reached, str(cols["status"])
            )
        elif reached <= offset:
            report_loss(
                opts.fail_on_data_loss,
                part.topic,
                part.queue_id,
                offset,
                part.end,
                f"the read stopped before the planned end: {cols['status']}",
            )
            return
        offset = reached
