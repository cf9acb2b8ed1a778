"""The rows a ferromq read produces, and the Arrow batches that carry them.

The Rust store decodes records into Arrow-layout buffers (`_store.Store.read_columns`,
`_store.decode_columns`; objects with the buffer protocol, still owned by Rust); `record_batch`
(`ferromq.arrow_columns`) wraps them, without copying, into a `pyarrow.RecordBatch` of exactly
the Arrow schema Spark expects for `spark_schema`. No Python object is built per row.
"""

from __future__ import annotations

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

from ferromq.arrow_columns import record_batch

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


__all__ = ["arrow_schema", "record_batch", "spark_schema"]
