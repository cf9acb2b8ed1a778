"""Spark reads ferromq's store: a PySpark (4.2+) Python data source over CommitLog segments.

    from ferromq.spark import FerroMQDataSource
    spark.dataSource.register(FerroMQDataSource)
    df = spark.read.format("ferromq").option("path", "/data/store").option("topic", "Orders").load()

Batch and streaming reads, straight from the store files (`path`) or through the brokers' pull
protocol (`namesrv`). Options and columns are described in `ferromq.spark.options` and
`ferromq.spark.schema`; pyspark and pyarrow are imported only by this package.
"""

from ferromq.spark.source import FerroMQDataSource

__all__ = ["FerroMQDataSource"]
