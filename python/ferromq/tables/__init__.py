"""Table topics: a topic's history as a Delta Lake table of Parquet files.

The broker's tiering service (`ferromq.tables.tiering`, broker.conf `tableTopics`) appends the
messages of chosen topics to one Delta table per topic, committed with the offsets they cover
(`ferromq.tables.writer`); the table outlives the CommitLog's retention. Readers:

- Spark: `ferromq.spark.read_topic(spark, topic, path=store)` reads the table's files with Spark's
  own Parquet reader and the log's tail after them with the ferromq source: one DataFrame.
  `ferromq.spark.read_topic_stream` is the stream that starts from the table and continues from
  the log (its tasks read the table's files with `ferromq.tables.ranges`).
- Plain Python: `ferromq.tables.read_arrow(table_root, topic)` (pyarrow), or `deltalake` itself
  (see `ferromq.tables.reader`).

Layout, schema and commit records: `ferromq.tables.layout`. The package holds everything that is
the table topics' own: their broker.conf keys (`config`), the tiering service the broker runs
(`tiering`), the status the broker reports and the admin client, `ferromq admin table-topics` and
the console read (`status`), the store's rows as Arrow (`columns`), the writer, the readers
(`reader`, `ranges`). Spark's data source over them stays in `ferromq.spark` (`tables`,
`tablestream`). Importing the package or `config`/`status` needs neither pyarrow nor deltalake.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_MODULE_OF = {
    **dict.fromkeys(
        ("PARTITION_COLUMNS", "app_id", "row_schema", "table_root", "table_schema", "table_uri"), "layout"
    ),
    **dict.fromkeys(("Snapshot", "committed_offsets", "open_table", "read_arrow", "snapshot"), "reader"),
}


def __getattr__(name: str) -> Any:
    # Each name imported on first use: the layout needs pyarrow, and the reader deltalake and
    # pyarrow.dataset (which imports pandas; ~0.2 s), while the broker's config
    # (ferromq.tables.config) and the admin client's status (ferromq.tables.status) need neither,
    # and a Spark task that reads a table's files (ferromq.tables.ranges) needs no reader.
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"ferromq.tables.{module}"), name)
