"""Timer messages (RocketMQ 5.x's TIMER_DELAY_SEC / TIMER_DELAY_MS / TIMER_DELIVER_MS) on ferromq and on the
real Apache RocketMQ 5.3.3 broker, through the official 5.3.3 remoting client (tests/interop/java5,
`io.ferromq.interop5.Timers`), and timers still pending in one broker's store delivered by the other.

Side by side (one ferromq and one 5.3.3 broker for the tests of `TestSideBySide`, timerPrecisionMs 1000 on
both): the same sends get their messages no earlier than asked on both, in the producer's queue, with the
same property names (less the consumer's additions and MSG_REGION / TRACE_ON, which 5.x stores with every
message: see JAVA5_STORED); a delay beyond timerMaxDelaySec is refused on both with the same code and remark;
ferromq's Python client, which sets TIMER_DELAY_SEC as a user property as a 4.x client does, gets its message
on time from both.

Store cross-compatibility, both ways: one broker takes timers due 24-38 s ahead into its timer wheel and is
stopped (SIGTERM) while they wait there; the other starts on the same store directory (Java's
`storePathRootDir`, ferromq's `--store`: commitlog/, consumequeue/, timerlog/, timerwheel, config/timercheck
and config/topics.json, where Java adds `rmq_sys_wheel_timer` itself) with the same file sizes, resumes from
the writer's config/timercheck and delivers each of them once, none before its time.

The consumers are the 5.3.3 push consumer (`Timers push`). Run with `-s` to see what was compared.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import ROCKETMQ_5_VERSION, ApacheRocketMQ, have_java, start_rocketmq

from ferromq.client import Message, Producer
from ferromq.store import MessageStore
from ferromq.testing import BrokerProcess
from tests.interop.conftest import stop_ferromq
from tests.interop.java5build import build_interop5_jar, run_driver
from tests.interop.small_store import SMALL_STORE, SMALL_STORE_OPTIONS

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="the 5.3.3 timer tests need `java` and `mvn` on PATH"),
    # The first run resolves the 5.3.3 broker's jars and builds the driver (Maven Central).
    pytest.mark.timeout(900),
]

KINDS = ("ferromq", "rocketmq")
JAVA_CLIENT = "Java client 5.3.3 (remoting)"
PY_CLIENT = "ferromq Python client"
PRECISION_MS = 1000  # timerPrecisionMs, the default of both
MAX_DELAY_SEC = 259200  # timerMaxDelaySec, the default of both
TIMER_TOPIC = "rmq_sys_wheel_timer"
# Added by the consuming client, not by either broker: the pull's queue bounds (PullAPIWrapper) and the push
# consumer's start time (ConsumeMessageConcurrentlyService).
CLIENT_ADDED = {"MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME"}
# What the brokers add to a delivered timer message (beside what the producer sent).
BROKER_ADDED = {"REAL_TOPIC", "REAL_QID", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS"}
# A deliberate difference, not the timer's: RocketMQ 5.x's send processor writes the broker's regionId and
# traceOn into every message it stores (AbstractSendMessageProcessor.buildMsgContext, run for each send since
# 5.0), where 4.9.7 (and ferromq, which follows it) only answers them in the send response's ext fields and
# stores them only when a send hook is registered.
JAVA5_STORED = {"MSG_REGION", "TRACE_ON"}
# The driver's VALUE_SPEC per property: due 2-3 s after each send.
ASKS = {"TIMER_DELAY_SEC": "2", "TIMER_DELAY_MS": "2500", "TIMER_DELIVER_MS": "+3000"}
# Due 24-38 s after each send, so that they still wait when the writer has stopped and (most of them) are due
# after the reader is ready: a 5.3.3 broker keeps delivering for ~10 s after SIGTERM (its shutdown hook stops
# the timer only after the remoting and POP services) and takes 15-22 s to stop on a loaded machine; it starts
# in 10-15 s.
CROSS_ASKS = {
    "rocketmq": {"TIMER_DELAY_SEC": "24", "TIMER_DELAY_MS": "31000", "TIMER_DELIVER_MS": "+38000"},
    "ferromq": {"TIMER_DELAY_SEC": "24", "TIMER_DELAY_MS": "25500", "TIMER_DELIVER_MS": "+27000"},
}
SBS_PER_ASK = 3
# 30 per property: 90 units of 52 bytes, more than a 4 KiB timer log file holds (78 and a blank).
CROSS_PER_ASK = 30
ILLEGAL_REMARK = (
    "timer message illegal, the delay time should not be bigger than the max delay "
    f"{MAX_DELAY_SEC * 1000}ms; or if set del msg, the delay time should be bigger than the current time"
)

# The same keys for both brokers of a store moved between them: either opens the other's files.
STORE_CONF = {
    "brokerClusterName": "DefaultCluster",
    "brokerName": "broker-a",
    "brokerIP1": "127.0.0.1",
    "autoCreateTopicEnable": "true",
    **SMALL_STORE,
}
STORE_OPTIONS = SMALL_STORE_OPTIONS
SBS_CONF = {k: v for k, v in STORE_CONF.items() if k != "mappedFileSizeTimerLog"}

Record = dict[str, Any]


def rounded(deliver_ms: int) -> int:
    """The slot a deliver time waits in (both brokers keep it as TIMER_OUT_MS): rounded down to
    timerPrecisionMs, one precision earlier when it is a multiple already."""
    return (deliver_ms - 1) // PRECISION_MS * PRECISION_MS


@dataclass
class Side:
    """One broker under test, as the clients see it."""

    kind: str
    namesrv: str
    workdir: Path
    log_tail: Callable[[], str]


@pytest.fixture(scope="module")
def jar5() -> Path:
    return build_interop5_jar()


def driver(jar: Path, side: Side, *args: str, timeout: float = 120) -> tuple[int, list[Record]]:
    """One run of the driver against `side`; its exit code and the JSON objects it printed."""
    r = run_driver(jar, side.workdir, "Timers", *args, timeout=timeout)
    if r.code not in (0, 1):
        pytest.fail(f"[{side.kind}] Timers {' '.join(args)} exited {r.code}\n{r.stdout}\n{r.stderr[-3000:]}")
    return r.code, r.out


def send(jar: Path, side: Side, topic: str, count: int, prop: str, spec: str) -> list[Record]:
    """`count` timer messages; each must be stored (SEND_OK)."""
    code, sent = driver(jar, side, "send", side.namesrv, topic, str(count), prop, spec)
    assert code == 0 and len(sent) == count, (side.kind, sent)
    for s in sent:
        assert s.get("status") == "SEND_OK", (side.kind, s, side.log_tail())
        s["property"] = prop
    return sent


def push(jar: Path, side: Side, topic: str, group: str, count: int, timeout_ms: int) -> list[Record]:
    """Everything a push consumer from the first offset got until `count` distinct messages arrived."""
    code, got = driver(jar, side, "push", side.namesrv, topic, group, str(count), str(timeout_ms))
    distinct = {m["properties"]["UNIQ_KEY"] for m in got}
    assert code == 0 and len(distinct) == count, (
        f"[{side.kind}] {len(distinct)} of {count} messages of {topic} within {timeout_ms} ms: {got}\n"
        + side.log_tail()
    )
    return got


def check_delivered(kind: str, s: Record, m: Record) -> None:
    """Message `m` as delivered for send `s`: in the producer's topic and queue, never before its time,
    with the broker's timer properties."""
    props = m["properties"]
    requested, prop = s["requested"], s["property"]
    assert (m["topic"], m["queueId"]) == (props["REAL_TOPIC"], int(props["REAL_QID"])), (kind, m)
    assert m["queueId"] == s["queueId"], f"[{kind}] delivered to queue {m['queueId']}, sent to {s['queueId']}"
    # Never early: stored back into its topic (and so received) no earlier than asked.
    for at in ("storeTimestamp", "receivedAtMs"):
        assert m[at] >= requested, f"[{kind}] {prop}: {at} {m[at]} is {requested - m[at]} ms early: {s} {m}"
    assert int(props["TIMER_DEQUEUE_MS"]) >= requested, (kind, s, m)
    out = int(props["TIMER_OUT_MS"])
    if prop == "TIMER_DELIVER_MS":
        assert out == rounded(requested), (kind, s, m)
    else:
        # The broker adds the delay to its own clock, between the client's send and its answer.
        delay = requested - s["sentAtMs"]
        assert rounded(s["sentAtMs"] + delay) <= out <= rounded(s["returnedAtMs"] + delay), (kind, s, m)
    assert props[prop] == s["value"], (kind, s, m)


