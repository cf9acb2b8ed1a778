"""Where a topic's table lives and what its rows, files and commits look like.

One Delta Lake table per topic, at `<table root>/<topic>` (the broker's `tableTopicPath`, by default
`<storePathRootDir>/tables`). Its columns are the rows of `spark.read.format("ferromq")` (the Arrow
schema of `ferromq.spark.schema.arrow_schema()`, built here without pyspark) plus `day`, the UTC date
of `store_timestamp`. It is partitioned by `day` and `queue_id` (hive-style directories
`day=2024-05-01/queue_id=3/`), so a time range or a queue selects whole directories, and each data
file carries min/max statistics of the `STATS_COLUMNS`.

Each commit records, per queue it covers, the offset after the last row it holds as a Delta app
transaction (`txn` action) with the id `app_id(queue_id)`: the table holds exactly the offsets below
that version of each queue, and whoever continues (the tiering after a restart, a reader adding the
log's tail) starts there.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlparse

import pyarrow as pa

PARTITION_COLUMNS = ("day", "queue_id")
# What the data files carry min/max statistics of (Delta's data skipping; the rest are text,
# bodies and maps that would only make the log larger).
STATS_COLUMNS = ("queue_offset", "commitlog_offset", "store_timestamp", "born_timestamp")
APP_ID_PREFIX = "ferromq.queue."
DEFAULT_DIR = "tables"
TABLE_CONFIGURATION = {"delta.dataSkippingStatsColumns": ",".join(STATS_COLUMNS)}

_TIMESTAMP = pa.timestamp("us", tz="UTC")
_PROPERTIES = pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.string(), False))
_ROW_FIELDS = [
    pa.field("topic", pa.string(), False),
    pa.field("queue_id", pa.int32(), False),
    pa.field("queue_offset", pa.int64(), False),
    pa.field("commitlog_offset", pa.int64(), False),
    pa.field("msg_id", pa.string(), False),
    pa.field("uniq_key", pa.string(), True),
    pa.field("tags", pa.string(), True),
    pa.field("keys", pa.string(), True),
    pa.field("properties", _PROPERTIES, False),
    pa.field("body", pa.binary(), False),
    pa.field("born_timestamp", _TIMESTAMP, False),
    pa.field("store_timestamp", _TIMESTAMP, False),
    pa.field("born_host", pa.string(), False),
    pa.field("store_host", pa.string(), False),
    pa.field("reconsume_times", pa.int32(), False),
    pa.field("sys_flag", pa.int32(), False),
    pa.field("flag", pa.int32(), False),
]
ROW_COLUMNS = tuple(f.name for f in _ROW_FIELDS)

# A topic name as RocketMQ allows it (TopicValidator): also what keeps a table path inside its root.
_TOPIC_NAME = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")


def row_schema(include_properties: bool = True, body_views: bool = False) -> pa.Schema:
    """The rows of a read: the same Arrow schema as the Spark source's (with `body_views`, bodies
    as binary_view, as `_store.RowFilter(body_views=True)` reads them; Parquet stores both alike)."""
    fields = [f for f in _ROW_FIELDS if include_properties or f.name != "properties"]
    return pa.schema([_view_body(f) if body_views else f for f in fields])


def _view_body(f: pa.Field) -> pa.Field:
    return f.with_type(pa.binary_view()) if f.name == "body" else f


def table_schema() -> pa.Schema:
    """The table's columns: the rows and `day`."""
    return pa.schema([*_ROW_FIELDS, pa.field("day", pa.date32(), False)])


def file_schema(body_views: bool = False) -> pa.Schema:
    """What a data file holds: the table's columns less the partition columns (their values are
    in the file's directory and in the Delta log, as Delta keeps them)."""
    fields = [f for f in table_schema() if f.name not in PARTITION_COLUMNS]
    return pa.schema([_view_body(f) if body_views else f for f in fields])


def partition_schema() -> pa.Schema:
    return pa.schema([table_schema().field(name) for name in PARTITION_COLUMNS])


def app_id(queue_id: int) -> str:
    """The Delta app transaction id under which a commit records a queue's next offset."""
    return f"{APP_ID_PREFIX}{queue_id}"


def is_uri(path: str) -> bool:
    """A URI with a scheme (s3://, file://, ...) rather than a local path."""
    return len(urlparse(path).scheme) > 1


def table_root(store_root: str | os.PathLike[str], table_path: str | None = None) -> str:
    """The directory (or URI) holding the tables: `table_path`, else `<store root>/tables`."""
    if table_path:
        return table_path if is_uri(table_path) else os.path.abspath(os.path.expanduser(table_path))
    return os.path.join(os.path.abspath(os.path.expanduser(os.fspath(store_root))), DEFAULT_DIR)


def table_uri(root: str, topic: str) -> str:
    """Where `topic`'s table is under `root`. ValueError for a name that is no topic name."""
    if not _TOPIC_NAME.fullmatch(topic):
        raise ValueError(f"{topic!r} is not a topic name")
    if is_uri(root):
        return root.rstrip("/") + "/" + topic
    return os.path.join(root, topic)


def local_path(uri: str) -> str | None:
    """The local path of a table URI (a plain path or file://), else None."""
    if not is_uri(uri):
        return uri
    parsed = urlparse(uri)
    return parsed.path if parsed.scheme == "file" else None
