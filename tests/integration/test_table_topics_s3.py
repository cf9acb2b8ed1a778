"""Table topics on object storage (issue 44): `tableTopicPath=s3://bucket/prefix` against a real
S3-compatible server, versitygw with its posix backend (tools/s3_server.py), on 127.0.0.1.

Messages sent are rows of the bucket's Delta table, each once, read back from the bucket; a
broker killed with SIGKILL while a commit is held leaves no row lost or doubled once it restarts;
with the server stopped for a while the broker keeps taking sends, and the table catches up once
the server is back; compaction merges a partition's files in the bucket. Skipped, with the
reason, where the server cannot be built (no Go).

After the kill, a third reader checks the table besides ferromq's `read_arrow` and delta-rs's:
DuckDB over the Parquet files of the add actions the Delta log itself lists (`log_files`: the
commits replayed here, adds less removes, from the newest checkpoint if there is one).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import duckdb
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import s3_server
from deltalake import DeltaTable

from ferromq import _store
from ferromq.broker.config import load_broker_config
from ferromq.client import Message
from ferromq.client.blocking import BlockingProducer
from ferromq.store import MessageStore
from ferromq.tables import committed_offsets, open_table, read_arrow
from ferromq.tables.objectstore import filesystem
from ferromq.tables.tiering import PAUSE_ENV, TieringService, TieringSettings
from ferromq.testing import BrokerProcess, wait_until
from tests.interop.conftest import stop_ferromq
from tests.s3kit import s3 as s3  # the fixture: the server, module-wide

pytestmark = pytest.mark.timeout(180)

WAIT = 60.0
EAGER = {
    "tableTopicIntervalSeconds": 1,
    "tableTopicMinRows": 1,
    "tableTopicMaxDelaySeconds": 0,
    "defaultTopicQueueNums": 4,
    "flushDiskType": "ASYNC_FLUSH",
    "mapedFileSizeCommitLog": 256 * 1024,
}


def conf_keys(s3: s3_server.S3Server) -> dict[str, str]:
    """broker.conf's keys that reach the server."""
    return {
        "tableTopicS3Endpoint": s3.endpoint,
        "tableTopicS3AccessKey": s3.access_key,
        "tableTopicS3SecretKey": s3.secret_key,
        "tableTopicS3Region": s3.region,
    }


def produce(namesrv: str, topic: str, start: int, n: int) -> dict[tuple[int, int], bytes]:
    """`n` messages; what each (queue, offset) holds."""
    sent: dict[tuple[int, int], bytes] = {}
    with BlockingProducer(f"{topic}_producer", namesrv) as producer:
        for i in range(start, start + n):
            msg = Message(topic, f"{topic}-{i:05d}|".encode() * 20, tags="T", keys=f"k{i}")
            r = producer.send(msg)
            sent[(r.message_queue.queue_id, r.queue_offset)] = msg.body
    return sent


def log_ends(store: Path, topic: str) -> dict[int, int]:
    view = _store.Store(store, read_only=True)
    try:
        return {q: hi for t, q, _, hi in view.queues() if t == topic and hi > 0}
    finally:
        view.close()


def fully_tiered(store: Path, root: str, topic: str, options: Mapping[str, str]) -> bool:
    ends = log_ends(store, topic)
    table = open_table(root, topic, options)
    offsets = {} if table is None else committed_offsets(table)
    return bool(ends) and all(offsets.get(q) == hi for q, hi in ends.items())


def rows_of(root: str, topic: str, options: Mapping[str, str]) -> dict[tuple[int, int], bytes]:
    """The table's rows as (queue, offset) -> body, asserting none is there twice."""
    rows = read_arrow(root, topic, columns=["queue_id", "queue_offset", "body"], storage_options=options)
    keys = list(
        zip(rows.column("queue_id").to_pylist(), rows.column("queue_offset").to_pylist(), strict=True)
    )
    assert len(keys) == len(set(keys)), "no row twice"
    return dict(zip(keys, rows.column("body").to_pylist(), strict=True))


