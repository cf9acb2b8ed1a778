"""The `ferromq` sink: `df.write` and `df.writeStream` into a live `ferromq serve`, read back through
the source and through the official C++ client's pull consumer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ferromq.spark.sink import uniq_key
from ferromq.testing import BrokerProcess
from tests.interop.conftest import stop_ferromq
from tests.spark.conftest import TOPIC, Produced

pytestmark = [pytest.mark.timeout(600)]

WAIT = 120.0
SCENARIOS = Path(__file__).resolve().parents[1] / "interop" / "cpp_scenarios.py"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The sink's own `ferromq serve` (what it writes stays out of the other tests' store)."""
    server = BrokerProcess(tmp_path_factory.mktemp("sink-broker")).start()
    try:
        yield server
    finally:
        stop_ferromq(server)


def rows_df(spark: SparkSession, n: int, prefix: str, partitions: int = 3) -> DataFrame:
    return (
        spark.range(n)
        .repartition(partitions)
        .select(
            F.concat(F.lit(f"{prefix}-"), F.col("id").cast("string"), F.lit("|payload"))
            .cast("binary")
            .alias("body"),
            F.when(F.col("id") % 2 == 0, F.lit("Even")).otherwise(F.lit("Odd")).alias("tags"),
            F.concat(F.lit("k"), F.col("id").cast("string")).alias("keys"),
            F.create_map(F.lit("n"), F.col("id").cast("string")).alias("properties"),
        )
    )


def read_back(
    spark: SparkSession, cluster: BrokerProcess, topic: str, done: int | Callable[[list[Any]], bool]
) -> list[Any]:
    """The topic's rows through the source (local mode: the broker's store files), once there are
    `done` of them (or `done(rows)` holds), or what there is after WAIT seconds."""
    enough = (lambda rows: len(rows) >= done) if isinstance(done, int) else done
    deadline = time.monotonic() + WAIT
    rows: list[Any] = []
    while time.monotonic() < deadline:
        df = spark.read.format("ferromq").option("path", str(cluster.store)).option("topic", topic).load()
        rows = df.select(
            "body", "tags", "keys", "properties", "uniq_key", "queue_id", "queue_offset"
        ).collect()
        if enough(rows):
            break
        time.sleep(0.5)
    return rows


def write(df: DataFrame, cluster: BrokerProcess, topic: str | None = None, **options: str) -> None:
    w = df.write.format("ferromq").option("namesrv", cluster.namesrv).mode("append")
    if topic is not None:
        w = w.option("topic", topic)
    w.options(**options).save()


def test_batch_write_every_row_exactly_once(spark: SparkSession, cluster: BrokerProcess) -> None:
    topic = "SinkBatch"
    n = 500
    write(rows_df(spark, n, "b"), cluster, topic, batchSize="50")
    rows = read_back(spark, cluster, topic, n)
    bodies = Counter(bytes(r.body) for r in rows)
    assert bodies == Counter(f"b-{i}|payload".encode() for i in range(n))
    for r in rows:
        i = int(bytes(r.body).split(b"|")[0][2:])
        assert (r.tags, r.keys, r.properties["n"]) == ("Even" if i % 2 == 0 else "Odd", f"k{i}", str(i))
        assert r.uniq_key is not None and len(r.uniq_key) == 32
    assert len({r.uniq_key for r in rows}) == n


def test_topic_queue_and_delay_columns(spark: SparkSession, cluster: BrokerProcess) -> None:
    df = spark.range(40).select(
        F.concat(F.lit("q-"), F.col("id").cast("string")).alias("body"),  # a string body
        F.when(F.col("id") < 20, F.lit("SinkColA")).otherwise(F.lit("SinkColB")).alias("topic"),
        (F.col("id") % 2).cast("int").alias("queue_id"),
    )
    write(df, cluster)
    for topic, ids in (("SinkColA", range(20)), ("SinkColB", range(20, 40))):
        rows = read_back(spark, cluster, topic, len(ids))
        assert sorted(bytes(r.body) for r in rows) == sorted(f"q-{i}".encode() for i in ids)
        for r in rows:
            assert r.queue_id == int(bytes(r.body)[2:]) % 2
        # One task wrote each queue in order: queue offsets follow the row order.
        for q in (0, 1):
            got = [
                int(bytes(r.body)[2:]) for r in sorted(rows, key=lambda r: r.queue_offset) if r.queue_id == q
            ]
            assert got == sorted(got)

    delayed = spark.range(3).select(F.lit(b"later").alias("body"), F.lit(1).alias("delay_level"))
    write(delayed, cluster, "SinkDelayed")
    rows = read_back(spark, cluster, "SinkDelayed", 3)  # level 1 is one second
    assert [bytes(r.body) for r in rows] == [b"later"] * 3
    assert all(r.properties.get("DELAY") == "1" for r in rows)


