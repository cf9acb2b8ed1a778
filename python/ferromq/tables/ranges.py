"""One queue's offset range read back from a table's data files, with pyarrow's Parquet reader.

A stream that starts from a topic's table (`ferromq.spark.tablestream`) plans on the driver, which
lists the files of one table version per queue (`ferromq.tables.reader.queue_files`), and reads in
Spark tasks: `read_range` opens only the listed files, and in them only the row groups, whose
`queue_offset` statistics meet the range, then keeps the rows of the range exactly. It imports
neither deltalake nor pyarrow.dataset (together ~0.2 s in each fresh Python worker).

The rows have the columns and types of the `ferromq` source's (`layout.row_schema`): `queue_id`
comes from the queue the files are of (the files hold it in their directory, as Delta keeps
partition columns), and `day` is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ferromq.tables.layout import row_schema

# Rows per Arrow batch a task yields (as the log's reads, a batch Spark converts while the next
# one is read).
BATCH_ROWS = 16384


@dataclass(frozen=True)
class DataFile:
    """A committed data file of one queue, with its statistics from the Delta log."""

    path: str
    first: int  # the smallest queue_offset in it
    last: int  # the largest
    last_store_ms: int | None  # the latest store_timestamp, in ms (None: no statistics)


@dataclass(frozen=True)
class QueueFiles:
    """What one table version holds of one queue: offsets `[first, committed)`, less those the
    tiering found lost before it got to them, in `files` (ordered by their first offset)."""

    version: int
    first: int
    committed: int
    files: tuple[DataFile, ...]

    def files_of(self, start: int, end: int) -> tuple[DataFile, ...]:
        """The files that may hold offsets of `[start, end)`."""
        return tuple(f for f in self.files if f.first < end and f.last >= start)


# Missing offsets `[lo, hi)` of a range: the caller reports them (fail or skip).
OnMissing = Callable[[int, int], None]


def read_range(
    files: Sequence[DataFile],
    queue_id: int,
    start: int,
    end: int,
    *,
    include_properties: bool = True,
    tags: Sequence[str] | None = None,
    store_ms: tuple[int | None, int | None] = (None, None),
    on_missing: OnMissing | None = None,
    filesystem: pafs.FileSystem | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of queue offsets `[start, end)` in `files` (those of one queue), as batches of
    `row_schema(include_properties)`; with `tags`, only rows of these tags, with `store_ms` only
    rows stored in `[lo, hi)` ms. The offsets of the range that no file holds are passed to
    `on_missing` once the range is read (the table has a gap only where the tiering found them
    lost). `filesystem`: the one the paths are in, without their scheme (an object store's);
    None: local paths."""
    schema = row_schema(include_properties)
    wanted = [n for n in schema.names if n != "queue_id"]
    seen: list[pa.Array] = []
    count = 0
    for f in files:
        if f.first >= end or f.last < start:
            continue
        for batch in _batches(f.path, start, end, wanted, filesystem):
            offsets = batch.column("queue_offset")
            keep = pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end))
            batch = batch.filter(keep)
            seen.append(batch.column("queue_offset"))
            count += batch.num_rows
            batch = _select(batch, tags, store_ms)
            if batch.num_rows:
                yield _with_queue_id(batch, queue_id, schema)
    if count < end - start and on_missing is not None:
        for lo, hi in _gaps(seen, start, end):
            on_missing(lo, hi)


def first_offset_at(
    files: Sequence[DataFile], timestamp_ms: int, filesystem: pafs.FileSystem | None = None
) -> int | None:
    """The first offset of these files (one queue's) stored at or after `timestamp_ms`, or None.
    As the consume queue's time search, it takes store times to grow with offsets: the answer is
    in the first file (by offset) whose latest row is that late."""
    for f in sorted(files, key=lambda f: f.first):
        if f.last_store_ms is not None and f.last_store_ms < timestamp_ms:
            continue
        table = pq.read_table(
            _in(f.path, filesystem), columns=["queue_offset", "store_timestamp"], filesystem=filesystem
        )
        late = table.filter(pc.greater_equal(table.column("store_timestamp"), _micros(timestamp_ms, table)))
        if late.num_rows:
            return int(pc.min(late.column("queue_offset")).as_py())
    return None


def _in(path: str, filesystem: pafs.FileSystem | None) -> str:
    """The path in `filesystem`: a URI without its scheme (s3://bucket/key: bucket/key)."""
    return path.split("://", 1)[1] if filesystem is not None and "://" in path else path


def _batches(
    path: str, start: int, end: int, columns: list[str], filesystem: pafs.FileSystem | None = None
) -> Iterator[pa.RecordBatch]:
    """The batches of the file's row groups that may hold offsets of `[start, end)`."""
    try:
        parquet = pq.ParquetFile(_in(path, filesystem), filesystem=filesystem)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"table file {path} is gone: a vacuum removed it after the read was planned "
            "(tableTopicVacuumRetentionHours shorter than the read took); read again"
        ) from None
    with parquet:
        meta = parquet.metadata
        index = meta.schema.names.index("queue_offset")
        groups = []
        for i in range(meta.num_row_groups):
            stats = meta.row_group(i).column(index).statistics
            if stats is not None and stats.has_min_max and (stats.min >= end or stats.max < start):
                continue
            groups.append(i)
        if groups:
            yield from parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=groups, columns=columns)


def _micros(ms: int, table: pa.Table | pa.RecordBatch) -> pa.Scalar:
    return pa.scalar(ms * 1000, type=table.schema.field("store_timestamp").type)


def _select(
    batch: pa.RecordBatch, tags: Sequence[str] | None, store_ms: tuple[int | None, int | None]
) -> pa.RecordBatch:
    """The rows the tags and store times select, as the log's read checks them per record."""
    lo, hi = store_ms
    conditions = []
    if tags is not None:
        conditions.append(pc.is_in(batch.column("tags"), value_set=pa.array(list(tags), pa.string())))
    if lo is not None:
        conditions.append(pc.greater_equal(batch.column("store_timestamp"), _micros(lo, batch)))
    if hi is not None:
        conditions.append(pc.less(batch.column("store_timestamp"), _micros(hi, batch)))
    if not conditions:
        return batch
    keep = conditions[0]
    for c in conditions[1:]:
        keep = pc.and_(keep, c)
    return batch.filter(keep)


def _with_queue_id(batch: pa.RecordBatch, queue_id: int, schema: pa.Schema) -> pa.RecordBatch:
    """The batch in `schema`'s column order and types (the file's map entries, or the string types
    a compaction wrote, may be named or typed otherwise)."""
    queue_ids = pa.repeat(pa.scalar(queue_id, pa.int32()), batch.num_rows)
    arrays = [queue_ids if name == "queue_id" else batch.column(name) for name in schema.names]
    loose = pa.schema([pa.field(name, a.type) for name, a in zip(schema.names, arrays, strict=True)])
    return pa.RecordBatch.from_arrays(arrays, schema=loose).cast(schema)


def _gaps(seen: list[pa.Array], start: int, end: int) -> Iterator[tuple[int, int]]:
    """The offsets of `[start, end)` none of `seen` holds, as `[lo, hi)` runs."""
    held = pc.unique(pa.chunked_array(seen, pa.int64()))
    expected = start
    for offset in pc.take(held, pc.array_sort_indices(held)).to_pylist():
        if offset > expected:
            yield expected, offset
        expected = offset + 1
    if expected < end:
        yield expected, end
