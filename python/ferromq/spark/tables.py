"""`read_topic`: a topic's table topic and the log's tail after it, as one DataFrame.

    from ferromq.spark import read_topic
    df = read_topic(spark, "Orders", path="/data/store", startingTimestamp="1714521600000")

The broker's tiering (`tableTopics`, see `ferromq.tables.tiering`) keeps a topic's history in a
Delta table. `read_topic` takes one snapshot of it: its data files, read by Spark's own Parquet
reader (`spark.read.parquet`, at native speed on any Spark version: no delta-spark needed), and,
per queue, the offset after the last row committed. The rows after those offsets, up to the log's
end when `read_topic` is called, are read from the store by the `ferromq` source
(`spark.read.format("ferromq")`) and the two are unioned: the same columns and rows as the
`ferromq` source reading everything, none twice, plus what retention has since deleted from the
log but the table kept. Every action on the DataFrame reads the topic as of the call. A topic
without a table is read by the `ferromq` source alone.

Options (as the `ferromq` source names them; any other is refused by name):

- `queues` (`0,2,4-7`), `tags` (`TagA || TagB`), `startingTimestamp` / `endingTimestamp` (store
  time in ms, `[start, end)`): the table's files are pruned by partition (`queue_id`, `day`) and by
  their statistics (`store_timestamp`), then filtered exactly; the tail is read with the same
  options;
- `includeProperties` (default true), `failOnDataLoss` (default true: the log lost offsets the
  table does not hold), `maxRecordsPerPartition` (the tail's tasks).

`path` is the store root, `table_path` the tables' directory (default `<path>/tables`, as the
broker's `tableTopicPath`). Spark reads Parquet columns as nullable: the DataFrame has the
`ferromq` source's column names and types, and every column nullable. Projections and filters on
the result prune the Parquet columns and row groups as for any Parquet read.

On Spark versions delta-spark supports, the same table reads with `spark.read.format("delta")
.load(table_path + "/Orders")` too (the table alone: no tail).

`read_topic_stream` is the streaming counterpart: `spark.readStream.format("ferromq")` with
`fromTable`, a stream that starts from the table and continues from the log, no row twice, none
skipped (see `ferromq.spark.tablestream`):

    query = (read_topic_stream(spark, "Orders", path="/data/store", maxRecordsPerTrigger=100000)
             .writeStream.format("parquet").option("checkpointLocation", "/ckpt/orders")
             .trigger(availableNow=True).start("/out/orders"))

It starts at the earliest offsets (the table's first ones) unless `startingOffsets` or
`startingTimestamp` say otherwise, and takes read_topic's options less `endingTimestamp`, plus
`startingOffsets` and `maxRecordsPerTrigger`; any other is refused by name. Its rows have the
source's schema (non-nullable columns as the source's). An s3:// `table_path` is reached with
`storage_options` as in `read_topic` (passed to the source as its `tableTopicS3*` options); the
tasks read the table's files from the bucket with pyarrow.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, StructField, StructType

from ferromq.errors import InvalidArgumentError
from ferromq.spark.local import open_view
from ferromq.spark.options import ReadOptions, parse_options
from ferromq.spark.schema import spark_schema
from ferromq.spark.source import FerroMQDataSource
from ferromq.tables.layout import table_root
from ferromq.tables.objectstore import is_s3
from ferromq.tables.reader import Snapshot, dataset, open_table, snapshot

# The `ferromq` source's options read_topic takes (lower case, as Spark passes them).
_TAKEN = {
    "queues": "queues",
    "tags": "tags",
    "startingtimestamp": "startingTimestamp",
    "endingtimestamp": "endingTimestamp",
    "includeproperties": "includeProperties",
    "failondataloss": "failOnDataLoss",
    "maxrecordsperpartition": "maxRecordsPerPartition",
}
# The `ferromq` source's options read_topic_stream takes: a stream has no end, and it may start at
# given offsets (a checkpoint keeps where it is).
_STREAM_TAKEN = {
    **{k: v for k, v in _TAKEN.items() if k != "endingtimestamp"},
    "startingoffsets": "startingOffsets",
    "maxrecordspertrigger": "maxRecordsPerTrigger",
}
# Up to this many files of a table are looked up on the driver (see `_table_rows`).
DRIVER_LISTED_FILES = 4096
# read_topic_stream's storage_options, as the source's options that carry them to its tasks.
_STREAM_S3_OPTIONS = {
    "AWS_ENDPOINT_URL": "tableTopicS3Endpoint",
    "AWS_ACCESS_KEY_ID": "tableTopicS3AccessKey",
    "AWS_SECRET_ACCESS_KEY": "tableTopicS3SecretKey",
    "AWS_REGION": "tableTopicS3Region",
    "AWS_DEFAULT_REGION": "tableTopicS3Region",
}
# Settings ferromq.tables.objectstore derives itself (an http:// endpoint allows http, path-style).
_DERIVED_S3_OPTIONS = frozenset({"AWS_ALLOW_HTTP", "AWS_CONDITIONAL_PUT", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST"})
# Passed on to the tail's read as they are (startingTimestamp becomes a filter: the source would
# let it take precedence over the tail's starting offsets).
_TAIL_OPTIONS = frozenset(_TAKEN) - {"startingtimestamp"}


def read_topic(
    spark: SparkSession,
    topic: str,
    *,
    path: str,
    table_path: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    **options: Any,
) -> DataFrame:
    """`topic`'s rows: its table's committed files and the store's rows after them (see the
    module's doc). Bad or unknown options raise `InvalidArgumentError` naming them. An s3://
    `table_path` is reached with `storage_options` (AWS_* settings) over the AWS_* environment,
    and its files are read on the driver with pyarrow (no Spark S3 connector needed)."""
    given = _given("read_topic", options, _TAKEN)
    # The values are checked as the source checks them.
    opts = parse_options({"path": path, "topic": topic, **given}, streaming=False)
    table = open_table(table_root(path, table_path), topic, storage_options)
    if table is None:
        return _source(spark, path, topic, given).load()
    view = open_view(path)
    try:
        bounds = {q: (lo, hi) for t, q, lo, hi in view.queues() if t == topic}
    finally:
        view.close()
    snap = snapshot(table, queue_ids=bounds, predicate=_pruning(opts), storage_options=storage_options)
    columns = spark_schema(opts.include_properties).names
    rows = _bucket_rows(spark, snap) if is_s3(snap.uri) else _table_rows(spark, snap.files, snap.base)
    stored = rows.where(_wanted(opts)).select(*columns)
    # The tail: each queue's offsets after the table's, up to the log's end now, so that the read
    # is of the topic as of this call, as the table's part is. Nothing there: no Python source
    # (its planning alone costs a Python worker's start, about a second).
    ends = {q: hi for q, (_, hi) in bounds.items() if opts.wants_queue(q)}
    if all(snap.offsets.get(q, bounds[q][0]) >= hi for q, hi in ends.items()):
        return stored
    tail = _source(spark, path, topic, {k: v for k, v in given.items() if k in _TAIL_OPTIONS})
    tail = tail.option("endingOffsets", json.dumps({topic: {str(q): hi for q, hi in ends.items()}}))
    if snap.offsets:
        starts = {topic: {str(q): offset for q, offset in snap.offsets.items()}}
        tail = tail.option("startingOffsets", json.dumps(starts))
    rest = tail.load()
    if opts.starting_timestamp is not None:
        rest = rest.where(F.col("store_timestamp") >= _timestamp(opts.starting_timestamp))
    return stored.union(rest.select(*columns))


def read_topic_stream(
    spark: SparkSession,
    topic: str,
    *,
    path: str,
    table_path: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    **options: Any,
) -> DataFrame:
    """A streaming DataFrame of `topic`'s rows from its table's first offsets on, then the log's
    (see the module's doc). Bad or unknown options raise `InvalidArgumentError` naming them. An
    s3:// `table_path` is reached with `storage_options` (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY, AWS_REGION) over the AWS_* environment; others (AWS_SESSION_TOKEN)
    are taken from the environment of the driver's and executors' Python workers only."""
    given = _given("read_topic_stream", options, _STREAM_TAKEN)
    stream = {"path": path, "topic": topic, "fromTable": "true", "startingOffsets": "earliest"}
    if table_path:
        stream["tablePath"] = table_path
    for key, value in sorted((storage_options or {}).items()):
        if key in _STREAM_S3_OPTIONS:
            if value:
                stream[_STREAM_S3_OPTIONS[key]] = str(value)
        elif key not in _DERIVED_S3_OPTIONS:
            raise InvalidArgumentError(
                f"read_topic_stream: storage option {key} cannot be passed to the stream's tasks; it takes "
                f"{', '.join(sorted(_STREAM_S3_OPTIONS))} (others: set them in the AWS_* environment)"
            )
    stream.update({_STREAM_TAKEN[k]: v for k, v in given.items()})
    parse_options(stream, streaming=True)  # now, rather than when the query starts
    spark.dataSource.register(FerroMQDataSource)
    reader = spark.readStream.format("ferromq")
    for key, value in stream.items():
        reader = reader.option(key, value)
    return reader.load()


def _given(caller: str, options: Mapping[str, Any], taken: Mapping[str, str]) -> dict[str, str]:
    """The options by their lower-case names; one not `taken` raises `InvalidArgumentError`."""
    given = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    for key in sorted(given):
        if key not in taken:
            raise InvalidArgumentError(
                f"{caller}: unknown option {key}; it takes {', '.join(sorted(taken.values()))}"
            )
    return given


def _source(spark: SparkSession, path: str, topic: str, options: Mapping[str, str]) -> DataFrameReader:
    # Only when the source is read: registering ships the class to the JVM (~0.1 s).
    spark.dataSource.register(FerroMQDataSource)
    reader = spark.read.format("ferromq").option("path", path).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(_TAKEN[key], value)
    return reader


def _table_schema() -> StructType:
    """The Parquet files' columns and the partition columns, as Spark reads them."""
    return StructType([*spark_schema(True).fields, StructField("day", DateType(), False)])


def _table_rows(spark: SparkSession, files: tuple[str, ...], base: str) -> DataFrame:
    if not files:
        return spark.createDataFrame([], _table_schema())
    # Spark lists more than `parallelPartitionDiscovery.threshold` (32) paths with a Spark job,
    # which costs ~0.2 s more than looking up a few thousand local files on the driver.
    key = "spark.sql.sources.parallelPartitionDiscovery.threshold"
    before = spark.conf.get(key, "32") or "32"
    if len(files) <= DRIVER_LISTED_FILES:
        spark.conf.set(key, str(max(int(before), len(files))))
    try:
        # basePath: the partition columns (day, queue_id) come from the directories below it.
        return spark.read.schema(_table_schema()).option("basePath", base).parquet(*files)
    finally:
        spark.conf.set(key, before)


def _bucket_rows(spark: SparkSession, snap: Snapshot) -> DataFrame:
    """An object-store table's files, read on the driver with pyarrow (which reaches the bucket
    with the snapshot's settings), as a DataFrame of `_table_schema`'s columns."""
    if not snap.files:
        return spark.createDataFrame([], _table_schema())
    schema = _table_schema()
    rows = dataset(snap).to_table(columns=schema.names)
    return spark.createDataFrame(rows, schema)


def _timestamp(ms: int) -> Column:
    return F.timestamp_millis(F.lit(ms))


def _wanted(opts: ReadOptions) -> Column:
    """The rows of the table the options select (exactly)."""
    cond = F.lit(True)
    if opts.queues is not None:
        cond = cond & F.col("queue_id").isin(sorted(opts.queues))
    if opts.tags is not None:
        cond = cond & F.col("tags").isin(list(opts.tags))
    if opts.starting_timestamp is not None:
        cond = cond & (F.col("store_timestamp") >= _timestamp(opts.starting_timestamp))
    if opts.ending_timestamp is not None:
        cond = cond & (F.col("store_timestamp") < _timestamp(opts.ending_timestamp))
    return cond


def _iso(ms: int) -> str:
    t = datetime.fromtimestamp(ms / 1000, UTC)
    return f"{t:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def _pruning(opts: ReadOptions) -> str | None:
    """The SQL condition on partition values and file statistics that picks the files the options
    may need (a superset: `_wanted` filters the rows)."""
    terms = []
    if opts.queues is not None:
        terms.append(f"queue_id IN ({', '.join(str(q) for q in sorted(opts.queues))})")
    if opts.starting_timestamp is not None:
        start = opts.starting_timestamp
        terms.append(f"day >= '{datetime.fromtimestamp(start / 1000, UTC).date().isoformat()}'")
        terms.append(f"store_timestamp >= '{_iso(start)}'")
    if opts.ending_timestamp is not None:
        end = opts.ending_timestamp
        terms.append(f"day <= '{datetime.fromtimestamp(end / 1000, UTC).date().isoformat()}'")
        terms.append(f"store_timestamp < '{_iso(end)}'")
    return " AND ".join(terms) or None
