"""Store cross-compatibility between ferromq and Apache RocketMQ 4.9.7: the data set, how it is produced
through a running broker (either kind), and how a store or a serving broker is checked against it.

`produce()` sends, with ferromq's Python client, messages of several topics and queues: tags, one or several
keys, user properties (non-ASCII included), bodies big enough to be zlib-compressed (and incompressible ones
that are not), batches, delayed messages (some delivered before the broker stops, some still pending), and
commits a consumer group's offsets. It returns a `Dataset`: every message as sent, where the broker put it
(queue, offset, ids), the committed offsets and what the broker served back (`served`), so a store written
by one broker can be compared, record for record, with what the other one reads and serves.

Both brokers use the same `BROKER_CONF` keys (small CommitLog and ConsumeQueue files, small index files, a
short delay table), so either can open the other's store. `java_written_store()` makes the store a Java broker
wrote (stopped cleanly or killed), for tests of other readers (the Spark source) to reuse.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ferromq.client import (
    Admin,
    ConsumeFromWhere,
    LocalTransactionState,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    ReceivedMessage,
    TransactionProducer,
)
from ferromq.client.admin import decode_offset_msg_id
from ferromq.client.message import decode_received
from ferromq.jsonutil import loads_lenient
from ferromq.message import StoredMessage, decode_messages
from ferromq.protocol.codes import RequestCode
from ferromq.protocol.command import RemotingCommand
from ferromq.store import MessageStore
from ferromq.testing.waiting import until

BROKER_NAME = "broker-a"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# Level 1..3 are delivered before the writer stops; level 4 is still pending then, and through the
# reader's first pass over the data set (45 s: a loaded machine needs most of it for the writer's
# stop, the reader's start and that pass; `java_written_store` checks the writer stopped in time).
DELAY_LEVELS = "1s 2s 3s 45s 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
DELAY_MS = {1: 1000, 2: 2000, 3: 3000, 4: 45_000}
PENDING_LEVEL = 4
CQ_UNITS_PER_FILE = 100
COMMITLOG_FILE_SIZE = 1 << 20
# Index files of 2,500 entries: the data set's ~6,000 keys and ids fill several.
HASH_SLOTS = 1000
INDEX_ENTRIES = 2500

# The same keys mean the same thing to both brokers (RocketMQ's names; ferromq reads broker.conf too).
BROKER_CONF: dict[str, str] = {
    "brokerName": BROKER_NAME,
    "brokerClusterName": "DefaultCluster",
    "mappedFileSizeCommitLog": str(COMMITLOG_FILE_SIZE),
    "mappedFileSizeConsumeQueue": str(CQ_UNITS_PER_FILE * 20),
    "maxHashSlotNum": str(HASH_SLOTS),
    "maxIndexNum": str(INDEX_ENTRIES),
    "messageDelayLevel": DELAY_LEVELS,
    # Offsets reach config/*.json within a second, so a kill -9 after they are on disk loses none.
    "flushConsumerOffsetInterval": "1000",
    "flushDelayOffsetInterval": "1000",
    "autoCreateTopicEnable": "true",
}
# What MessageStore needs to open such a store itself.
STORE_OPTIONS: dict[str, object] = {
    "mapped_file_size_commitlog": COMMITLOG_FILE_SIZE,
    "mapped_file_size_consume_queue": CQ_UNITS_PER_FILE * 20,
    "max_hash_slot_num": HASH_SLOTS,
    "max_index_num": INDEX_ENTRIES,
    "message_delay_level": DELAY_LEVELS,
}

# A Java broker writes topics.json and re-registers before it answers a topic creation: on a loaded
# machine that takes longer than the 5 s default.
ADMIN_TIMEOUT = 30.0
TOPICS = {"CC_Plain": 4, "CC_Zip": 2, "CC_Batch": 3, "CC_Delay": 2}
GROUP = "CC_Group"
NOTE = "h\u00e9llo \u2192 \u2713 \u4e2d\u6587 \U0001f680"
N_PLAIN = 1800
N_ZIP = 40
N_RANDOM = 10
N_BATCHES = 30
BATCH = 10
N_DELAY_EACH = 12
# ferromq's client compresses bodies above this many bytes (as the official clients do).
COMPRESS_OVER = 4096
COMPRESSED_FLAG = 0x1
SYSTEM_PROPS = {
    "TAGS",
    "KEYS",
    "UNIQ_KEY",
    "WAIT",
    "DELAY",
    "REAL_TOPIC",
    "REAL_QID",
    "MIN_OFFSET",
    "MAX_OFFSET",
}


@dataclass(frozen=True)
class Sent:
    """One message as sent, and where the broker stored it. Delayed messages: `queue_offset` is None until
    delivery gives them one in their real topic; `offset_msg_id` names the SCHEDULE_TOPIC_XXXX record."""

    topic: str
    queue_id: int
    queue_offset: int | None
    msg_id: str
    offset_msg_id: str
    body: bytes
    tags: str | None
    keys: tuple[str, ...]
    user_props: tuple[tuple[str, str], ...]
    delay_level: int = 0

    @property
    def compressed(self) -> bool:
        return self.delay_level == 0 and len(self.body) > COMPRESS_OVER and _compressible(self.body)


def _compressible(body: bytes) -> bool:
    import zlib

    return len(zlib.compress(body, 5)) < len(body)


@dataclass
class Dataset:
    messages: list[Sent]
    """Not delayed: at their queue offsets."""
    delayed_delivered: list[Sent]
    delayed_pending: list[Sent]
    committed: dict[tuple[str, int], int]
    """GROUP's committed offsets (topic, queue) -> next offset."""
    served: dict[str, ReceivedMessage] = field(default_factory=dict)
    """What the writing broker served to a fresh group before it stopped, by msg_id (UNIQ_KEY)."""

    def by_position(self) -> dict[tuple[str, int, int], Sent]:
        return {(m.topic, m.queue_id, m.queue_offset): m for m in self.messages if m.queue_offset is not None}

    def queue_ends(self) -> dict[tuple[str, int], int]:
        """Every queue of every topic -> its expected max offset (delayed messages included)."""
        ends = {(t, q): 0 for t, n in TOPICS.items() for q in range(n)}
        for m in self.messages:
            assert m.queue_offset is not None
            ends[(m.topic, m.queue_id)] = max(ends[(m.topic, m.queue_id)], m.queue_offset + 1)
        for m in self.delayed_delivered:
            ends[(m.topic, m.queue_id)] += 1
        return ends


