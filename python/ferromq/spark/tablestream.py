"""Streams that start from a topic's table and continue from the log (the `fromTable` option).

    from ferromq.spark import read_topic_stream
    query = read_topic_stream(spark, "Orders", path="/data/store").writeStream...start()

A topic the broker keeps as a table topic (`tableTopics`) has its history in a Delta table that
outlives the CommitLog's retention (`ferromq.tables`). With `fromTable` (or `tablePath`), the
stream reader's offsets stay the log's (`{topic: {"queue id": offset}}`, the same checkpoints), but
each queue holds what its table and its log hold together:

- a queue's earliest offset is the table's first one when the table starts lower than the log
  (what `startingOffsets=earliest` and a queue new to the stream start from), and
  `startingTimestamp` finds its first offset in the table's files too;
- each micro-batch's range `[start, end)` of a queue is split on the driver against one table
  version, read when the batch is planned: the offsets the table holds, from its first offset up
  to its committed one (the offset after the last row committed, the app transaction
  `ferromq.queue.<id>`), are read from the table's Parquet files, listed in the task (pinned: an
  executor reads the files of that version, whatever has been committed since), and the others
  from the log as without the option. The table is preferred where both hold an offset: retention
  cannot delete it under the read, and through the brokers it saves pulling the rows (locally
  both read at about the same speed). Rows are the same either way (the table's are the log's,
  written by the same decoder), so a batch planned again after a restart against a newer version
  reads the same rows.
- offsets neither holds (the tiering found them lost before it got to them, or the log lost them
  before the tiering caught up) are data loss, reported as the log's are (`failOnDataLoss`).

A task reads a table range with pyarrow alone (`ferromq.tables.ranges.read_range`): only the files,
and in them the row groups, whose `queue_offset` statistics meet the range, then the range's rows
exactly; the `tags` option is applied as on the log. The column layout is the source's. An
`s3://` `tablePath` is read the same way, the files through pyarrow's S3 filesystem (one per
Python worker) configured as the tiering's (`ferromq.tables.objectstore`: the `tableTopicS3*`
options, `read_topic_stream`'s `storage_options`, over the AWS_* environment): no Spark S3
connector is needed.

A topic without a table (none yet, or not a table topic) is read from the log alone, as `read_topic`
does; a table that appears later is used from the next micro-batch on. The tables of a `topicPattern`
are those of the topics the log has.

Files a table version lists stay until a vacuum removes them, `tableTopicVacuumRetentionHours`
(default 168) after a compaction replaced them: a micro-batch planned before and read after that
fails naming the file; run the query again (it plans the batch against the current version).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from ferromq.spark.dataloss import report_loss
from ferromq.spark.options import ReadOptions
from ferromq.spark.planning import QueueBounds, QueueRange

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from ferromq.spark.local import LocalSource
    from ferromq.spark.remote import RemoteSource
    from ferromq.tables.ranges import QueueFiles


class TableSource:
    """A log source (local or remote) whose queues also hold what their topics' tables hold: one
    table version per topic, read when first needed (each driver call makes a new one)."""

    def __init__(self, log: LocalSource | RemoteSource, opts: ReadOptions) -> None:
        assert opts.table_root is not None
        self._log = log
        self._opts = opts
        self._root = opts.table_root
        self._storage = dict(opts.table_s3_options) or None
        self._tables: dict[str, dict[int, QueueFiles]] = {}
        self._in_log: set[tuple[str, int]] = set()

    def close(self) -> None:
        self._log.close()

    def _table(self, topic: str) -> dict[int, QueueFiles]:
        """Per queue, what the current version of the topic's table holds ({}: no table)."""
        if topic not in self._tables:
            from ferromq.tables.reader import open_table, queue_files

            table = open_table(self._root, topic, self._storage)
            self._tables[topic] = {} if table is None else queue_files(table)
        return self._tables[topic]

    def held(self, topic: str, queue_id: int) -> QueueFiles | None:
        """What the topic's table holds of the queue (None: no table, or no row of it)."""
        held = self._table(topic).get(queue_id)
        return held if held is not None and held.first < held.committed else None

    def queues(self) -> list[QueueBounds]:
        """The log's queues, each widened to the offsets its table holds, and queues only the
        tables still hold (of the topics named in `topic`)."""
        out: list[QueueBounds] = []
        for b in self._log.queues():
            self._in_log.add((b.topic, b.queue_id))
            held = self.held(b.topic, b.queue_id) if self._opts.wants(b.topic) else None
            if held is not None:
                low, high = min(b.min_offset, held.first), max(b.max_offset, held.committed)
                b = dataclasses.replace(b, min_offset=low, max_offset=high)
            out.append(b)
        for topic in self._opts.topics:
            for q in sorted(self._table(topic)):
                if (topic, q) not in self._in_log and (held := self.held(topic, q)) is not None:
                    out.append(QueueBounds(topic, q, held.first, held.committed))
        return out

    def offset_by_time(self, queue: QueueBounds, timestamp_ms: int, *, end: bool) -> int:
        """The log's answer, or the table's first offset stored that late when it is lower."""
        in_log = (queue.topic, queue.queue_id) in self._in_log
        found = self._log.offset_by_time(queue, timestamp_ms, end=end) if in_log else queue.max_offset
        held = self.held(queue.topic, queue.queue_id)
        if held is not None:
            from ferromq.tables.ranges import first_offset_at

            first = first_offset_at(held.files, timestamp_ms, table_filesystem(self._opts))
            if first is not None:
                return min(first, found)
        return found

    def expected_rows(self, r: QueueRange, tags: list[str] | None) -> int:
        if r.table is not None:  # the consume queue may no longer count them
            return r.end - r.start
        return self._log.expected_rows(r, tags)

    def assign(self, ranges: list[QueueRange]) -> list[QueueRange]:
        """The ranges, the offsets a table holds cut out of them and planned on the table."""
        out: list[QueueRange] = []
        for r in ranges:
            held = self.held(r.topic, r.queue_id)
            if held is None or max(r.start, held.first) >= min(r.end, held.committed):
                out.append(r)
                continue
            lo, hi = max(r.start, held.first), min(r.end, held.committed)
            if r.start < lo:  # below the table's first offset: the log may still hold them
                out.append(dataclasses.replace(r, end=lo))
            files = dataclasses.replace(held, files=held.files_of(lo, hi))
            out.append(dataclasses.replace(r, start=lo, end=hi, table=files))
            if hi < r.end:
                out.append(dataclasses.replace(r, start=hi))
        return out


