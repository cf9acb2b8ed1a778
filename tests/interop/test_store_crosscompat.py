"""Store cross-compatibility with the real Apache RocketMQ 4.9.7 broker, both ways (and 5.5.0 reading a
ferromq store).

(a) Apache RocketMQ writes (tools/apache_rocketmq.py runs it), is stopped cleanly or killed with kill -9,
and ferromq opens the same store: `MessageStore` (read-only and read-write) reads every message at its queue
offset with the same ids, bodies, tags, keys and properties and finds them by key and by offsetMsgId; a
ferromq broker on that store serves every message exactly as the Java broker served it, resumes the group at
its committed offsets and delivers the still pending delayed messages when they are due.

(b) ferromq writes, is stopped cleanly or killed with kill -9 (SYNC_FLUSH), and the Java broker recovers the
store: it serves every message exactly as ferromq served it, resumes the group, delivers the pending delayed
messages, answers queries by key, and keeps the topics of config/topics.json with their queue counts.

The data set and the checks are in crosscompat_data.py; `java_store` here is the stopped Java-written store
other tests (e.g. the Spark reader's) can reuse through `tests.interop.crosscompat_data.java_written_store`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from apache_rocketmq import ROCKETMQ_55_VERSION, ROCKETMQ_VERSION, ApacheRocketMQ, have_java, start_rocketmq

from ferromq.client import Admin
from ferromq.jsonutil import loads_lenient
from ferromq.store import MessageStore
from ferromq.testing import BrokerProcess

from . import crosscompat_data as cc

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not have_java(), reason="the Apache RocketMQ broker needs `java` and `mvn` on PATH"),
    # Producing takes ~30 s per broker; the pending delayed messages are due 45 s after they were sent.
    pytest.mark.timeout(600),
]


# Java broker log lines that are not about the store: answers to long polls whose consumer had gone (netty
# logs each; 5.5.0 says "Failed to write response" of a PULL_MESSAGE, request code 11).
JAVA_BENIGN = (
    "processRequestWrapper response to",
    "Failed to write response[request code: 11,",
    "StacklessClosedChannelException",
    "RemotingCommand [code=",
)


def java_problems(mq: ApacheRocketMQ) -> list[str]:
    """ERROR lines of the Java broker's log. After its shutdown hook began only the store's count: the
    transaction checker's last round races the shutdown (rejected tasks, "message store has shutdown")."""
    text = mq.broker_log.read_text(encoding="utf-8", errors="replace")
    running, _, stopping = text.partition("Shutdown hook was invoked")
    problems = [
        line
        for line in running.splitlines()
        if (" ERROR " in line or "Exception" in line) and not any(b in line for b in JAVA_BENIGN)
    ]
    return problems + [
        line for line in stopping.splitlines() if " ERROR " in line and "RocketmqStore" in line
    ]


@dataclass
class WrittenStore:
    store: Path
    ds: cc.Dataset


@pytest.fixture(scope="module")
def java_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WrittenStore]:
    """The store Apache RocketMQ wrote and left after a clean shutdown (read by ferromq once while the
    Java broker was still running); tests copy it before writing."""
    live: list[dict[str, int]] = []

    def read_live(store: Path, ds: cc.Dataset) -> None:
        # A read-only view of the store the Java broker is still writing (what a Spark job would open).
        assert (store / "abort").exists(), "the Java broker should be running"
        with MessageStore.open_read_only(store, **cc.STORE_OPTIONS) as s:
            live.append(cc.check_store(s, ds))

    store, ds = cc.java_written_store(tmp_path_factory.mktemp("java-clean"), while_running=read_live)
    assert live and live[0]["messages"] == len(ds.messages) + len(ds.delayed_delivered)
    yield WrittenStore(store, ds)


def _read_only_check(store: Path, ds: cc.Dataset, *, crashed: bool) -> None:
    last, raw = cc.last_record(store)
    with MessageStore.open_read_only(store, **cc.STORE_OPTIONS) as s:
        stats = cc.check_store(s, ds)
        # The view maps whole files, but reports where the records end.
        assert s.max_physical_offset == last + len(raw)
    assert stats["messages"] == len(ds.messages) + len(ds.delayed_delivered)
    assert stats["compressed"] == sum(m.compressed for m in ds.messages) > 0
    assert len(list((store / "commitlog").iterdir())) >= 3, "the data set should span several CommitLog files"
    assert len(list((store / "index").iterdir())) >= 2, "the data set should span several index files"
    assert (store / "abort").exists() == crashed


def _read_write_check(store: Path, ds: cc.Dataset, *, crashed: bool, torn_at: int | None = None) -> None:
    with MessageStore(store, **cc.STORE_OPTIONS) as s:
        assert s.recovery["abnormal_exit"] == crashed
        if torn_at is not None:  # the torn record is cut off, nothing before it
            assert s.recovery["commitlog_end"] == torn_at and s.recovery["truncated_bytes"] > 0, s.recovery
        else:
            assert s.recovery["truncated_bytes"] == 0, s.recovery
        cc.check_store(s, ds)
    # ferromq's clean close leaves a store it reopens without recovery, still holding everything.
    with MessageStore(store, **cc.STORE_OPTIONS) as s:
        assert s.recovery["abnormal_exit"] is False
        cc.check_store(s, ds)


