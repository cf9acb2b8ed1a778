"""Table topics: a topic's history as a Delta Lake table of Parquet files.

The broker's tiering service (`ferromq.broker.tiering`, broker.conf `tableTopics`) appends the
messages of chosen topics to one Delta table per topic, committed with the offsets they cover
(`ferromq.tables.writer`); the table outlives the CommitLog's retention. Readers:

- Spark: `ferromq.spark.read_topic(spark, topic, path=store)` reads the table's files with Spark's
  own Parquet reader and the log's tail after them with the ferromq source: one DataFrame.
- Plain Python: `ferromq.tables.read_arrow(table_root, topic)` (pyarrow), or `deltalake` itself
  (see `ferromq.tables.reader`).

Layout, schema and commit records: `ferromq.tables.layout`.
"""

from ferromq.tables.layout import (
    PARTITION_COLUMNS,
    app_id,
    row_schema,
    table_root,
    table_schema,
    table_uri,
)
from ferromq.tables.reader import Snapshot, committed_offsets, open_table, read_arrow, snapshot

__all__ = [
    "PARTITION_COLUMNS",
    "Snapshot",
    "app_id",
    "committed_offsets",
    "open_table",
    "read_arrow",
    "row_schema",
    "snapshot",
    "table_root",
    "table_schema",
    "table_uri",
]
