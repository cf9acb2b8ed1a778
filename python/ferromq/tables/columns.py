"""A queue's records as Arrow, decoded by the store in Rust (`_store.Store.read_columns`).

`record_batch` wraps the decoder's buffers (still owned by Rust) into a `pyarrow.RecordBatch`
without copying, exactly as `ferromq.spark.schema.record_batch` does for the Spark source (that
module imports pyspark, which the broker does not have).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ferromq import _store
from ferromq.tables.layout import row_schema

# Statuses where a walk jumped over offsets whose files retention deleted (as ferromq.spark.local).
LOSS_STATUSES = frozenset({"OFFSET_TOO_SMALL", "MESSAGE_WAS_REMOVING", "OFFSET_FOUND_NULL"})
BATCH_ROWS = 65536
BATCH_BYTES = 4 << 20


def _var(kind: pa.DataType, rows: int, parts: tuple[Any, int, Any, Any]) -> pa.Array:
    validity, nulls, offsets, data = parts
    buffers = [
        None if validity is None else pa.py_buffer(validity),
        pa.py_buffer(offsets),
        pa.py_buffer(data),
    ]
    return pa.Array.from_buffers(kind, rows, buffers, null_count=nulls)


def _fixed(kind: pa.DataType, rows: int, data: Any) -> pa.Array:
    return pa.Array.from_buffers(kind, rows, [None, pa.py_buffer(data)], null_count=0)


def record_batch(cols: dict[str, Any], schema: pa.Schema) -> pa.RecordBatch:
    """The column buffers of `read_columns` / `decode_columns` as a RecordBatch of `schema` (one
    of `row_schema`'s)."""
    rows = int(cols["rows"])
    arrays: list[pa.Array] = []
    for field in schema:
        raw = cols[field.name]
        kind = field.type
        if pa.types.is_map(kind):
            entry_offsets, keys, values = raw
            n_entries = len(keys[2]) // 4 - 1  # one more offset than entries
            arrays.append(
                pa.MapArray.from_arrays(
                    _fixed(pa.int32(), rows + 1, entry_offsets),
                    _var(pa.string(), n_entries, keys),
                    _var(pa.string(), n_entries, values),
                    type=kind,
                )
            )
        elif pa.types.is_string(kind) or pa.types.is_binary(kind):
            arrays.append(_var(kind, rows, raw))
        else:
            arrays.append(_fixed(kind, rows, raw))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass(frozen=True)
class QueueRows:
    """What one read of a queue found: the rows of `[start, next_offset)` that are still stored,
    and how many offsets of that range retention had deleted (`lost`)."""

    queue_id: int
    start: int
    next_offset: int
    batches: tuple[pa.RecordBatch, ...]
    lost: int

    @property
    def rows(self) -> int:
        return sum(b.num_rows for b in self.batches)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.batches)


def read_queue(
    store: _store.Store, topic: str, queue_id: int, start: int, end: int, max_bytes: int
) -> QueueRows:
    """The records of `[start, end)` of one queue, up to about `max_bytes` of them (at least one
    batch), decoded in Rust. Offsets retention deleted are skipped and counted; the read stops
    early where the store has nothing more to give."""
    schema = row_schema()
    everything = _store.RowFilter()
    batches: list[pa.RecordBatch] = []
    offset, lost, size = start, 0, 0
    while offset < end and (not batches or size < max_bytes):
        cols = store.read_columns(
            topic,
            queue_id,
            offset,
            end,
            everything,
            max_rows=BATCH_ROWS,
            max_bytes=min(BATCH_BYTES, max(1, max_bytes - size)),
        )
        if cols["rows"]:
            batch = record_batch(cols, schema)
            batches.append(batch)
            size += batch.nbytes
        reached = int(cols["next_offset"])
        if reached <= offset:
            break
        if cols["status"] in LOSS_STATUSES:
            lost += reached - offset - int(cols["rows"])
        offset = reached
    return QueueRows(queue_id, start, offset, tuple(batches), lost)
