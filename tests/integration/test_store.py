"""MessageStore through the Python API, on real files."""

from __future__ import annotations

import asyncio
import os
import threading
import zlib
from pathlib import Path

import pytest

from ferromq.errors import (
    CorruptStoreError,
    InvalidTopicError,
    MessageTooLargeError,
    NotAStoreError,
    ReadOnlyStoreError,
    StoreClosedError,
    StoreLockedError,
)
from ferromq.message import SYSFLAG_COMPRESSED, TRANSACTION_PREPARED_TYPE, decode_messages
from ferromq.store import FlushDiskType, MessageStore

from ..conftest import SMALL


def drain(store: MessageStore, topic: str, queue_id: int, tags: str | None = None) -> list:
    out, offset = [], 0
    for _ in range(100_000):
        r = store.get(topic, queue_id, offset, 32, 1 << 20, tags)
        if r.status not in ("FOUND", "NO_MATCHED_MESSAGE"):
            break
        out += decode_messages(r.body, check_crc=True)
        offset = r.next_begin_offset
    return out


def test_put_get_round_trip_across_segments(store: MessageStore) -> None:
    sent = {}
    for i in range(3000):
        body = os.urandom(i % 700)
        r = store.put("Topic", i % 4, body, tags=f"T{i % 5}", keys=[f"k{i}", "common"])
        assert r.queue_offset == i // 4
        sent[r.msg_id] = (body, r.queue_offset, i % 4)
    segments = sorted(os.listdir(Path(store.config.root) / "commitlog"))
    assert len(segments) > 20
    assert segments[1] == f"{64 * 1024:020d}"
    got = {}
    for q in range(4):
        for m in drain(store, "Topic", q):
            got[m.msg_id] = (m.body, m.queue_offset, m.queue_id)
    assert got == sent


def test_get_statuses_and_limits(store: MessageStore) -> None:
    assert store.get("Nope", 0, 0).status == "NO_MATCHED_LOGIC_QUEUE"
    for i in range(10):
        store.put("T", 0, b"x" * 100, tags="A" if i % 2 else "B")
    r = store.get("T", 0, 0, max_count=3)
    assert (r.status, r.message_count, r.next_begin_offset) == ("FOUND", 3, 3)
    assert r.queue_offsets == [0, 1, 2]
    at_end, past_end = store.get("T", 0, 10), store.get("T", 0, 11)
    assert (at_end.status, at_end.next_begin_offset) == ("OFFSET_OVERFLOW_ONE", 10)
    assert (past_end.status, past_end.next_begin_offset) == ("OFFSET_OVERFLOW_BADLY", 10)
    assert store.get("T", 0, 0, max_bytes=1).message_count == 1, "the first message always goes"
    assert [m.tags for m in store.get_messages("T", 0, 0, 100, tags="A")] == ["A"] * 5
    assert store.get("T", 0, 0, tags="C").status == "NO_MATCHED_MESSAGE"
    assert (store.min_offset("T", 0), store.max_offset("T", 0)) == (0, 10)


def test_batch_put(store: MessageStore) -> None:
    bodies = [f"m{i}".encode() for i in range(500)]
    props = [f"TAGS\x01B\x02KEYS\x01bk{i}" for i in range(500)]
    r = store.put_batch("Batch", 1, bodies, props, flags=list(range(500)))
    assert (len(r), r.first_queue_offset) == (500, 0)
    assert len(set(r.msg_ids)) == 500
    r2 = store.put_batch("Batch", 1, bodies[:10], "TAGS\x01Shared")
    assert r2.first_queue_offset == 500
    msgs = drain(store, "Batch", 1)
    assert [m.body for m in msgs] == bodies + bodies[:10]
    assert [m.flag for m in msgs[:3]] == [0, 1, 2]
    assert msgs[-1].tags == "Shared"
    assert store.query("Batch", "bk77")[0].body == b"m77"
    with pytest.raises(ValueError, match="properties"):
        store.put_batch("Batch", 1, bodies, props[:3])


def test_compressed_body_stored_as_sent(store: MessageStore) -> None:
    raw = b"abc" * 5000
    r = store.put("Z", 0, zlib.compress(raw, 5), sys_flag=SYSFLAG_COMPRESSED)
    m = store.read(r.physical_offset)
    assert m is not None and m.compressed
    assert m.body == zlib.compress(raw, 5)
    assert m.payload() == raw


def test_query_by_key_and_ids(store: MessageStore) -> None:
    ids = []
    for i in range(200):
        r = store.put("Q", 0, f"{i}".encode(), keys=f"order-{i % 20}", properties=None)
        ids.append(r.msg_id)
    found = store.query("Q", "order-7", max_num=100)
    assert sorted(int(m.body) for m in found) == list(range(7, 200, 20))
    assert store.query("Other", "order-7") == []
    m = store.look_message_by_id(ids[42])
    assert m is not None and m.body == b"42"
    assert store.look_message_by_id(ids[42].replace(ids[42][-4:], "FFFF")) is None


