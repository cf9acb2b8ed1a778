"""Apache RocketMQ 5.5.0 as the second 5.x reference beside 5.3.3 (issue 43): the launcher starts its broker
(`start_rocketmq(root, version="5.5.0")`) and its proxy (`start_rocketmq_proxy(root, version="5.5.0")`),
ferromq's Python client sends and pulls through the broker over remoting, the official Python 5.x client
sends, receives and acks through the proxy over gRPC, and the store the 5.5.0 broker wrote (plain, tagged,
keyed messages and a delayed one still pending), stopped cleanly, is read back whole by ferromq's
`MessageStore.open_read_only`.

What 5.5.0's store looks like beside 5.3.3's, with 5.5.0's default engines (its MessageStoreConfig:
timerRocksDBEnable, transRocksDBEnable and indexRocksDBEnable false, storeType "default", the JSON config
managers; RIP-82's RocksDB timer / transaction / index engines are opt-in):

- the same files where ferromq looks: commitlog/<20-digit offset>, consumequeue/<topic>/<queue>/<offset>,
  index/<timestamp>, checkpoint, config/{topics,consumerOffset,subscriptionGroup,delayOffset}.json; the
  same record format (ferromq reads every message, tag and key of them) and the same SCHEDULE_TOPIC_XXXX
  queues for delay levels (5.x's timer wheel does not take delay levels unless timerInterceptDelayLevel);
- one directory more: storePathRootDir/rocksdbstore, a RocksDB (column families default = index, timer,
  trans) that 5.5.0's DefaultMessageStore opens whatever the engines (MessageRocksDBStorage); with the
  default engines nothing is written into it but RocksDB's own files (its write-ahead log stays empty).
  ferromq ignores it; a store that used the RocksDB engines would keep its timer / transaction / index
  records there, which ferromq does not read (not tested here);
- the rest ferromq ignores as it does 5.3.3's: timerwheel, config/timercheck, config/timermetrics,
  config/transactionMetrics, config/consumerFilter.json, config/consumerOrderInfo.json, compaction/, lock,
  abort.bak and the *.bak copies of the config files.

Beside the store: 5.5.0's proxy refuses a gRPC consumer of a group the broker does not have, even with
autoCreateSubscriptionGroup=true: the consumer's Telemetry settings are answered "group not found"
(ILLEGAL_CONSUMER_GROUP; ClientProcessor.registerConsumer reads the group's config for RIP-83's lite bind
topic first), and its ReceiveMessage then fails with 50001 (a NullPointerException: no settings). 5.3.3
made such a group on first use; side-by-side tests against 5.5.0 create their groups.

One broker and one proxy for the module: the broker's store is read, so it stops with SIGTERM; the proxy's
is not, so it ends with kill -9.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from apache_rocketmq import (
    ROCKETMQ_5_VERSION,
    ROCKETMQ_55_VERSION,
    ApacheRocketMQ,
    ApacheRocketMQProxy,
    have_java,
    start_rocketmq,
)

from ferromq.client import Admin, ConsumeFromWhere, Message, MessageQueue, Producer, PullConsumer
from ferromq.jsonutil import loads_lenient
from ferromq.message import decode_messages
from ferromq.store import MessageStore
from tests.interop.test_apache_proxy_launcher import COUNT, _read, _run_client
from tests.interop.test_apache_proxy_launcher import GROUP as GRPC_GROUP
from tests.interop.test_apache_proxy_launcher import TOPIC as GRPC_TOPIC

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="the Apache RocketMQ launcher needs `java` and `mvn` on PATH"),
    # The first run resolves the 5.5.0 jars from Maven Central and makes the 5.x client's environment.
    pytest.mark.timeout(900),
]

TOPIC = "R55Topic"
QUEUES = 2
GROUP = "R55Group"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# Level 4 is ten minutes: the delayed message is still pending when the broker stops, however slow.
DELAY_LEVELS = "1s 2s 3s 10m"
PENDING_LEVEL = 4
COMMITLOG_FILE_SIZE = 1 << 20
CQ_FILE_SIZE = 20 * 100
BROKER_CONF = {
    "mappedFileSizeCommitLog": str(COMMITLOG_FILE_SIZE),
    "mappedFileSizeConsumeQueue": str(CQ_FILE_SIZE),
    "maxHashSlotNum": "1000",
    "maxIndexNum": "4000",
    "messageDelayLevel": DELAY_LEVELS,
}
STORE_OPTIONS: dict[str, object] = {
    "mapped_file_size_commitlog": COMMITLOG_FILE_SIZE,
    "mapped_file_size_consume_queue": CQ_FILE_SIZE,
    "max_hash_slot_num": 1000,
    "max_index_num": 4000,
    "message_delay_level": DELAY_LEVELS,
}
# (body, tags, keys) of the messages sent; the last one is delayed.
MESSAGES: list[tuple[bytes, str | None, list[str]]] = [
    (b"plain", None, []),
    (b"tagged", "TagA", []),
    (b"keyed", None, ["k-one", "k-two"]),
    ("tagged and keyed h\u00e9llo \u4e2d\u6587".encode(), "TagB", ["k-three"]),
    (b"\x00\xff binary", "TagA", ["k-four"]),
    (b"delayed, pending", "TagD", ["k-delayed"]),
]
# What 5.5.0 writes in the store root with its default engines; rocksdbstore is what 5.3.3 has not.
STORE_ROOT_55 = {
    "abort.bak",
    "checkpoint",
    "commitlog",
    "compaction",
    "config",
    "consumequeue",
    "index",
    "lock",
    "rocksdbstore",
    "timerwheel",
}


@dataclass(frozen=True)
class Sent:
    body: bytes
    tags: str | None
    keys: tuple[str, ...]
    msg_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    delayed: bool


@dataclass
class Written:
    """What the 5.5.0 broker was sent and served, and the broker (stopped)."""

    mq: ApacheRocketMQ
    sent: list[Sent]
    pulled: list[tuple[str, bytes, str | None]]


async def _send_and_pull(mq: ApacheRocketMQ) -> tuple[list[Sent], list[tuple[str, bytes, str | None]]]:
    async with Admin(mq.namesrv, timeout=30.0) as admin:
        await admin.create_topic(TOPIC, QUEUES)
    sent: list[Sent] = []
    async with Producer("R55Producer", mq.namesrv, send_timeout=10.0) as producer:
        for _ in range(100):  # the route shows up once the broker re-registered
            try:
                if len(await producer.publish_queues(TOPIC)) == QUEUES:
                    break
            except Exception:
                pass
            await asyncio.sleep(0.1)
        for i, (body, tags, keys) in enumerate(MESSAGES):
            delayed = i == len(MESSAGES) - 1
            m = Message(
                TOPIC, body, tags=tags, keys=keys or None, delay_level=PENDING_LEVEL if delayed else 0
            )
            r = await producer.send(m)
            sent.append(
                Sent(
                    body,
                    tags,
                    tuple(keys),
                    r.msg_id,
                    r.offset_msg_id,
                    r.message_queue.queue_id,
                    r.queue_offset,
                    delayed,
                )
            )
    pulled: list[tuple[str, bytes, str | None]] = []
    consumer = PullConsumer(
        GROUP, mq.namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, auto_commit=False
    )
    async with consumer:
        consumer.subscribe(TOPIC, "*")
        ends: dict[MessageQueue, int] = {}
        for _ in range(60):
            for m in await consumer.poll(timeout=1.0):
                pulled.append((m.msg_id, m.body, m.tags))
                ends[m.queue] = max(ends.get(m.queue, 0), m.queue_offset + 1)
            if len(pulled) >= len(MESSAGES) - 1:
                break
        await consumer.commit(ends)
    return sent, pulled


async def _create_group(namesrv: str, group: str) -> None:
    async with Admin(namesrv, timeout=30.0) as admin:
        await admin.create_group(group)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    """A 5.5.0 broker, sent the messages (one delayed past the module's end) and pulled from by ferromq's
    client, then stopped with SIGTERM (its store is read)."""
    mq = start_rocketmq(tmp_path_factory.mktemp("rocketmq55"), BROKER_CONF, version=ROCKETMQ_55_VERSION)
    try:
        assert mq.version == "5.5.0" and mq.running() and mq.broker_pid > 0
        sent, pulled = asyncio.run(asyncio.wait_for(_send_and_pull(mq), 180))
    except BaseException:
        mq.stop(kill=True)
        raise
    mq.stop()
    yield Written(mq, sent, pulled)


def test_versions() -> None:
    """5.3.3 stays the default 5.x reference; 5.5.0 is there beside it."""
    assert (ROCKETMQ_5_VERSION, ROCKETMQ_55_VERSION) == ("5.3.3", "5.5.0")


def test_broker_remoting_roundtrip_and_clean_stop(written: Written) -> None:
    mq = written.mq
    plain = [s for s in written.sent if not s.delayed]
    assert sorted(written.pulled) == sorted((s.msg_id, s.body, s.tags) for s in plain), mq.log_tail()
    # SIGTERM ended both JVMs through their shutdown hooks (128 + 15), leaving no abort file.
    assert mq.broker_exit == 143 and mq.namesrv_exit == 143, mq.log_tail()
    assert not (mq.store / "abort").exists(), mq.log_tail()
    offsets = loads_lenient((mq.store / "config" / "consumerOffset.json").read_text())["offsetTable"]
    assert sum(offsets[f"{TOPIC}@{GROUP}"].values()) == len(plain), offsets


def test_ferromq_reads_the_55_store(written: Written) -> None:
    """Every message the 5.5.0 broker stored, read by ferromq: at its queue offset with its ids, body, tags
    and keys; the pending delayed one in its level's schedule queue; lookups by key and by offsetMsgId."""
    plain = {s.msg_id: s for s in written.sent if not s.delayed}
    (pending,) = [s for s in written.sent if s.delayed]
    with MessageStore.open_read_only(written.mq.store, **STORE_OPTIONS) as store:
        found = {}
        for q in range(QUEUES):
            assert store.min_offset(TOPIC, q) == 0
            end = store.max_offset(TOPIC, q)
            for m in store.get_messages(TOPIC, q, 0, end):
                found[m.uniq_key] = m
                want = plain[m.uniq_key or ""]
                assert (m.queue_id, m.queue_offset) == (want.queue_id, want.queue_offset), m
                assert (m.payload(), m.tags, tuple(m.keys)) == (want.body, want.tags, want.keys), m
                assert m.msg_id == want.offset_msg_id
        assert set(found) == set(plain)
        # Tag filtering reads the consume queue units' tags codes.
        for s in plain.values():
            if s.tags:
                r = store.get(TOPIC, s.queue_id, 0, 64, 1 << 30, s.tags)
                assert r.body and s.body in {m.payload() for m in decode_messages(r.body)}
        sched_q = PENDING_LEVEL - 1
        sched = store.get_messages(SCHEDULE_TOPIC, sched_q, 0, store.max_offset(SCHEDULE_TOPIC, sched_q))
        (m,) = [m for m in sched if m.uniq_key == pending.msg_id]
        assert m.properties["REAL_TOPIC"] == TOPIC and m.properties["DELAY"] == str(PENDING_LEVEL)
        assert (m.payload(), m.tags, tuple(m.keys)) == (pending.body, pending.tags, pending.keys)
        for s in written.sent:
            by_id = store.look_message_by_id(s.offset_msg_id)
            assert by_id is not None and by_id.uniq_key == s.msg_id
            # The index names a record by the topic it is stored under: the pending one's is the schedule's.
            for key in s.keys:
                topic = SCHEDULE_TOPIC if s.delayed else TOPIC
                assert [m.uniq_key for m in store.query(topic, key)] == [s.msg_id], key


def test_55_store_layout(written: Written) -> None:
    """The files ferromq reads are where it looks; what else 5.5.0 writes is listed (module docstring)."""
    store = written.mq.store
    files = sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())
    assert {p.name for p in store.iterdir()} == STORE_ROOT_55, files
    assert (store / "commitlog" / f"{0:020d}").stat().st_size == COMMITLOG_FILE_SIZE
    for q in {s.queue_id for s in written.sent if not s.delayed}:
        assert (store / "consumequeue" / TOPIC / str(q) / f"{0:020d}").stat().st_size == CQ_FILE_SIZE
    assert (store / "consumequeue" / SCHEDULE_TOPIC / str(PENDING_LEVEL - 1) / f"{0:020d}").is_file()
    assert [p.name.isdigit() and len(p.name) == 17 for p in (store / "index").iterdir()] == [True], files
    assert (store / "checkpoint").stat().st_size == 4096
    for name in ("topics", "consumerOffset", "subscriptionGroup", "delayOffset"):
        assert (store / "config" / f"{name}.json").is_file(), files
    topics = loads_lenient((store / "config" / "topics.json").read_text())["topicConfigTable"]
    assert topics[TOPIC]["readQueueNums"] == QUEUES
    # 5.5.0's RocksDB for the timer / transaction / index engines, opened though they are off.
    assert (store / "rocksdbstore" / "CURRENT").is_file(), files
    wal = list((store / "rocksdbstore").glob("*.log"))
    assert wal and all(p.stat().st_size == 0 for p in wal), files  # the default engines wrote nothing


