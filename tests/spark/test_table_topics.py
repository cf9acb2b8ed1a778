"""Table topics: broker processes tier topics into Delta tables (broker.conf `tableTopics`), and
`read_topic` reads a table plus the log's tail after it.

The main broker runs with the tiering's test hook (`PAUSE_ENV`): each commit waits, its files
written, until the test removes the hook's file. The tests release every commit of a first round
of messages, then hold the commit of a second round: the table holds the first round, the log's
tail the second, and the second's Parquet files lie uncommitted in the table's directory. Other
brokers: one killed with SIGKILL while a commit is held and restarted; one whose CommitLog files
retention deletes after its tables were compacted.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
import urllib.request
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql import DataFrame, SparkSession

from ferromq import _store
from ferromq.broker.config import TABLE_TOPIC_CODECS, ConfigError, load_broker_config
from ferromq.client import Message
from ferromq.client.blocking import BlockingProducer
from ferromq.errors import InvalidArgumentError
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.spark import read_topic
from ferromq.spark.schema import arrow_schema
from ferromq.store import MessageStore
from ferromq.tables import committed_offsets, open_table, read_arrow, row_schema
from ferromq.tables.columns import read_queue
from ferromq.tables.layout import table_root
from ferromq.tables.tiering import PAUSE_ENV, TieringService, TieringSettings
from ferromq.tables.writer import CODECS, TopicTable
from ferromq.testing import Broker, BrokerProcess, wait_until
from ferromq.testing.process import ferromq_command
from ferromq.testing.waiting import until
from tests.integration.brokerkit import Client, properties, running, send_ext
from tests.interop.conftest import stop_ferromq

pytestmark = [pytest.mark.spark, pytest.mark.timeout(420)]

TOPIC = "TableOrders"
WAIT = 90.0
FIRST, SECOND = 400, 150
TAGS = ("TagA", "TagB", "TagC")

# Every commit as soon as a message waits.
EAGER = {
    "tableTopicIntervalSeconds": 1,
    "tableTopicMinRows": 1,
    "tableTopicMaxDelaySeconds": 0,
    "defaultTopicQueueNums": 4,
    "flushDiskType": "ASYNC_FLUSH",
}


def _body(i: int) -> bytes:
    if i % 97 == 5:  # above 4 KiB: the client compresses it
        return f"compressible-{i} ".encode() * 400
    return (f"order-{i:05d}|".encode() + zlib.crc32(str(i).encode()).to_bytes(4, "big") * 250)[:1000]


def produce(namesrv: str, topic: str, start: int, n: int) -> dict[tuple[int, int], bytes]:
    """`n` messages (single ones, some compressed, and a batch of 10 at the end); what each
    (queue, offset) holds."""
    sent: dict[tuple[int, int], bytes] = {}
    with BlockingProducer(f"{topic}_producer", namesrv) as producer:
        for i in range(start, start + n - 10):
            msg = Message(topic, _body(i), tags=TAGS[i % 3], keys=f"k{i}", properties={"i": str(i)})
            r = producer.send(msg)
            sent[(r.message_queue.queue_id, r.queue_offset)] = msg.body
        batch = [
            Message(topic, _body(i), tags="TagB", keys=f"b{i}") for i in range(start + n - 10, start + n)
        ]
        r = producer.send_batch(batch)
        for j, m in enumerate(batch):
            sent[(r.message_queue.queue_id, r.queue_offset + j)] = m.body
    return sent


def tiering_settings(root: Path, topic: str, **keys: Any) -> TieringSettings:
    """The tiering service's settings for `topic` of the store at `root`, with broker.conf `keys`."""
    return TieringSettings.of(load_broker_config(table_topics=topic, **keys), str(root))


def log_bounds(store: Path, topic: str) -> dict[int, tuple[int, int]]:
    view = _store.Store(store, read_only=True)
    try:
        return {q: (lo, hi) for t, q, lo, hi in view.queues() if t == topic}
    finally:
        view.close()


def table_offsets(store: Path, topic: str) -> dict[int, int]:
    table = open_table(table_root(store), topic)
    return {} if table is None else committed_offsets(table)


