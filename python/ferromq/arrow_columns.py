"""The store's column buffers as Arrow, without copying.

`_store.Store.read_columns` and `_store.decode_columns` decode records in Rust into Arrow-layout
buffers (objects with the buffer protocol, still owned by Rust); `record_batch` wraps them into a
`pyarrow.RecordBatch`. Shared by the Spark source (`ferromq.spark`) and the table topics writer
(`ferromq.tables`); pyarrow only, so neither pulls in the other's libraries.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa


def _var(kind: pa.DataType, rows: int, parts: tuple[Any, int, Any, Any]) -> pa.Array:
    validity, nulls, offsets, data = parts
    buffers = [
        None if validity is None else pa.py_buffer(validity),
        pa.py_buffer(offsets),
        pa.py_buffer(data),
    ]
    return pa.Array.from_buffers(kind, rows, buffers, null_count=nulls)


def _views(kind: pa.DataType, rows: int, parts: tuple[Any, tuple[Any, ...]]) -> pa.Array:
    """A binary_view column: its views, then its data buffers (copies, then mapped CommitLog files
    the views point into, kept mapped while the array lives)."""
    views, data = parts
    buffers = [None, pa.py_buffer(views), *(pa.py_buffer(d) for d in data)]
    return pa.Array.from_buffers(kind, rows, buffers, null_count=0)


def _fixed(kind: pa.DataType, rows: int, data: Any) -> pa.Array:
    return pa.Array.from_buffers(kind, rows, [None, pa.py_buffer(data)], null_count=0)


def record_batch(cols: dict[str, Any], schema: pa.Schema) -> pa.RecordBatch:
    """Wraps the column buffers of `read_columns` / `decode_columns` into a RecordBatch of
    `schema` (the Spark source's `arrow_schema` or the tables' `row_schema`); the body is
    binary_view in `schema` when it was read with `RowFilter(body_views=True)`."""
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
        elif pa.types.is_binary_view(kind):
            arrays.append(_views(kind, rows, raw))
        elif pa.types.is_string(kind) or pa.types.is_binary(kind):
            arrays.append(_var(kind, rows, raw))
        else:
            arrays.append(_fixed(kind, rows, raw))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
