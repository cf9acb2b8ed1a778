"""The Spark source's option parsing and micro-batch capping (no Spark needed)."""

from __future__ import annotations

import pickle

import pytest

from ferromq.errors import InvalidArgumentError
from ferromq.spark.options import EARLIEST, LATEST, parse_options
from ferromq.spark.planning import NOTHING, QueueRange, ReadTask, pack, plan, split
from ferromq.spark.source import FerroMQReader, _cap
from ferromq.tables.ranges import DataFile, QueueFiles


def test_offsets_queues_tags_and_defaults() -> None:
    o = parse_options(
        {
            "PATH": "/s",
            "topic": "A, B",
            "queues": "0,2,4-6",
            "startingOffsets": '{"A": {"0": 7, "1": -2}}',
            "endingOffsets": '{"B": {"3": -1}}',
            "tags": "x || y",
            "maxRecordsPerPartition": "10",
        },
        streaming=False,
    )
    assert o.topics == ("A", "B") and o.queues == frozenset({0, 2, 4, 5, 6})
    assert o.start_of("A", 0, EARLIEST) == 7 and o.start_of("A", 1, LATEST) == EARLIEST
    assert (
        o.start_of("B", 0, EARLIEST) == EARLIEST and o.end_of("B", 3) == LATEST and o.end_of("A", 0) == LATEST
    )
    assert o.tags == ("x", "y") and o.max_records_per_partition == 10 and o.include_properties
    assert parse_options({"path": "/s", "topic": "A", "tags": "*"}, streaming=True).tags is None


def test_topic_pattern_leaves_internal_topics_out() -> None:
    o = parse_options({"namesrv": "127.0.0.1:9876", "topicPattern": ".*"}, streaming=True)
    assert o.wants("Orders") and o.wants("%RETRY%g")
    assert (
        not o.wants("SCHEDULE_TOPIC_XXXX")
        and not o.wants("RMQ_SYS_TRANS_HALF_TOPIC")
        and not o.wants("TBW102")
    )
    named = parse_options({"path": "/s", "topic": "SCHEDULE_TOPIC_XXXX"}, streaming=False)
    assert named.wants("SCHEDULE_TOPIC_XXXX")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "A"}, "exactly one of path"),
        ({"path": "/s", "namesrv": "x:1", "topic": "A"}, "exactly one of path"),
        ({"path": "/s"}, "exactly one of topic"),
        ({"path": "/s", "topic": "A", "topicPattern": "A.*"}, "exactly one of topic"),
        ({"path": "/s", "topicPattern": "("}, "not a regular expression"),
        ({"path": "/s", "topic": "A", "startingOffset": "earliest"}, "unknown option"),
        ({"path": "/s", "topic": "A", "startingOffsets": "latest"}, "cannot be latest for a batch"),
        ({"path": "/s", "topic": "A", "endingOffsets": "earliest"}, "cannot be earliest"),
        ({"path": "/s", "topic": "A", "endingOffsets": '{"A": {"0": -2}}'}, "cannot use -2"),
        ({"path": "/s", "topic": "A", "startingOffsets": "{nope"}, "must be earliest, latest or JSON"),
        ({"path": "/s", "topic": "A", "startingOffsets": '{"A": {"x": 1}}'}, "queue id to an offset"),
        ({"path": "/s", "topic": "A", "queues": "1-0"}, "is empty"),
        ({"path": "/s", "topic": "A", "queues": "a"}, "queues must look like"),
        ({"path": "/s", "topic": "A", "maxRecordsPerPartition": "0"}, "must be >= 1"),
        ({"path": "/s", "topic": "A", "startingTimestamp": "soon"}, "must be an integer"),
        (
            {"path": "/s", "topic": "A", "startingTimestamp": "5", "endingTimestamp": "4"},
            "before startingTimestamp",
        ),
        ({"path": "/s", "topic": "A", "includeProperties": "yes"}, "true or false"),
        ({"path": "/s", "topic": "A", "tags": "a || *"}, "tags must be"),
        ({"path": "/s", "topic": "A", "filterPushdown": "on"}, "filterPushdown must be true or false"),
    ],
)
def test_bad_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_options(options, streaming=False)


def test_streams_have_no_end() -> None:
    with pytest.raises(InvalidArgumentError, match="batch reads only"):
        parse_options({"path": "/s", "topic": "A", "endingTimestamp": "5"}, streaming=True)
    with pytest.raises(InvalidArgumentError, match="filterPushdown applies to batch reads only"):
        parse_options({"path": "/s", "topic": "A", "filterPushdown": "true"}, streaming=True)


