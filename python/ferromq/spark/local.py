"""Local mode: tasks open the store's files read-only where they run.

A read-only view never takes the writer's lock and checks every record against its consume queue
unit, so a broker may keep writing: a read sees a consistent prefix, never a torn record.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import pyarrow as pa

from ferromq import _store
from ferromq.errors import NotAStoreError
from ferromq.spark.dataloss import report_loss
from ferromq.spark.options import ReadOptions
from ferromq.spark.planning import QueueBounds, QueueRange
from ferromq.spark.schema import record_batch

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
    """Queue bounds and timestamps from the store files (used on the driver)."""

    def __init__(self, path: str) -> None:
        self._store = open_view(path)

    def close(self) -> None:
        self._store.close()

    def queues(self) -> list[QueueBounds]:
        return [QueueBounds(t, q, lo, hi) for t, q, lo, hi in self._store.queues()]

    def offset_by_time(self, queue: QueueBounds, timestamp_ms: int, *, end: bool) -> int:
        # First offset stored at or after the time: exact for both ends of [start, end).
        return self._store.offset_by_time(queue.topic, queue.queue_id, timestamp_ms)

    def expected_rows(self, r: QueueRange, tags: list[str] | None) -> int:
        """How many records of the range a read decodes: its units of these tags (any: all)."""
        if tags is None:
            return r.end - r.start
        return self._store.count_units(r.topic, r.queue_id, r.start, r.end, tag_codes(tags))


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
        for part in parts:
            yield from _read_range(opts, store, part, schema, rows, codes)
    finally:
        store.close()


def _read_range(
    opts: ReadOptions,
    store: _store.Store,
    part: QueueRange,
    schema: pa.Schema,
    rows: _store.RowFilter,
    codes: list[int] | None,
) -> Iterator[pa.RecordBatch]:
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
        if cols["status"] in LOSS_STATUSES and reached > offset:
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
