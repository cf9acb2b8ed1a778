"""Filter pushdown (the option `filterPushdown` with `spark.sql.python.filterPushdown.enabled`):
the same rows with it on and off over random predicates, and pruning shown by how many records
the decoder looked at."""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    StringStartsWith,
)

from ferromq import _store
from ferromq.spark.options import parse_options
from ferromq.spark.planning import ReadTask
from ferromq.spark.source import FerroMQPushdownReader
from tests.spark.conftest import TOPIC, Produced

pytestmark = [pytest.mark.timeout(600)]

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
QUERIES = 14


def load(spark: SparkSession, produced: Produced, **options: str) -> DataFrame:
    """A read that takes pushed filters when Spark's setting is on (`filterPushdown` follows it)."""
    enabled = spark.conf.get(PUSHDOWN)
    reader = spark.read.format("ferromq").option("path", str(produced.store)).option("topic", TOPIC)
    return reader.options(filterPushdown=enabled, **options).load()


@pytest.fixture(scope="module")
def rows(spark: SparkSession, produced: Produced) -> list[Any]:
    df = spark.read.format("ferromq").option("path", str(produced.store)).option("topic", TOPIC).load()
    return df.select(
        "queue_id", "queue_offset", "commitlog_offset", "tags", "keys", "store_timestamp"
    ).collect()


@pytest.fixture
def pushdown(spark: SparkSession) -> Iterator[None]:
    spark.conf.set(PUSHDOWN, "true")
    try:
        yield
    finally:
        spark.conf.set(PUSHDOWN, "false")


def _ts(value: datetime) -> str:
    return f"timestamp'{value.isoformat(sep=' ')}'"


def random_predicate(rnd: random.Random, rows: list[Any]) -> str:
    """An AND of 1-3 comparisons over the pushable columns, sometimes with one Spark must keep."""
    pick = rnd.choice
    atoms = []
    for _ in range(rnd.randint(1, 3)):
        r = pick(rows)
        kind = rnd.randrange(9)
        if kind == 0:
            atoms.append(f"queue_id {pick(['=', '<=', '>', '!='])} {r.queue_id}")
        elif kind == 1:
            atoms.append(f"queue_id IN ({r.queue_id}, {pick(rows).queue_id})")
        elif kind == 2:
            lo = r.queue_offset
            atoms.append(f"queue_offset >= {lo} AND queue_offset < {lo + rnd.randint(1, 60)}")
        elif kind == 3:
            atoms.append(f"commitlog_offset {pick(['<', '>=', '='])} {r.commitlog_offset}")
        elif kind == 4:
            atoms.append(
                f"tags {pick(['=', '!='])} '{r.tags}'" if rnd.random() < 0.7 else "tags IN ('TagA', 'TagZ')"
            )
        elif kind == 5:
            atoms.append(f"keys IN ('{r.keys}', '{pick(rows).keys}', 'nope')")
        elif kind == 6:
            other = pick(rows).store_timestamp
            lo, hi = sorted((r.store_timestamp, other))
            atoms.append(f"store_timestamp >= {_ts(lo)} AND store_timestamp <= {_ts(hi)}")
        elif kind == 7:
            atoms.append(f"born_timestamp {pick(['<', '>'])} {_ts(r.store_timestamp)}")
        else:
            atoms.append(
                f"queue_offset IN ({r.queue_offset}, {pick(rows).queue_offset}) AND topic = '{TOPIC}'"
            )
    if rnd.random() < 0.3:
        atoms.append("keys LIKE 'key-1%'")
    return " AND ".join(atoms)


def test_the_same_rows_with_pushdown_on_and_off(
    spark: SparkSession, produced: Produced, rows: list[Any]
) -> None:
    rnd = random.Random(17)
    checked = 0
    for _ in range(QUERIES):
        where = random_predicate(rnd, rows)
        got = {}
        for enabled in ("false", "true"):
            spark.conf.set(PUSHDOWN, enabled)
            try:
                selected = (
                    load(spark, produced)
                    .where(where)
                    .select("queue_id", "queue_offset", "body", "keys", "store_timestamp")
                )
                got[enabled] = sorted(tuple(r) for r in selected.collect())
            finally:
                spark.conf.set(PUSHDOWN, "false")
        assert got["true"] == got["false"], where
        checked += bool(got["true"])
    assert checked >= QUERIES // 3, "too few predicates selected anything"


def test_contradictions_and_bad_literals(
    spark: SparkSession, produced: Produced, rows: list[Any], pushdown: None
) -> None:
    # Pushed to the planner: one queue of four is one partition (pushdown off: four, with a task
    # per queue). A new DataFrame each time: Spark keeps the reader it planned for one across the
    # setting's changes.
    per_queue = str(max(Counter(r.queue_id for r in rows).values()))
    assert (
        load(spark, produced, maxRecordsPerPartition=per_queue).where("queue_id = 2").rdd.getNumPartitions()
        == 1
    )
    spark.conf.set(PUSHDOWN, "false")
    assert (
        load(spark, produced, maxRecordsPerPartition=per_queue).where("queue_id = 2").rdd.getNumPartitions()
        == 4
    )
    spark.conf.set(PUSHDOWN, "true")
    df = load(spark, produced)
    assert df.where("queue_id = 1 AND queue_id = 2").count() == 0
    assert df.where("tags IN ('TagA') AND tags = 'TagB'").count() == 0
    want = sum(1 for r in rows if r.queue_offset == 3)
    assert df.where("queue_offset = 3.0").count() == want  # a cast: Spark keeps it