def test_uniq_key_is_indexed(store: MessageStore) -> None:
    store.put("U", 0, b"one", properties={"UNIQ_KEY": "0A00000100002A9F0000000000000001"})
    (m,) = store.query("U", "0A00000100002A9F0000000000000001")
    assert m.uniq_key == "0A00000100002A9F0000000000000001"


def test_delay_and_transaction_dispatch(store: MessageStore) -> None:
    r = store.put("Real", 3, b"later", properties={"DELAY": "2", "TAGS": "X"})
    assert (r.topic, r.queue_id) == ("SCHEDULE_TOPIC_XXXX", 1)
    (m,) = store.get_messages("SCHEDULE_TOPIC_XXXX", 1, 0)
    assert m.properties["REAL_TOPIC"] == "Real" and m.properties["REAL_QID"] == "3"
    half = store.put("Tx", 0, b"half", sys_flag=TRANSACTION_PREPARED_TYPE)
    assert store.max_offset("Tx", 0) == 0, "prepared messages are not dispatched"
    assert store.read(half.physical_offset) is not None


def test_timestamps(store: MessageStore) -> None:
    r0 = store.put("TS", 0, b"a")
    r1 = store.put("TS", 0, b"b")
    assert store.store_time("TS", 0, 1) == r1.store_timestamp
    assert store.earliest_store_time("TS", 0) == r0.store_timestamp
    assert store.offset_by_time("TS", 0, r1.store_timestamp + 1) == 2
    assert store.queues() == [("TS", 0, 0, 2)]


def test_bad_input_errors(tmp_path: Path) -> None:
    with MessageStore(tmp_path / "s", max_message_size=1000, **SMALL) as store:
        with pytest.raises(MessageTooLargeError) as e:
            store.put("T", 0, b"x" * 1001)
        assert e.value.code == 13
        with pytest.raises(InvalidTopicError):
            store.put("bad topic!", 0, b"x")
        with pytest.raises(InvalidTopicError):
            store.put("t" * 128, 0, b"x")
        with pytest.raises(StoreLockedError):
            MessageStore(tmp_path / "s", **SMALL)
        store.put("T", 0, b"still fine")
    with pytest.raises(StoreClosedError):
        store.put("T", 0, b"x")
    with pytest.raises(NotAStoreError):
        MessageStore.open_read_only(tmp_path / "missing")


def test_wrong_sized_segment_is_a_clear_error(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(root, **SMALL) as store:
        store.put("T", 0, b"x" * 100)
    seg = root / "commitlog" / ("0" * 20)
    with open(seg, "r+b") as f:
        f.truncate(1000)
    with pytest.raises(CorruptStoreError, match="configured file size"):
        MessageStore(root, **SMALL)


def test_read_only_view_while_writing(store: MessageStore) -> None:
    for i in range(50):
        store.put("RO", 0, f"{i}".encode(), keys=f"k{i}")
    view = MessageStore.open_read_only(store.config.root, **SMALL)
    try:
        assert len(drain(view, "RO", 0)) == 50
        with pytest.raises(ReadOnlyStoreError):
            view.put("RO", 0, b"x")
        stop = threading.Event()

        def writer() -> None:
            i = 50
            while not stop.is_set() and i < 5000:
                store.put("RO", 0, f"{i}".encode())
                i += 1

        t = threading.Thread(target=writer)
        t.start()
        seen = 0
        for _ in range(200):
            msgs = drain(view, "RO", 0)
            # A consistent prefix: offsets 0..n-1, every body in order.
            assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
            assert [int(m.body) for m in msgs] == list(range(len(msgs)))
            seen = len(msgs)
            if seen >= 1000:
                break
        stop.set()
        t.join(timeout=30)
        assert seen >= 50
        assert view.query("RO", "k7")[0].body == b"7"
    finally:
        view.close()


def test_sync_flush_and_async_flushed_future(tmp_path: Path) -> None:
    with MessageStore(tmp_path / "s", flush_disk_type=FlushDiskType.SYNC_FLUSH, **SMALL) as store:
        results = []

        def appender(q: int) -> None:
            for i in range(30):
                results.append(store.put("S", q, f"{i}".encode()))

        threads = [threading.Thread(target=appender, args=(q,)) for q in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(results) == 240
        assert all(r.flush_ok for r in results)
        assert store.flushed_physical_offset >= max(r.end_offset for r in results)

        async def main() -> bool:
            r = store.put("S", 0, b"no wait", wait=False)
            return await asyncio.wait_for(store.flushed(r.end_offset), 10)

        assert asyncio.run(main())


def test_clean_reopen_keeps_offsets(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore(root, **SMALL) as store:
        for i in range(100):
            store.put("R", i % 2, f"{i}".encode(), keys=f"k{i}")
    assert not (root / "abort").exists()
    with MessageStore(root, **SMALL) as store:
        assert store.recovery["abnormal_exit"] is False
        assert store.put("R", 0, b"next").queue_offset == 50
        assert store.query("R", "k99")[0].body == b"99"
