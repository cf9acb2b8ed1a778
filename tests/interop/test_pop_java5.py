"""POP consumption (RocketMQ 5.x) by the official Java 5.3.3 remoting client's push consumer, on ferromq and
on the real Apache RocketMQ 5.3.3 broker side by side (tests/interop/java5, `io.ferromq.interop5.Pop`).

For each broker: a topic of 4 queues gets 10 messages (ferromq's Python client); `Pop setmode` does
what `mqadmin setConsumeMode -c DefaultCluster -t T -g G -m POP -q 0` does (SET_MESSAGE_REQUEST_MODE to
every master); `Pop consume` runs a DefaultMQPushConsumer with `setClientRebalance(false)` (QUERY_ASSIGNMENT
gives it queue -1 of the broker in POP mode; it pops with POP_MESSAGE and long polling, acks with
ACK_MESSAGE) whose listener fails two bodies the first time (RECONSUME_LATER: the client sends
CHANGE_MESSAGE_INVISIBLETIME with the first delay level, 10 s; the broker's revive puts them into
`%RETRY%<group>_<topic>` with reconsumeTimes 1, and they come back through POP as messages of the topic).
Both consumers run at the same time.

Checked on both brokers: every body consumed successfully exactly once, the two failed ones once before with
reconsumeTimes 0 and then again with reconsumeTimes 1 no earlier than the 10 s asked, from the retry topic
(receipt mark 1) with 1ST_POP_TIME = the time of the checkpoint the nack wrote; each delivery carries POP_CK
(the 8-field receipt) and 1ST_POP_TIME; every ack and change was answered SUCCESS; the group's committed
offsets reach the max offset of the topic's queues and of the pop retry topic (GET_CONSUME_STATS).
Then the two brokers' outcomes are compared: the same deliveries (body, reconsumeTimes, status; ferromq may
show at-least-once duplicates only if Java does too), the same property names, what a redelivery keeps of
the first delivery (born host, timestamps, flags, properties), the same queue for redeliveries, the same
offsets, the same header fields in the answers to POP_MESSAGE / ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME
and the same QUERY_ASSIGNMENT bodies. Run with `-s` to see them (and the remarks, which differ slightly).
The driver's record of each run (deliveries and answered requests) is left in the broker's work directory
as pop-consume.jsonl.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import ROCKETMQ_5_VERSION, have_java, start_rocketmq

from ferromq.client import Message, Producer
from ferromq.client.admin import Admin, QueueProgress
from ferromq.testing import BrokerProcess
from ferromq.testing.waiting import until
from tests.interop.compat import OFFICIAL
from tests.interop.conftest import stop_ferromq
from tests.interop.java5build import build_interop5_jar, run_driver

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="the 5.3.3 POP tests need `java` and `mvn` on PATH"),
    # The first run resolves the 5.3.3 broker's jars and builds the driver (Maven Central).
    pytest.mark.timeout(600),
]

KINDS = ("ferromq", "rocketmq")
JAVA_CLIENT = "Java client 5.3.3 (remoting)"
CLUSTER, BROKER_NAME = "DefaultCluster", "broker-a"
RUN = uuid.uuid4().hex[:6]
TOPIC, GROUP = f"PopJ5_{RUN}", f"PopJ5G_{RUN}"
RETRY_TOPIC = f"%RETRY%{GROUP}_{TOPIC}"  # the pop retry topic (v1 name, enableRetryTopicV2=false)
QUEUES = 4
BODIES = [f"pop-{i}" for i in range(10)]
FAIL = ["pop-3", "pop-6"]
# The client's first nack (CHANGE_MESSAGE_INVISIBLETIME) asks for popDelayLevel[0] = 10 s.
NACK_DELAY_MS = 10_000
# Both consume at once; Java's redelivery takes 10 s + revive + up to one 15 s long poll (a v1 retry
# topic arrival wakes no parked pop there).
CONSUME_TIMEOUT_MS = 90_000
CONF = {
    "brokerClusterName": CLUSTER,
    "brokerName": BROKER_NAME,
    "brokerIP1": "127.0.0.1",
    "autoCreateTopicEnable": "true",
    "autoCreateSubscriptionGroup": "true",
    "timerPrecisionMs": "100",
}
# Added by the consuming client, not by the broker: the push consumer's start time
# (ConsumeMessagePopConcurrentlyService). (It adds POP_CK and 1ST_POP_TIME too, from the pop's answer, on
# both brokers alike.)
CLIENT_ADDED = {"CONSUME_START_TIME"}
# Differences of the send path, not of POP: RocketMQ 5.x's send processor stores the broker's regionId and
# traceOn in every message (AbstractSendMessageProcessor.buildMsgContext) and keeps the producer's WAIT
# property (5.3.3's SendMessageProcessor re-encodes every property it got); ferromq, as 4.9.7, only answers
# regionId/traceOn and stores a message without WAIT.
JAVA5_STORED = {"MSG_REGION", "TRACE_ON", "WAIT"}

Record = dict[str, Any]


@dataclass
class Outcome:
    """One broker's run: what the Java consumer got and sent, and the group's offsets afterwards."""

    kind: str
    code: int = -1
    deliveries: list[Record] = field(default_factory=list)
    rpcs: list[Record] = field(default_factory=list)
    sent: dict[str, str] = field(default_factory=dict)
    """body -> msgId (UNIQ_KEY) as the Python producer sent it."""
    setmode: list[Record] = field(default_factory=list)
    progress: list[QueueProgress] = field(default_factory=list)
    elapsed: float = 0.0
    stderr_tail: str = ""
    log_tail: Callable[[], str] = lambda: ""

    def context(self) -> str:
        return (
            f"[{self.kind}] exit {self.code}\ndeliveries:\n"
            + "\n".join(map(str, self.deliveries))
            + f"\nclient stderr (tail):\n{self.stderr_tail}\n--- broker log ---\n{self.log_tail()}"
        )


@pytest.fixture(scope="module")
def jar5() -> Path:
    return build_interop5_jar()


def run_pop(
    jar: Path, workdir: Path, *args: str, timeout: float
) -> tuple[int, list[Record], list[Record], str]:
    """One run of `Pop`: exit code, stdout JSON lines, stderr JSON lines, stderr's tail."""
    r = run_driver(jar, workdir, "Pop", *args, timeout=timeout)
    tail = "\n".join(line for line in r.stderr.splitlines()[-60:] if not line.startswith('{"rpc":"POP'))
    return r.code, r.out, r.err, tail


