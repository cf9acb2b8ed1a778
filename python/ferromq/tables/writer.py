"""Appending a topic's rows to its Delta table, exactly once per offset.

A commit is two steps: the rows become Parquet files under the table's directory (`write_files`),
then one Delta commit adds those files together with an app transaction per queue saying the
offset after the last row added (`commit`). Delta commits are atomic, so a crash between the two
steps leaves files no commit names (a reader never sees them; `vacuum` deletes them later) and the
table's app transactions still say where the last commit ended: the next writer starts there and
writes those rows again, into new files. Neither a crash nor a restart can skip or repeat a row.

Two writers on one queue cannot both win: a commit is checked against the commits made since the
table version it read, and Delta refuses one that carries an app transaction another has carried
meanwhile.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import ColumnProperties, CommitProperties, DeltaTable, Transaction, WriterProperties
from deltalake.transaction import AddAction

from ferromq.tables import objectstore
from ferromq.tables.columns import QueueRows
from ferromq.tables.layout import (
    PARTITION_COLUMNS,
    STATS_COLUMNS,
    TABLE_CONFIGURATION,
    app_id,
    file_schema,
    table_schema,
)

logger = logging.getLogger(__name__)

# Row groups of at most this many rows: Spark splits a large file by row groups across tasks.
ROW_GROUP_ROWS = 131072


# The data files' codecs (broker.conf tableTopicCompression): pyarrow's name, delta-rs's (for
# compaction) and the file name's suffix, as Spark names them. On 1 KiB JSON events, per row on one
# core and in isolation, writing costs 0.8 us snappy, 0.7 us lz4 (LZ4_RAW), 1.0 us zstd, 0.3 us
# none, for 370, 340, 180 and 1028 bytes stored (docs/table-topics.md has what they cost in a
# loaded broker). Snappy is the default that every Parquet reader takes.
class Codec(NamedTuple):
    pyarrow: str
    delta: Literal["SNAPPY", "LZ4_RAW", "ZSTD", "UNCOMPRESSED"]
    suffix: str


CODECS = {
    "snappy": Codec("snappy", "SNAPPY", ".snappy"),
    "lz4": Codec("lz4", "LZ4_RAW", ".lz4raw"),
    "zstd": Codec("zstd", "ZSTD", ".zstd"),
    "none": Codec("none", "UNCOMPRESSED", ""),
}
DEFAULT_CODEC = "snappy"
# Columns with a value per message (offsets, ids, keys, the properties' values): PLAIN, not
# dictionary-encoded. Parquet writers (pyarrow's, and delta-rs's for compaction) dictionary-encode
# every column by default and only fall back to PLAIN once the dictionary passes its page limit
# (1 MiB), which a file's unique offsets and ids often do not: the file then holds each value
# twice (dictionary and indices), and Spark looks every one up through the dictionary. On the 1M x
# 1 KiB Spark benchmark that made full scans of the table 0.80x a scan of Spark's own files (which
# fall back after the first page), 0.98x without. The other columns (topic, tags, property names,
# hosts, timestamps, flags, bodies) repeat, and keep the dictionary while it pays.
PLAIN_COLUMNS = (
    "queue_offset",
    "commitlog_offset",
    "msg_id",
    "uniq_key",
    "keys",
    "properties.key_value.value",
)
# Columns without Parquet min/max statistics: no query prunes on a body or a property, and the
# bounds of 1 KiB bodies cost the writer a comparison of every body (a tenth of its time).
UNBOUNDED_COLUMNS = ("body", "properties.key_value.key", "properties.key_value.value")


class TableSchemaError(ValueError):
    """The path holds a Delta table whose columns are not a topic table's."""


@dataclass(frozen=True)
class WrittenFile:
    """A data file written and not committed yet."""

    action: AddAction
    queue_id: int
    day: str
    """Its partition: the queue, and the UTC day of its rows (ISO)."""
    rows: int