def fully_tiered(store: Path, topic: str) -> bool:
    ends = {q: hi for q, (_, hi) in log_bounds(store, topic).items() if hi > 0}
    offsets = table_offsets(store, topic)
    return bool(ends) and all(offsets.get(q) == hi for q, hi in ends.items())


def source(spark: SparkSession, store: Path, **options: str) -> DataFrame:
    reader = spark.read.format("ferromq").option("path", str(store)).option("topic", TOPIC)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def keyed(df: DataFrame) -> dict[tuple[int, int], tuple[Any, ...]]:
    """The rows by (queue, offset), each as comparable values; fails on a (queue, offset) twice."""
    out: dict[tuple[int, int], tuple[Any, ...]] = {}
    rows = df.collect()
    for r in rows:
        d = r.asDict()
        if "properties" in d:
            d["properties"] = tuple(sorted(d["properties"].items()))
        if "body" in d:
            d["body"] = bytes(d["body"])
        out[(r.queue_id, r.queue_offset)] = tuple(d[c] for c in df.columns)
    assert len(out) == len(rows), "a (queue, offset) was read twice"
    return out


def ms(t: Any) -> int:
    return round(t.timestamp() * 1000)


@dataclass
class Tiered:
    server: BrokerProcess
    pause: Path
    sent: dict[tuple[int, int], bytes] = field(default_factory=dict)
    committed: dict[int, int] = field(default_factory=dict)
    """What the table held when the second round's commit was held."""

    @property
    def store(self) -> Path:
        return self.server.store


def release_until_tiered(server: BrokerProcess, pause: Path, topic: str) -> None:
    def released() -> bool:
        pause.unlink(missing_ok=True)
        return fully_tiered(server.store, topic)

    wait_until(released, f"{topic} fully tiered", timeout=WAIT, why=server.log_tail, interval=0.2)


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    work = tmp_path_factory.mktemp("table-topics")
    pause = work / "pause-before-commit"
    conf = {
        **EAGER,
        "tableTopics": TOPIC,
        "mapedFileSizeCommitLog": 256 * 1024,
        "mappedFileSizeConsumeQueue": 20 * 64,
        "metricsExporterType": "PROM",
        "metricsPromExporterHost": "127.0.0.1",
        "metricsPromExporterPort": 0,
    }
    # Read once, when the broker starts.
    env = pytest.MonkeyPatch()
    env.setenv(PAUSE_ENV, str(pause))
    try:
        server = BrokerProcess(work, conf).start()
    finally:
        env.undo()
    out = Tiered(server, pause)
    try:
        out.sent.update(produce(server.namesrv, TOPIC, 0, FIRST))
        release_until_tiered(server, pause, TOPIC)
        out.sent.update(produce(server.namesrv, TOPIC, FIRST, SECOND))
        wait_until(pause.exists, "the second round's commit held", timeout=WAIT, why=server.log_tail)
        out.committed = table_offsets(server.store, TOPIC)
        yield out
    finally:
        stop_ferromq(server)