def delivered_once(kind: str, sent: list[Record], got: list[Record]) -> dict[str, Record]:
    """The delivery of each sent message by its id: every one delivered, none twice."""
    counts = Counter(m["properties"]["UNIQ_KEY"] for m in got)
    assert all(n == 1 for n in counts.values()), f"[{kind}] delivered more than once: {counts}"
    by_id = {m["properties"]["UNIQ_KEY"]: m for m in got}
    assert set(by_id) == {s["msgId"] for s in sent}, (kind, sent, got)
    return by_id


def names(m: Record) -> tuple[str, ...]:
    """The property names of a delivered message, less the consumer's and 5.x's send-time additions (which a
    5.3.3 broker must have stored)."""
    found = set(m["properties"]) - CLIENT_ADDED
    return tuple(sorted(found - JAVA5_STORED))


def check_java5_stored(kind: str, m: Record) -> None:
    """The deliberate difference (JAVA5_STORED): on the 5.3.3 broker and only there."""
    present = JAVA5_STORED & set(m["properties"])
    assert present == (JAVA5_STORED if kind == "rocketmq" else set()), (kind, m)


# -- side by side ----------------------------------------------------------------------------------------


@pytest.fixture(scope="class")
def sides(tmp_path_factory: pytest.TempPathFactory, jar5: Path) -> Iterator[dict[str, Side]]:
    """A ferromq broker and an Apache RocketMQ 5.3.3 broker with the same broker.conf keys, for the class."""
    server = BrokerProcess(tmp_path_factory.mktemp("timer-sbs-ferromq"), SBS_CONF).start()
    try:
        mq = start_rocketmq(
            tmp_path_factory.mktemp("timer-sbs-rocketmq"), dict(SBS_CONF), version=ROCKETMQ_5_VERSION
        )
    except BaseException:
        server.stop()
        raise
    try:
        yield {
            "ferromq": Side("ferromq", server.namesrv, server.workdir, server.log_tail),
            "rocketmq": Side("rocketmq", mq.namesrv, mq.root, mq.log_tail),
        }
    finally:
        mq.stop(kill=True)  # a reference broker: nothing reads its store afterwards
        stop_ferromq(server)


