"""Read a topic straight from the store files with Spark (batch), as a DataFrame.

Needs `pip install '.[spark]'` (from a clone) and Java 17+. The store can be one a broker is
writing right now: Spark sees a consistent prefix.

    python examples/spark_read.py [--store ~/store] [--topic Orders]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from ferromq.spark import FerroMQDataSource


def main(store: Path, topic: str) -> None:
    # Spark's Python workers must import ferromq from this environment too.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("ferromq-example")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(FerroMQDataSource)
        df = spark.read.format("ferromq").option("path", str(store)).option("topic", topic).load()
        print(f"{df.count()} messages in {topic}")
        for row in df.groupBy("tags").count().orderBy("tags").collect():
            print(f"  tags={row['tags']}: {row['count']}")
    finally:
        spark.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", default="~/store", help="the broker's storePathRootDir")
    ap.add_argument("--topic", default="Orders")
    args = ap.parse_args()
    main(Path(args.store).expanduser(), args.topic)