def test_sharding_keys_keep_their_order_and_large_rows_split_by_bytes(
    spark: SparkSession, cluster: BrokerProcess
) -> None:
    """24 rows of 300 KB (7 MB: batches are cut at the 3 MiB cap) with three sharding keys, from
    one task: each key's rows land in one queue, in row order."""
    df = spark.range(0, 24, numPartitions=1).select(
        F.concat(F.col("id").cast("string"), F.lit("|"), F.expr("repeat('x', 300000)"))
        .cast("binary")
        .alias("body"),
        (F.col("id") % 3).cast("string").alias("sharding_key"),
    )
    write(df, cluster, "SinkShard")
    rows = read_back(spark, cluster, "SinkShard", 24)
    assert sorted(len(r.body) for r in rows) == sorted(len(f"{i}|") + 300000 for i in range(24))
    ids = {r.queue_offset * 100 + r.queue_id: int(bytes(r.body).split(b"|")[0]) for r in rows}
    assert sorted(ids.values()) == list(range(24))
    for key in range(3):
        queues = {r.queue_id for r in rows if int(bytes(r.body).split(b"|")[0]) % 3 == key}
        assert len(queues) == 1
        in_queue = sorted((r for r in rows if r.queue_id in queues), key=lambda r: r.queue_offset)
        got = [int(bytes(r.body).split(b"|")[0]) for r in in_queue]
        assert got == sorted(got)


def test_bad_options_and_columns_are_refused_by_name(spark: SparkSession, cluster: BrokerProcess) -> None:
    df = spark.range(1).select(F.lit(b"x").alias("body"))
    with pytest.raises(Exception, match=r"unknown option\(s\) topik"):
        write(df, cluster, topik="T")
    with pytest.raises(Exception, match="exactly one of the option topic or a topic column"):
        write(df, cluster)
    with pytest.raises(Exception, match="unknown column 'colour'"):
        write(df.withColumn("colour", F.lit("red")), cluster, "T")
    with pytest.raises(Exception, match="column queue_id must be int"):
        write(df.withColumn("queue_id", F.lit("zero")), cluster, "T")
    with pytest.raises(Exception, match='property "TAGS" contains a RocketMQ separator'):
        write(df.withColumn("tags", F.lit("a\x02b")), cluster, "SinkBadTags")
    with pytest.raises(Exception, match=r"option batchsize must be in \[1, 10000\]"):
        write(df, cluster, "T", batchSize="0")
    with pytest.raises(Exception, match="option namesrv"):
        df.write.format("ferromq").option("topic", "T").mode("append").save()
    with pytest.raises(Exception, match="mode append"):
        df.write.format("ferromq").option("namesrv", cluster.namesrv).option("topic", "T").mode(
            "overwrite"
        ).save()


def test_a_failed_send_fails_the_job(spark: SparkSession, cluster: BrokerProcess) -> None:
    df = spark.range(2).select(F.lit(b"x").alias("body"), F.lit(99).cast("int").alias("queue_id"))
    with pytest.raises(Exception, match="has no writable queue 99"):
        write(df, cluster, "SinkNoQueue")


def test_retried_rows_keep_their_uniq_key() -> None:
    assert uniq_key("q", 3, 1, 7) == uniq_key("q", 3, 1, 7)
    assert len({uniq_key("q", 3, 1, r) for r in range(1000)} | {uniq_key("q", 4, 1, 0)}) == 1001


