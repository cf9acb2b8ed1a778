"""Reading a topic's table: one snapshot's files and committed offsets, without Spark.

    from ferromq.tables import read_arrow
    rows = read_arrow("/data/store/tables", "Orders", columns=["queue_offset", "body"])

`read_arrow` reads the committed files of the table's latest version with pyarrow's own Parquet
reader (deltalake lists them; a `predicate` prunes them by partition and statistics first). The
table is an ordinary Delta table, so `deltalake` reads it too, e.g. with SQL:

    from deltalake import DeltaTable, QueryBuilder
    dt = DeltaTable("/data/store/tables/Orders")
    QueryBuilder().register("orders", dt).execute("select queue_id, count(*) from orders group by 1")

(`DeltaTable.to_pyarrow_table()` / `to_pandas()` read it as well, but with deltalake 1.6.6 the
interpreter then sometimes aborts at exit, "terminate called without an active exception", as
delta-rs issue 2184 reports: they scan through deltalake's Python filesystem handler. `read_arrow`
and `QueryBuilder` do not.)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable

from ferromq.tables import objectstore
from ferromq.tables.layout import (
    PARTITION_COLUMNS,
    app_id,
    local_path,
    partition_schema,
    table_schema,
    table_uri,
)
from ferromq.tables.ranges import DataFile, QueueFiles


@dataclass(frozen=True)
class Snapshot:
    """One version of a topic's table: its data files (all, or those a predicate kept) and, per
    queue, the offset after the last row it holds."""

    uri: str
    version: int
    files: tuple[str, ...]
    offsets: dict[int, int]
    rows: int
    storage_options: dict[str, str] | None = None
    """For an s3:// table, the AWS_* settings it was opened with (ferromq.tables.objectstore)."""

    @property
    def base(self) -> str:
        """The directory the partition directories are under (a local path or the URI)."""
        return local_path(self.uri) or self.uri


def open_table(root: str, topic: str, storage_options: Mapping[str, str] | None = None) -> DeltaTable | None:
    """The topic's table under `root`, or None when it has none. `storage_options`: for an s3://
    root, AWS_* settings over the environment's (ferromq.tables.objectstore)."""
    uri = table_uri(root, topic)
    options = objectstore.storage_options(uri, storage_options) or None
    return DeltaTable(uri, storage_options=options) if DeltaTable.is_deltatable(uri, options) else None


def queues_of(table: DeltaTable) -> set[int]:
    """The queues the table has rows of."""
    return {int(q) for p in table.partitions() if (q := p.get("queue_id")) is not None}


def committed_offsets(table: DeltaTable, queue_ids: Iterable[int] = ()) -> dict[int, int]:
    """Per queue (those with rows, and `queue_ids`), the offset after the last row committed."""
    out: dict[int, int] = {}
    for q in sorted(queues_of(table) | set(queue_ids)):
        version = table.transaction_version(app_id(q))
        if version is not None:
            out[q] = version
    return out