def test_broker_conf_keys(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("tableTopics=Orders, Payments\ntableTopicPath=/data/tables\ntableTopicMinRows=5\n")
    cfg = load_broker_config(conf)
    assert cfg.table_topic_selection == (("Orders", "Payments"), None)
    assert (cfg.table_topic_path, cfg.table_topic_min_rows) == ("/data/tables", 5)
    assert load_broker_config(table_topics="regex:Ord.*").table_topic_selection == ((), "Ord.*")
    for bad, key in (
        ("tableTopics=regex:(\n", "tableTopics"),
        ("tableTopics=a b\n", "tableTopics"),
        ("tableTopicIntervalSeconds=0\n", "tableTopicIntervalSeconds"),
        ("tableTopicMaxCommitBytes=10\n", "tableTopicMaxCommitBytes"),
        ("tableTopicCompactionFiles=-1\n", "tableTopicCompactionFiles"),
        ("tableTopicRole=BOTH\n", "tableTopicRole"),
        ("tableTopicCompression=brotli\n", "tableTopicCompression"),
    ):
        conf.write_text(bad)
        with pytest.raises(ConfigError, match=key):
            load_broker_config(conf)
    assert TABLE_TOPIC_CODECS == tuple(CODECS), "broker.conf names the writer's codecs"


def test_offsets_retention_deleted_before_tiering_are_skipped_and_counted(tmp_path: Path) -> None:
    """In process: the service's cycle over a store whose first CommitLog files retention deleted
    after the table's last commit."""
    root = tmp_path / "store"
    settings = tiering_settings(
        root,
        "Gone",
        table_topic_min_rows=1,
        table_topic_interval_seconds=1,
    )
    small = {"mapped_file_size_commitlog": 64 * 1024, "delete_commitlog_files_interval_ms": 0}
    with MessageStore(root, **small) as store:
        service = TieringService(store.raw, settings)
        for i in range(20):
            store.put("Gone", 0, _body(i), tags="T")
        service.run_once()
        assert table_offsets(root, "Gone") == {0: 20}
        for i in range(20, 300):
            store.put("Gone", 0, _body(i), tags="T")
        store.flush()
        old = time.time() - 100 * 3600
        for f in sorted((root / "commitlog").iterdir())[:2]:
            os.utime(f, (old, old))
        assert store.clean_expired_files(hour=4, physic_used_ratio=0.1, logics_used_ratio=0.1)
        store.clean_expired_consume_queues()
        lo = store.min_offset("Gone", 0)
        assert 20 < lo < 300
        service.run_once()
        [progress] = service.progress()
        assert progress.rows_lost == lo - 20 and progress.rows_tiered == 20 + 300 - lo
        assert table_offsets(root, "Gone") == {0: 300}
        rows = read_arrow(table_root(root), "Gone", columns=["queue_offset", "body"])
        assert sorted(rows.column("queue_offset").to_pylist()) == [*range(20), *range(lo, 300)]


def test_a_partition_is_compacted_once_enough_files_were_added(tmp_path: Path) -> None:
    """In process: tableTopicCompactionFiles=3 merges a queue's day once three commits added a
    file each, without waiting for the schedule (off here); the rows stay the same."""
    root = tmp_path / "store"
    settings = tiering_settings(
        root,
        "Busy",
        table_topic_min_rows=1,
        table_topic_compaction_interval_seconds=0,
        table_topic_compaction_files=3,
    )
    with MessageStore(root) as store:
        service = TieringService(store.raw, settings)
        files = []
        for commit in range(4):
            for i in range(commit * 10, commit * 10 + 10):
                store.put("Busy", 0, _body(i), tags="T")
            service.run_once()
            table = open_table(table_root(root), "Busy")
            assert table is not None
            files.append(len(table.file_uris()))
        [progress] = service.progress()
    assert files == [1, 2, 1, 2], "the third commit's files were merged into one"
    assert progress.maintain_cpu_seconds > 0 and progress.commits == 4
    rows = read_arrow(table_root(root), "Busy", columns=["queue_offset"])
    assert sorted(rows.column("queue_offset").to_pylist()) == list(range(40))


@pytest.mark.parametrize("codec", ["lz4", "zstd", "none"])
def test_each_codec_writes_and_compacts_files_spark_reads(
    spark: SparkSession, tmp_path: Path, codec: str
) -> None:
    """tableTopicCompression: tiering's files and compaction's are in the codec chosen, and Spark's
    own Parquet reader (read_topic) and deltalake read the rows back."""
    root = tmp_path / "store"
    settings = tiering_settings(
        root,
        "Coded",
        table_topic_compression=codec,
        table_topic_min_rows=1,
        table_topic_compaction_interval_seconds=0,
        table_topic_compaction_files=2,
    )
    names = {"lz4": "LZ4", "zstd": "ZSTD", "none": "UNCOMPRESSED"}  # pyarrow calls LZ4_RAW "LZ4"

    def codecs() -> tuple[int, set[str]]:
        table = open_table(table_root(root), "Coded")
        assert table is not None
        files = table.file_uris()
        return len(files), {pq.ParquetFile(f).metadata.row_group(0).column(0).compression for f in files}

    expected = {}
    with MessageStore(root) as store:
        service = TieringService(store.raw, settings)
        for commit in range(2):
            for i in range(commit * 30, commit * 30 + 30):
                store.put("Coded", i % 2, _body(i), tags="T")
                expected[(i % 2, i // 2)] = _body(i)
            service.run_once()
            # First the tiering's files (one per queue), then compaction's (each queue's two in one).
            assert codecs() == (2, {names[codec]})
        [progress] = service.progress()
    assert progress.maintain_cpu_seconds > 0 and progress.failures == 0
    rows = read_arrow(table_root(root), "Coded", columns=["queue_id", "queue_offset", "body"])
    assert {(q, o): b for q, o, b in zip(*(c.to_pylist() for c in rows.columns), strict=True)} == expected
    df = read_topic(spark, "Coded", path=str(root)).select("queue_id", "queue_offset", "body")
    assert {(r.queue_id, r.queue_offset): bytes(r.body) for r in df.collect()} == expected


def test_rows_go_in_as_whole_files_that_compaction_leaves_alone(tmp_path: Path) -> None:
    """tableTopicMinRows=0 (the default): a queue goes in as files of about
    tableTopicTargetFileBytes once it holds that many, and compaction never rewrites them; rows
    that do not fill a file wait until they are tableTopicMaxDelaySeconds old."""
    root = tmp_path / "store"
    target = 1024 * 1024

    def settings(max_delay: int) -> TieringSettings:
        return tiering_settings(
            root,
            "Whole",
            table_topic_target_file_bytes=target,
            table_topic_max_delay_seconds=max_delay,
            table_topic_compaction_interval_seconds=0,
            table_topic_compaction_files=2,
        )

    def sizes() -> list[int]:
        table = open_table(table_root(root), "Whole")
        assert table is not None
        return sorted(os.path.getsize(f.removeprefix("file://")) for f in table.file_uris())

    bodies = [os.urandom(1000) for _ in range(3500)]  # incompressible: a row weighs its body
    with MessageStore(root) as store:
        for b in bodies:
            store.put("Whole", 0, b, tags="T")
        service = TieringService(store.raw, settings(max_delay=3600))
        assert service.settings.min_rows == 0, "whole files are the default"
        for _ in range(20):
            if not service.run_once():
                break
        whole = sizes()
        assert len(whole) >= 3 and all(size >= target for size in whole), whole
        [progress] = service.progress()
        assert 0 < 3500 - progress.committed[0] < 3500 / len(whole), "the rest waits: it fills no file"
        assert progress.maintain_cpu_seconds == 0, "whole files do not call for compaction"
        table = open_table(table_root(root), "Whole")
        assert table is not None
        assert TopicTable(table.table_uri, "Whole").compact(target) == 0
        assert sizes() == whole
        # Once old enough, the rest goes in as a file of its own.
        TieringService(store.raw, settings(max_delay=0)).run_once()
    assert table_offsets(root, "Whole") == {0: 3500}
    assert len(sizes()) == len(whole) + 1
    rows = read_arrow(table_root(root), "Whole", columns=["queue_offset", "body"])
    assert dict(zip(*(c.to_pylist() for c in rows.columns), strict=True)) == dict(enumerate(bodies))


def test_with_table_topic_role_slave_the_slave_tiers_and_the_master_does_not(tmp_path: Path) -> None:
    """tableTopicRole=SLAVE: the slave, which replicates the master's messages, appends them to its
    own table; the master runs no tiering at all. In-process master and slave on real sockets."""
    tables = {
        "table_topics": "Replicated",
        "table_topic_role": "SLAVE",
        "table_topic_min_rows": 1,
        "table_topic_interval_seconds": 1,
        "table_topic_max_delay_seconds": 0,
        "ha_send_heartbeat_interval": 200,
        "ha_listen_port": 0,
    }

    async def body() -> None:
        async with running(tmp_path / "m", broker_role="ASYNC_MASTER", **tables) as (ns, master):
            async with running(tmp_path / "s", namesrv=ns, broker_role="SLAVE", broker_id=1, **tables) as (
                _,
                slave,
            ):
                client = await Client().connect(master.port)
                try:
                    for i in range(40):
                        props = properties(TAGS="A", KEYS=f"k{i}")
                        r = await client.call(RC.SEND_MESSAGE, send_ext("Replicated", i % 4, props), _body(i))
                        assert r.code == R.SUCCESS, r.remark
                finally:
                    await client.close()
                slave_store = Path(slave.config.store_path_root_dir)
                assert master.tiering is None and slave.tiering is not None
                tiering = slave.tiering
                # The service counts a commit's rows once the commit returns, after its files and
                # log entry are on disk (and its process reports them after its cycle): wait for both.
                await until(
                    lambda: (
                        fully_tiered(slave_store, "Replicated")
                        and [p.rows_tiered for p in tiering.progress()] == [40]
                    ),
                    "the slave's table",
                    timeout=WAIT,
                )
                [progress] = tiering.progress()
                assert progress.tier_cpu_seconds > 0
                assert not (Path(master.config.store_path_root_dir) / "tables").exists()

    asyncio.run(asyncio.wait_for(body(), 120))
    rows = read_arrow(
        table_root(tmp_path / "s" / "store"), "Replicated", columns=["queue_id", "queue_offset", "body"]
    )
    got = {
        (q, o): b for q, o, b in zip(*(rows.column(c).to_pylist() for c in rows.column_names), strict=True)
    }
    assert got == {(i % 4, i // 4): _body(i) for i in range(40)}


def test_the_table_rows_have_the_spark_sources_schema() -> None:
    assert row_schema() == arrow_schema()
    assert row_schema(include_properties=False) == arrow_schema(include_properties=False)


def test_table_and_tail_equal_the_source_row_for_row(spark: SparkSession, tiered: Tiered) -> None:
    in_table = sum(tiered.committed.values())
    assert in_table == FIRST and len(tiered.sent) == FIRST + SECOND
    df = read_topic(spark, TOPIC, path=str(tiered.store))
    assert df.columns == source(spark, tiered.store).columns
    # Same names and types (Spark reads Parquet columns as nullable).
    assert df.schema.simpleString() == source(spark, tiered.store).schema.simpleString()
    got = keyed(df)
    assert set(got) == set(tiered.sent)
    assert got == keyed(source(spark, tiered.store))
    body = df.columns.index("body")
    assert {k: row[body] for k, row in got.items()} == tiered.sent


@pytest.mark.parametrize(
    "options",
    [
        {"queues": "1"},
        {"queues": "0,2-3"},
        {"tags": "TagA"},
        {"tags": "TagB || TagC"},
        {"includeProperties": "false"},
        {"queues": "2", "tags": "TagC", "includeProperties": "false"},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_selections_equal_the_sources(spark: SparkSession, tiered: Tiered, options: dict[str, str]) -> None:
    got = keyed(read_topic(spark, TOPIC, path=str(tiered.store), **options))
    want = keyed(source(spark, tiered.store, **options))
    assert got and got == want


def test_a_time_range_across_table_and_tail_equals_the_sources(spark: SparkSession, tiered: Tiered) -> None:
    rows = source(spark, tiered.store).select("queue_id", "queue_offset", "store_timestamp").collect()
    old = sorted(ms(r.store_timestamp) for r in rows if r.queue_offset < tiered.committed[r.queue_id])
    new = sorted(ms(r.store_timestamp) for r in rows if r.queue_offset >= tiered.committed[r.queue_id])
    lo, hi = old[len(old) // 2], new[len(new) // 2]
    window = {"startingTimestamp": str(lo), "endingTimestamp": str(hi)}
    got = keyed(read_topic(spark, TOPIC, path=str(tiered.store), **window))
    want = keyed(source(spark, tiered.store, **window))
    assert got == want
    assert any(o < tiered.committed[q] for q, o in got) and any(o >= tiered.committed[q] for q, o in got)


def test_a_projection_equals_the_sources(spark: SparkSession, tiered: Tiered) -> None:
    cols = ["queue_id", "queue_offset", "body", "store_timestamp"]
    got = keyed(read_topic(spark, TOPIC, path=str(tiered.store)).select(*cols).where("queue_id = 3"))
    want = keyed(source(spark, tiered.store).select(*cols).where("queue_id = 3"))
    assert got and got == want
    counted = read_topic(spark, TOPIC, path=str(tiered.store)).groupBy("tags").count().collect()
    assert {r.tags: r["count"] for r in counted} == {
        r.tags: r["count"] for r in source(spark, tiered.store).groupBy("tags").count().collect()
    }


def test_uncommitted_files_are_not_read(tiered: Tiered) -> None:
    held = json.loads(tiered.pause.read_text())
    root = Path(table_root(tiered.store)) / TOPIC
    assert held["topic"] == TOPIC and held["files"]
    assert all((root / f).is_file() for f in held["files"])
    table = open_table(table_root(tiered.store), TOPIC)
    assert table is not None
    committed = {os.path.relpath(f, root) for f in table.file_uris()}
    assert not committed & set(held["files"])
    rows = read_arrow(table_root(tiered.store), TOPIC, columns=["queue_id", "queue_offset"])
    assert rows.num_rows == FIRST


def test_per_message_columns_are_written_plain(tiered: Tiered) -> None:
    """Unique values (offsets, ids, keys) without a dictionary: Spark reads them faster so. Bodies
    and properties without min/max statistics, which no query prunes on; the other columns with."""
    import pyarrow.parquet as pq

    from ferromq.tables.writer import PLAIN_COLUMNS, UNBOUNDED_COLUMNS

    table = open_table(table_root(tiered.store), TOPIC)
    assert table is not None
    meta = pq.ParquetFile(table.file_uris()[0]).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    for name, used in encodings.items():
        assert ("RLE_DICTIONARY" in used) == (name not in PLAIN_COLUMNS), (name, used)
    bounded = {meta.column(i).path_in_schema: meta.column(i).statistics for i in range(meta.num_columns)}
    for name, stats in bounded.items():
        has_bounds = stats is not None and stats.has_min_max
        assert has_bounds == (name not in UNBOUNDED_COLUMNS), (name, stats)


def test_the_table_reads_in_plain_python(tiered: Tiered) -> None:
    root = table_root(tiered.store)
    rows = read_arrow(root, TOPIC, columns=["queue_id", "queue_offset", "body", "day"])
    got = {
        (q, o): b
        for q, o, b in zip(*(rows.column(c).to_pylist() for c in rows.column_names[:3]), strict=True)
    }
    want = {k: b for k, b in tiered.sent.items() if k[1] < tiered.committed[k[0]]}
    assert got == want
    one = read_arrow(root, TOPIC, columns=["queue_offset"], predicate="queue_id = 1")
    assert one.num_rows == tiered.committed[1]
    # deltalake alone (its SQL engine), without ferromq.
    dt = DeltaTable(os.path.join(root, TOPIC))
    counted = (
        QueryBuilder().register("t", dt).execute("select queue_id, count(*) as n from t group by queue_id")
    )
    table = pa.table(counted.read_all())
    assert dict(zip(table.column("queue_id").to_pylist(), table.column("n").to_pylist(), strict=True)) == {
        q: n for q, n in tiered.committed.items() if n
    }
    assert committed_offsets(dt) == tiered.committed


def test_bad_options_are_refused_by_name(spark: SparkSession, tiered: Tiered) -> None:
    path = str(tiered.store)
    with pytest.raises(InvalidArgumentError, match="unknown option startingoffsets"):
        read_topic(spark, TOPIC, path=path, startingOffsets="earliest")
    with pytest.raises(InvalidArgumentError, match="queues must look like"):
        read_topic(spark, TOPIC, path=path, queues="one")
    with pytest.raises(InvalidArgumentError, match="option includeProperties must be true or false"):
        read_topic(spark, TOPIC, path=path, includeProperties="maybe")
    with pytest.raises(InvalidArgumentError, match="option startingTimestamp must be an integer"):
        read_topic(spark, TOPIC, path=path, startingTimestamp="yesterday")
    with pytest.raises(InvalidArgumentError, match="endingTimestamp is before startingTimestamp"):
        read_topic(spark, TOPIC, path=path, startingTimestamp="20", endingTimestamp="10")


def test_admin_and_metrics_show_rows_and_lag(tiered: Tiered) -> None:
    out = subprocess.run(
        [*ferromq_command(), "admin", "table-topics", "--store", str(tiered.store), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    [info] = json.loads(out.stdout)
    assert (info["topic"], info["rows"], info["lag"]) == (TOPIC, FIRST, SECOND)
    assert {int(q): d["committed"] for q, d in info["queues"].items()} == tiered.committed
    port = re.search(r"metrics at http://[^:]+:(\d+)/metrics", tiered.server.log())
    assert port, tiered.server.log_tail()
    with urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=30) as r:
        text = r.read().decode()
    assert re.search(rf'ferromq_table_topic_rows_total{{[^}}]*topic="{TOPIC}"}} {FIRST}\.0', text), text
    assert re.search(rf'ferromq_table_topic_lag_messages{{[^}}]*topic="{TOPIC}"}} {SECOND}\.0', text), text
    # The tiering thread's CPU for the topic: some, for the rows it wrote.
    cpu_line = rf'ferromq_table_topic_cpu_seconds_total{{[^}}]*topic="{TOPIC}",work="tier"}} (\S+)'
    cpu = re.search(cpu_line, text)
    assert cpu and float(cpu.group(1)) > 0, text


def test_once_committed_the_table_holds_everything(spark: SparkSession, tiered: Tiered) -> None:
    release_until_tiered(tiered.server, tiered.pause, TOPIC)
    got = keyed(read_topic(spark, TOPIC, path=str(tiered.store)))
    assert got == keyed(source(spark, tiered.store))
    rows = read_arrow(table_root(tiered.store), TOPIC, columns=["queue_id", "queue_offset"])
    assert rows.num_rows == FIRST + SECOND


def test_a_topic_without_a_table_reads_from_the_source(spark: SparkSession, tiered: Tiered) -> None:
    got = read_topic(spark, TOPIC, path=str(tiered.store), table_path=str(tiered.store / "no-tables"))
    assert keyed(got) == keyed(source(spark, tiered.store))


def test_kill_9_between_file_write_and_commit(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = "TableCrash"
    pause = tmp_path / "pause-before-commit"
    conf = {**EAGER, "tableTopics": topic, "mapedFileSizeCommitLog": 256 * 1024}
    monkeypatch.setenv(PAUSE_ENV, str(pause))
    first = BrokerProcess(tmp_path / "first", conf).start()
    monkeypatch.delenv(PAUSE_ENV)
    try:
        sent = produce(first.namesrv, topic, 0, 200)
        wait_until(pause.exists, "a commit held", timeout=WAIT, why=first.log_tail)
    finally:
        first.stop(kill=True)
    held = json.loads(pause.read_text())["files"]
    root = Path(table_root(first.store)) / topic
    assert held and all((root / f).is_file() for f in held), "the files are written before the commit"
    assert table_offsets(first.store, topic) == {}, "nothing committed"
    pause.unlink()

    second = BrokerProcess(tmp_path / "second", conf, store=first.store).start()
    try:
        sent.update(produce(second.namesrv, topic, 200, 100))
        wait_until(lambda: fully_tiered(second.store, topic), "tiered", timeout=WAIT, why=second.log_tail)
        rows = read_arrow(table_root(second.store), topic, columns=["queue_id", "queue_offset", "body"])
        keys = list(
            zip(rows.column("queue_id").to_pylist(), rows.column("queue_offset").to_pylist(), strict=True)
        )
        assert len(keys) == len(set(keys)) == len(sent), "no row twice, none missing"
        assert dict(zip(keys, rows.column("body").to_pylist(), strict=True)) == sent
        table = open_table(table_root(second.store), topic)
        assert table is not None
        assert not {os.path.relpath(f, root) for f in table.file_uris()} & set(held)
        df = read_topic(spark, topic, path=str(second.store))
        assert df.count() == len(sent)
    finally:
        stop_ferromq(second)


def test_bodies_read_for_tiering_are_views_that_outlive_the_files_retention_deletes(tmp_path: Path) -> None:
    """Tiering reads bodies as views into the CommitLog's mapped files, not copies: a batch still
    holds them after retention deleted those files and the store closed."""
    root = tmp_path / "store"
    small = {"mapped_file_size_commitlog": 64 * 1024, "delete_commitlog_files_interval_ms": 0}
    with MessageStore(root, **small) as store:
        for i in range(200):
            store.put("Views", 0, _body(i), tags="T")
        store.flush()
        part = read_queue(store.raw, "Views", 0, 0, 200, 1 << 30)
        [batch] = part.batches
        assert batch.schema.field("body").type == pa.binary_view()
        assert part.body_bytes == sum(len(_body(i)) for i in range(200))
        old = time.time() - 100 * 3600
        for f in sorted((root / "commitlog").iterdir())[:-1]:
            os.utime(f, (old, old))
        assert store.clean_expired_files(hour=4, physic_used_ratio=0.1, logics_used_ratio=0.1)
    assert not (root / "commitlog" / f"{0:020d}").exists()
    assert batch.column("body").to_pylist() == [_body(i) for i in range(200)]


def test_a_table_outlives_the_commitlog_files_retention_deleted(spark: SparkSession, tmp_path: Path) -> None:
    """Tables compacted on the broker's schedule read the same; then CommitLog files go. The
    broker runs in this process, so that the retention round the admin command asks for runs at
    once (the store's own rounds start a minute after the broker)."""
    topic = "TableKept"
    conf = {
        **EAGER,
        "tableTopics": f"regex:{topic}|Other.*",
        "mapedFileSizeCommitLog": 64 * 1024,
        "mappedFileSizeConsumeQueue": 20 * 50,
        "tableTopicCompactionIntervalSeconds": 1,
        "tableTopicVacuumRetentionHours": 0,
        "deleteCommitLogFilesInterval": 0,
        "deleteConsumeQueueFilesInterval": 0,
    }
    with Broker(conf, store_dir=tmp_path) as broker:
        store = broker.store_dir / "store"
        sent: dict[tuple[int, int], bytes] = {}
        for round_ in range(3):  # several commits: several files per partition to compact
            sent.update(produce(broker.namesrv, topic, round_ * 100, 100))
            wait_until(lambda: fully_tiered(store, topic), "tiered", timeout=WAIT)
        uri = os.path.join(table_root(store), topic)

        def compacted() -> bool:
            dt = DeltaTable(uri)
            partitions = {(p["day"], p["queue_id"]) for p in dt.partitions()}
            ops = {h["operation"] for h in dt.history()}
            return "OPTIMIZE" in ops and len(dt.file_uris()) == len(partitions)

        wait_until(compacted, "the table compacted", timeout=WAIT)
        assert keyed(read_topic(spark, topic, path=str(store))) == keyed(
            spark.read.format("ferromq").option("path", str(store)).option("topic", topic).load()
        )

        # Retention: the oldest CommitLog files aged past fileReservedTime, then deleted by the
        # store's next round on the admin command (mqadmin deleteExpiredCommitLog), whatever the hour.
        files = sorted((store / "commitlog").iterdir())
        assert len(files) >= 4
        old = time.time() - 100 * 3600
        for f in files[:3]:
            os.utime(f, (old, old))
        admin = [*ferromq_command(), "admin", "-n", broker.namesrv, "delete-expired-commitlog"]
        subprocess.run([*admin, "-b", broker.broker_addr], check=True, capture_output=True, timeout=60)
        quiet = {"hour": 12, "physic_used_ratio": 0.1, "logics_used_ratio": 0.1}
        report = broker.broker.store.clean_expired_files(**quiet)
        assert report.manual and report.commitlog_files_deleted == 3, report
        assert any(lo > 0 for lo, _ in log_bounds(store, topic).values()), "the log's first offsets gone"
        left = spark.read.format("ferromq").option("path", str(store)).option("topic", topic).load()
        assert left.count() < len(sent)
        got = read_topic(spark, topic, path=str(store)).select("queue_id", "queue_offset", "body")
        assert {k: v[2] for k, v in keyed(got).items()} == sent