def test_streaming_write_available_now_and_processing_time(
    spark: SparkSession, produced: Produced, cluster: BrokerProcess, tmp_path: Path
) -> None:
    """A stream from the ferromq source (topic A) into the sink (topic B): at least once, and
    every duplicate carries the UNIQ_KEY of its first copy."""
    topic = "SinkStream"
    n = len(produced.sent)

    def start(trigger: dict[str, Any], checkpoint: Path) -> Any:
        df = (
            spark.readStream.format("ferromq")
            .option("path", str(produced.store))
            .option("topic", TOPIC)
            .option("startingOffsets", "earliest")
            .option("maxRecordsPerTrigger", "300")
            .load()
            .select("body", "tags", "keys")
        )
        return (
            df.writeStream.format("ferromq")
            .option("namesrv", cluster.namesrv)
            .option("topic", topic)
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    sent = Counter(s.body for s in produced.sent.values())

    def copies(rows: list[Any]) -> int:
        """How many times over every sent row arrived (the least of them)."""
        got = Counter(bytes(r.body) for r in rows)
        assert set(got) <= set(sent), "a row that was never sent"
        return min(got[b] for b in sent)

    def same_key_same_row(rows: list[Any]) -> int:
        """Duplicates share their UNIQ_KEY (and a UNIQ_KEY one row); returns the keys' number."""
        by_key: dict[str, set[bytes]] = {}
        for r in rows:
            by_key.setdefault(r.uniq_key, set()).add(bytes(r.body))
        assert all(len(b) == 1 for b in by_key.values()), "a UNIQ_KEY on two different rows"
        return len(by_key)

    query = start({"availableNow": True}, tmp_path / "c1")
    assert query.awaitTermination(WAIT), "the availableNow query did not finish"
    assert query.exception() is None
    rows = read_back(spark, cluster, topic, lambda rows: copies(rows) >= 1)
    assert copies(rows) >= 1 and same_key_same_row(rows) == n  # retried tasks may repeat rows

    # Processing time, another checkpoint: the same rows again, under another query's keys.
    query = start({"processingTime": "200 milliseconds"}, tmp_path / "c2")
    try:
        # Watched through its progress: Spark jobs started meanwhile would compete with the
        # stream's Python workers for a start on a loaded machine.
        deadline = time.monotonic() + WAIT
        while sum(p["numInputRows"] for p in query.recentProgress) < n and time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            time.sleep(0.5)
    finally:
        query.stop()
    rows = read_back(spark, cluster, topic, lambda rows: copies(rows) >= 2)
    assert copies(rows) >= 2 and same_key_same_row(rows) == 2 * n

    # The first query's last micro-batch again (its commit removed, as if the driver had died
    # before committing it): the replayed rows repeat their UNIQ_KEYs.
    commits = [p for p in (tmp_path / "c1" / "commits").iterdir() if p.name.isdigit()]
    last = max(commits, key=lambda p: int(p.name))
    last.unlink()
    last.with_name(f".{last.name}.crc").unlink(missing_ok=True)  # else Spark cannot write it again
    before = len(rows)
    query = start({"availableNow": True}, tmp_path / "c1")
    assert query.awaitTermination(WAIT), "the availableNow query did not finish"
    assert query.exception() is None
    rows = read_back(spark, cluster, topic, lambda rows: len(rows) > before)
    assert len(rows) > before and same_key_same_row(rows) == 2 * n


def test_the_official_cpp_consumer_reads_what_the_sink_wrote(
    spark: SparkSession, cluster: BrokerProcess, tmp_path: Path
) -> None:
    probe = subprocess.run([sys.executable, "-c", "import rocketmq.client"], capture_output=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip("the RocketMQ C++ client (PyPI rocketmq 0.4.4, Linux x86_64) is not usable here")
    topic, n = "SinkCpp", 120
    write(rows_df(spark, n, "cpp", partitions=2), cluster, topic, batchSize="16")
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, str(SCENARIOS), "pull", cluster.namesrv, "--topic", topic]
    argv += [
        "--group",
        "SinkCppGroup",
        "--expect",
        str(n),
        "--wait",
        "60",
        "--deadline",
        "90",
        "--props",
        "n",
    ]
    r = subprocess.run(argv, capture_output=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    lines = [line for line in r.stdout.decode().splitlines() if line.startswith("RESULT ")]
    assert r.returncode == 0 and lines, r.stderr.decode()[-4000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    got = {m["id"]: m for m in result["received"]}
    assert set(got) == {f"cpp-{i}" for i in range(n)}
    for i in range(n):
        m = got[f"cpp-{i}"]
        assert (m["tags"], m["keys"], m["props"]["n"]) == ("Even" if i % 2 == 0 else "Odd", f"k{i}", str(i))
        assert m["uniq_key"] and len(m["uniq_key"]) == 32
