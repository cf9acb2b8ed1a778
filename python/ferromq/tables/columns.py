"""A queue's records as Arrow, decoded by the store in Rust (`_store.Store.read_columns`).

The decoder's buffers (still owned by Rust) become a `pyarrow.RecordBatch` without copying
(`ferromq.arrow_columns.record_batch`, as for the Spark source); the bodies are not copied even
once: they are views into the CommitLog's mapped files, which the batches keep mapped.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ferromq import _store
from ferromq.arrow_columns import record_batch
from ferromq.tables.layout import row_schema

# Statuses where a walk jumped over offsets whose files retention deleted (as ferromq.spark.local).
LOSS_STATUSES = frozenset({"OFFSET_TOO_SMALL", "MESSAGE_WAS_REMOVING", "OFFSET_FOUND_NULL"})
BATCH_ROWS = 65536
BATCH_BYTES = 16 << 20  # fewer, larger reads: each costs a Python round of wrapping


@dataclass(frozen=True)
class QueueRows:
    """What one read of a queue found: the rows of `[start, next_offset)` that are still stored,
    and how many offsets of that range retention had deleted (`lost`)."""

    queue_id: int
    start: int
    next_offset: int
    batches: tuple[pa.RecordBatch, ...]
    lost: int
    body_bytes: int
    """The rows' bodies' bytes (the bulk of what they weigh, wherever they are)."""

    @property
    def rows(self) -> int:
        return sum(b.num_rows for b in self.batches)


def read_queue(
    store: _store.Store, topic: str, queue_id: int, start: int, end: int, max_bytes: int
) -> QueueRows:
    """The records of `[start, end)` of one queue, up to about `max_bytes` of them (at least one
    batch), decoded in Rust. Offsets retention deleted are skipped and counted; the read stops
    early where the store has nothing more to give."""
    # Bodies as views into the CommitLog's mapped files: written to Parquet straight from there.
    schema = row_schema(body_views=True)
    everything = _store.RowFilter(body_views=True)
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
            size += int(cols["body_bytes"])
        reached = int(cols["next_offset"])
        if reached <= offset:
            break
        if cols["status"] in LOSS_STATUSES:
            lost += reached - offset - int(cols["rows"])
        offset = reached
    return QueueRows(queue_id, start, offset, tuple(batches), lost, size)