class TestSideBySide:
    def test_timers_are_delivered_alike(
        self, sides: dict[str, Side], jar5: Path, compat: Callable[..., None]
    ) -> None:
        topic = "TimerSbs"
        sent = {
            kind: [s for p, v in ASKS.items() for s in send(jar5, sides[kind], topic, SBS_PER_ASK, p, v)]
            for kind in KINDS
        }
        seen: dict[str, dict[str, set[tuple[str, ...]]]] = {}
        lags: dict[str, list[int]] = {}
        for kind in KINDS:
            got = push(jar5, sides[kind], topic, "TimerSbsGroup", len(sent[kind]), 60_000)
            by_id = delivered_once(kind, sent[kind], got)
            seen[kind] = {}
            for s in sent[kind]:
                m = by_id[s["msgId"]]
                check_delivered(kind, s, m)
                check_java5_stored(kind, m)
                seen[kind].setdefault(s["property"], set()).add(names(m))
                # From the end of the slot it waited in to its store time back in its topic.
                lags.setdefault(kind, []).append(
                    m["storeTimestamp"] - int(m["properties"]["TIMER_OUT_MS"]) - PRECISION_MS
                )
        print(
            "\nms from the end of a timer's slot to its delivery: "
            + ", ".join(f"{kind} {min(v)}..{max(v)}" for kind, v in lags.items())
        )
        print(f"\nproperty names of delivered timer messages, less {sorted(CLIENT_ADDED | JAVA5_STORED)}:")
        for prop in ASKS:
            print(f"{prop}: ferromq {sorted(seen['ferromq'][prop])}")
            print(f"{prop}: rocketmq {sorted(seen['rocketmq'][prop])}")
        for prop in ASKS:
            assert len(seen["rocketmq"][prop]) == 1, seen["rocketmq"][prop]
            assert seen["ferromq"][prop] == seen["rocketmq"][prop], (prop, seen)
            assert set(next(iter(seen["ferromq"][prop]))) >= BROKER_ADDED | {prop}
            compat(
                area="side by side",
                item=f"timer message ({prop}): delivered on time, in the producer's queue, same properties",
                client=JAVA_CLIENT,
                rocketmq_version=ROCKETMQ_5_VERSION,
            )

    def test_a_delay_beyond_the_max_is_refused_alike(
        self, sides: dict[str, Side], jar5: Path, compat: Callable[..., None]
    ) -> None:
        refused = {}
        for kind in KINDS:
            code, sent = driver(
                jar5,
                sides[kind],
                "send",
                sides[kind].namesrv,
                "TimerSbsMax",
                "1",
                "TIMER_DELAY_SEC",
                str(MAX_DELAY_SEC + 1),
            )
            assert code == 0 and len(sent) == 1, (kind, sent)
            refused[kind] = (sent[0].get("error"), sent[0].get("remark"))
        print(f"\nTIMER_DELAY_SEC={MAX_DELAY_SEC + 1}: {refused}")
        assert refused["ferromq"] == refused["rocketmq"] == (13, ILLEGAL_REMARK)  # MESSAGE_ILLEGAL
        compat(
            area="side by side",
            item="timer message beyond timerMaxDelaySec: refused with the same code and remark",
            client=JAVA_CLIENT,
            rocketmq_version=ROCKETMQ_5_VERSION,
        )

    def test_a_user_property_timer_from_the_python_client(
        self, sides: dict[str, Side], jar5: Path, compat: Callable[..., None]
    ) -> None:
        """ferromq's Python client sets TIMER_DELAY_SEC as a plain (user) property, as a 4.x client does: the
        5.3.3 broker takes it as a timer, and so does ferromq."""
        topic = "TimerSbsPy"

        async def send_py(namesrv: str) -> Record:
            async with Producer("TimerSbsPyProducer", namesrv) as p:
                sent_at = int(time.time() * 1000)
                r = await p.send(Message(topic, b"py-timer", properties={"TIMER_DELAY_SEC": "2"}))
                returned_at = int(time.time() * 1000)
            return {
                "msgId": r.msg_id,
                "queueId": r.message_queue.queue_id,
                "sentAtMs": sent_at,
                "returnedAtMs": returned_at,
                "requested": sent_at + 2000,
                "property": "TIMER_DELAY_SEC",
                "value": "2",
            }

        seen = {}
        for kind in KINDS:
            s = asyncio.run(asyncio.wait_for(send_py(sides[kind].namesrv), 60))
            got = push(jar5, sides[kind], topic, "TimerSbsPyGroup", 1, 60_000)
            m = delivered_once(kind, [s], got)[s["msgId"]]
            check_delivered(kind, s, m)
            assert m["body"] == "py-timer"
            check_java5_stored(kind, m)
            seen[kind] = names(m)
        print(f"\nPython client, TIMER_DELAY_SEC=2: {seen}")
        assert seen["ferromq"] == seen["rocketmq"], seen
        compat(
            area="side by side",
            item="timer message with TIMER_DELAY_SEC as a user property: delivered on time",
            client=PY_CLIENT,
            rocketmq_version=ROCKETMQ_5_VERSION,
        )


