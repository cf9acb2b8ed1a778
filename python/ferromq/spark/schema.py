"""The rows a ferromq read produces, and the Arrow batches that carry them.

The Rust store decodes records into Arrow-layout buffers (`_store.Store.read_columns`,
`_store.decode_columns`; objects with the buffer protocol, still owned by Rust); `record_batch`
wraps them, without copying, into a `pyarrow.RecordBatch` of exactly the Arrow schema Spark
expects for `spark_schema`. No Python object is built per row.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

_COLUMNS: list[StructField] = [
    StructField("topic", StringType(), False),
    StructField("queue_id", IntegerType(), False),
    StructField("queue_offset", LongType(), False),
    StructField("commitlog_offset", LongType(), False),
    StructField("msg_id", StringType(), False),
    StructField("uniq_key", StringType(), True),
    StructField("tags", StringType(), True),
    StructField("keys", StringType(), True),
    StructField("properties", MapType(StringType(), StringType(), False), False),
    StructField("body", BinaryType(), False),
    StructField("born_timestamp", TimestampType(), False),
    StructField("store_timestamp", TimestampType(), False),
    StructField("born_host", StringType(), False),
    StructField("store_host", StringType(), False),
    StructField("reconsume_times", IntegerType(), False),
    StructField("sys_flag", IntegerType(), False),
    StructField("flag", IntegerType(), False),
]


def spark_schema(include_properties: bool = True) -> StructType:
    """The schema of a read; without `includeProperties` the `properties` map is left out."""
    return StructType([f for f in _COLUMNS if include_properties or f.name != "properties"])


def arrow_schema(include_properties: bool = True) -> pa.Schema:
    return to_arrow_schema(spark_schema(include_properties), timezone="UTC")


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
    """Wraps the column buffers of `read_columns` / `decode_columns` into a RecordBatch of
    `schema` (one of `arrow_schema`'s)."""
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