def read_table(
    opts: ReadOptions,
    part: QueueRange,
    tags: list[str] | None,
    store_ms: tuple[int | None, int | None],
) -> Iterator[pa.RecordBatch]:
    """A range planned on a table: its rows from the table version's files (in a task)."""
    from ferromq.tables.ranges import read_range

    held = part.table
    assert held is not None

    def missing(lo: int, hi: int) -> None:
        why = f"neither table version {held.version} nor the log holds them"
        report_loss(opts.fail_on_data_loss, part.topic, part.queue_id, lo, hi, why)

    yield from read_range(
        held.files,
        part.queue_id,
        part.start,
        part.end,
        include_properties=opts.include_properties,
        tags=tags,
        store_ms=store_ms,
        on_missing=missing,
        filesystem=table_filesystem(opts),
    )


def table_filesystem(opts: ReadOptions) -> pafs.FileSystem | None:
    """The filesystem an object store's table files are read through (None: local files)."""
    assert opts.table_root is not None
    from ferromq.tables.objectstore import is_s3

    return _object_store(opts.table_root, opts.table_s3_options) if is_s3(opts.table_root) else None


@functools.cache
def _object_store(root: str, s3_options: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    from ferromq.tables.objectstore import filesystem

    return filesystem(root, dict(s3_options))[0]
