"""The Apache RocketMQ launcher (tools/apache_rocketmq.py) works for 4.9.7 (the default) and 5.3.3: the
real Java name server and broker start under a temporary root, ferromq's Python client sends to and pulls
from them, and a SIGTERM stops both cleanly (no abort file, offsets persisted, nothing written outside the
root)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from apache_rocketmq import ROCKETMQ_5_VERSION, ROCKETMQ_VERSION, ApacheRocketMQ, have_java, start_rocketmq

from ferromq.client import ConsumeFromWhere, Message, MessageQueue, Producer, PullConsumer
from ferromq.jsonutil import loads_lenient

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="the Apache RocketMQ launcher needs `java` and `mvn` on PATH"),
    # The first run resolves the broker's jars from Maven Central.
    pytest.mark.timeout(600),
]

TOPIC = "LauncherTopic"
GROUP = "LauncherGroup"


async def _roundtrip(mq: ApacheRocketMQ) -> tuple[list[tuple[int, int, bytes]], list[tuple[int, int, bytes]]]:
    async with Producer("LauncherProducer", mq.namesrv) as producer:
        sent = []
        for i in range(10):
            body = f"hello {i} \u00e9\u4e2d".encode()
            r = await producer.send(Message(TOPIC, body, tags="T", keys=f"k{i}"))
            sent.append((r.message_queue.queue_id, r.queue_offset, body))
    got: list[tuple[int, int, bytes]] = []
    consumer = PullConsumer(
        GROUP, mq.namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, auto_commit=False
    )
    async with consumer:
        consumer.subscribe(TOPIC, "*")
        ends: dict[MessageQueue, int] = {}
        for _ in range(60):
            for m in await consumer.poll(timeout=1.0):
                got.append((m.queue.queue_id, m.queue_offset, m.body))
                ends[m.queue] = max(ends.get(m.queue, 0), m.queue_offset + 1)
            if len(got) >= len(sent):
                break
        # What was read, queue by queue: a rebalance while polling (the Java broker's consumer list
        # can lag a heartbeat under load) may have dropped and re-added a queue's uncommitted position.
        await consumer.commit(ends)
    return sorted(sent), sorted(got)


def test_launcher_roundtrip_and_clean_stop(tmp_path: Path) -> None:
    assert ROCKETMQ_VERSION == "4.9.7"
    mq = start_rocketmq(tmp_path, {"mappedFileSizeCommitLog": str(1 << 20)})
    try:
        assert mq.broker_pid > 0 and mq.running()
        sent, got = asyncio.run(_roundtrip(mq))
        assert got == sent, mq.log_tail()
    finally:
        mq.stop()
    # A clean shutdown: the broker removed its abort file and wrote the group's offsets.
    assert not mq.running()
    store = tmp_path / "store"
    assert not (store / "abort").exists(), mq.log_tail()
    assert (store / "checkpoint").is_file()
    offsets = loads_lenient((store / "config" / "consumerOffset.json").read_text())["offsetTable"]
    committed = {int(q): o for q, o in offsets[f"{TOPIC}@{GROUP}"].items()}
    assert sum(committed.values()) == len(sent), offsets
    topics = loads_lenient((store / "config" / "topics.json").read_text())["topicConfigTable"]
    assert TOPIC in topics
    assert list((store / "commitlog").iterdir()) == [store / "commitlog" / f"{0:020d}"]
    assert (store / "commitlog" / f"{0:020d}").stat().st_size == 1 << 20
    # Nothing the Java processes wrote is outside the root (logs under root/logs).
    assert (tmp_path / "logs" / "broker.log").stat().st_size > 0


def test_launcher_5_roundtrip_and_clean_stop(tmp_path: Path) -> None:
    """The same with Apache RocketMQ 5.3.3 (its own classpath, its shaded logback pointed at our config)."""
    assert ROCKETMQ_5_VERSION == "5.3.3"
    mq = start_rocketmq(tmp_path, {"mappedFileSizeCommitLog": str(1 << 20)}, version=ROCKETMQ_5_VERSION)
    try:
        assert mq.version == "5.3.3" and mq.broker_pid > 0 and mq.running()
        sent, got = asyncio.run(_roundtrip(mq))
        assert got == sent, mq.log_tail()
    finally:
        mq.stop()
    assert not mq.running()
    # SIGTERM ends the JVM through its shutdown hooks: 128 + 15, not a SIGKILL (None).
    assert mq.broker_exit == 143 and mq.namesrv_exit == 143, mq.log_tail()
    store = tmp_path / "store"
    assert not (store / "abort").exists(), mq.log_tail()
    assert (store / "checkpoint").is_file()
    offsets = loads_lenient((store / "config" / "consumerOffset.json").read_text())["offsetTable"]
    committed = {int(q): o for q, o in offsets[f"{TOPIC}@{GROUP}"].items()}
    assert sum(committed.values()) == len(sent), offsets
    topics = loads_lenient((store / "config" / "topics.json").read_text())["topicConfigTable"]
    assert TOPIC in topics
    assert list((store / "commitlog").iterdir()) == [store / "commitlog" / f"{0:020d}"]
    assert (store / "commitlog" / f"{0:020d}").stat().st_size == 1 << 20
    # The timer store (on by default in 5.x) lives in the store root too.
    assert (store / "timerwheel").is_file() and (store / "config" / "timercheck").is_file()
    # The broker's own lines (5.x logger names) reach the file log_tail() reads.
    log = (tmp_path / "logs" / "broker.log").read_text(encoding="utf-8", errors="replace")
    assert "RocketmqBroker" in log and "RocketmqStore" in log, mq.log_tail()
    assert "boot success" in (tmp_path / "logs" / "broker.out").read_text(), mq.log_tail()


def test_java_send_reply_names_the_requested_queue(tmp_path: Path) -> None:
    """What tests/integration/test_send_reply_queue.py expects of ferromq is what the Java broker does:
    a delayed or a transaction half message sent to queue 1 is answered with queueId 1."""
    from ferromq.protocol.codes import RequestCode, ResponseCode
    from tests.integration.brokerkit import Client
    from tests.integration.test_send_reply_queue import CASES, send_ext

    async def main(addr: str) -> list[str]:
        port = addr.rsplit(":", 1)[1]
        b = await Client().connect(int(port))
        answers = []
        for props, _, _ in CASES:
            sys_flag = 0x4 if "TRAN_MSG" in props else 0
            r = await b.call(RequestCode.SEND_MESSAGE, send_ext("ReplyQ", 1, props, sysFlag=sys_flag), b"x")
            if r.code == ResponseCode.TOPIC_NOT_EXIST:  # the first send may race the topic's creation
                r = await b.call(
                    RequestCode.SEND_MESSAGE, send_ext("ReplyQ", 1, props, sysFlag=sys_flag), b"x"
                )
            assert r.code == ResponseCode.SUCCESS, r.remark
            answers.append(r.ext["queueId"])
        await b.close()
        return answers

    with start_rocketmq(tmp_path) as mq:
        assert asyncio.run(asyncio.wait_for(main(mq.broker_addr), 60)) == ["1"] * len(CASES), mq.log_tail()


def test_java_stored_properties(tmp_path: Path) -> None:
    """The properties the Java broker stores for plain, delayed, half and batch sends are what
    tests/integration/test_stored_properties.py expects of ferromq (read back from its store with ferromq)."""
    from ferromq.store import MessageStore
    from tests.integration.test_stored_properties import SENDS, expected_properties, send_all

    sizes = {"mappedFileSizeCommitLog": str(1 << 20), "mappedFileSizeConsumeQueue": "2000"}
    sizes |= {"maxHashSlotNum": "1000", "maxIndexNum": "4000"}
    with start_rocketmq(tmp_path, sizes) as mq:
        port = int(mq.broker_addr.rsplit(":", 1)[1])
        sent = asyncio.run(asyncio.wait_for(send_all(port), 60))
    options = {"mapped_file_size_commitlog": 1 << 20, "mapped_file_size_consume_queue": 2000}
    with MessageStore.open_read_only(
        tmp_path / "store", **options, max_hash_slot_num=1000, max_index_num=4000
    ) as s:
        for name, props, _, _ in SENDS:
            queue_id, offsets = sent[name]
            got = [m.properties if (m := s.read(o)) is not None else None for o in offsets]
            assert got == expected_properties(name, props, queue_id), name


UNMAP_JAVA = """
import java.io.RandomAccessFile;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;