_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.\d{10}\.\d{10})?\.parquet$")


def log_files(fs: pafs.FileSystem, table: str) -> tuple[int, dict[str, dict[str, str]], int]:
    """Replays the Delta log of the table at `table` (a path in `fs`) by hand, without delta-rs:
    (its current version, {data file path in `fs`: partition values} of that version, the
    checkpoint it started from or -1). -1 and {} where the table has no log yet."""
    log = f"{table}/_delta_log"
    names = [i.base_name for i in fs.get_file_info(pafs.FileSelector(log, allow_not_found=True))]
    commits = sorted(int(m[1]) for n in names if (m := _COMMIT.match(n)))
    if not commits:
        return -1, {}, -1
    version = commits[-1]
    checkpoint = max((int(m[1]) for n in names if (m := _CHECKPOINT.match(n))), default=-1)
    assert checkpoint <= version, names
    start = checkpoint + 1
    assert commits[commits.index(start) :] == list(range(start, version + 1)), f"a gap in the log: {names}"

    def where(path: str) -> str:
        if "://" in path:  # an absolute URI (delta-rs writes relative paths)
            u = urlparse(path)
            return unquote(u.netloc + u.path)
        return f"{table}/{unquote(path)}"

    live: dict[str, dict[str, str]] = {}
    if checkpoint >= 0:
        parts = sorted(n for n in names if n.startswith(f"{checkpoint:020d}.checkpoint"))
        for part in parts:
            with fs.open_input_file(f"{log}/{part}") as f:
                actions = pq.read_table(f)
            if "sidecar" in actions.column_names:  # delta-rs writes the column, all null
                assert actions.column("sidecar").null_count == actions.num_rows, "V2 sidecars: not read"
            for add in actions.column("add").to_pylist():
                if add is not None:  # a checkpoint's removes are tombstones: not in the snapshot
                    live[where(add["path"])] = dict(add["partitionValues"] or {})
    for v in range(start, version + 1):
        with fs.open_input_stream(f"{log}/{v:020d}.json") as f:
            lines = f.read().decode().splitlines()
        for action in (json.loads(line) for line in lines if line.strip()):
            if "add" in action:
                live[where(action["add"]["path"])] = dict(action["add"]["partitionValues"])
            elif "remove" in action:
                live.pop(where(action["remove"]["path"]), None)
    return version, live, checkpoint


def duckdb_rows(
    root: str, topic: str, options: Mapping[str, str], scratch: Path
) -> dict[tuple[int, int], bytes]:
    """The rows of the table's current version as DuckDB reads them, (queue, offset) -> body,
    asserting none is there twice: the data files the log lists (`log_files`) fetched from the
    bucket with pyarrow, read by DuckDB's own Parquet reader (the queue id from the add action's
    partition values, as Delta keeps it out of the files)."""
    fs, table = filesystem(f"{root}/{topic}", options)
    version, live, checkpoint = log_files(fs, table)
    # None here so far (delta-rs checkpoints every 100 versions); log_files reads one if it comes.
    assert checkpoint == -1, f"a checkpoint at version {checkpoint} of {version}"
    if not live:
        return {}
    scratch.mkdir(parents=True, exist_ok=True)
    files: list[tuple[str, int]] = []
    for i, (path, partition) in enumerate(sorted(live.items())):
        local = scratch / f"v{version}-{i:05d}.parquet"
        with fs.open_input_stream(path) as src:
            local.write_bytes(src.read())
        files.append((str(local), int(partition["queue_id"])))
    con = duckdb.connect()
    try:
        con.execute("CREATE TABLE files (filename VARCHAR, queue_id INTEGER)")
        con.executemany("INSERT INTO files VALUES (?, ?)", files)
        con.read_parquet([f for f, _ in files], filename=True, hive_partitioning=False).create_view("data")
        rows = "SELECT files.queue_id, data.queue_offset, data.body FROM data JOIN files USING (filename)"
        count, distinct = con.execute(
            f"SELECT count(*), count(DISTINCT (queue_id, queue_offset)) FROM ({rows})"
        ).fetchone() or (0, 0)
        out = {(q, o): bytes(b) for q, o, b in con.execute(rows).fetchall()}
    finally:
        con.close()
    assert count == distinct == len(out), f"{count} rows, {distinct} distinct (queue, offset): none twice"
    return out