# -- store cross-compatibility ---------------------------------------------------------------------------


def send_cross(jar: Path, writer: Side, topic: str) -> list[Record]:
    asks = CROSS_ASKS[writer.kind]
    return [s for p, v in asks.items() for s in send(jar, writer, topic, CROSS_PER_ASK, p, v)]


def stored(store: Path, topic: str) -> tuple[list[Any], int]:
    """The messages of `topic` in a stopped broker's store, and how many the timer topic holds."""
    with MessageStore.open_read_only(store, **STORE_OPTIONS) as s:
        queues = s.queues()
        found = [m for t, q, lo, hi in queues if t == topic for m in s.get_messages(t, q, lo, hi - lo)]
        waiting = sum(hi - lo for t, _q, lo, hi in queues if t == TIMER_TOPIC)
    return found, waiting


def layout(store: Path) -> dict[str, list[str]]:
    """The store root's entries, and those of config/ and timerlog/."""
    return {
        str(d.relative_to(store.parent)): sorted(p.name for p in d.iterdir())
        for d in (store, store / "config", store / "timerlog")
    }


def check_moved(kind: str, store: Path, topic: str, sent: list[Record], got: list[Record]) -> None:
    """The reader delivered every timer the writer left pending, each once, none early; and its store holds
    each exactly once in the producer's topic and queue."""
    by_id = delivered_once(kind, sent, got)
    for s in sent:
        check_delivered(kind, s, by_id[s["msgId"]])
    found, _ = stored(store, topic)
    counts = Counter(m.properties["UNIQ_KEY"] for m in found)
    assert counts == Counter({s["msgId"]: 1 for s in sent}), counts
    queue_of = {s["msgId"]: s["queueId"] for s in sent}
    assert all(m.queue_id == queue_of[m.properties["UNIQ_KEY"]] for m in found)