# -- producing ---------------------------------------------------------------------------------


def _text_body(rng: random.Random, i: int, size: int) -> bytes:
    words = [f"w{rng.randrange(50)}" for _ in range(size // 3 + 1)]
    return f"#{i} {NOTE} ".encode() + " ".join(words).encode()[:size]


def _noise(rng: random.Random, size: int) -> bytes:
    return bytes(rng.getrandbits(8) for _ in range(size))


async def _send_window(
    producer: Producer, msgs: list[Message], window: int = 24, queues: list[MessageQueue] | None = None
) -> list[Sent]:
    """Sends `window` messages at a time; message i to `queues[i % len(queues)]` when given (else
    the producer picks, in whatever order the concurrent sends get to it)."""
    out: list[Sent] = []
    for start in range(0, len(msgs), window):
        chunk = msgs[start : start + window]
        sends = [
            producer.send(m, queue=queues[(start + i) % len(queues)] if queues else None)
            for i, m in enumerate(chunk)
        ]
        results = await asyncio.gather(*sends)
        for m, r in zip(chunk, results, strict=True):
            out.append(_sent(m, r.message_queue.queue_id, r.queue_offset, r.msg_id, r.offset_msg_id))
    return out


def _sent(m: Message, queue_id: int, offset: int | None, msg_id: str, offset_msg_id: str) -> Sent:
    keys = (m.keys,) if isinstance(m.keys, str) else tuple(m.keys or ())
    return Sent(
        m.topic,
        queue_id,
        offset if m.delay_level == 0 else None,
        msg_id,
        offset_msg_id,
        m.body,
        m.tags,
        tuple(k for key in keys for k in key.split(" ") if k),
        tuple(sorted(m.properties.items())),
        m.delay_level,
    )


async def _max_offsets(admin: Admin, topic: str) -> dict[int, int]:
    return {q: await admin.max_offset(MessageQueue(topic, BROKER_NAME, q)) for q in range(TOPICS[topic])}


async def produce(namesrv: str, store_root: Path, *, seed: int = 7) -> Dataset:
    """Sends the data set through the broker behind `namesrv` (whose store is `store_root`), commits GROUP's
    offsets, reads everything back once with a fresh group, and sends the pending delayed messages last.
    Returns once consumer and delay offsets are in the store's config files (so a kill -9 right after keeps
    them)."""
    rng = random.Random(seed)
    async with Admin(namesrv, timeout=ADMIN_TIMEOUT) as admin:
        for topic, n in TOPICS.items():
            await admin.create_topic(topic, n)
        async with Producer("CC_Producer", namesrv, send_timeout=10.0) as producer:
            for topic in TOPICS:
                for _ in range(100):  # the route shows up once the broker re-registered
                    with contextlib.suppress(Exception):
                        if len(await producer.publish_queues(topic)) == TOPICS[topic]:
                            break
                    await asyncio.sleep(0.1)
            plain = []
            for i in range(N_PLAIN):
                keys: list[str] = [f"plain-{i}"] + ([f"shared-{i % 40}"] if i % 3 == 0 else [])
                plain.append(
                    Message(
                        "CC_Plain",
                        _text_body(rng, i, rng.randrange(100, 3000)),
                        tags=("TagA", "TagB", "TagC")[i % 3],
                        keys=keys,
                        properties={"u.idx": str(i), "u.note": NOTE, "u.k\u00ebY": f"v{i}\u00e4"},
                    )
                )
            messages = await _send_window(producer, plain)
            zips = [
                Message(
                    "CC_Zip",
                    _text_body(rng, i, rng.randrange(COMPRESS_OVER + 1, 40_000)),
                    tags="Zip",
                    keys=f"zip-{i}",
                    properties={"u.idx": str(i)},
                )
                for i in range(N_ZIP)
            ]
            zips += [
                Message("CC_Zip", _noise(rng, 5000 + i), tags="Noise", keys=f"noise-{i}")
                for i in range(N_RANDOM)
            ]
            zips.append(Message("CC_Zip", b"x" * COMPRESS_OVER, tags="Edge", keys="edge"))
            messages += await _send_window(producer, zips, window=8)
            for b in range(N_BATCHES):
                batch = [
                    Message(
                        "CC_Batch",
                        _text_body(rng, b * BATCH + j, rng.randrange(10, 600)),
                        tags=f"B{j % 2}",
                        keys=[f"batch-{b}-{j}", f"batch-{b}"],
                        properties={"u.batch": str(b), "u.j": str(j), "u.note": NOTE},
                    )
                    for j in range(BATCH)
                ]
                r = await producer.send_batch(batch)
                ids, offset_ids = r.msg_id.split(","), r.offset_msg_id.split(",")
                assert len(ids) == len(offset_ids) == BATCH, r
                for j, m in enumerate(batch):
                    messages.append(
                        _sent(m, r.message_queue.queue_id, r.queue_offset + j, ids[j], offset_ids[j])
                    )
            delayed = [
                Message(
                    "CC_Delay",
                    f"delay {lvl}/{i} {NOTE}".encode(),
                    tags=f"D{lvl}",
                    keys=f"delay-{lvl}-{i}",
                    properties={"u.level": str(lvl)},
                    delay_level=lvl,
                )
                for lvl in (1, 2, 3)
                for i in range(N_DELAY_EACH)
            ]
            # Explicit queues: a delayed message's queue is stored in its properties (REAL_QID), and
            # the records are compared with the Java broker's for the same sends.
            delay_queues = sorted(await producer.publish_queues("CC_Delay"), key=lambda q: q.queue_id)
            delivered = await _send_window(producer, delayed, window=6, queues=delay_queues)
            n_delivered = len(delivered)

            async def all_delivered() -> bool:
                return sum((await _max_offsets(admin, "CC_Delay")).values()) >= n_delivered

            await until(all_delivered, "the delayed messages of levels 1-3", timeout=60, interval=0.2)

            # GROUP consumes part: a real poll from the first offsets, then explicit commits (about half of
            # CC_Plain and CC_Batch, nothing of CC_Zip).
            committed: dict[tuple[str, int], int] = {}
            ends = {t: await _max_offsets(admin, t) for t in ("CC_Plain", "CC_Batch")}
            for t, per_q in ends.items():
                for q, end in per_q.items():
                    committed[(t, q)] = end // 2 + q
            consumer = PullConsumer(
                GROUP,
                namesrv,
                auto_commit=False,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            )
            async with consumer:
                consumer.assign([MessageQueue(t, BROKER_NAME, q) for (t, q) in committed])
                seen: dict[tuple[str, int], int] = {}
                deadline = time.monotonic() + 60
                while any(seen.get(k, 0) < v for k, v in committed.items()) and time.monotonic() < deadline:
                    for m in await consumer.poll(timeout=1.0):
                        k = (m.topic, m.queue.queue_id)
                        seen[k] = max(seen.get(k, 0), m.queue_offset + 1)
                assert all(seen.get(k, 0) >= v for k, v in committed.items()), (seen, committed)
                # One at a time: Apache RocketMQ 4.9.7's ConsumerOffsetManager.commitOffset creates a new
                # topic@group table with get-then-put, so concurrent first commits can lose queues.
                for (t, q), o in committed.items():
                    await consumer.commit({MessageQueue(t, BROKER_NAME, q): o})

            served = await consume_all(namesrv, "CC_Reader", queue_ends(messages, delivered))

            def offsets_on_disk() -> bool:
                try:
                    table = loads_lenient((store_root / "config" / "consumerOffset.json").read_bytes())
                    delay = loads_lenient((store_root / "config" / "delayOffset.json").read_bytes())
                except (OSError, ValueError):
                    return False
                got = table.get("offsetTable", {})
                ok = all(
                    int(got.get(f"{t}@{GROUP}", {}).get(str(q), -1)) == o for (t, q), o in committed.items()
                )
                levels = {int(k): int(v) for k, v in delay.get("offsetTable", {}).items()}
                return ok and all(levels.get(lvl, 0) >= N_DELAY_EACH for lvl in (1, 2, 3))

            async def on_disk() -> bool:
                return offsets_on_disk()

            await until(
                on_disk, "consumer and delay offsets in the store's config files", timeout=30, interval=0.2
            )

            pending = [
                Message(
                    "CC_Delay",
                    f"pending {i} {NOTE}".encode(),
                    tags="DP",
                    keys=f"pending-{i}",
                    properties={"u.level": str(PENDING_LEVEL)},
                    delay_level=PENDING_LEVEL,
                )
                for i in range(N_DELAY_EACH)
            ]
            pending_sent = await _send_window(producer, pending, window=6, queues=delay_queues)
    return Dataset(messages, delivered, pending_sent, committed, {m.msg_id: m for m in served.values()})


def queue_ends(messages: list[Sent], delivered: list[Sent]) -> dict[tuple[str, int], int]:
    return Dataset(messages, delivered, [], {}).queue_ends()


async def consume_all(
    namesrv: str,
    group: str,
    ends: dict[tuple[str, int], int],
    *,
    timeout: float = 120.0,
    from_committed: bool = False,
    expression: str = "*",
) -> dict[tuple[str, int, int], ReceivedMessage]:
    """Pulls every queue in `ends` up to its end with `group` (from its first offset, or from the group's
    committed offset), subscribed to `expression` (tags, filtered by the broker's consume queue tags codes);
    returns the messages by (topic, queue, offset). Duplicates fail."""
    got: dict[tuple[str, int, int], ReceivedMessage] = {}
    consumer = PullConsumer(
        group,
        namesrv,
        auto_commit=False,
        pull_batch_size=64,
        poll_timeout=1.0,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        if not from_committed
        else ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
    )
    queues = {MessageQueue(t, BROKER_NAME, q): end for (t, q), end in ends.items()}

    def behind() -> dict[MessageQueue, tuple[int | None, int]]:
        return {
            mq: (consumer.position(mq), end)
            for mq, end in queues.items()
            if (consumer.position(mq) or 0) < end
        }

    async with consumer:
        consumer.assign(list(queues), expression)
        deadline = time.monotonic() + timeout
        last_round = False
        while True:
            msgs = await consumer.poll(timeout=0.5 if last_round else 1.0)
            for m in msgs:
                key = (m.topic, m.queue.queue_id, m.queue_offset)
                assert key not in got, f"{group}: {key} delivered twice"
                got[key] = m
            if last_round and not msgs:
                break
            # Every position at its end: one more poll collects what was fetched but not yet returned.
            last_round = not behind()
            if time.monotonic() > deadline:
                raise AssertionError(f"{group}: queues not read to the end in {timeout} s: {behind()}")
    return got


# -- checking ----------------------------------------------------------------------------------


def user_props(props: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in props.items() if k.startswith("u.")))


def check_message(got: StoredMessage | ReceivedMessage, want: Sent, where: str) -> None:
    """The stored or received message is the sent one: ids, body, tags, keys, user properties, compression."""
    if isinstance(got, StoredMessage):
        body, tags, keys, props = got.payload(), got.tags, got.keys, got.properties
        msg_id = got.uniq_key
        compressed = got.compressed
    else:
        body, tags, keys, props = got.body, got.tags, got.keys, got.properties
        msg_id = got.msg_id
        compressed = bool(got.sys_flag & COMPRESSED_FLAG)
    assert msg_id == want.msg_id, f"{where}: msg id {msg_id} != {want.msg_id}"
    assert body == want.body, f"{where}: body differs ({len(body)} vs {len(want.body)} bytes)"
    assert tags == want.tags, f"{where}: tags {tags!r} != {want.tags!r}"
    assert tuple(keys) == want.keys, f"{where}: keys {keys} != {want.keys}"
    assert user_props(props) == want.user_props, f"{where}: {user_props(props)} != {want.user_props}"
    assert compressed == want.compressed, f"{where}: compressed={compressed}, expected {want.compressed}"


def comparable(m: ReceivedMessage) -> tuple[object, ...]:
    """Everything a consumer sees of a message, for comparing two brokers serving the same store."""
    return (
        m.topic,
        m.queue.queue_id,
        m.queue_offset,
        m.commitlog_offset,
        m.msg_id,
        m.offset_msg_id,
        m.body,
        tuple(sorted(m.properties.items())),
        m.sys_flag,
        m.flag,
        m.born_timestamp,
        m.store_timestamp,
        m.born_host,
        m.store_host,
        m.reconsume_times,
    )


def check_store(store: MessageStore, ds: Dataset) -> dict[str, int]:
    """Reads the whole data set from a store: every message at its queue offset, delivered delayed messages
    in their real queues, pending ones in SCHEDULE_TOPIC_XXXX, lookups by key and by offsetMsgId. Returns
    counts for the report."""
    expected = ds.by_position()
    ends = ds.queue_ends()
    stats = {"messages": 0, "compressed": 0, "key_queries": 0, "id_lookups": 0}
    delivered_by_id = {m.msg_id: m for m in ds.delayed_delivered}
    found_delivered: set[str] = set()
    for (topic, q), end in sorted(ends.items()):
        assert store.min_offset(topic, q) == 0, (topic, q)
        assert store.max_offset(topic, q) == end, (topic, q, store.max_offset(topic, q), end)
        offset = 0
        while offset < end:
            batch = store.get_messages(topic, q, offset, 64)
            assert batch, f"{topic}/{q}: nothing at offset {offset} of {end}"
            for m in batch:
                where = f"{topic}/{q}@{offset}"
                assert (m.topic, m.queue_id, m.queue_offset) == (topic, q, offset), where
                if (topic, q, offset) in expected:
                    check_message(m, expected[(topic, q, offset)], where)
                    stats["compressed"] += m.compressed
                else:
                    want = delivered_by_id.get(m.uniq_key or "")
                    assert want is not None and want.queue_id == q, f"{where}: unexpected message {m}"
                    check_message(m, want, where)
                    assert m.properties.get("REAL_TOPIC") == topic, m.properties
                    found_delivered.add(want.msg_id)
                stats["messages"] += 1
                offset += 1
    assert found_delivered == set(delivered_by_id), "delivered delayed messages missing"
    # The consume queue units' tags codes: a tag-filtered read returns exactly the messages with that tag.
    tagged: dict[tuple[str, int, str], set[str]] = {}
    for m in ds.messages + ds.delayed_delivered:
        tagged.setdefault((m.topic, m.queue_id, m.tags or ""), set()).add(m.msg_id)
    for (topic, q, tag), ids in sorted(tagged.items()):
        found, offset = set(), 0
        while offset < ends[(topic, q)]:
            r = store.get(topic, q, offset, 64, 1 << 30, tag)
            found |= {m.uniq_key for m in decode_messages(r.body)}
            assert r.next_begin_offset > offset, (topic, q, tag, offset)
            offset = r.next_begin_offset
        assert found == ids, f"{topic}/{q} tag {tag}: {len(found)} found, {len(ids)} expected"
        stats["tag_reads"] = stats.get("tag_reads", 0) + 1
    # Pending delayed messages: still in the level's schedule queue, pointing at their real topic.
    pending_ids = {m.msg_id for m in ds.delayed_pending}
    sched_q = PENDING_LEVEL - 1
    sched = store.get_messages(SCHEDULE_TOPIC, sched_q, store.min_offset(SCHEDULE_TOPIC, sched_q), 1000)
    in_schedule = {m.uniq_key: m for m in sched if m.uniq_key in pending_ids}
    assert set(in_schedule) == pending_ids
    for want in ds.delayed_pending:
        m = in_schedule[want.msg_id]
        assert m.properties["REAL_TOPIC"] == want.topic and int(m.properties["REAL_QID"]) == want.queue_id
        assert m.properties["DELAY"] == str(PENDING_LEVEL) and m.payload() == want.body
    # Lookups: every non-delayed message by its offsetMsgId, keys by the index.
    for want in ds.messages + ds.delayed_pending:
        m = store.look_message_by_id(want.offset_msg_id)
        assert m is not None and m.uniq_key == want.msg_id, want.offset_msg_id
        stats["id_lookups"] += 1
    by_key: dict[tuple[str, str], set[str]] = {}
    for want in ds.messages + ds.delayed_delivered:
        for k in want.keys:
            by_key.setdefault((want.topic, k), set()).add(want.msg_id)
    for (topic, key), ids in sorted(by_key.items()):
        found = {m.uniq_key for m in store.query(topic, key, max_num=64)}
        assert found == ids, f"query {topic} {key!r}: {found} != {ids}"
        stats["key_queries"] += 1
    return stats


def check_served(
    got: dict[tuple[str, int, int], ReceivedMessage],
    ds: Dataset,
    start: dict[tuple[str, int], int] | None = None,
) -> None:
    """What a broker served is exactly the data set (every queue from 0, or only the queues in `start`
    from their offsets there), and each message is identical to what the writing broker served."""
    expected = ds.by_position()
    ends = ds.queue_ends()
    starts = start if start is not None else dict.fromkeys(ends, 0)
    want_keys = {(t, q, o) for (t, q), first in starts.items() for o in range(first, ends[(t, q)])}
    assert set(got) == want_keys, (
        f"missing {sorted(want_keys - set(got))[:10]}, extra {sorted(set(got) - want_keys)[:10]}"
    )
    delivered_by_id = {m.msg_id: m for m in ds.delayed_delivered}
    for key, m in got.items():
        want = expected.get(key) or delivered_by_id.get(m.msg_id)
        assert want is not None, f"{key}: unexpected {m.msg_id}"
        check_message(m, want, str(key))
        before = ds.served.get(m.msg_id)
        assert before is not None, f"{key}: {m.msg_id} was not served by the writer"
        assert comparable(m) == comparable(before), (
            f"{key}:\n now    {comparable(m)}\n before {comparable(before)}"
        )


# -- brokers -----------------------------------------------------------------------------------


async def check_queries(namesrv: str, broker_addr: str, ds: Dataset, samples: int = 60) -> None:
    """The serving broker finds messages of the data set by key and by msgId (its index) and by the CommitLog
    offset of their offsetMsgId (VIEW_MESSAGE_BY_ID; the id's host is the writer's, so ask `broker_addr`)."""
    async with Admin(namesrv, timeout=ADMIN_TIMEOUT) as admin:
        for want in ds.messages[:: max(1, len(ds.messages) // samples)]:
            for key in want.keys:
                found = await admin.query_message_by_key(want.topic, key, max_num=64)
                assert want.msg_id in {m.msg_id for m in found}, (want.topic, key)
            m = await admin.query_message_by_msg_id(want.topic, want.msg_id)
            check_message(m, want, f"query msgId {want.msg_id}")
            _, offset = decode_offset_msg_id(want.offset_msg_id)
            cmd = RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID, ext={"offset": str(offset)})
            reply = await admin.instance.invoke(broker_addr, cmd, 5.0)
            assert reply.code == 0, reply
            (m,) = decode_received(reply.body, BROKER_NAME)
            check_message(m, want, f"view {want.offset_msg_id}")
            assert (m.queue.queue_id, m.queue_offset) == (want.queue_id, want.queue_offset)


def same_records(java_store: Path, ferromq_store: Path) -> int:
    """The data set as each broker stored it, message by message (matched by topic and first key): the same
    properties (but UNIQ_KEY, which the producer makes unique), flags, sysFlag, stored body bytes. Includes
    the schedule records of pending delayed messages and the delivered ones. Returns how many it compared."""

    def records(root: Path) -> dict[tuple[str, str | None], StoredMessage]:
        out = {}
        with MessageStore.open_read_only(root, **STORE_OPTIONS) as s:
            for topic, q, lo, hi in s.queues():
                if topic not in TOPICS and topic != SCHEDULE_TOPIC:
                    continue
                for m in s.get_messages(topic, q, lo, hi - lo):
                    key = (m.topic, m.keys[0] if m.keys else None)
                    assert key not in out, f"{root}: two records for {key}"
                    out[key] = m
        return out

    def shape(m: StoredMessage) -> tuple[object, ...]:
        props = {k: v for k, v in m.properties.items() if k != "UNIQ_KEY"}
        return (props, m.flag, m.sys_flag, m.body, m.reconsume_times, m.prepared_transaction_offset)

    java, ours = records(java_store), records(ferromq_store)
    assert set(java) == set(ours), (
        f"only Java: {set(java) - set(ours)}, only ferromq: {set(ours) - set(java)}"
    )
    differ = [
        (k, shape(java[k]), shape(ours[k])) for k in sorted(java, key=str) if shape(java[k]) != shape(ours[k])
    ]
    if differ:
        key, theirs, mine = differ[0]
        raise AssertionError(f"{len(differ)} records differ, e.g. {key}:\n Java    {theirs}\n ferromq {mine}")
    return len(java)


@dataclass(frozen=True)
class Scheduled:
    """A pending delayed message's record in SCHEDULE_TOPIC_XXXX: when it is due, and the record itself."""

    due: int
    record: StoredMessage


def scheduled_records(store: MessageStore, ds: Dataset) -> dict[str, Scheduled]:
    """Pending delayed message id -> its schedule record and due time (the record's store time + delay)."""
    out = {}
    for want in ds.delayed_pending:
        m = store.look_message_by_id(want.offset_msg_id)
        assert m is not None and m.topic == SCHEDULE_TOPIC, want
        out[want.msg_id] = Scheduled(m.store_timestamp + DELAY_MS[PENDING_LEVEL], m)
    return out


async def receive_pending(
    namesrv: str, ds: Dataset, scheduled: dict[str, Scheduled], timeout: float = 150.0
) -> None:
    """The pending delayed messages arrive in their real queues after the data set, each exactly once, not
    before they were due, and as Apache RocketMQ 4.9.7 re-stores them: the schedule record's properties
    string unchanged (DELAY, REAL_TOPIC, REAL_QID included), its body, flags and born data."""
    ends = ds.queue_ends()
    want = {m.msg_id: m for m in ds.delayed_pending}
    consumer = PullConsumer("CC_PendingReader", namesrv, auto_commit=False, poll_timeout=1.0)
    got: dict[str, ReceivedMessage] = {}
    async with consumer:
        queues = [MessageQueue("CC_Delay", BROKER_NAME, q) for q in range(TOPICS["CC_Delay"])]
        consumer.assign(queues)
        for mq in queues:
            await consumer.seek(mq, ends[("CC_Delay", mq.queue_id)])
        deadline = time.monotonic() + timeout
        while len(got) < len(want) and time.monotonic() < deadline:
            for m in await consumer.poll(timeout=1.0):
                assert m.msg_id in want and m.msg_id not in got, f"unexpected or repeated {m}"
                got[m.msg_id] = m
    assert set(got) == set(want), f"pending delayed messages not delivered: {sorted(set(want) - set(got))}"
    for msg_id, m in got.items():
        check_message(m, want[msg_id], f"pending {msg_id}")
        sched = scheduled[msg_id]
        assert m.queue.queue_id == want[msg_id].queue_id
        assert m.store_timestamp >= sched.due, f"{msg_id} delivered at {m.store_timestamp}, due {sched.due}"
        r = sched.record
        assert m.properties == r.properties, f"{msg_id}: {m.properties} != schedule record's {r.properties}"
        assert (m.body, m.flag, m.sys_flag, m.born_timestamp, m.born_host, m.reconsume_times) == (
            r.payload(),
            r.flag,
            r.sys_flag,
            r.born_timestamp,
            r.born_host,
            r.reconsume_times,
        )


def java_written_store(
    root: Path, *, kill: bool = False, while_running: Callable[[Path, Dataset], None] | None = None
) -> tuple[Path, Dataset]:
    """Apache RocketMQ writes the data set under `root` and is stopped with SIGTERM, or (kill=True,
    SYNC_FLUSH) SIGKILLed right after the last acknowledged send. Returns (store root, data set).
    `while_running(store, data set)` runs before a clean stop, with the Java broker still up."""
    from apache_rocketmq import start_rocketmq

    conf = {**BROKER_CONF, "flushDiskType": "SYNC_FLUSH" if kill else "ASYNC_FLUSH"}
    mq = start_rocketmq(root, conf)
    try:
        ds = asyncio.run(produce(mq.namesrv, mq.store))
        pending_sent = time.monotonic()
        if while_running is not None and not kill:
            while_running(mq.store, ds)
    except BaseException:
        mq.stop(kill=True)
        raise
    mq.stop(kill=kill)
    ran = time.monotonic() - pending_sent
    assert ran < DELAY_MS[PENDING_LEVEL] / 1000, (
        f"the writer ran {ran:.0f} s more: the pending messages fell due"
    )
    assert kill or not (mq.store / "abort").exists(), mq.log_tail()
    return mq.store, ds


def copy_store(src: Path, dst: Path) -> Path:
    """A private copy of a stopped store (the fixture's stays as the writer left it)."""
    shutil.copytree(src, dst)
    return dst


# -- transactions left pending by one broker, finished by the other -----------------------------

TX_TOPIC = "CC_Tx"
TX_GROUP = "CC_TxProducer"
TX_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TX_OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
# What each local transaction ends in; the unknown ones are answered by the reader's check: even -> commit.
TX_PLAN = ["commit"] * 8 + ["rollback"] * 6 + ["unknown"] * 6
# The writer never checks (its stop comes first); the reader checks every second.
TX_WRITER_CONF = {"transactionCheckInterval": "600000", "transactionTimeOut": "600000"}
TX_READER_CONF = {
    "transactionCheckInterval": "1000",
    "transactionTimeOut": "1000",
    "transactionCheckMax": "15",
}


@dataclass(frozen=True)
class TxSent:
    msg_id: str
    idx: int
    plan: str
    body: bytes

    @property
    def committed_in_the_end(self) -> bool:
        return self.plan == "commit" or (self.plan == "unknown" and self.idx % 2 == 0)


class _TxListener:
    def __init__(self) -> None:
        self.checked: list[str] = []

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        plan = msg.properties["u.plan"]
        if plan == "commit":
            return LocalTransactionState.COMMIT_MESSAGE
        if plan == "rollback":
            return LocalTransactionState.ROLLBACK_MESSAGE
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        self.checked.append(msg.msg_id)
        if msg.properties["u.plan"] != "unknown":
            return LocalTransactionState.UNKNOW  # never asked about settled ones; would show in `checked`
        if int(msg.properties["u.idx"]) % 2 == 0:
            return LocalTransactionState.COMMIT_MESSAGE
        return LocalTransactionState.ROLLBACK_MESSAGE


async def _max_offset_at(admin: Admin, broker_addr: str, topic: str, queue_id: int) -> int:
    cmd = RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext={"topic": topic, "queueId": str(queue_id)})
    reply = await admin.instance.invoke(broker_addr, cmd, 5.0)
    return int(reply.ext.get("offset", "0")) if reply.code == 0 else 0


async def produce_transactions(namesrv: str, broker_addr: str) -> list[TxSent]:
    """Sends TX_PLAN as transactional messages; returns once the broker stored every half message and the
    op message of every committed or rolled back one (END_TRANSACTION is one-way)."""
    sent: list[TxSent] = []
    async with Admin(namesrv, timeout=ADMIN_TIMEOUT) as admin:
        await admin.create_topic(TX_TOPIC, 2)
        async with TransactionProducer(TX_GROUP, namesrv, _TxListener(), send_timeout=10.0) as producer:
            for _ in range(100):
                with contextlib.suppress(Exception):
                    if len(await producer.publish_queues(TX_TOPIC)) == 2:
                        break
                await asyncio.sleep(0.1)
            for i, plan in enumerate(TX_PLAN):
                body = f"tx {i} {plan} {NOTE}".encode()
                msg = Message(
                    TX_TOPIC,
                    body,
                    tags=f"T{plan}",
                    keys=f"tx-{i}",
                    properties={"u.idx": str(i), "u.plan": plan},
                )
                r = await producer.send_message_in_transaction(msg)
                sent.append(TxSent(r.msg_id, i, plan, body))
        settled = sum(1 for s in sent if s.plan != "unknown")

        async def ops_stored() -> bool:
            halves = await _max_offset_at(admin, broker_addr, TX_HALF_TOPIC, 0)
            return halves == len(sent) and await _max_offset_at(admin, broker_addr, TX_OP_TOPIC, 0) == settled

        await until(ops_stored, "the half and op messages of the transactions", timeout=30, interval=0.2)
    return sent


async def finish_transactions(namesrv: str, sent: list[TxSent], timeout: float = 120.0) -> list[str]:
    """A producer of the same group connects to the reading broker, whose checker asks it about the pending
    transactions; the topic then holds exactly the committed messages, each once. Returns the checked ids."""
    listener = _TxListener()
    want = {s.msg_id: s for s in sent if s.committed_in_the_end}
    ends = {(TX_TOPIC, q): 0 for q in range(2)}
    got: dict[str, ReceivedMessage] = {}
    async with TransactionProducer(TX_GROUP, namesrv, listener):
        consumer = PullConsumer(
            "CC_TxReader",
            namesrv,
            auto_commit=False,
            poll_timeout=1.0,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        async with consumer:
            consumer.assign([MessageQueue(t, BROKER_NAME, q) for (t, q) in ends])
            deadline = time.monotonic() + timeout
            while len(got) < len(want) and time.monotonic() < deadline:
                for m in await consumer.poll(timeout=1.0):
                    assert m.msg_id in want and m.msg_id not in got, (
                        f"unexpected or repeated {m.msg_id} {m.properties}"
                    )
                    got[m.msg_id] = m
            # Two more check rounds: nothing else may appear (no rolled back or repeated message).
            settle = time.monotonic() + 2.5
            while time.monotonic() < settle:
                for m in await consumer.poll(timeout=0.5):
                    raise AssertionError(
                        f"unexpected message after the committed ones: {m.msg_id} {m.properties}"
                    )
    assert set(got) == set(want), f"missing {sorted(want.keys() - got.keys())}"
    for msg_id, m in got.items():
        s = want[msg_id]
        assert m.body == s.body and m.keys == [f"tx-{s.idx}"] and m.tags == f"T{s.plan}"
        assert m.properties["u.idx"] == str(s.idx) and m.properties["TRAN_MSG"] == "true"
        assert m.sys_flag & 0xC == 0x8, "a committed message has the COMMIT transaction type"
    unknown = {s.msg_id for s in sent if s.plan == "unknown"}
    assert set(listener.checked) == unknown, "the checker asks about exactly the pending transactions"
    return listener.checked


def last_record(store: Path) -> tuple[int, bytes]:
    """The CommitLog's last record (offset, bytes): the last consume queue unit's, as every record of the
    data set has one."""
    with MessageStore.open_read_only(store, **STORE_OPTIONS) as s:
        last = max(
            m.physical_offset
            for topic, q, lo, hi in s.queues()
            if hi > lo
            for m in s.get_messages(topic, q, hi - 1, 1)
        )
        raw = s.read_raw(last)
    assert raw is not None
    return last, raw


# A v4 record (IPv4 hosts): the fixed fields before the body length, and where the physical offset is.
RECORD_HEADER = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8
PHYSICAL_OFFSET_AT = 28


def tear_tail(store: Path) -> int:
    """Appends a torn record after the CommitLog's last one, as a crash in the middle of an append leaves it:
    a copy of the last record placed at the end (its physical offset field says so) of which only the
    header and half the body reached the file, so its body CRC fails. (Cut later, in the properties, neither
    RocketMQ nor ferromq could tell: 4.x has no checksum over them.) Marks the store as crashed (abort
    file). Returns the CommitLog end before the torn bytes, where a recovery has to cut."""
    last, raw = last_record(store)
    end = last + len(raw)
    body_len = int.from_bytes(raw[RECORD_HEADER : RECORD_HEADER + 4], "big")
    assert body_len >= 2, "the last record needs a body to tear"
    torn = bytearray(raw[: RECORD_HEADER + 4 + body_len // 2])
    torn[PHYSICAL_OFFSET_AT : PHYSICAL_OFFSET_AT + 8] = end.to_bytes(8, "big")
    start = end - end % COMMITLOG_FILE_SIZE
    assert end % COMMITLOG_FILE_SIZE + len(torn) <= COMMITLOG_FILE_SIZE
    with open(store / "commitlog" / f"{start:020d}", "r+b") as f:
        f.seek(end - start)
        assert f.read(len(torn)) == bytes(len(torn)), "the CommitLog goes on after the last unit's record"
        f.seek(end - start)
        f.write(torn)
    (store / "abort").touch()
    return end