def failed(broker: BrokerProcess, topic: str) -> bool:
    """The tiering service logged a failure of `topic`'s work (the server away)."""
    log = broker.workdir / "logs" / "ferromqlogs" / "broker.log"
    return log.exists() and f"table topic {topic}: tiering failed" in log.read_text(errors="replace")


def start_broker(workdir: Path, conf: dict[str, Any], store: Path | None = None) -> BrokerProcess:
    return BrokerProcess(workdir, conf, store=store).start()


def s3_broker(workdir: Path, s3: s3_server.S3Server, topic: str, root: str) -> BrokerProcess:
    """A broker tiering `topic` under the s3:// `root`, the server named by broker.conf's keys."""
    return start_broker(workdir, {**EAGER, "tableTopics": topic, "tableTopicPath": root, **conf_keys(s3)})


def wait_tiered(broker: BrokerProcess, root: str, topic: str, options: Mapping[str, str], what: str) -> None:
    wait_until(
        lambda: fully_tiered(broker.store, root, topic, options), what, timeout=WAIT, why=broker.log_tail
    )


def test_sent_messages_are_rows_of_the_buckets_table_each_once(
    s3: s3_server.S3Server, tmp_path: Path
) -> None:
    topic = "S3Orders"
    root = s3.bucket("tables") + "/ferromq/prod"
    options = s3.storage_options()
    broker = s3_broker(tmp_path, s3, topic, root)
    try:
        sent = produce(broker.namesrv, topic, 0, 300)
        wait_tiered(broker, root, topic, options, "tiered")
        assert rows_of(root, topic, options) == sent
        # deltalake's own reader, straight from the bucket.
        table = DeltaTable(f"{root}/{topic}", storage_options=options)
        assert sum(
            len(b) for b in table.to_pyarrow_dataset().to_table(columns=["body"])["body"].to_pylist()
        ) == sum(len(b) for b in sent.values())
    finally:
        stop_ferromq(broker)
    # The files are objects of the server's bucket, none on the broker's disk.
    objects = s3.data / "tables" / "ferromq" / "prod" / topic
    assert any(objects.glob("_delta_log/*.json"))
    assert len(list(objects.glob("day=*/queue_id=*/*.parquet"))) >= 1
    assert not (broker.store / "tables").exists()


def test_a_partition_in_the_bucket_is_compacted_and_keeps_its_rows(
    s3: s3_server.S3Server, tmp_path: Path
) -> None:
    """In process: tableTopicCompactionFiles=3 merges a queue's day in the bucket (delta-rs's
    optimize over S3) once three commits added a file each; the rows stay the same."""
    root = s3.bucket("compact") + "/t"
    cfg = load_broker_config(
        table_topics="Busy",
        table_topic_path=root,
        table_topic_min_rows=1,
        table_topic_compaction_interval_seconds=0,
        table_topic_compaction_files=3,
        table_topic_s3_endpoint=s3.endpoint,
        table_topic_s3_access_key=s3.access_key,
        table_topic_s3_secret_key=s3.secret_key,
        table_topic_s3_region=s3.region,
    )
    settings = TieringSettings.of(cfg, str(tmp_path / "store"))
    options = s3.storage_options()
    with MessageStore(tmp_path / "store") as store:
        service = TieringService(store.raw, settings)
        files = []
        for commit in range(4):
            for i in range(commit * 10, commit * 10 + 10):
                store.put("Busy", 0, f"b{i}".encode(), tags="T")
            service.run_once()
            table = open_table(root, "Busy", options)
            assert table is not None
            files.append(len(table.file_uris()))
    assert files == [1, 2, 1, 2], "the third commit's files were merged into one"
    assert sorted(k[1] for k in rows_of(root, "Busy", options)) == list(range(40))