def snapshot(
    table: DeltaTable,
    queue_ids: Iterable[int] = (),
    predicate: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Snapshot:
    """The files (those `predicate`, a SQL condition over partition and statistics columns, may
    need) and committed offsets of the table's current version. `storage_options`: those the
    table was opened with, for reading its files (an s3:// table)."""
    files = table.file_uris(file_pruning_predicate=predicate) if predicate else table.file_uris()
    actions = table.get_add_actions(flatten=True)
    rows = sum(n or 0 for n in actions.column("num_records").to_pylist()) if actions.num_rows else 0
    return Snapshot(
        uri=table.table_uri,
        version=table.version(),
        files=tuple(files),
        offsets=committed_offsets(table, queue_ids),
        rows=rows,
        storage_options=objectstore.storage_options(table.table_uri, storage_options) or None,
    )


def queue_files(table: DeltaTable) -> dict[int, QueueFiles]:
    """Per queue the table has rows of or a committed offset for: what its current version holds
    (first offset, committed offset, data files with their offset statistics)."""
    base = local_path(table.table_uri) or table.table_uri
    actions = pa.table(table.get_add_actions(flatten=True))
    by_queue: dict[int, list[DataFile]] = {}
    for row in actions.select(_FILE_STATS).to_pylist() if actions.num_rows else []:
        last_store = row["max.store_timestamp"]
        # Statistics the writer always records; a file without them is taken to hold anything.
        data_file = DataFile(
            path=_join(base, row["path"]),
            first=row["min.queue_offset"] if row["min.queue_offset"] is not None else 0,
            last=row["max.queue_offset"] if row["max.queue_offset"] is not None else 2**63 - 1,
            last_store_ms=None if last_store is None else int(last_store.timestamp() * 1000),
        )
        by_queue.setdefault(row["partition.queue_id"], []).append(data_file)
    committed = committed_offsets(table, by_queue)
    version = table.version()
    out: dict[int, QueueFiles] = {}
    for q, next_offset in committed.items():
        files = tuple(sorted(by_queue.get(q, []), key=lambda f: (f.first, f.last)))
        # No rows left (all lost before tiering, or past the table's retention): it holds nothing.
        first = min((f.first for f in files), default=next_offset)
        out[q] = QueueFiles(version, min(first, next_offset), next_offset, files)
    return out


_FILE_STATS = ["path", "min.queue_offset", "max.queue_offset", "max.store_timestamp", "partition.queue_id"]


def _join(base: str, relative: str) -> str:
    # Add actions name files relative to the table, percent-encoded (Delta's protocol).
    relative = unquote(relative)
    return os.path.join(base, relative) if os.path.isabs(base) else base.rstrip("/") + "/" + relative


def dataset(snap: Snapshot) -> ds.Dataset:
    """The snapshot's files as a pyarrow dataset of the table's columns (partition columns from
    the hive-style directories)."""
    partitioning = ds.partitioning(partition_schema(), flavor="hive")
    files, base, fs = list(snap.files), snap.base, None
    if objectstore.is_s3(snap.uri):
        fs, base = objectstore.filesystem(snap.uri, snap.storage_options)
        files = [f.split("://", 1)[1] for f in files]
    return ds.dataset(
        files,
        schema=table_schema(),
        format="parquet",
        partitioning=partitioning,
        partition_base_dir=base,
        filesystem=fs,
    )


def read_arrow(
    root: str,
    topic: str,
    *,
    columns: Sequence[str] | None = None,
    filter: ds.Expression | None = None,
    predicate: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> pa.Table:
    """The rows of `topic`'s table under `root` (`columns` of them; those passing the pyarrow
    `filter`), read with pyarrow. `predicate` (SQL over the partition and statistics columns,
    e.g. "queue_id = 1") prunes files before they are opened. An empty table when there is no
    table yet."""
    table = open_table(root, topic, storage_options)
    names = list(columns) if columns is not None else table_schema().names
    if table is None:
        return table_schema().empty_table().select(names)
    snap = snapshot(table, predicate=predicate, storage_options=storage_options)
    if not snap.files:
        return table_schema().empty_table().select(names)
    return dataset(snap).to_table(columns=names, filter=filter)


def describe(table: DeltaTable, bounds: dict[int, tuple[int, int]] | None = None) -> dict[str, Any]:
    """What `ferromq admin table-topics` shows of a table: version, files, rows, committed
    offsets, and, given the log's (min, max) offsets per queue, the messages the log holds that
    the table does not yet (`lag`)."""
    snap = snapshot(table, queue_ids=bounds or ())
    history = table.history(1)
    last = history[0] if history else {}
    out: dict[str, Any] = {
        "uri": snap.uri,
        "version": snap.version,
        "files": len(snap.files),
        "rows": snap.rows,
        "lastCommitTimestamp": last.get("timestamp"),
        "lastOperation": last.get("operation"),
        "partitionedBy": list(PARTITION_COLUMNS),
        "queues": {str(q): {"committed": off} for q, off in snap.offsets.items()},
    }
    if bounds is not None:
        lag = 0
        for q, (lo, hi) in sorted(bounds.items()):
            behind = max(0, hi - max(lo, snap.offsets.get(q, 0)))
            out["queues"].setdefault(str(q), {"committed": None}).update(logMin=lo, logMax=hi, lag=behind)
            lag += behind
        out["lag"] = lag
    return out