def test_proxy_grpc_roundtrip(
    proxy55: ApacheRocketMQProxy, tmp_path: Path, failure_sections: list[tuple[str, Callable[[], str]]]
) -> None:
    """The official Python 5.x client sends, receives and acks through 5.5.0's proxy (the harness of
    tests/interop/test_apache_proxy_launcher.py)."""
    failure_sections.append(("Apache RocketMQ 5.5.0 proxy logs", proxy55.log_tail))
    failure_sections.append(
        ("Python 5.x client log", lambda: _read(tmp_path / "client" / "logs" / "rocketmq_python"))
    )
    assert proxy55.version == "5.5.0" and proxy55.running()
    proxy55.create_topic(GRPC_TOPIC)
    # 5.5.0's proxy refuses a consumer whose group does not exist (ClientProcessor.registerConsumer asks the
    # group's config for its lite bind topic; 40xxx ILLEGAL_CONSUMER_GROUP "group not found"), whatever
    # autoCreateSubscriptionGroup says; 5.3.3's made the group on first use. ferromq's Admin makes it.
    asyncio.run(asyncio.wait_for(_create_group(proxy55.namesrv, GRPC_GROUP), 60))
    result = _run_client(proxy55, tmp_path / "client")
    bodies = [f"proxy launcher {i}" for i in range(COUNT)]
    assert [m["body"] for m in result["sent"]] == bodies
    assert sorted(m["body"] for m in result["received"]) == bodies, result
    assert {m["message_id"] for m in result["received"]} == {m["message_id"] for m in result["sent"]}
    assert result["acked"] == [m["message_id"] for m in result["received"]]