class TopicTable:
    """One topic's table, opened (created if need be) for appending. Not thread-safe: one writer
    (the broker's tiering service) uses it from one thread."""

    def __init__(
        self,
        uri: str,
        topic: str,
        compression: str = DEFAULT_CODEC,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        """`storage_options`: for an s3:// `uri`, the AWS_* settings over the environment's
        (ferromq.tables.objectstore)."""
        if compression not in CODECS:
            raise ValueError(f"compression must be one of {', '.join(CODECS)}, not {compression!r}")
        self.uri = uri
        self.topic = topic
        self.compression = compression
        self._options = objectstore.storage_options(uri, storage_options) or None
        self._fs, self._root = objectstore.filesystem(uri, self._options)
        self.table = self._open_or_create()

    def _open_or_create(self) -> DeltaTable:
        if DeltaTable.is_deltatable(self.uri, storage_options=self._options):
            table = DeltaTable(self.uri, storage_options=self._options)
        else:
            table = DeltaTable.create(
                self.uri,
                storage_options=self._options,
                schema=table_schema(),
                mode="ignore",  # another process may just have created it
                partition_by=list(PARTITION_COLUMNS),
                name=self.topic,
                description=f"ferromq topic {self.topic}",
                configuration=TABLE_CONFIGURATION,
            )
            logger.info("created the table of topic %s at %s", self.topic, self.uri)
        columns = [f.name for f in table.schema().fields]
        if columns != table_schema().names or table.metadata().partition_columns != list(PARTITION_COLUMNS):
            raise TableSchemaError(
                f"{self.uri} holds a Delta table that is not a ferromq topic table "
                f"(columns {columns}, partitioned by {table.metadata().partition_columns})"
            )
        return table

    @property
    def version(self) -> int:
        return self.table.version()

    def file_bytes_per_row(self) -> float | None:
        """What a row weighs in the table's data files (their bytes over their rows); None
        without rows."""
        actions = pa.table(self.table.get_add_actions(flatten=True))  # arro3 -> pyarrow, no copy
        rows = int(pc.sum(actions.column("num_records")).as_py() or 0)
        if not rows:
            return None
        return int(pc.sum(actions.column("size_bytes")).as_py()) / rows

    def committed(self, queue_ids: Iterable[int]) -> dict[int, int]:
        """The next offset of each queue that a commit recorded (queues without one are left out)."""
        out: dict[int, int] = {}
        for q in queue_ids:
            version = self.table.transaction_version(app_id(q))
            if version is not None:
                out[q] = version
        return out

    def write_files(self, parts: Sequence[QueueRows]) -> list[WrittenFile]:
        """The rows as Parquet files, one per queue and day, not committed yet."""
        written: list[WrittenFile] = []
        for part in parts:
            if not part.rows:
                continue
            rows = pa.Table.from_batches(part.batches)
            days = pc.cast(rows.column("store_timestamp"), pa.date32())
            distinct = pc.unique(days).to_pylist()
            for day in distinct:
                # Usually one day: the rows as they are, no copy.
                chunk = (
                    rows if len(distinct) == 1 else rows.filter(pc.equal(days, pa.scalar(day, pa.date32())))
                )
                written.append(self._write_file(part.queue_id, day, chunk))
        return written

    def _write_file(self, queue_id: int, day: date, rows: pa.Table) -> WrittenFile:
        first = rows.column("queue_offset")[0].as_py()
        codec = CODECS[self.compression]
        name = f"part-{first:020d}-{uuid.uuid4().hex}{codec.suffix}.parquet"
        rel = f"day={day.isoformat()}/queue_id={queue_id}/{name}"
        path = f"{self._root}/{rel}"
        self._fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        views = pa.types.is_binary_view(rows.schema.field("body").type)
        data = rows.select(file_schema().names).cast(file_schema(body_views=views))
        pq.write_table(
            data,
            path,
            filesystem=self._fs,
            # No Arrow schema in the file: it would name binary_view, and readers (delta-rs
            # compaction among them) take the file's columns as the table's, binary.
            store_schema=False,
            compression=codec.pyarrow,
            row_group_size=ROW_GROUP_ROWS,
            use_dictionary=_dictionary_columns(),
            write_statistics=_bounded_columns(),
        )
        self._sync(path)
        size = self._fs.get_file_info(path).size
        action = AddAction(
            path=rel,
            size=int(size),
            partition_values={"day": day.isoformat(), "queue_id": str(queue_id)},
            modification_time=int(time.time() * 1000),
            data_change=True,
            stats=json.dumps(_stats(data)),
        )
        return WrittenFile(action, queue_id, day.isoformat(), rows.num_rows)

    def commit(self, files: Sequence[WrittenFile], offsets: dict[int, int]) -> int:
        """Adds `files` and records each queue's next offset in one Delta commit; the new version.
        Raises (deltalake's `CommitFailedError`, ...) when the commit did not happen: the table is
        then read again."""
        now = int(time.time() * 1000)
        props = CommitProperties(
            app_transactions=[Transaction(app_id(q), off, now) for q, off in sorted(offsets.items())],
            custom_metadata={
                "ferromq.topic": self.topic,
                "ferromq.offsets": {str(q): off for q, off in sorted(offsets.items())},
            },
        )
        try:
            self.table.create_write_transaction(
                [f.action for f in files],
                mode="append",
                schema=self.table.schema(),
                partition_by=list(PARTITION_COLUMNS),
                commit_properties=props,
            )
        finally:
            # create_write_transaction leaves this object at the version it read: a next commit
            # from it would be checked as concurrent with this one (and refused for its
            # app transactions).
            self.table.update_incremental()
        version = self.table.version()
        self._sync(f"{self._root}/_delta_log/{version:020d}.json")
        return version

    def _sync(self, path: str) -> None:
        """On a local disk, `path` and its directory's entry reach the disk before the step after
        (delta-rs and pyarrow leave both in the page cache): once committed, a row survives a power
        loss, and the log's retention may delete what the table holds. Object stores are durable
        when a write returns."""
        if not isinstance(self._fs, pafs.LocalFileSystem):
            return
        for target, flags in ((path, os.O_RDONLY), (os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)):
            fd = os.open(target, flags)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def compact(self, target_size: int, partition: tuple[str, int] | None = None) -> int:
        """Merges small files of each partition, or of one (day, queue id) (Delta's optimize); the
        files removed."""
        only = (
            None if partition is None else [("day", "=", partition[0]), ("queue_id", "=", str(partition[1]))]
        )
        metrics = self.table.optimize.compact(
            partition_filters=only,
            target_size=target_size,
            writer_properties=_compaction_properties(self.compression),
        )
        self.table.update_incremental()
        return int(metrics.get("numFilesRemoved", 0))

    def expire(self, retention_days: int, today: date | None = None) -> int:
        """Deletes the days older than `retention_days` (whole partitions: nothing is rewritten);
        the rows deleted."""
        cutoff = (today or datetime.now(UTC).date()) - timedelta(days=retention_days)
        old = [p for p in self.table.partitions() if (p.get("day") or "9999") < cutoff.isoformat()]
        if not old:
            return 0
        metrics = self.table.delete(f"day < '{cutoff.isoformat()}'")
        self.table.update_incremental()
        return int(metrics.get("num_deleted_rows", 0))

    def vacuum(self, retention_hours: int) -> int:
        """Deletes files no version of the last `retention_hours` uses: those compaction and
        retention removed, and those a crash left uncommitted; how many."""
        deleted = self.table.vacuum(
            retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False, full=True
        )
        self.table.update_incremental()
        return len(deleted)


def _dictionary_columns() -> list[str]:
    """The Parquet columns (leaf paths) a data file dictionary-encodes: all but `PLAIN_COLUMNS`."""
    return [c for c in _leaf_paths(file_schema()) if c not in PLAIN_COLUMNS]


def _bounded_columns() -> list[str]:
    """The Parquet columns a data file keeps min/max statistics of: all but `UNBOUNDED_COLUMNS`."""
    return [c for c in _leaf_paths(file_schema()) if c not in UNBOUNDED_COLUMNS]


def _leaf_paths(schema: pa.Schema) -> list[str]:
    out: list[str] = []
    for f in schema:
        if pa.types.is_map(f.type):
            out += [f"{f.name}.key_value.key", f"{f.name}.key_value.value"]
        else:
            out.append(f.name)
    return out


def _compaction_properties(compression: str) -> WriterProperties:
    """Compaction's files as the tiering's: the table's codec, row groups of `ROW_GROUP_ROWS`, the
    top-level `PLAIN_COLUMNS` without a dictionary (delta-rs takes no nested column path here: a
    map's values keep the default, a dictionary up to its page limit)."""
    plain = ColumnProperties(dictionary_enabled=False)
    return WriterProperties(
        compression=CODECS[compression].delta,
        max_row_group_size=ROW_GROUP_ROWS,
        column_properties={c: plain for c in PLAIN_COLUMNS if "." not in c},
    )


def _stats(data: pa.Table) -> dict[str, object]:
    """Delta's per-file statistics (numRecords, min/max and null counts) of `STATS_COLUMNS`."""
    mins: dict[str, object] = {}
    maxs: dict[str, object] = {}
    for name in STATS_COLUMNS:
        col = data.column(name)
        bounds = pc.min_max(col)
        lo, hi = bounds["min"], bounds["max"]
        if pa.types.is_timestamp(col.type):
            # Delta keeps timestamps to the millisecond: the bounds rounded outwards.
            lo_us, hi_us = lo.cast(pa.int64()).as_py(), hi.cast(pa.int64()).as_py()
            mins[name] = _iso_ms(math.floor(lo_us / 1000))
            maxs[name] = _iso_ms(math.ceil(hi_us / 1000))
        else:
            mins[name], maxs[name] = lo.as_py(), hi.as_py()
    return {
        "numRecords": data.num_rows,
        "minValues": mins,
        "maxValues": maxs,
        "nullCount": dict.fromkeys(STATS_COLUMNS, 0),
    }


def _iso_ms(ms: int) -> str:
    t = datetime.fromtimestamp(ms / 1000, UTC)
    return f"{t:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"