def test_streams_from_tables() -> None:
    def root(**options: str) -> str | None:
        return parse_options({"topic": "A", **options}, streaming=True).table_root

    assert root(path="/s") is None and root(path="/s", fromTable="false") is None
    assert root(path="/s", fromTable="true") == "/s/tables"  # the broker's default tableTopicPath
    assert root(path="/s", tablePath="/t") == "/t" == root(path="/s", tablePath="/t", fromTable="true")
    assert root(namesrv="h:1", tablePath="s3://b/tables") == "s3://b/tables"
    for options, message in [
        ({"path": "/s", "fromTable": "yes"}, "option fromTable must be true or false"),
        (
            {"path": "/s", "tablePath": "/t", "fromTable": "false"},
            "tablePath is given but fromTable is false",
        ),
        ({"namesrv": "h:1", "fromTable": "true"}, "through the brokers \\(namesrv\\) needs tablePath"),
    ]:
        with pytest.raises(InvalidArgumentError, match=message):
            parse_options({"topic": "A", **options}, streaming=True)
    with pytest.raises(InvalidArgumentError, match="fromTable / tablePath apply to streams"):
        parse_options({"path": "/s", "topic": "A", "fromTable": "true"}, streaming=False)


def test_small_ranges_are_packed_by_their_expected_rows() -> None:
    ranges = [QueueRange("A", q, 0, 100) for q in range(5)]
    expected = {0: 30, 1: 0, 2: 50, 3: 60, 4: 200}
    tasks = pack([(r, expected[r.queue_id]) for r in ranges if expected[r.queue_id]], limit=100)
    # Queue 4 alone exceeds the limit.
    assert [[r.queue_id for r in t.ranges] for t in tasks] == [[0, 2], [3], [4]]
    # Queue 1 is expected to yield nothing: left out.
    planned = plan(ranges, None, lambda r: expected[r.queue_id], cores=2)
    assert [[r.queue_id for r in t.ranges] for t in planned] == [[0, 2, 3, 4]]
    assert plan(ranges, None, lambda r: 0) == [NOTHING]
    # maxRecordsPerPartition: one task per piece, none packed.
    assert plan(ranges[:2], 60, lambda r: 1) == [
        ReadTask((QueueRange("A", 0, 0, 60),)),
        ReadTask((QueueRange("A", 0, 60, 100),)),
        ReadTask((QueueRange("A", 1, 0, 60),)),
        ReadTask((QueueRange("A", 1, 60, 100),)),
    ]
    assert pickle.loads(pickle.dumps(tasks[0])) == tasks[0]


def test_split_and_pickle() -> None:
    parts = split([QueueRange("A", 0, 5, 30), QueueRange("A", 1, 3, 3), QueueRange("B", 2, 0, 10, "h:1")], 10)
    assert [(p.topic, p.queue_id, p.start, p.end) for p in parts] == [
        ("A", 0, 5, 15),
        ("A", 0, 15, 25),
        ("A", 0, 25, 30),
        ("B", 2, 0, 10),
    ]
    assert parts[-1].broker_addr == "h:1"
    assert pickle.loads(pickle.dumps(parts[0])) == parts[0]
    # A range planned on a table keeps its files when it is cut.
    held = QueueFiles(3, 0, 40, (DataFile("/t/A/day=2024-05-01/queue_id=0/a.parquet", 0, 39, 1),))
    cut = split([QueueRange("A", 0, 0, 40, table=held)], 25)
    assert [(p.start, p.end, p.table) for p in cut] == [(0, 25, held), (25, 40, held)]
    assert pickle.loads(pickle.dumps(cut[1])) == cut[1]
    reader = FerroMQReader(parse_options({"path": "/s", "topic": "A"}, streaming=False))
    assert pickle.loads(pickle.dumps(reader)).opts == reader.opts


def test_cap_shares_the_budget_fairly() -> None:
    begin = {("A", 0): 0, ("A", 1): 100, ("A", 2): 5}
    ends = {("A", 0): 1000, ("A", 1): 103, ("A", 2): 5}
    capped = _cap(begin, ends, 100)
    assert capped == {("A", 0): 97, ("A", 1): 103, ("A", 2): 5}
    assert sum(capped[k] - begin[k] for k in begin) == 100
    assert _cap(begin, ends, 10_000) == ends