async def prepare(namesrv: str) -> dict[str, str]:
    """The topic (4 queues) on the broker, and the 10 messages; body -> msgId."""
    async with Admin(namesrv) as admin:
        await admin.create_topic(TOPIC, QUEUES)

        async def routed() -> bool:
            try:
                route = await admin.topic_route(TOPIC)
            except Exception:
                return False
            return sum(q.write_queue_nums for q in route.queue_datas) == QUEUES

        await until(routed, f"a route of {TOPIC} with {QUEUES} queues", timeout=30)
    sent = {}
    async with Producer(f"PopJ5P_{RUN}", namesrv, send_timeout=10.0) as producer:
        for body in BODIES:
            r = await producer.send(Message(TOPIC, body.encode(), tags="PopTag", keys=f"key-{body}"))
            sent[body] = r.msg_id
    return sent


async def progress(namesrv: str) -> list[QueueProgress]:
    """The group's progress on every queue it has an offset on (the topic's and the retry topic's), once
    every one reached its queue's max offset (the 5.3.3 broker commits a pop's offset asynchronously)."""
    async with Admin(namesrv) as admin:
        last: list[QueueProgress] = []

        async def caught_up() -> bool:
            nonlocal last
            last = (await admin.consumer_progress(GROUP)).queues
            topics = {q.queue.topic for q in last}
            return {TOPIC, RETRY_TOPIC} <= topics and all(q.consumer_offset >= q.broker_offset for q in last)

        try:
            await until(caught_up, f"the offsets of {GROUP} at the queues' max", timeout=20)
        except AssertionError:
            pass  # the assertions on `last` say what is missing
        return last