def test_kill_9_while_a_commit_is_held_loses_and_doubles_nothing(
    s3: s3_server.S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credentials from the standard AWS_* environment variables this time."""
    topic = "S3Crash"
    root = s3.bucket("crash") + "/tables"
    options = s3.storage_options()
    for k, v in options.items():
        monkeypatch.setenv(k, v)
    pause = tmp_path / "pause-before-commit"
    conf = {**EAGER, "tableTopics": topic, "tableTopicPath": root}
    monkeypatch.setenv(PAUSE_ENV, str(pause))
    first = start_broker(tmp_path / "first", conf)
    monkeypatch.delenv(PAUSE_ENV)
    try:
        sent = produce(first.namesrv, topic, 0, 200)
        wait_until(pause.exists, "a commit held", timeout=WAIT, why=first.log_tail)
    finally:
        first.stop(kill=True)
    held = json.loads(pause.read_text())["files"]
    objects = s3.data / "crash" / "tables" / topic
    assert held and all((objects / f).is_file() for f in held), (
        "the files are in the bucket before the commit"
    )
    table = open_table(root, topic)
    assert table is None or committed_offsets(table) == {}, "nothing committed"
    assert duckdb_rows(root, topic, {}, tmp_path / "duck-before") == {}, "no row in the log's files"
    pause.unlink()

    second = start_broker(tmp_path / "second", conf, store=first.store)
    try:
        sent.update(produce(second.namesrv, topic, 200, 100))
        wait_until(
            lambda: fully_tiered(second.store, root, topic, {}), "tiered", timeout=WAIT, why=second.log_tail
        )
        assert rows_of(root, topic, {}) == sent, "none lost, none twice"
        # delta-rs's reader, and DuckDB over the files the log's add actions list.
        keys = DeltaTable(f"{root}/{topic}").to_pyarrow_table(columns=["queue_id", "queue_offset"])
        pairs = list(zip(keys["queue_id"].to_pylist(), keys["queue_offset"].to_pylist(), strict=True))
        assert len(pairs) == len(set(pairs)) and set(pairs) == set(sent), "delta-rs: each row once"
        assert duckdb_rows(root, topic, {}, tmp_path / "duck") == sent, "DuckDB: each row once"
        table = open_table(root, topic)
        assert table is not None
        assert not {u.split(f"/{topic}/", 1)[1] for u in table.file_uris()} & set(held)
    finally:
        stop_ferromq(second)


def test_the_table_catches_up_once_the_server_is_back(s3: s3_server.S3Server, tmp_path: Path) -> None:
    topic = "S3Outage"
    root = s3.bucket("outage")
    options = s3.storage_options()
    broker = s3_broker(tmp_path, s3, topic, root)
    try:
        sent = produce(broker.namesrv, topic, 0, 100)
        wait_tiered(broker, root, topic, options, "tiered")
        s3.stop()
        try:
            # Sends are acknowledged while the bucket is away; tiering fails and waits.
            sent.update(produce(broker.namesrv, topic, 100, 150))
            wait_until(lambda: failed(broker, topic), "a commit failed", timeout=WAIT, why=broker.log_tail)
        finally:
            s3.start()
        wait_tiered(broker, root, topic, options, "caught up")
        assert rows_of(root, topic, options) == sent
    finally:
        code = broker.stop(timeout=60)
    assert code == 0, broker.log()
    # The only errors logged: the failures while the server was away (each with its traceback).
    expected = (f"table topic {topic}: tiering failed", "Traceback (most recent call last):")
    assert [p for p in broker.errors() if not any(e in p for e in expected)] == [], broker.log()
