"""Spark reads ferromq's store: a PySpark (4.2+) Python data source over CommitLog segments.

    from ferromq.spark import FerroMQDataSource
    spark.dataSource.register(FerroMQDataSource)
    df = spark.read.format("ferromq").option("path", "/data/store").option("topic", "Orders").load()

Batch and streaming reads, straight from the store files (`path`) or through the brokers' pull
protocol (`namesrv`). Options and columns are described in `ferromq.spark.options` and
`ferromq.spark.schema`; pyspark and pyarrow are imported only by this package.

A topic the broker keeps as a table topic (`tableTopics`) reads at Parquet speed with
`read_topic(spark, "Orders", path="/data/store")`: its Delta table's files and the log's tail after
them, as one DataFrame (`ferromq.spark.tables`); `read_topic_stream(spark, "Orders", path=...)` is
the stream that starts from the table and continues from the log (`ferromq.spark.tablestream`).
"""

from typing import TYPE_CHECKING, Any

from ferromq.spark.source import FerroMQDataSource

if TYPE_CHECKING:
    from ferromq.spark.tables import read_topic, read_topic_stream

__all__ = ["FerroMQDataSource", "read_topic", "read_topic_stream"]


def __getattr__(name: str) -> Any:
    # Imported on first use: deltalake and pyarrow.dataset (which imports pandas) cost ~0.2 s, and
    # every Spark task's fresh Python worker imports this package.
    if name in ("read_topic", "read_topic_stream"):
        from ferromq.spark import tables

        return getattr(tables, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