def scenario(jar: Path, kind: str, namesrv: str, workdir: Path, log_tail: Callable[[], str]) -> Outcome:
    out = Outcome(kind, log_tail=log_tail)
    out.sent = asyncio.run(asyncio.wait_for(prepare(namesrv), 90))
    code, out.setmode, _, tail = run_pop(
        jar, workdir, "setmode", namesrv, CLUSTER, TOPIC, GROUP, "POP", timeout=120
    )
    assert code == 0 and out.setmode and all(r.get("ok") for r in out.setmode), (kind, out.setmode, tail)
    started = time.monotonic()
    out.code, out.deliveries, out.rpcs, out.stderr_tail = run_pop(
        jar,
        workdir,
        "consume",
        namesrv,
        TOPIC,
        GROUP,
        str(len(BODIES)),
        str(CONSUME_TIMEOUT_MS),
        ",".join(FAIL),
        timeout=CONSUME_TIMEOUT_MS / 1000 + 60,
    )
    out.elapsed = time.monotonic() - started
    with open(workdir / "pop-consume.jsonl", "w") as f:  # for a look after the run
        for r in [*out.deliveries, *out.rpcs]:
            f.write(json.dumps(r) + "\n")
    out.progress = asyncio.run(asyncio.wait_for(progress(namesrv), 60))
    return out


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory, jar5: Path) -> Iterator[dict[str, Outcome]]:
    """The scenario on a ferromq broker and on an Apache RocketMQ 5.3.3 broker (same broker.conf keys), the
    two Java consumers running at the same time."""
    server = BrokerProcess(tmp_path_factory.mktemp("pop-ferromq"), CONF).start()
    try:
        mq = start_rocketmq(tmp_path_factory.mktemp("pop-rocketmq"), dict(CONF), version=ROCKETMQ_5_VERSION)
    except BaseException:
        server.stop()
        raise
    try:
        with ThreadPoolExecutor(2) as pool:
            futures = {
                "ferromq": pool.submit(scenario, jar5, "ferromq", server.namesrv, server.workdir, server.log),
                "rocketmq": pool.submit(scenario, jar5, "rocketmq", mq.namesrv, mq.root, mq.log_tail),
            }
            yield {kind: f.result() for kind, f in futures.items()}
    finally:
        mq.stop(kill=True)  # a reference broker: nothing reads its store afterwards
        stop_ferromq(server)


# -- one broker ----------------------------------------------------------------------------------------


def receipt(m: Record) -> list[str]:
    return str(m["properties"].get("POP_CK", "")).split(" ")


def redeliveries(o: Outcome) -> dict[str, list[Record]]:
    by_body: dict[str, list[Record]] = {}
    for m in o.deliveries:
        by_body.setdefault(m["body"], []).append(m)
    return by_body


def duplicates(o: Outcome) -> list[Record]:
    """Deliveries beyond the expected ones: a second success of a body, or any more of a failed one."""
    extra = []
    for body, ms in redeliveries(o).items():
        expected = 2 if body in FAIL else 1
        extra += ms[expected:]
    return extra


