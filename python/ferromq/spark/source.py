"""`FerroMQDataSource`: the `ferromq` format for `spark.read` and `spark.readStream` (and for
`df.write` / `df.writeStream`: see `ferromq.spark.sink`).

Planning (which queues, which offset ranges) runs on the driver from the consume queues (local
mode) or the brokers (remote mode); each task reads the queue ranges of one `ReadTask` and
yields Arrow batches decoded in Rust. A stream with `fromTable` also plans on the topics' tables
and reads the ranges they hold from their Parquet files (`ferromq.spark.tablestream`). Readers
keep their parsed options and, for a stream under `Trigger.AvailableNow`, the target offsets fixed
when the run started; nothing else is kept between calls.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    Filter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ferromq.errors import InvalidArgumentError
from ferromq.spark.dataloss import report_loss
from ferromq.spark.local import LocalSource, read_local
from ferromq.spark.options import EARLIEST, LATEST, ReadOptions, parse_options
from ferromq.spark.planning import NOTHING, QueueBounds, QueueRange, ReadTask, offsets_json, plan
from ferromq.spark.pushdown import NO_FILTER, Selection, narrow, push
from ferromq.spark.schema import arrow_schema, spark_schema
from ferromq.spark.tablestream import TableSource, read_table

# Remote reads and the sink need the RocketMQ client, whose import costs a Python worker about
# 0.2 s: every Spark query plans in a fresh worker, so local reads leave it out.
if TYPE_CHECKING:
    from ferromq.spark.remote import RemoteSource
    from ferromq.spark.sink import WriteOptions

    Source = LocalSource | RemoteSource | TableSource


def _source(opts: ReadOptions) -> Source:
    log = _log_source(opts)
    return log if opts.table_root is None else TableSource(log, opts)


def _log_source(opts: ReadOptions) -> LocalSource | RemoteSource:
    if opts.path is not None:
        return LocalSource(opts.path, opts)
    assert opts.namesrv is not None
    from ferromq.spark.remote import RemoteSource

    return RemoteSource(opts.namesrv, opts)


def _wanted(opts: ReadOptions, source: Source) -> list[QueueBounds]:
    return sorted(
        (b for b in source.queues() if opts.wants(b.topic) and opts.wants_queue(b.queue_id)),
        key=lambda b: (b.topic, b.queue_id),
    )


def _resolve(offset: int, b: QueueBounds) -> int:
    if offset == EARLIEST:
        return b.min_offset
    if offset == LATEST:
        return b.max_offset
    return min(max(offset, b.min_offset), b.max_offset)


def _start(opts: ReadOptions, source: Source, b: QueueBounds, default: int) -> int:
    if opts.starting_timestamp is not None:
        return _resolve(source.offset_by_time(b, opts.starting_timestamp, end=False), b)
    wanted = opts.start_of(b.topic, b.queue_id, default)
    _check_gone(opts, b, wanted, b.max_offset, "the starting offset is below the queue's minimum")
    return _resolve(wanted, b)


def _check_gone(opts: ReadOptions, b: QueueBounds, start: int, end: int, why: str) -> None:
    """A planned start below what the queue still holds: data lost to retention."""
    if 0 <= start < b.min_offset and start < end:
        report_loss(opts.fail_on_data_loss, b.topic, b.queue_id, start, min(b.min_offset, end), why)


def _tasks(
    opts: ReadOptions, source: Source, ranges: list[QueueRange], tags: list[str] | None
) -> list[ReadTask]:
    """The ranges as Spark tasks, small ones packed by the records they are expected to yield
    (those below a local min offset carrying what their tasks read of the tiered storage bucket)."""
    if isinstance(source, LocalSource):
        ranges = source.with_segments(ranges)
    return plan(ranges, opts.max_records_per_partition, lambda r: source.expected_rows(r, tags))


def _freeze_worker_heap() -> None:
    """PySpark's daemon runs a full `gc.collect()` after every task of a reused Python worker, and
    a worker that imported pyspark, pyarrow and this package holds ~40,000 objects: that walk
    cost ~27 ms of CPU per task (15-20 % of the Python side of a 500k-row scan in 8 tasks). Those
    objects live as long as the worker, so the first read in a process moves them out of every
    later collection (`gc.freeze`); what the tasks allocate is still collected."""
    global _worker_heap_frozen
    if not _worker_heap_frozen:
        _worker_heap_frozen = True
        gc.freeze()


_worker_heap_frozen = False


def _read(
    opts: ReadOptions, task: ReadTask, *, streaming: bool, sel: Selection = NO_FILTER
) -> Iterator[pa.RecordBatch]:
    _freeze_worker_heap()
    schema = arrow_schema(opts.include_properties)
    if opts.path is not None:
        read = read_local
    else:
        from ferromq.spark.remote import read_remote as read
    # Batch reads keep [startingTimestamp, endingTimestamp) exactly; a stream only starts there.
    rows = sel.row_filter(opts, filter_time=not streaming)
    store_ms = sel.store_range(opts, filter_time=not streaming)
    for part in task.ranges:
        if part.table is not None:
            yield from read_table(opts, part, sel.tag_list(opts), (store_ms.lo, store_ms.hi))
    logged = [part for part in task.ranges if part.table is None]
    if logged or not task.ranges:
        yield from read(opts, logged, schema, rows, sel.tag_list(opts))


class FerroMQDataSource(DataSource):
    """Reads a ferromq (or Apache RocketMQ 4.x) store: `spark.read.format("ferromq")`."""

    @classmethod
    def name(cls) -> str:
        return "ferromq"

    def _options(self, *, streaming: bool) -> ReadOptions:
        return parse_options(self.options, streaming=streaming)

    def schema(self) -> StructType:
        return spark_schema(_include_properties(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = self._options(streaming=False)
        _check_schema(schema, opts)
        return FerroMQPushdownReader(opts) if opts.filter_pushdown else FerroMQReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from ferromq.spark.sink import FerroMQWriter

        return FerroMQWriter(_write_options(self.options, schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from ferromq.spark.sink import FerroMQStreamWriter

        return FerroMQStreamWriter(_write_options(self.options, schema, overwrite))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = self._options(streaming=True)
        _check_schema(schema, opts)
        return FerroMQStreamReader(opts)


def _write_options(options: Any, schema: StructType, overwrite: bool) -> WriteOptions:
    if overwrite:
        raise InvalidArgumentError("ferromq sink: a topic can only be appended to (mode append)")
    from ferromq.spark.sink import parse_write_options

    return parse_write_options(options, schema)


def _include_properties(options: Any) -> bool:
    raw = options.get("includeProperties")
    return raw is None or str(raw).strip().lower() != "false"


def _check_schema(schema: StructType, opts: ReadOptions) -> None:
    expected = spark_schema(opts.include_properties)
    if schema != expected:
        raise InvalidArgumentError(
            f"ferromq data source: the schema is fixed; got {schema.simpleString()}, "
            f"expected {expected.simpleString()}"
        )


class FerroMQReader(DataSourceReader):
    """Batch read: every wanted queue from its starting to its ending offset, as planned now,
    narrowed by the filters Spark pushed (see `ferromq.spark.pushdown`)."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.sel = NO_FILTER

    def partitions(self) -> Sequence[InputPartition]:
        opts, sel = self.opts, self.sel
        if sel.empty:
            return [NOTHING]
        source = _source(opts)
        try:
            ranges = []
            for b in _wanted(opts, source):
                if not sel.wants(b.topic, b.queue_id):
                    continue
                start = _start(opts, source, b, EARLIEST)
                end = _resolve(opts.end_of(b.topic, b.queue_id), b)
                if opts.ending_timestamp is not None:
                    end = min(end, _resolve(source.offset_by_time(b, opts.ending_timestamp, end=True), b))
                start, end = narrow(sel, start, end)
                if start < end and sel.store_ms.lo is not None:
                    start = max(start, _resolve(source.offset_by_time(b, sel.store_ms.lo, end=False), b))
                if start < end and sel.store_ms.hi is not None:
                    end = min(end, _resolve(source.offset_by_time(b, sel.store_ms.hi, end=True), b))
                ranges.append(QueueRange(b.topic, b.queue_id, start, end, b.broker_addr))
            return _tasks(opts, source, ranges, sel.tag_list(opts))
        finally:
            source.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReadTask)
        return _read(self.opts, partition, streaming=False, sel=self.sel)