def _examined(reader: FerroMQPushdownReader, tasks: int = 1) -> tuple[list[tuple[int, int]], int]:
    """Reads every partition in this process (there must be `tasks` of them): the rows' (queue,
    offset) and how many records the decoder looked at."""
    before = _store.records_examined()
    out = []
    parts = reader.partitions()
    assert len(parts) == tasks
    for part in parts:
        assert isinstance(part, ReadTask)
        for batch in reader.read(part):
            out.extend(
                zip(
                    batch.column("queue_id").to_pylist(),
                    batch.column("queue_offset").to_pylist(),
                    strict=True,
                )
            )
    return sorted(out), _store.records_examined() - before


def _reader(produced: Produced, filters: list[Filter]) -> tuple[FerroMQPushdownReader, list[Filter]]:
    reader = FerroMQPushdownReader(
        parse_options({"path": str(produced.store), "topic": TOPIC}, streaming=False)
    )
    rest = list(reader.pushFilters(filters))
    return reader, rest


def test_pruning_is_seen_in_the_records_decoded(produced: Produced, rows: list[Any]) -> None:
    everything, all_examined = _examined(_reader(produced, [])[0])
    assert all_examined == len(everything) == len(rows)

    # One queue of four, one tag: other queues are not planned, other tags not read.
    reader, rest = _reader(produced, [EqualTo(("queue_id",), 2), EqualTo(("tags",), "TagA")])
    assert rest == []
    got, examined = _examined(reader)
    want = sorted((r.queue_id, r.queue_offset) for r in rows if r.queue_id == 2 and r.tags == "TagA")
    assert got == want and examined == len(want)

    # One tag of three: units of other tags (by the consume queue's tag codes) are not read.
    reader, rest = _reader(produced, [EqualTo(("tags",), "TagB")])
    assert rest == []
    got, examined = _examined(reader)
    want = sorted((r.queue_id, r.queue_offset) for r in rows if r.tags == "TagB")
    assert got == want and examined == len(want) < len(rows)

    # A tenth of the store time: the consume queue's time search finds the offsets.
    times = sorted(r.store_timestamp for r in rows)
    lo, hi = times[len(times) // 2], times[len(times) // 2 + len(times) // 10]
    reader, rest = _reader(
        produced, [GreaterThanOrEqual(("store_timestamp",), lo), LessThan(("store_timestamp",), hi)]
    )
    assert rest == []
    got, examined = _examined(reader)
    want = sorted((r.queue_id, r.queue_offset) for r in rows if lo <= r.store_timestamp < hi)
    assert got == want and examined == len(want)

    # Offset ranges cut the planned ranges; an IN list narrows them and goes back to Spark.
    offsets = In(("queue_offset",), (10, 20))
    reader, rest = _reader(
        produced, [GreaterThan(("queue_offset",), 4), offsets, StringStartsWith(("keys",), "k")]
    )
    assert rest[0] is offsets and isinstance(rest[1], StringStartsWith)
    got, examined = _examined(reader)
    assert got == sorted((q, o) for q, o in everything if 10 <= o <= 20) and examined == len(got)


def test_the_option_and_spark_setting_go_together(
    spark: SparkSession, produced: Produced, rows: list[Any]
) -> None:
    reader = spark.read.format("ferromq").option("path", str(produced.store)).option("topic", TOPIC)
    # The option without Spark's setting: Spark refuses the reader, naming the setting.
    with pytest.raises(Exception, match=PUSHDOWN.replace(".", r"\.")):
        reader.option("filterPushdown", "true").load().where("queue_id = 1").count()
    # The setting without the option: nothing is pushed, the rows are the same.
    spark.conf.set(PUSHDOWN, "true")
    try:
        assert reader.load().where("queue_id = 1").count() == sum(1 for r in rows if r.queue_id == 1)
    finally:
        spark.conf.set(PUSHDOWN, "false")


def test_a_large_tag_read_is_spread_over_two_tasks_and_decodes_only_its_tag(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Three queues of 24,000 records, two tags: one tag's 36,000 records are enough for two
    tasks (`MIN_TASK_ROWS` a core), which share the walk and decode exactly that tag's records."""
    from ferromq.store import MessageStore

    root = tmp_path_factory.mktemp("spread-store")
    with MessageStore(root) as store:
        for q in range(3):
            for start in range(0, 24_000, 1000):
                ids = range(start, start + 1000)
                props = [f"TAGS\x01Tag{i % 2}\x02KEYS\x01k{q}-{i}" for i in ids]
                store.put_batch(TOPIC, q, [f"{q}-{i}".encode() for i in ids], props)
        store.flush()
    reader = FerroMQPushdownReader(parse_options({"path": str(root), "topic": TOPIC}, streaming=False))
    assert list(reader.pushFilters([EqualTo(("tags",), "Tag1")])) == []
    got, examined = _examined(reader, tasks=min(2, os.cpu_count() or 1))
    assert got == [(q, o) for q in range(3) for o in range(1, 24_000, 2)]
    assert examined == len(got) == 36_000