@pytest.mark.parametrize("kind", KINDS)
def test_pop_push_consumer(outcomes: dict[str, Outcome], kind: str, compat: Callable[..., None]) -> None:
    o = outcomes[kind]
    ctx = o.context()
    assert o.code == 0, f"[{kind}] the consumer did not get every body within {CONSUME_TIMEOUT_MS} ms\n{ctx}"
    print(f"\n[{kind}] {len(o.deliveries)} deliveries in {o.elapsed:.1f} s")
    for m in o.deliveries:
        props = m["properties"]
        print(
            f"[{kind}] {m['body']} {m['status']} reconsumeTimes={m['reconsumeTimes']} topic={m['topic']} "
            f"queue={m['queueId']}@{m['queueOffset']} POP_CK={props.get('POP_CK')!r} "
            f"1ST_POP_TIME={props.get('1ST_POP_TIME')}"
        )
    # Every body consumed successfully exactly once: at-least-once duplicates (deliveries after the expected
    # ones) are reported here and judged against Java's in test_side_by_side_the_same_outcome.
    extra = duplicates(o)
    print(f"[{kind}] duplicates: {extra}")
    successes = Counter(m["body"] for m in o.deliveries if m["status"] == "CONSUME_SUCCESS")
    duplicated = Counter(m["body"] for m in extra if m["status"] == "CONSUME_SUCCESS")
    assert successes - duplicated == Counter(BODIES), (successes, ctx)
    by_body = redeliveries(o)
    for body in BODIES:
        ms = by_body[body]
        for m in ms:
            assert m["topic"] == TOPIC and m["msgId"] == o.sent[body], (m, ctx)
            ck = receipt(m)
            assert len(ck) == 8 and ck[5] == BROKER_NAME, (m, ctx)
            assert "1ST_POP_TIME" in m["properties"], (m, ctx)
        if body not in FAIL:
            assert [(m["reconsumeTimes"], m["status"]) for m in ms[:1]] == [(0, "CONSUME_SUCCESS")], (
                body,
                ms,
                ctx,
            )
            assert receipt(ms[0])[4] == "0", ms  # from the topic itself
            continue
        first, again = ms[0], ms[1]
        assert [(m["reconsumeTimes"], m["status"]) for m in ms[:2]] == [
            (0, "RECONSUME_LATER"),
            (1, "CONSUME_SUCCESS"),
        ], (body, ms, ctx)
        assert receipt(first)[4] == "0" and receipt(again)[4] == "1", (first, again)  # from the retry topic
        waited = again["receivedAtMs"] - first["receivedAtMs"]
        assert waited >= NACK_DELAY_MS - 1000, f"[{kind}] {body} back after {waited} ms\n{ctx}"
        # The broker sets 1ST_POP_TIME when it revives the message: the time of the checkpoint revived, which
        # is the one CHANGE_MESSAGE_INVISIBLETIME wrote (its answer's popTime), not the first pop's.
        changed = [
            r
            for r in o.rpcs
            if r["rpc"] == "CHANGE_MESSAGE_INVISIBLETIME"
            and r["request"]["extraInfo"] == first["properties"]["POP_CK"]
        ]
        assert len(changed) == 1, (first, o.rpcs)
        assert again["properties"]["1ST_POP_TIME"] == changed[0]["response"]["popTime"], (
            first,
            again,
            changed,
        )
        assert changed[0]["response"]["invisibleTime"] == str(NACK_DELAY_MS), changed
    # The client's requests, as the broker answered them.
    answered = Counter((r["rpc"], r.get("code")) for r in o.rpcs if r["rpc"] != "summary")
    print(f"[{kind}] requests answered (name, code): {dict(sorted(answered.items()))}")
    assert answered[("ACK_MESSAGE", 0)] >= len(BODIES), (answered, ctx)
    assert answered[("CHANGE_MESSAGE_INVISIBLETIME", 0)] >= len(FAIL), (answered, ctx)
    bad = [
        r for r in o.rpcs if r["rpc"] in ("ACK_MESSAGE", "CHANGE_MESSAGE_INVISIBLETIME") and r["code"] != 0
    ]
    assert not bad, (bad, ctx)
    pops = Counter(r.get("code") for r in o.rpcs if r["rpc"] == "POP_MESSAGE")
    assert set(pops) <= {0, 210}, (pops, ctx)  # FOUND, or POLLING_TIMEOUT once a long poll found nothing
    # The group's committed offsets at the max of every queue it consumed.
    for q in o.progress:
        where = f"{q.queue.topic}@{q.queue.queue_id}"
        print(f"[{kind}] {where}: consumer {q.consumer_offset} broker {q.broker_offset}")
    on_topic = {q.queue.queue_id: q for q in o.progress if q.queue.topic == TOPIC}
    assert sorted(on_topic) == list(range(QUEUES)), (o.progress, ctx)
    assert sum(q.broker_offset for q in on_topic.values()) == len(BODIES), o.progress
    retry = [q for q in o.progress if q.queue.topic == RETRY_TOPIC]
    assert [q.broker_offset for q in retry] == [len(FAIL)], (o.progress, ctx)
    behind = [q for q in o.progress if q.consumer_offset < q.broker_offset]
    assert not behind, (behind, ctx)
    if kind == "ferromq":
        compat(
            area=OFFICIAL,
            item="push consumer in POP mode (setConsumeMode POP): pop, ack, nack, redelivery, offsets",
            client=JAVA_CLIENT,
            rocketmq_version=None,
        )