class FerroMQPushdownReader(FerroMQReader):
    """A batch read that takes the filters Spark pushes: made for the option `filterPushdown`
    (Spark refuses a reader with `pushFilters` while its own setting is off)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.sel, rest = push(filters)
        return rest


class FerroMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over per-queue offsets `{topic: {"queue id": offset}}`.

    New queues (and, with topicPattern, new topics) join at their earliest offset. A micro-batch
    reads exactly `[start, end)` of each queue, so a restart from a checkpoint neither skips nor
    repeats rows.

    Under `Trigger.AvailableNow`, Spark calls `prepareForTriggerAvailableNow` once per run: the
    queues' latest offsets at that moment become the run's target. Micro-batches still honour
    `maxRecordsPerTrigger` but never pass the target, and queues that appear later wait for the
    next run; once every queue is at its target the run has no new data and the query stops.
    """

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.target: dict[tuple[str, int], int] | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {(b.topic, b.queue_id): b.max_offset for b in self._bounds()}

    def _bounds(self) -> list[QueueBounds]:
        source = _source(self.opts)
        try:
            return _wanted(self.opts, source)
        finally:
            source.close()

    def initialOffset(self) -> dict[str, dict[str, int]]:
        source = _source(self.opts)
        try:
            starts = [
                (b.topic, b.queue_id, _start(self.opts, source, b, LATEST))
                for b in _wanted(self.opts, source)
            ]
        finally:
            source.close()
        return offsets_json(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def reportLatestOffset(self) -> dict[str, dict[str, int]]:
        return offsets_json((b.topic, b.queue_id, b.max_offset) for b in self._bounds())

    def latestOffset(self, start: dict[str, dict[str, int]], limit: ReadLimit) -> dict[str, dict[str, int]]:
        bounds = self._bounds()
        if self.target is not None:  # AvailableNow: nothing past the run's target
            target = self.target
            bounds = [
                dataclasses.replace(b, max_offset=min(b.max_offset, target[(b.topic, b.queue_id)]))
                for b in bounds
                if (b.topic, b.queue_id) in target
            ]
        begin = {
            (b.topic, b.queue_id): start.get(b.topic, {}).get(str(b.queue_id), b.min_offset) for b in bounds
        }
        ends = {(b.topic, b.queue_id): max(b.max_offset, begin[(b.topic, b.queue_id)]) for b in bounds}
        if isinstance(limit, ReadMaxRows):
            ends = _cap(begin, ends, limit.max_rows)
        # Queues that vanished from the store keep their last offset.
        out = {(t, int(q)): off for t, per in start.items() for q, off in per.items()}
        out.update(ends)
        return offsets_json((t, q, off) for (t, q), off in out.items())

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> Sequence[InputPartition]:
        source = _source(self.opts)
        try:
            # Bounds now, not when `end` was chosen: retention may have removed offsets since.
            bounds = {(b.topic, b.queue_id): b for b in _wanted(self.opts, source)}
            ranges = []
            for topic, per in end.items():
                for qid, hi in per.items():
                    b = bounds.get((topic, int(qid)))
                    lo = start.get(topic, {}).get(qid)
                    if lo is None:  # a queue that appeared after `start`: from its beginning
                        lo = b.min_offset if b is not None else 0
                    elif b is not None and lo < b.min_offset and lo < hi:
                        _check_gone(self.opts, b, lo, hi, "the micro-batch starts below the queue's minimum")
                        lo = min(b.min_offset, hi)
                    addr = b.broker_addr if b is not None else None
                    ranges.append(QueueRange(topic, int(qid), lo, hi, addr))
            if isinstance(source, TableSource):
                ranges = source.assign(ranges)
            return _tasks(self.opts, source, ranges, NO_FILTER.tag_list(self.opts))
        finally:
            source.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReadTask)
        return _read(self.opts, partition, streaming=True)

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        pass


def _cap(
    begin: dict[tuple[str, int], int], ends: dict[tuple[str, int], int], budget: int
) -> dict[tuple[str, int], int]:
    """Spreads at most `budget` offsets over the queues, fairly: each round gives every queue with
    data left an equal share, so one busy queue cannot starve the others."""
    capped = dict(begin)
    left = {k: ends[k] - begin[k] for k in ends if ends[k] > begin[k]}
    while budget > 0 and left:
        share = max(1, budget // len(left))
        for k in sorted(left):
            take = min(share, left[k], budget)
            capped[k] += take
            left[k] -= take
            budget -= take
            if budget == 0:
                break
        left = {k: n for k, n in left.items() if n > 0}
    return {k: capped.get(k, begin[k]) for k in ends}