public class Unmap {
    public static void main(String[] args) throws Exception {
        try (RandomAccessFile f = new RandomAccessFile(args[0], "rw")) {
            f.setLength(4096);
            MappedByteBuffer m = f.getChannel().map(FileChannel.MapMode.READ_WRITE, 0, 4096);
            org.apache.rocketmq.store.MappedFile.clean(m);
        }
        System.out.println("unmapped");
    }
}
"""


def test_java17_flags_let_the_store_unmap_files(tmp_path: Path) -> None:
    """The broker unmaps CommitLog files (deleting expired ones, shutting down) through JDK internals that
    Java 17 closes; the launcher's JAVA17_FLAGS open them (without them the same call fails)."""
    import subprocess

    from apache_rocketmq import JAVA17_FLAGS, classpath

    source = tmp_path / "Unmap.java"
    source.write_text(UNMAP_JAVA)

    def run(flags: list[str]) -> subprocess.CompletedProcess[str]:
        cmd = ["java", *flags, "-cp", classpath(), str(source), str(tmp_path / "file")]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)

    ok = run(JAVA17_FLAGS)
    assert ok.returncode == 0 and "unmapped" in ok.stdout, ok.stderr
    closed = run([])
    assert closed.returncode != 0 and "InaccessibleObjectException" in closed.stderr, closed.stderr
