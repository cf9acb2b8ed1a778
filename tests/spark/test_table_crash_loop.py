"""Table topics under kill -9 (issue 39.9): what a reader of the Delta log can see while the broker
is killed at varying moments of its commits and restarted.

A watcher thread reads the table's `_delta_log` the way a Delta reader does (list, take the
commits `NNNNNNNNNNNNNNNNNNNN.json`, parse them) every few milliseconds, the whole time, and
records every state that would give a reader a different table: a listing without version 0 or
with a gap once a commit was seen, a commit that does not parse whole, a `metaData` or `protocol`
action after version 0 (a schema change for every reader that analysed the table before it), a
checkpoint whose schema is not version 0's, a commit whose bytes change once seen. The first
broker holds its commits (the tiering's test hook) and is killed between writing a commit's files
and committing them; the next ones are killed as soon as the log has moved on, at whatever point
of their next cycle they are. After the last restart the table holds every offset of the log
once, and Spark reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from ferromq.client import Message
from ferromq.client.blocking import BlockingProducer
from ferromq.spark import read_topic
from ferromq.tables import read_arrow
from ferromq.tables.layout import table_root
from ferromq.tables.tiering import PAUSE_ENV
from ferromq.testing import BrokerProcess, wait_until
from tests.interop.conftest import stop_ferromq
from tests.spark.test_table_topics import EAGER, WAIT, fully_tiered, log_bounds

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

TOPIC = "TableKilled"
KILLS = 5
POLL = 0.003
COMMIT_NAME_LEN = len("00000000000000000000.json")


@dataclass
class LogWatch:
    """Reads `log` as a reader would, until stopped; `problems` lists what a reader should never
    see."""

    log: Path
    problems: list[str] = field(default_factory=list)
    digests: dict[int, str] = field(default_factory=dict)
    schema: str | None = None
    table_id: str | None = None
    checkpoints: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LogWatch:
        self._thread = threading.Thread(target=self._run, name="delta-log-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            assert not self._thread.is_alive(), "the watcher did not stop"

    @property
    def version(self) -> int:
        return max(self.digests, default=-1)

    def _run(self) -> None:
        while not self._stop.wait(POLL):
            try:
                self.look()
            except Exception as e:  # a reader's error is a finding, not the watcher's end
                self.problems.append(f"reading the log failed: {type(e).__name__}: {e}")

    def look(self) -> None:
        try:
            names = os.listdir(self.log)
        except FileNotFoundError:
            if self.digests:
                self.problems.append("the log directory is gone")
            return
        versions = sorted(int(n[:20]) for n in names if len(n) == COMMIT_NAME_LEN and n.endswith(".json"))
        if self.digests and not versions:
            self.problems.append(f"a listing without a commit after version {self.version}: {sorted(names)}")
        if versions and versions != list(range(versions[-1] + 1)):
            self.problems.append(f"commits listed are not 0..{versions[-1]}: {versions}")
        for v in versions:
            if v not in self.digests:
                self._read_commit(v)
        for name in names:
            if name.endswith(".checkpoint.parquet") and name not in self.checkpoints:
                self._read_checkpoint(name)

    def _read_commit(self, version: int) -> None:
        data = (self.log / f"{version:020d}.json").read_bytes()
        self.digests[version] = hashlib.sha256(data).hexdigest()
        try:
            actions = [json.loads(line) for line in data.decode().splitlines()]
        except ValueError as e:
            self.problems.append(f"version {version} does not parse whole ({len(data)} bytes): {e}")
            return
        kinds = [next(iter(a)) for a in actions]
        if version == 0:
            if "protocol" not in kinds or "metaData" not in kinds:
                self.problems.append(f"version 0 holds {kinds}, not the protocol and the metadata")
                return
            meta = next(a["metaData"] for a in actions if "metaData" in a)
            self.schema, self.table_id = meta["schemaString"], meta["id"]
            return
        for a in actions:
            if "metaData" in a:
                same = a["metaData"].get("schemaString") == self.schema
                self.problems.append(f"version {version} changes the metadata (same schema: {same})")
            if "protocol" in a:
                self.problems.append(f"version {version} changes the protocol")

    def _read_checkpoint(self, name: str) -> None:
        self.checkpoints.add(name)
        rows = pq.read_table(self.log / name, columns=["metaData"]).column("metaData").to_pylist()
        metas = [m for m in rows if m is not None]
        if len(metas) != 1 or (metas[0]["schemaString"], metas[0]["id"]) != (self.schema, self.table_id):
            self.problems.append(f"checkpoint {name} does not hold version 0's metadata")

    def check_unchanged(self) -> None:
        """Every commit seen still holds the bytes it held when first seen."""
        for v, digest in sorted(self.digests.items()):
            data = (self.log / f"{v:020d}.json").read_bytes()
            if hashlib.sha256(data).hexdigest() != digest:
                self.problems.append(f"version {v} changed after it was read")


class Sender:
    """Sends to whichever broker `target` names, until stopped; sends to a killed broker fail and
    are sent again to the next one."""

    def __init__(self, namesrv: str) -> None:
        self.namesrv = namesrv
        self.acked: set[tuple[int, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sender", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            namesrv = self.namesrv
            try:
                with BlockingProducer("killed_producer", namesrv) as producer:
                    while not self._stop.is_set() and namesrv == self.namesrv:
                        r = producer.send(Message(TOPIC, f"row-{i:06d}|".encode() * 20, tags="T"))
                        self.acked.add((r.message_queue.queue_id, r.queue_offset))
                        i += 1
            except Exception:
                self._stop.wait(0.05)  # the broker was killed: wait for the next address

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the sender did not stop"


def test_kill_9_at_any_moment_never_shows_a_reader_another_schema(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = {
        **EAGER,
        "tableTopics": TOPIC,
        "mapedFileSizeCommitLog": 1024 * 1024,
        # Compaction and vacuum as often as they go, so that kills land in them too.
        "tableTopicCompactionIntervalSeconds": 2,
        "tableTopicCompactionFiles": 3,
        "tableTopicVacuumRetentionHours": 0,
    }
    store = tmp_path / "store"
    table = Path(table_root(store)) / TOPIC
    watch = LogWatch(table / "_delta_log").start()

    pause = tmp_path / "pause-before-commit"
    monkeypatch.setenv(PAUSE_ENV, str(pause))
    server = BrokerProcess(tmp_path / "b0", conf, store=store).start()
    monkeypatch.delenv(PAUSE_ENV)
    sender = Sender(server.namesrv)
    try:
        # 1: killed with a commit's files written and not committed, after some commits.
        def released() -> bool:
            pause.unlink(missing_ok=True)
            return watch.version >= 3

        wait_until(released, "three commits", timeout=WAIT, why=server.log_tail, interval=0.05)
        wait_until(pause.exists, "a commit held", timeout=WAIT, why=server.log_tail)
        held = json.loads(pause.read_text())["files"]
        server.stop(kill=True)
        assert held and all((table / f).is_file() for f in held), "files written, not committed"
        pause.unlink()
        # 2..KILLS: killed as soon as the log moved on, wherever the next cycle then is.
        for k in range(1, KILLS + 1):
            server = BrokerProcess(tmp_path / f"b{k}", conf, store=store).start()
            sender.namesrv = server.namesrv
            if k == KILLS:
                break
            seen = watch.version
            wait_until(lambda s=seen: watch.version > s, "a commit", timeout=WAIT, why=server.log_tail)
            server.stop(kill=True)
        wait_until(lambda: len(sender.acked) > 0 and watch.version > 0, "sends", timeout=WAIT)
        sender.stop()
        wait_until(lambda: fully_tiered(store, TOPIC), "tiered", timeout=WAIT, why=server.log_tail)
        watch.look()
    finally:
        watch.stop()
        sender.stop()
        stop_ferromq(server)

    watch.check_unchanged()
    assert not watch.problems, "a reader could see:\n" + "\n".join(watch.problems[:20])
    assert watch.version >= KILLS, "the restarts committed"
    rows = read_arrow(table_root(store), TOPIC, columns=["queue_id", "queue_offset"])
    columns = (rows.column("queue_id").to_pylist(), rows.column("queue_offset").to_pylist())
    keys = list(zip(*columns, strict=True))
    assert len(keys) == len(set(keys)), "a row twice"
    ends = {q: hi for q, (_, hi) in log_bounds(store, TOPIC).items()}
    assert set(keys) == {(q, o) for q, hi in ends.items() for o in range(hi)}, "every offset of the log once"
    assert sender.acked <= set(keys)
    assert read_topic(spark, TOPIC, path=str(store)).count() == len(keys)