def java_timer_problems(mq: ApacheRocketMQ) -> list[str]:
    """ERROR lines of the Java broker's log before its shutdown began, and any line of its timer store
    that says it failed."""
    text = mq.broker_log.read_text(encoding="utf-8", errors="replace")
    running = text.partition("Shutdown hook was invoked")[0]

    def timer_failed(line: str) -> bool:
        # The reader's group is named Timer...: its own lines (e.g. "getConsumerGroupInfo failed,
        # TimerFromFerromqGroup", a consumer not registered yet) are not the timer store's.
        rest = line.replace("TimerFromFerromqGroup", "")
        return "Timer" in rest and ("error" in rest.lower() or "fail" in rest.lower())

    return [line for line in running.splitlines() if " ERROR " in line or timer_failed(line)]


def timer_checkpoint(store: Path) -> tuple[int, int, int, int]:
    """config/timercheck (both brokers' layout, big-endian longs): the next slot to deliver, the timer log's
    flushed end, the timer topic's next offset to enqueue, and the master's."""
    last_read, flush_pos, queue_offset, master = struct.unpack_from(
        ">4q", (store / "config" / "timercheck").read_bytes()
    )
    return last_read, flush_pos, queue_offset, master


def timeline(sent: list[Record], stopping: float, stopped: float, reader_ready: float) -> tuple[str, int]:
    """When the writer stopped and the reader was ready, against the deliver times asked (seconds after the
    first send); and how many were due after the reader was ready (some must be, or the reader's timing
    would go unchecked)."""
    t0 = min(s["sentAtMs"] for s in sent) / 1000
    due = sorted(s["requested"] / 1000 - t0 for s in sent)
    later = sum(d > reader_ready - t0 for d in due)
    told = (
        f"writer stopping at +{stopping - t0:.1f} s, stopped at +{stopped - t0:.1f} s, reader ready at "
        f"+{reader_ready - t0:.1f} s; timers due from +{due[0]:.1f} s to +{due[-1]:.1f} s, {later} of "
        f"{len(due)} after the reader was ready"
    )
    return told, later