def _serve_check(workdir: Path, store: Path, ds: cc.Dataset) -> None:
    """A ferromq broker on the store serves the data set as the writer did, resumes GROUP where it committed
    and delivers the pending delayed messages on time."""
    with MessageStore.open_read_only(store, **cc.STORE_OPTIONS) as s:
        scheduled = cc.scheduled_records(s, ds)
    server = BrokerProcess(workdir, cc.BROKER_CONF, store=store).start()
    try:
        got = asyncio.run(cc.consume_all(server.namesrv, "CC_Fresh", ds.queue_ends()))
        cc.check_served(got, ds)
        ends = {k: e for k, e in ds.queue_ends().items() if k in ds.committed}
        resumed = asyncio.run(cc.consume_all(server.namesrv, cc.GROUP, ends, from_committed=True))
        cc.check_served(resumed, ds, start=ds.committed)
        _check_tag_filtered(server.namesrv, ds)
        asyncio.run(_check_topics(server.namesrv))
        asyncio.run(cc.check_queries(server.namesrv, server.broker_addr, ds))
        asyncio.run(cc.receive_pending(server.namesrv, ds, scheduled))
    except BaseException:
        print(server.log_tail(200))
        raise
    finally:
        code = server.stop()
    assert code == 0, server.log_tail()
    assert not server.errors(), "\n".join(server.errors()[:20])


def _check_tag_filtered(namesrv: str, ds: cc.Dataset) -> None:
    """Tag subscriptions, filtered by the broker with the other broker's consume queue tags codes, get
    exactly the messages with those tags."""
    for topic, expression in (("CC_Plain", "TagB || TagC"), ("CC_Batch", "B1"), ("CC_Zip", "Noise")):
        tags = set(expression.split(" || "))
        ends = {k: e for k, e in ds.queue_ends().items() if k[0] == topic}
        got = asyncio.run(cc.consume_all(namesrv, f"CC_Tags_{topic}", ends, expression=expression))
        want = {
            (m.topic, m.queue_id, m.queue_offset) for m in ds.messages if m.topic == topic and m.tags in tags
        }
        assert set(got) == want, f"{topic} {expression}: {len(got)} received, {len(want)} expected"


async def _check_topics(namesrv: str) -> None:
    async with Admin(namesrv) as admin:
        for topic, n in cc.TOPICS.items():
            route = await admin.topic_route(topic)
            assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [
                (cc.BROKER_NAME, n, n)
            ], route


# -- (a) Apache RocketMQ writes, ferromq reads ---------------------------------------------------


def test_ferromq_reads_java_store(java_store: WrittenStore, tmp_path: Path) -> None:
    _read_only_check(java_store.store, java_store.ds, crashed=False)
    _read_write_check(cc.copy_store(java_store.store, tmp_path / "store"), java_store.ds, crashed=False)


def test_ferromq_serves_java_store(java_store: WrittenStore, tmp_path: Path) -> None:
    _serve_check(tmp_path, cc.copy_store(java_store.store, tmp_path / "store"), java_store.ds)


def test_ferromq_recovers_java_store_after_kill9(tmp_path: Path) -> None:
    store, ds = cc.java_written_store(tmp_path / "java", kill=True)
    _read_only_check(store, ds, crashed=True)
    _read_write_check(cc.copy_store(store, tmp_path / "rw" / "store"), ds, crashed=True)
    # And with the last append torn by the crash.
    torn = cc.copy_store(store, tmp_path / "torn" / "store")
    _read_write_check(torn, ds, crashed=True, torn_at=cc.tear_tail(torn))
    (tmp_path / "serve").mkdir()
    _serve_check(tmp_path / "serve", cc.copy_store(store, tmp_path / "serve" / "store"), ds)


# -- (b) ferromq writes, Apache RocketMQ reads ---------------------------------------------------


