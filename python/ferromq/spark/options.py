"""The options of `spark.read.format("ferromq")`, parsed and checked once on the driver.

Named like Spark's Kafka source where the idea is the same:

- `path` (a store root directory) or `namesrv` (`host:port;host:port`, read through the brokers);
- `topic` (comma-separated) or `topicPattern` (a regular expression matched against whole names);
  internal topics (delay schedule, transaction half/op, ...) are left out unless named in `topic`;
- `queues`: queue ids to read, e.g. `0,2,4-7` (default: all);
- `startingOffsets` / `endingOffsets`: `earliest`, `latest`, or JSON per topic and queue,
  `{"Orders": {"0": 120, "1": -2}}` with -2 = earliest and -1 = latest; queues not named take the
  default (earliest / latest for batch reads, latest for a new streaming query);
- `startingTimestamp` / `endingTimestamp`: store time in ms, `[start, end)`; they take precedence
  over the offsets;
- `tags`: a tag expression, `*` or `TagA || TagB`;
- `maxRecordsPerPartition`: split a queue range into tasks of at most this many offsets;
- `maxRecordsPerTrigger` (streaming): at most this many offsets per micro-batch, also under
  `Trigger.AvailableNow` (which then runs several micro-batches up to the offsets of its start);
- `includeProperties` (default true): the `properties` map column;
- `consumerGroup` (remote mode): the group named in pull requests (default `ferromq-spark`);
- `failOnDataLoss` (default true): fail a query whose planned offsets retention removed, or (false)
  skip them with a warning (see `ferromq.spark.dataloss`);
- `filterPushdown` (default false; batch reads): take the filters Spark pushes (see
  `ferromq.spark.pushdown`). Spark pushes filters only with `spark.sql.python.filterPushdown.enabled`
  set, and refuses a reader that takes them while that setting is off
  (DATA_SOURCE_PUSHDOWN_DISABLED), so turn both on together. Spark tells a data source nothing of
  the setting: the option says it explicitly.
- `fromTable` (default false; streams): a topic the broker keeps as a table topic starts from its
  table and continues from the log (see `ferromq.spark.tablestream`); the tables are under
  `tablePath`, default `<path>/tables` (the broker's default `tableTopicPath`). Giving `tablePath`
  turns it on; through the brokers (`namesrv`) `tablePath` is needed. Batch reads of a table topic
  use `ferromq.spark.read_topic`. An `s3://bucket/prefix` `tablePath` is reached with
  `tableTopicS3Endpoint`, `tableTopicS3AccessKey`, `tableTopicS3SecretKey`, `tableTopicS3Region`
  as in broker.conf (unset: the AWS_* environment, see `ferromq.tables.objectstore`).
- tiered storage (local mode): `tieredStoreFilePath` (a directory, or `s3://bucket/prefix`) with
  the broker's `brokerClusterName` (default `DefaultCluster`) and `brokerName` (default: the only
  broker in the bucket under that cluster) reads the offsets the broker tiered to its bucket and
  retention deleted locally (see `ferromq.spark.tiered`); `tieredBackendServiceProvider` (`s3` or
  `posix`, default from the path's scheme), `objectStoreBucket` (s3 without a path),
  `objectStoreEndpoint`, `objectStoreAccessKey`, `objectStoreSecretKey`, `objectStoreRegion` as
  in broker.conf (unset: the AWS_* environment). Through the brokers (`namesrv`) their pulls read
  the bucket already.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ferromq.errors import InvalidArgumentError
from ferromq.protocol.constants import (
    AUTO_CREATE_TOPIC_KEY,
    OFFSET_MOVED_EVENT_TOPIC,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TRACE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from ferromq.tables.layout import table_root

EARLIEST = -2
LATEST = -1

# Topics RocketMQ keeps for itself: never part of a pattern or of "all topics".
INTERNAL_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        AUTO_CREATE_TOPIC_KEY,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT_TOPIC,
        TRACE_TOPIC,
    }
)

# broker.conf's tiered store keys, taken as options of a local-mode read (ferromq.spark.tiered).
_TIERED_KEYS = (
    "tieredStoreFilePath",
    "tieredBackendServiceProvider",
    "brokerClusterName",
    "brokerName",
    "objectStoreBucket",
    "objectStoreEndpoint",
    "objectStoreAccessKey",
    "objectStoreSecretKey",
    "objectStoreRegion",
)
_S3_KEYS = {
    "objectstoreendpoint": "AWS_ENDPOINT_URL",
    "objectstoreaccesskey": "AWS_ACCESS_KEY_ID",
    "objectstoresecretkey": "AWS_SECRET_ACCESS_KEY",
    "objectstoreregion": "AWS_REGION",
}

# fromTable with an s3:// tablePath: broker.conf's keys, as the AWS_* settings they stand for.
_TABLE_S3_KEYS = {
    "tabletopics3endpoint": "AWS_ENDPOINT_URL",
    "tabletopics3accesskey": "AWS_ACCESS_KEY_ID",
    "tabletopics3secretkey": "AWS_SECRET_ACCESS_KEY",
    "tabletopics3region": "AWS_REGION",
}

_KNOWN = {
    "path",
    "namesrv",
    "topic",
    "topicpattern",
    "queues",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "tags",
    "maxrecordsperpartition",
    "maxrecordspertrigger",
    "includeproperties",
    "consumergroup",
    "failondataloss",
    "filterpushdown",
    "fromtable",
    "tablepath",
    *_TABLE_S3_KEYS,
    *(k.lower() for k in _TIERED_KEYS),
}

# Per topic, per queue id: an offset, EARLIEST or LATEST.
OffsetSpec = Literal["earliest", "latest"] | dict[str, dict[int, int]]


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS or topic.lower().startswith("rmq_sys_")


@dataclass(frozen=True)
class TieredOptions:
    """Where a broker's tiered storage bucket is (broker.conf's keys, see `ferromq.tiered.config`)."""

    uri: str  # a directory (posix) or s3://bucket/prefix
    provider: Literal["s3", "posix"]
    cluster: str
    broker: str | None  # None: the only broker the bucket holds under `cluster`
    s3_options: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # AWS_* (a secret key)


@dataclass(frozen=True)
class ReadOptions:
    path: str | None
    namesrv: str | None
    topics: tuple[str, ...]
    topic_pattern: str | None
    queues: frozenset[int] | None
    starting_offsets: OffsetSpec | None
    ending_offsets: OffsetSpec | None
    starting_timestamp: int | None
    ending_timestamp: int | None
    tags: tuple[str, ...] | None
    max_records_per_partition: int | None
    max_records_per_trigger: int | None
    include_properties: bool
    consumer_group: str
    fail_on_data_loss: bool = True
    filter_pushdown: bool = False
    table_root: str | None = None  # fromTable: the directory (or URI) of the topics' tables
    tiered: TieredOptions | None = None  # local mode: also read the broker's tiered storage bucket
    # fromTable, an s3:// table_root: the AWS_* settings given (a secret key among them).
    table_s3_options: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def wants(self, topic: str) -> bool:
        """Whether a topic of the store or cluster is read."""
        if self.topics:
            return topic in self.topics
        assert self.topic_pattern is not None
        return not is_internal(topic) and re.fullmatch(self.topic_pattern, topic) is not None

    def wants_queue(self, queue_id: int) -> bool:
        return self.queues is None or queue_id in self.queues

    def start_of(self, topic: str, queue_id: int, default: int) -> int:
        return _lookup(self.starting_offsets, topic, queue_id, default)

    def end_of(self, topic: str, queue_id: int) -> int:
        return _lookup(self.ending_offsets, topic, queue_id, LATEST)


def _lookup(spec: OffsetSpec | None, topic: str, queue_id: int, default: int) -> int:
    if spec is None:
        return default
    if spec == "earliest":
        return EARLIEST
    if spec == "latest":
        return LATEST
    assert isinstance(spec, dict)
    return spec.get(topic, {}).get(queue_id, default)


def _bad(msg: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"ferromq data source: {msg}")


def _int(options: Mapping[str, str], key: str, *, minimum: int = 0) -> int | None:
    raw = options.get(key.lower())
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise _bad(f"option {key} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise _bad(f"option {key} must be >= {minimum}, not {value}")
    return value


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise _bad(f"option {key} must be true or false, not {raw!r}")
    return text == "true"


def _queues(raw: str | None) -> frozenset[int] | None:
    if raw is None or not raw.strip():
        return None
    out: set[int] = set()
    for part in raw.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m is None:
            raise _bad(f"queues must look like 0,2,4-7; {part!r} does not")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise _bad(f"queue range {part!r} is empty")
        out.update(range(lo, hi + 1))
    return frozenset(out)


def _offsets(key: str, raw: str | None) -> OffsetSpec | None:
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return "earliest" if text.lower() == "earliest" else "latest"
    try:
        parsed = json.loads(text)
    except ValueError:
        raise _bad(f'{key} must be earliest, latest or JSON like {{"T": {{"0": 5}}}}: {raw!r}') from None
    if not isinstance(parsed, dict):
        raise _bad(f"{key} JSON must be an object of topics")
    spec: dict[str, dict[int, int]] = {}
    for topic, queues in parsed.items():
        if not isinstance(queues, dict):
            raise _bad(f"{key}: the value of topic {topic!r} must be an object of queue ids")
        per: dict[int, int] = {}
        for qid, off in queues.items():
            if not str(qid).isdigit() or isinstance(off, bool) or not isinstance(off, int) or off < -2:
                raise _bad(f"{key}: {topic}/{qid} must map a queue id to an offset >= -2, got {off!r}")
            per[int(qid)] = off
        spec[str(topic)] = per
    return spec


def _tags(raw: str | None) -> tuple[str, ...] | None:
    if raw is None or raw.strip() in ("", "*"):
        return None
    tags = tuple(t.strip() for t in raw.split("||"))
    if any(not t or t == "*" for t in tags):
        raise _bad(f"tags must be * or TagA || TagB, not {raw!r}")
    return tags


def parse_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Checks the options; every problem is an `InvalidArgumentError` naming the option."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    unknown = sorted(set(opts) - _KNOWN)
    if unknown:
        raise _bad(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(_KNOWN))}")
    path, namesrv = opts.get("path"), opts.get("namesrv")
    if (path is None) == (namesrv is None):
        raise _bad("give exactly one of path (a store directory) or namesrv (host:port)")
    topics = tuple(t.strip() for t in opts.get("topic", "").split(",") if t.strip())
    pattern = opts.get("topicpattern")
    if bool(topics) == (pattern is not None):
        raise _bad("give exactly one of topic (comma-separated) or topicPattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as e:
            raise _bad(f"topicPattern {pattern!r} is not a regular expression: {e}") from None
    ending = _offsets("endingOffsets", opts.get("endingoffsets"))
    if streaming and (ending is not None or "endingtimestamp" in opts):
        raise _bad("endingOffsets / endingTimestamp apply to batch reads only")
    if streaming and _bool(opts, "filterPushdown", False):
        raise _bad("filterPushdown applies to batch reads only (Spark pushes no filter to a stream)")
    if ending == "earliest":
        raise _bad("endingOffsets cannot be earliest")
    if isinstance(ending, dict) and any(o == EARLIEST for q in ending.values() for o in q.values()):
        raise _bad("endingOffsets cannot use -2 (earliest)")
    starting = _offsets("startingOffsets", opts.get("startingoffsets"))
    if starting == "latest" and not streaming:
        raise _bad("startingOffsets cannot be latest for a batch read")
    tables = _table_root(opts, streaming)
    start_ts = _int(opts, "startingTimestamp")
    end_ts = _int(opts, "endingTimestamp")
    if start_ts is not None and end_ts is not None and end_ts < start_ts:
        raise _bad("endingTimestamp is before startingTimestamp")
    return ReadOptions(
        path=path,
        namesrv=namesrv,
        topics=topics,
        topic_pattern=pattern,
        queues=_queues(opts.get("queues")),
        starting_offsets=starting,
        ending_offsets=ending,
        starting_timestamp=start_ts,
        ending_timestamp=end_ts,
        tags=_tags(opts.get("tags")),
        max_records_per_partition=_int(opts, "maxRecordsPerPartition", minimum=1),
        max_records_per_trigger=_int(opts, "maxRecordsPerTrigger", minimum=1),
        include_properties=_bool(opts, "includeProperties", True),
        consumer_group=opts.get("consumergroup", "ferromq-spark"),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        filter_pushdown=_bool(opts, "filterPushdown", False),
        table_root=tables,
        tiered=_tiered(opts),
        table_s3_options=_table_s3(opts, tables),
    )


def _tiered(opts: Mapping[str, str]) -> TieredOptions | None:
    """The tiered storage options of a local-mode read, None when `tieredStoreFilePath` (or
    `objectStoreBucket`) is not given."""
    given = {k.lower() for k in _TIERED_KEYS} & set(opts)
    path = opts.get("tieredstorefilepath", "").strip()
    bucket = opts.get("objectstorebucket", "").strip()
    if not path and not bucket:
        if given:
            raise _bad(f"{', '.join(sorted(given))} need tieredStoreFilePath (the broker's bucket)")
        return None
    if "path" not in opts:
        raise _bad(
            "the tiered storage options apply to local mode (path): through the brokers (namesrv) "
            "their pulls read the bucket already"
        )
    raw = opts.get("tieredbackendserviceprovider", "").strip()
    provider = raw.lower()
    if provider == "org.apache.rocketmq.tieredstore.provider.posixfilesegment":
        provider = "posix"
    if not provider:
        provider = "s3" if (bucket and not path) or re.match(r"s3a?://", path) else "posix"
    if provider == "s3":
        uri = path or f"s3://{bucket}"
        if not re.match(r"s3a?://[^/]", uri):
            raise _bad(f"tieredStoreFilePath must be s3://bucket/prefix for the s3 provider, not {uri!r}")
        uri = re.sub(r"^s3a://", "s3://", uri)
    elif provider == "posix":
        if not path or ("://" in path and not path.startswith("file://")):
            raise _bad(f"tieredStoreFilePath must be a directory for the posix provider, not {path!r}")
        uri = path
    else:
        raise _bad(f"tieredBackendServiceProvider must be s3 or posix, not {raw!r}")
    s3 = tuple((aws, opts[k]) for k, aws in _S3_KEYS.items() if opts.get(k, "").strip())
    return TieredOptions(
        uri=uri,
        provider="s3" if provider == "s3" else "posix",
        cluster=opts.get("brokerclustername", "").strip() or "DefaultCluster",
        broker=opts.get("brokername", "").strip() or None,
        s3_options=s3,
    )


def _table_s3(opts: Mapping[str, str], tables: str | None) -> tuple[tuple[str, str], ...]:
    """The AWS_* settings of the tableTopicS3* options, which need fromTable."""
    given = tuple((aws, opts[k]) for k, aws in _TABLE_S3_KEYS.items() if opts.get(k, "").strip())
    if given and tables is None:
        raise _bad("the tableTopicS3* options need fromTable (a stream from s3:// tables)")
    return given


def _table_root(opts: Mapping[str, str], streaming: bool) -> str | None:
    """The tables' directory of a stream from tables (`fromTable`, `tablePath`), else None."""
    given = opts.get("tablepath", "").strip() or None
    on = _bool(opts, "fromTable", given is not None)
    if given is not None and not on:
        raise _bad("tablePath is given but fromTable is false")
    if not on:
        return None
    if not streaming:
        raise _bad("fromTable / tablePath apply to streams; batch reads of a table topic: read_topic")
    if given is None and "path" not in opts:
        raise _bad("fromTable through the brokers (namesrv) needs tablePath, the tables' directory")
    return table_root(opts.get("path", ""), given)