def test_ferromq_delivers_timers_pending_in_a_java_store(
    tmp_path: Path, jar5: Path, compat: Callable[..., None]
) -> None:
    topic = "TimerFromJava"
    mq = start_rocketmq(tmp_path / "java", dict(STORE_CONF), version=ROCKETMQ_5_VERSION)
    java = Side("rocketmq", mq.namesrv, mq.root, mq.log_tail)
    try:
        sent = send_cross(jar5, java, topic)
    finally:
        stopping = time.time()
        mq.stop()
        stopped = time.time()
    assert mq.broker_exit is not None, f"the Java broker had to be killed\n{mq.log_tail()}"
    problems = java_timer_problems(mq)
    assert not problems, "\n".join(problems[:30])
    store = mq.store
    assert not (store / "abort").exists(), mq.log_tail()
    # Every timer taken into the wheel (the timer topic read to its end), none delivered yet.
    found, waiting = stored(store, topic)
    assert found == [] and waiting == len(sent), f"the timers should still wait: {len(found)} delivered"
    checkpoint = timer_checkpoint(store)
    assert checkpoint[2] == checkpoint[3] == len(sent), checkpoint
    print(f"\n5.3.3 store: {layout(store)}\n5.3.3 config/timercheck: {checkpoint}")

    server = BrokerProcess(tmp_path / "ferromq", STORE_CONF, store=store).start()
    ready = time.time()
    reader = Side("ferromq", server.namesrv, server.workdir, server.log_tail)
    try:
        got = push(jar5, reader, topic, "TimerFromJavaGroup", len(sent), 90_000)
    finally:
        stop_ferromq(server)
    told, later = timeline(sent, stopping, stopped, ready)
    print(told)
    check_moved("ferromq", store, topic, sent, got)
    assert later > 0, f"none of the timers was still ahead when the reader started: {told}"
    compat(
        area="store files shared with Apache RocketMQ",
        item="timer messages pending in an Apache RocketMQ 5.3.3 store: delivered by ferromq, on time, once",
        client=JAVA_CLIENT,
        rocketmq_version=ROCKETMQ_5_VERSION,
    )


def test_java_delivers_timers_pending_in_a_ferromq_store(
    tmp_path: Path, jar5: Path, compat: Callable[..., None]
) -> None:
    topic = "TimerFromFerromq"
    root = tmp_path / "java"
    store = root / "store"  # where start_rocketmq(root) points storePathRootDir
    server = BrokerProcess(tmp_path / "ferromq", STORE_CONF, store=store).start()
    writer = Side("ferromq", server.namesrv, server.workdir, server.log_tail)
    try:
        sent = send_cross(jar5, writer, topic)
    finally:
        stopping = time.time()
        stop_ferromq(server)
        stopped = time.time()
    found, waiting = stored(store, topic)
    assert found == [] and waiting == len(sent), f"the timers should still wait: {len(found)} delivered"
    checkpoint = timer_checkpoint(store)
    assert checkpoint[2] == checkpoint[3] == len(sent), checkpoint
    print(f"\nferromq store: {layout(store)}\nferromq config/timercheck: {checkpoint}")

    mq = start_rocketmq(root, dict(STORE_CONF), version=ROCKETMQ_5_VERSION)
    ready = time.time()
    reader = Side("rocketmq", mq.namesrv, mq.root, mq.log_tail)
    try:
        got = push(jar5, reader, topic, "TimerFromFerromqGroup", len(sent), 90_000)
    finally:
        mq.stop()
    told, later = timeline(sent, stopping, stopped, ready)
    print(told)
    assert mq.broker_exit is not None, f"the Java broker had to be killed\n{mq.log_tail()}"
    problems = java_timer_problems(mq)
    assert not problems, "\n".join(problems[:30])
    # The Java broker resumed where ferromq's checkpoint says (TimerMessageStore.recover): the same next slot,
    # the timer topic's offset after the last unit's message, and the timer log's end found by its scan.
    last_read, flush_pos, queue_offset, _master = checkpoint
    recovered = (
        f"Timer recover ok currReadTimerMs:{last_read} currQueueOffset:{queue_offset} "
        f"checkQueueOffset:{queue_offset} processOffset:{flush_pos}"
    )
    assert recovered in mq.broker_log.read_text(encoding="utf-8", errors="replace"), (
        recovered,
        mq.log_tail(),
    )
    check_moved("rocketmq", store, topic, sent, got)
    assert later > 0, f"none of the timers was still ahead when the reader started: {told}"
    compat(
        area="store files shared with Apache RocketMQ",
        item="timer messages pending in a ferromq store: delivered by Apache RocketMQ 5.3.3, on time, once",
        client=JAVA_CLIENT,
        rocketmq_version=ROCKETMQ_5_VERSION,
    )
