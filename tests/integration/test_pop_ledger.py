"""The POP revive ledger as a state machine (issue 39), checked with hypothesis on a real broker
and store: any sequence of pops (messages invisible for a moment or for a minute), acks, batch
acks, changes of invisible time, revive rounds and restarts. The model: every message not acked
has exactly one live copy, in a topic or held by one receipt. So

* a pop never returns a message acked, nor one a receipt still holds invisible (no repeat);
* in the end every message not acked comes back, once each, and nothing else is left (no loss,
  no extra copy).

kill -9 is the subject of test_pop.py's crash test and of test_pop_ledger_kill below, where the
model allows what a crash allows: a pop or an ack not yet on disk may be done again."""

from __future__ import annotations

import asyncio
import base64
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ferromq.broker.broker import Broker
from ferromq.broker.pop.formats import REVIVE_GROUP, ExtraInfo, real_topic
from ferromq.broker.topics import TopicConfig
from ferromq.message import StoredMessage, decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.testing import BrokerProcess
from ferromq.testing.waiting import until
from tests.integration.brokerkit import Client, pop_receipt, pop_request, properties, running, send_ext

TOPIC, GROUP, QUEUES, MESSAGES = "LedgerT", "LedgerG", 2, 12
SETTINGS = {"timer_precision_ms": 100, "revive_queue_num": 2, "flush_consumer_offset_interval": 100}
# "Long" receipts come due within an example, so acked messages' checkpoints are decided too;
# the drain's own receipts stay for the rest of the example.
LONG_MS, DRAIN_MS = 4000, 60_000
# Acks and changes name only receipts with this long left: one nearer its time races the revive.
MARGIN_MS = 1500