# -- side by side --------------------------------------------------------------------------------------


def shape(o: Outcome) -> Counter[tuple[str, int, str]]:
    return Counter((m["body"], m["reconsumeTimes"], m["status"]) for m in o.deliveries)


def dup_shape(o: Outcome) -> Counter[tuple[str, int, str]]:
    return Counter((m["body"], m["reconsumeTimes"], m["status"]) for m in duplicates(o))


def names(m: Record) -> tuple[str, ...]:
    return tuple(sorted(set(m["properties"]) - CLIENT_ADDED - JAVA5_STORED))


def test_side_by_side_the_same_outcome(outcomes: dict[str, Outcome], compat: Callable[..., None]) -> None:
    ferro, java = outcomes["ferromq"], outcomes["rocketmq"]
    assert ferro.code == java.code == 0, (ferro.context(), java.context())
    dups = {kind: duplicates(o) for kind, o in outcomes.items()}
    print(f"\nat-least-once duplicates: {dups}")
    if dups["ferromq"]:
        assert dups["rocketmq"], f"ferromq delivered more than Java 5.3.3 did: {dups['ferromq']}"
    expected = Counter(
        [(b, 0, "CONSUME_SUCCESS") for b in BODIES if b not in FAIL]
        + [(b, 0, "RECONSUME_LATER") for b in FAIL]
        + [(b, 1, "CONSUME_SUCCESS") for b in FAIL]
    )
    assert shape(java) - dup_shape(java) == expected, java.context()
    assert shape(ferro) - dup_shape(ferro) == expected, ferro.context()

    # Property names of first deliveries and of redeliveries, and where a redelivery comes from.
    seen: dict[str, dict[str, set[tuple[str, ...]]]] = {}
    retry_queues: dict[str, set[int]] = {}
    for kind, o in outcomes.items():
        for m in o.deliveries:
            which = "redelivery" if m["reconsumeTimes"] else "first delivery"
            seen.setdefault(kind, {}).setdefault(which, set()).add(names(m))
            if m["reconsumeTimes"]:
                retry_queues.setdefault(kind, set()).add(m["queueId"])
    for which in ("first delivery", "redelivery"):
        print(f"{which} property names (less {sorted(CLIENT_ADDED | JAVA5_STORED)}):")
        for kind in KINDS:
            print(f"  {kind}: {sorted(seen[kind][which])}")
    print(f"queues of redeliveries: {retry_queues}")
    assert seen["ferromq"] == seen["rocketmq"], seen
    assert retry_queues["ferromq"] == retry_queues["rocketmq"] == {0}, retry_queues

    # What a redelivery keeps of the first delivery: the same fields kept (True) or changed on both.
    fields = ("bornHost", "bornTimestamp", "storeHost", "sysFlag", "flag", "msgId")
    kept: dict[str, dict[str, bool]] = {}
    for kind, o in outcomes.items():
        for body, ms in redeliveries(o).items():
            if body in FAIL:
                first, again = ms[0], ms[1]
                print(f"[{kind}] {body} first:   " + ", ".join(f"{f}={first[f]}" for f in fields))
                print(f"[{kind}] {body} again:   " + ", ".join(f"{f}={again[f]}" for f in fields))
                same = {f: first[f] == again[f] for f in fields}
                same |= {
                    f"property {k}": first["properties"].get(k) == again["properties"].get(k)
                    for k in set(first["properties"]) | set(again["properties"])
                    if k not in CLIENT_ADDED | JAVA5_STORED
                }
                assert kept.setdefault(kind, same) == same, (kind, kept[kind], same)
    print(f"kept by a redelivery: {kept}")
    assert kept["ferromq"] == kept["rocketmq"], kept

    # The send path's differences (JAVA5_STORED): on the 5.3.3 broker's messages and only there.
    for kind, o in outcomes.items():
        for m in o.deliveries:
            present = JAVA5_STORED & set(m["properties"])
            assert present == (JAVA5_STORED if kind == "rocketmq" else set()), (kind, m)

    # The offsets of the topic and of the pop retry topic: the same queues, all at their max. (Other
    # entries, e.g. %RETRY%<group> which the consumer pulls, depend on whether a 15 s suspended pull of it
    # was answered before the client shut down and stored its offset with a oneway UPDATE_CONSUMER_OFFSET.)
    def offsets(o: Outcome) -> set[tuple[str, int, int, int]]:
        return {
            (q.queue.topic, q.queue.queue_id, q.broker_offset, q.consumer_offset)
            for q in o.progress
            if q.queue.topic in (TOPIC, RETRY_TOPIC)
        }

    assert offsets(ferro) == offsets(java), (offsets(ferro), offsets(java))
    for kind, o in outcomes.items():
        other = [q for q in o.progress if q.queue.topic not in (TOPIC, RETRY_TOPIC)]
        print(f"[{kind}] other offsets of {GROUP}: {other}")

    # The brokers' answers to the client's POP requests: the same codes and header fields (values differ:
    # times, the order of the queues in the offset infos).
    def answers(o: Outcome) -> dict[tuple[str, int], set[tuple[str, ...]]]:
        found: dict[tuple[str, int], set[tuple[str, ...]]] = {}
        for r in o.rpcs:
            if r["rpc"] in ("POP_MESSAGE", "ACK_MESSAGE", "CHANGE_MESSAGE_INVISIBLETIME", "QUERY_ASSIGNMENT"):
                found.setdefault((r["rpc"], r["code"]), set()).add(tuple(sorted(r.get("response") or {})))
        return found

    print(f"answers (request, code) -> header fields: ferromq {answers(ferro)}\nrocketmq {answers(java)}")
    both = answers(ferro).keys() & answers(java).keys()
    assert {("ACK_MESSAGE", 0), ("CHANGE_MESSAGE_INVISIBLETIME", 0), ("POP_MESSAGE", 0)} <= both
    assert {k: answers(ferro)[k] for k in both} == {k: answers(java)[k] for k in both}
    for kind, o in outcomes.items():
        remarks = {(r["rpc"], r["code"], r.get("remark")) for r in o.rpcs if r["rpc"] != "summary"}
        print(f"[{kind}] (request, code, remark): {sorted(remarks, key=str)}")

    def assignments(o: Outcome) -> set[str]:
        return {r["responseBody"].replace(RUN, "*") for r in o.rpcs if r["rpc"] == "QUERY_ASSIGNMENT"}

    assert assignments(ferro) == assignments(java), (assignments(ferro), assignments(java))

    # How long a nacked message took to come back: the revive puts it into the pop retry topic ~10 s after
    # the nack, but on both brokers the pop parked then is answered only when its 15 s long poll ends (a
    # v1 retry topic arrival wakes no pop in 5.3.3; ferromq's pop waits only on queues that existed when it
    # parked).
    for kind, o in outcomes.items():
        waits = {
            b: ms[1]["receivedAtMs"] - ms[0]["receivedAtMs"] for b, ms in redeliveries(o).items() if b in FAIL
        }
        print(f"[{kind}] nack to redelivery (ms): {waits}; whole run {o.elapsed:.1f} s")
    compat(
        area="side by side",
        item="POP push consumer: same deliveries, receipts, properties, redelivery queue and offsets",
        client=JAVA_CLIENT,
        rocketmq_version=ROCKETMQ_5_VERSION,
    )