@pytest.mark.parametrize(
    ("kill", "version"),
    [(False, ROCKETMQ_VERSION), (True, ROCKETMQ_VERSION), (False, ROCKETMQ_55_VERSION)],
    ids=["clean-stop", "kill-9", "clean-stop-5.5.0"],
)
def test_java_reads_ferromq_store(java_store: WrittenStore, tmp_path: Path, kill: bool, version: str) -> None:
    """Apache RocketMQ 4.9.7 (and 5.5.0, RocketMQ 5.5's reference) recovers and serves a store ferromq
    wrote."""
    root = tmp_path / "java"
    store = root / "store"
    conf = {**cc.BROKER_CONF, "flushDiskType": "SYNC_FLUSH" if kill else "ASYNC_FLUSH"}
    server = BrokerProcess(tmp_path, conf, store=store).start()
    try:
        ds = asyncio.run(cc.produce(server.namesrv, store))
    except BaseException:
        server.stop(kill=True)
        print(server.log_tail(200))
        raise
    pending_sent = time.monotonic()
    code = server.stop(kill=kill)
    ran = time.monotonic() - pending_sent
    assert ran < cc.DELAY_MS[cc.PENDING_LEVEL] / 1000, (
        f"the writer ran {ran:.0f} s more: pending messages fell due"
    )
    if not kill:
        assert code == 0, server.log_tail()
        assert not server.errors(), "\n".join(server.errors()[:20])
    _read_only_check(store, ds, crashed=kill)
    # Byte for byte what Apache RocketMQ stored for the same sends (properties, flags, bodies).
    assert cc.same_records(java_store.store, store) == len(ds.messages) + 2 * len(ds.delayed_delivered) + len(
        ds.delayed_pending
    )
    with MessageStore.open_read_only(store, **cc.STORE_OPTIONS) as s:
        scheduled = cc.scheduled_records(s, ds)
    if kill:
        # The crash also tore the last append: the Java broker's recovery must cut it and keep the rest.
        cc.tear_tail(store)

    mq = start_rocketmq(root, cc.BROKER_CONF, version=version)
    try:
        got = asyncio.run(cc.consume_all(mq.namesrv, "CC_Fresh", ds.queue_ends()))
        cc.check_served(got, ds)
        ends = {k: e for k, e in ds.queue_ends().items() if k in ds.committed}
        resumed = asyncio.run(cc.consume_all(mq.namesrv, cc.GROUP, ends, from_committed=True))
        cc.check_served(resumed, ds, start=ds.committed)
        _check_tag_filtered(mq.namesrv, ds)
        asyncio.run(_check_topics(mq.namesrv))
        asyncio.run(cc.check_queries(mq.namesrv, mq.broker_addr, ds))
        asyncio.run(cc.receive_pending(mq.namesrv, ds, scheduled))
    except BaseException:
        mq.stop()
        print(mq.log_tail(200))
        raise
    mq.stop()
    assert not (store / "abort").exists(), mq.log_tail()
    # The Java broker rewrote config/topics.json on shutdown and kept every topic with its queue counts.
    topics = loads_lenient((store / "config" / "topics.json").read_bytes())["topicConfigTable"]
    for topic, n in cc.TOPICS.items():
        assert (topics[topic]["readQueueNums"], topics[topic]["writeQueueNums"]) == (n, n), topics[topic]
    offsets = loads_lenient((store / "config" / "consumerOffset.json").read_bytes())["offsetTable"]
    for (topic, q), committed in ds.committed.items():
        assert int(offsets[f"{topic}@{cc.GROUP}"][str(q)]) == committed
    log = mq.broker_log.read_text(encoding="utf-8", errors="replace")
    assert f"last shutdown {'abnormally' if kill else 'normally'}" in log
    assert ("CRC check failed" in log) == kill, "the Java recovery should have rejected the torn record"
    problems = java_problems(mq)
    assert not problems, "\n".join(problems[:30])


# -- transactions pending in one broker's store, finished by the other -----------------------------


def test_ferromq_finishes_java_transactions(tmp_path: Path) -> None:
    """Half messages Apache RocketMQ stored and left pending are checked and committed or rolled back by a
    ferromq broker on its store; the ones Java committed or rolled back (its op messages) are not asked
    about again."""
    mq = start_rocketmq(tmp_path / "java", {**cc.BROKER_CONF, **cc.TX_WRITER_CONF})
    try:
        sent = asyncio.run(cc.produce_transactions(mq.namesrv, mq.broker_addr))
    finally:
        mq.stop()
    server = BrokerProcess(tmp_path, {**cc.BROKER_CONF, **cc.TX_READER_CONF}, store=mq.store).start()
    try:
        asyncio.run(cc.finish_transactions(server.namesrv, sent))
    except BaseException:
        print(server.log_tail(200))
        raise
    finally:
        code = server.stop()
    assert code == 0, server.log_tail()
    assert not server.errors(), "\n".join(server.errors()[:20])


def test_java_finishes_ferromq_transactions(tmp_path: Path) -> None:
    """The same the other way: ferromq's half and op messages (and its CID_RMQ_SYS_TRANS offsets) as the
    Java broker's transaction checker reads them."""
    root = tmp_path / "java"
    server = BrokerProcess(tmp_path, {**cc.BROKER_CONF, **cc.TX_WRITER_CONF}, store=root / "store").start()
    try:
        sent = asyncio.run(cc.produce_transactions(server.namesrv, server.broker_addr))
    finally:
        code = server.stop()
    assert code == 0, server.log_tail()
    mq = start_rocketmq(root, {**cc.BROKER_CONF, **cc.TX_READER_CONF})
    try:
        asyncio.run(cc.finish_transactions(mq.namesrv, sent))
    except BaseException:
        mq.stop()
        print(mq.log_tail(200))
        raise
    mq.stop()
    problems = java_problems(mq)
    assert not problems, "\n".join(problems[:30])