# One operation of a run: ("pop", count, long), ("ack", index), ("batch_ack", count),
# ("change", index, long), ("revive",), ("restart",).
# What a client does (apply), then what only a run's own broker can (a revive round, a restart).
CLIENT_OPERATIONS = [
    st.tuples(st.just("pop"), st.integers(1, 5), st.booleans()),
    st.tuples(st.just("ack"), st.integers(0, 20)),
    st.tuples(st.just("batch_ack"), st.integers(1, 6)),
    st.tuples(st.just("change"), st.integers(0, 20), st.booleans()),
]
OPERATION = st.one_of(*CLIENT_OPERATIONS, st.tuples(st.just("revive")), st.tuples(st.just("restart")))
LEDGER = settings(
    max_examples=8,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@dataclass
class Held:
    """A popped message's receipt, and whether it holds the message invisible for long."""

    receipt: ExtraInfo
    long: bool

    @property
    def topic(self) -> str:
        return real_topic(TOPIC, GROUP, self.receipt.mark)

    @property
    def due(self) -> int:
        return self.receipt.pop_time + self.receipt.invisible_time


def now_ms() -> int:
    return int(time.time() * 1000)


class Model:
    """What the broker must hold: each message acked, held by a receipt, or free to pop."""

    def __init__(self) -> None:
        self.acked: set[bytes] = set()
        self.held: dict[bytes, Held] = {}
        self.latest_due = 0
        """The latest time a receipt of the run (not the drain's) comes due."""
        self.crashed = False
        """After a kill -9 a pop or an ack not yet on disk may be done again."""

    def popped(self, body: bytes, held: Held, drain: bool = False) -> None:
        if not self.crashed:
            assert body not in self.acked, f"{body!r} was acked and came back"
            old = self.held.get(body)
            assert old is None or now_ms() >= old.due, f"{body!r} came back while its receipt holds it"
        self.acked.discard(body)  # after a crash: a lost ack, done again
        self.held[body] = held
        if not drain:
            self.latest_due = max(self.latest_due, held.due)

    def live(self) -> list[bytes]:
        """Messages held by a receipt with time to act on it (ack, change)."""
        soon = now_ms() + MARGIN_MS
        return sorted(b for b, h in self.held.items() if h.due > soon)


async def pop(
    c: Client, model: Model, count: int, long: bool, broker_name: str, poll: int = 0, drain: bool = False
) -> list[bytes]:
    """One pop of the group (every queue, its retry topic too); the bodies it took."""
    invisible = DRAIN_MS if drain else LONG_MS if long else 0
    ext = pop_request(TOPIC, GROUP, maxMsgNums=count, invisibleTime=invisible, pollTime=poll)
    r = await c.call(RC.POP_MESSAGE, ext)
    assert r.code in (R.SUCCESS, R.POLLING_TIMEOUT), (r.code, r.remark)
    msgs: list[StoredMessage] = decode_messages(r.body) if r.body else []
    for m in msgs:
        held = Held(ExtraInfo.parse(pop_receipt(r.ext, m, broker_name)), long)
        model.popped(m.body, held, drain)
    return [m.body for m in msgs]


def chosen(model: Model, index: int) -> tuple[bytes, Held] | None:
    """The index-th message held by a receipt with time left (modulo their number)."""
    bodies = model.live()
    if not bodies:
        return None
    body = bodies[index % len(bodies)]
    return body, model.held[body]


def receipt_fields(h: Held) -> dict[str, Any]:
    """The header fields an ack and a change of invisible time name a message by."""
    r = h.receipt
    return {
        "consumerGroup": GROUP,
        "topic": h.topic,
        "queueId": r.queue_id,
        "offset": r.offset,
        "extraInfo": str(r),
    }


async def ack(c: Client, model: Model, index: int) -> None:
    if (held := chosen(model, index)) is None:
        return
    body, h = held
    r = await c.call(RC.ACK_MESSAGE, receipt_fields(h))
    assert r.code == R.SUCCESS, (r.code, r.remark)
    del model.held[body]
    model.acked.add(body)


async def batch_ack(c: Client, model: Model, count: int) -> None:
    """Acks up to `count` long-held messages in one BATCH_ACK_MESSAGE: an entry per checkpoint."""
    entries: dict[tuple[Any, ...], tuple[dict[str, Any], int]] = {}
    chosen = model.live()[:count]
    for body in chosen:
        r = model.held[body].receipt
        key = (r.mark, r.queue_id, r.ck_offset, r.pop_time, r.revive_qid)
        entry, bits = entries.get(key, (None, 0))
        if entry is None:
            entry = {
                "c": GROUP,
                "t": TOPIC,
                "r": r.mark,
                "q": r.queue_id,
                "rq": r.revive_qid,
                "so": r.ck_offset,
                "pt": r.pop_time,
                "it": r.invisible_time,
            }
        entries[key] = (entry, bits | 1 << (r.offset - r.ck_offset))
    if not entries:
        return
    acks = []
    for entry, bits in entries.values():
        raw = bits.to_bytes((bits.bit_length() + 7) // 8, "little")
        acks.append({**entry, "b": base64.b64encode(raw).decode()})
    r = await c.call(RC.BATCH_ACK_MESSAGE, {}, orjson.dumps({"acks": acks}))
    assert r.code == R.SUCCESS, (r.code, r.remark)
    for body in chosen:
        del model.held[body]
        model.acked.add(body)


async def change(c: Client, model: Model, index: int, long: bool) -> None:
    if (held := chosen(model, index)) is None:
        return
    body, h = held
    fields = {**receipt_fields(h), "invisibleTime": LONG_MS if long else 0}
    r = await c.call(RC.CHANGE_MESSAGE_INVISIBLETIME, fields)
    assert r.code == R.SUCCESS, (r.code, r.remark)
    e = r.ext
    changed = Held(h.receipt.changed(int(e["popTime"]), int(e["invisibleTime"]), int(e["reviveQid"])), long)
    model.held[body] = changed
    model.latest_due = max(model.latest_due, changed.due)


async def send_all(c: Client) -> None:
    for i in range(MESSAGES):
        ext = send_ext(TOPIC, i % QUEUES, properties(KEYS=f"k{i}"))
        assert (await c.call(RC.SEND_MESSAGE, ext, f"ledger-{i:02d}".encode())).code == R.SUCCESS


async def drain(c: Client, model: Model, broker_name: str) -> list[bytes]:
    """Makes every held message due now, then pops (holding for long) until each message not
    acked came back; returns what came, in order."""
    for body in model.live():
        live = model.live()
        if body in live:
            await change(c, model, live.index(body), long=False)
    expected = {f"ledger-{i:02d}".encode() for i in range(MESSAGES)} - model.acked
    came: list[bytes] = []
    deadline = time.monotonic() + 45
    while not expected <= set(came) and time.monotonic() < deadline:
        came += await pop(c, model, 32, True, broker_name, poll=1000, drain=True)
    assert expected <= set(came), f"never came back: {sorted(expected - set(came))}"
    if not model.crashed:
        assert sorted(came) == sorted(expected), f"came back twice, or acked: {sorted(came)}"
    return came


def ledger_settled(broker: Broker, model: Model) -> bool:
    """Every receipt of the run has come due and been decided: the timer has delivered past the
    latest one's time, and each revive queue is decided to its end."""
    topic = broker.pop.revive_topic
    read, _, _ = broker.store.timer_progress()
    if read < model.latest_due + 500:
        return False
    return all(
        broker.offsets.query(REVIVE_GROUP, topic, q) >= broker.store.max_offset(topic, q) - 1
        for q in range(broker.pop.revive_queues)
    )


def nothing_left(broker: Broker) -> list[tuple[str, int, int, int]]:
    """Messages still free to pop (the group's offset behind the queue's end): extra copies."""
    left = []
    for topic in (TOPIC, f"%RETRY%{GROUP}_{TOPIC}"):
        tc = broker.topics.get(topic)
        for q in range(tc.read_queue_nums if tc else 0):
            at, end = broker.offsets.query(GROUP, topic, q), broker.store.max_offset(topic, q)
            if max(at, 0) < end:
                left.append((topic, q, at, end))
    return left


async def apply(c: Client, model: Model, op: tuple[Any, ...], broker_name: str) -> None:
    """One of CLIENT_OPERATIONS, as a client sends it."""
    if op[0] == "pop":
        await pop(c, model, op[1], op[2], broker_name)
    elif op[0] == "ack":
        await ack(c, model, op[1])
    elif op[0] == "batch_ack":
        await batch_ack(c, model, op[1])
    elif op[0] == "change":
        await change(c, model, op[1], op[2])
    else:
        raise AssertionError(f"not a client's operation: {op}")


def split_at(operations: list[tuple[Any, ...]], marker: str) -> list[list[tuple[Any, ...]]]:
    """The operations between the `marker` ones (a restart, a kill): one list a broker's life."""
    segments: list[list[tuple[Any, ...]]] = [[]]
    for op in operations:
        if op[0] == marker:
            segments.append([])
        else:
            segments[-1].append(op)
    return segments


async def run_in_process(operations: list[tuple[Any, ...]], root: Path) -> None:
    model = Model()
    segments = split_at(operations, "restart")
    for n, segment in enumerate(segments):
        last = n == len(segments) - 1
        async with running(root, **SETTINGS) as (_, broker):
            name = broker.config.broker_name
            c = await Client().connect(broker.port)
            if n == 0:
                broker.topics.update(TopicConfig(TOPIC, QUEUES, QUEUES))
                await send_all(c)
            for op in segment:
                if op[0] == "revive":
                    for q in range(broker.pop.revive_queues):
                        broker.pop.revive_round(q)
                else:
                    await apply(c, model, op, name)
            if last:
                await drain(c, model, name)
                await until(lambda: ledger_settled(broker, model), "the revive ledger settled", 30)
                assert nothing_left(broker) == [], "an extra copy of a message is left to pop"
            await c.close()


@LEDGER
@given(st.lists(OPERATION, min_size=1, max_size=25))
def test_the_revive_ledger_neither_loses_nor_repeats(operations: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory(prefix="ferromq-ledger-") as root:
        asyncio.run(asyncio.wait_for(run_in_process(operations, Path(root)), 150))


# -- kill -9 ----------------------------------------------------------------------------------------

KILL_CONF = {
    "timerPrecisionMs": 100,
    "reviveQueueNum": 2,
    "flushConsumerOffsetInterval": 100,
    "mappedFileSizeCommitLog": 1 << 20,
    "brokerName": "broker-a",
}
KILL_OPERATION = st.one_of(*CLIENT_OPERATIONS, st.tuples(st.just("kill")))


async def run_ops(port: int, model: Model, ops: list[tuple[Any, ...]], first: bool) -> None:
    c = await Client().connect(port)
    if first:
        await send_all(c)
    for op in ops:
        await apply(c, model, op, "broker-a")
    await c.close()


async def drain_remote(port: int, model: Model) -> list[bytes]:
    c = await Client().connect(port)
    try:
        return await drain(c, model, "broker-a")
    finally:
        await c.close()


@pytest.mark.slow
@settings(LEDGER, max_examples=4)
@given(st.lists(KILL_OPERATION, min_size=1, max_size=16))
def test_pop_ledger_kill(operations: list[tuple[Any, ...]]) -> None:
    """kill -9 between any two requests: every message not acked still comes back (a crash may
    bring back one whose pop or ack was not on disk yet, never lose one)."""
    model = Model()
    segments = split_at(operations, "kill")
    with tempfile.TemporaryDirectory(prefix="ferromq-ledger-kill-") as tmp:
        root = Path(tmp)
        store = root / "store"
        for n, segment in enumerate(segments):
            with BrokerProcess(root / f"run{n}", {**KILL_CONF}, store=store) as b:
                asyncio.run(asyncio.wait_for(run_ops(b.port, model, segment, n == 0), 60))
                if n == len(segments) - 1:
                    asyncio.run(asyncio.wait_for(drain_remote(b.port, model), 90))
                else:
                    b.stop(kill=True)
                    model.crashed = True
