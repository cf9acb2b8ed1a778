"""POP under hostile input (issue 39): a checkpoint that cannot be revived, absurd invisible
times, forged receipts, huge batch-ack bitsets and PEEKs that ask for everything. Each case held
in Java (Apache RocketMQ 5.3.3) and broke ferromq: the revive queue must neither lose nor repeat
another group's message, and what one request costs stays bounded."""

from __future__ import annotations

import asyncio
import base64
import time
import tracemalloc
from pathlib import Path

import orjson

from ferromq.broker.broker import Broker
from ferromq.broker.metrics import BrokerCollector
from ferromq.broker.pop.formats import CK_TAG, REVIVE_GROUP, CheckPoint
from ferromq.broker.topics import TopicConfig
from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.testing.waiting import until
from tests.integration.brokerkit import Client, pop_receipt, pop_request, properties, running, send_ext

# One revive queue: every checkpoint of these tests shares it, as the groups of the issue did.
FAST = {"timer_precision_ms": 100, "revive_queue_num": 1}
TOPIC = "PopAbuseT"
GROUPS = [f"rv-{i:02d}" for i in range(1, 17)]
# Its retry topic, %RETRY%<group>_PopAbuseT, is over the store's 127 bytes.
LONG_GROUP = "g" * 181
TIMER_TOPIC = "rmq_sys_wheel_timer"


async def send(c: Client, n: int, topic: str = TOPIC, size: int = 0) -> None:
    for i in range(n):
        body = f"m{i}".encode().ljust(size, b".")
        r = await c.call(RC.SEND_MESSAGE, send_ext(topic, 0, properties(KEYS=f"k{i}")), body)
        assert r.code == R.SUCCESS, r.remark


async def pop_one(c: Client, group: str, **extra: object) -> tuple[int, str]:
    """Pops one message of queue 0 for `group` (the group made on the way); its body."""
    r = await c.call(RC.POP_MESSAGE, pop_request(TOPIC, group, queueId=0, maxMsgNums=1, **extra))
    return r.code, r.remark or ""


def retry_bodies(broker: Broker, group: str) -> list[bytes]:
    return [m.body for m in broker.store.get_messages(f"%RETRY%{group}_{TOPIC}", 0, 0, 100)]


def revive_decided(broker: Broker) -> int:
    """The revive queue's committed offset: the ledger entries the revive service decided."""
    return broker.offsets.query(REVIVE_GROUP, broker.pop.revive_topic, 0)


async def all_revived_once(broker: Broker) -> None:
    """Waits until every rv group's message is back, and the revive service has decided every
    entry of the ledger written so far; then each retry topic holds its message exactly once."""
    written = broker.store.max_offset(broker.pop.revive_topic, 0)
    await until(
        lambda: all(retry_bodies(broker, g) for g in GROUPS) and revive_decided(broker) >= written - 1,
        "every rv group's message back and the revive queue decided",
        60,
    )
    assert {g: retry_bodies(broker, g) for g in GROUPS} == {g: [b"m0"] for g in GROUPS}


def test_a_checkpoint_that_cannot_be_revived_stops_no_other(tmp_path: Path) -> None:
    """Issue 39.1: the long group's message cannot go back (its retry topic name is too long);
    the 16 others each come back exactly once, and the long group's is checkpointed again."""

    async def main() -> None:
        async with running(tmp_path, **FAST) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 1, 1))
            c = await Client().connect(broker.port)
            await send(c, 1)
            assert await pop_one(c, LONG_GROUP, invisibleTime=2000) == (R.SUCCESS, "FOUND")
            for g in GROUPS:
                assert (await pop_one(c, g, invisibleTime=3000))[0] == R.SUCCESS
            await all_revived_once(broker)
            assert broker.pop.revive_puts[(LONG_GROUP, TOPIC, "MESSAGE_ILLEGAL")] >= 1
            assert broker.pop.revive_puts[(GROUPS[0], TOPIC, "PUT_OK")] == 1
            assert broker.topics.get(f"%RETRY%{LONG_GROUP}_{TOPIC}") is None
            # ... and exported as 5.x's rocketmq_pop_revive_retry_messages_total.
            (family,) = [
                f for f in BrokerCollector(broker).collect() if f.name == "rocketmq_pop_revive_retry_messages"
            ]
            statuses = {(s.labels["consumer_group"], s.labels["put_status"]) for s in family.samples}
            assert {(LONG_GROUP, "MESSAGE_ILLEGAL"), (GROUPS[0], "PUT_OK")} <= statuses
            # The long group's message is in the ledger again, alone, due later (in the timer's
            # topic until then).
            again = [
                CheckPoint.from_json(m.body)
                for m in broker.store.get_messages(TIMER_TOPIC, 0, 0, 500)
                if m.tags == CK_TAG and b'"rp"' in m.body
            ]
            assert [(ck.group, ck.re_put_times, ck.offsets()) for ck in again] == [(LONG_GROUP, 1, [0])]
            assert again[0].revive_time >= again[0].pop_time + 10_000
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 90))


def test_absurd_invisible_times_are_refused_and_forged_times_stop_no_revive(tmp_path: Path) -> None:
    """Issue 39.2: an invisible time of 2^63-1 (or below 0, or past a Java long) is refused where
    the pop is read; a checkpoint whose times overflow (a forged receipt's, or one a Java broker
    wrote with its wrapped sum) neither wraps nor holds back the checkpoints behind it."""

    async def main() -> None:
        async with running(tmp_path, **FAST) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 1, 1))
            c = await Client().connect(broker.port)
            await send(c, 1)
            for bad in (2**63 - 1, -1, 7 * 24 * 3600 * 1000 + 1):
                code, remark = await pop_one(c, "absurd", invisibleTime=bad)
                assert code == R.INVALID_PARAMETER and "invisibleTime" in remark, (bad, code, remark)
            code, remark = await pop_one(c, "absurd", invisibleTime=2**64)
            assert code == R.SYSTEM_ERROR and "invisibleTime" in remark
            assert broker.offsets.query("absurd", TOPIC, 0) < 0  # nothing was popped

            # A change of invisible time is bounded the same way.
            r = await c.call(RC.POP_MESSAGE, pop_request(TOPIC, "changer", queueId=0, maxMsgNums=1))
            (m,) = decode_messages(r.body or b"")
            change = {
                "consumerGroup": "changer",
                "topic": TOPIC,
                "queueId": 0,
                "offset": 0,
                "extraInfo": pop_receipt(r.ext, m, broker.config.broker_name),
                "invisibleTime": 2**63 - 1,
            }
            assert (await c.call(RC.CHANGE_MESSAGE_INVISIBLETIME, change)).code == R.INVALID_PARAMETER

            # A forged receipt's times saturate instead of wrapping into the past: its ack is
            # due past what the timer takes (timerMaxDelaySec), and refused so.
            forged = f"0 {2**63 - 10} {2**63 - 10} 0 0 {broker.config.broker_name} 0 0"
            ack = {"consumerGroup": "changer", "topic": TOPIC, "queueId": 0, "offset": 0, "extraInfo": forged}
            r = await c.call(RC.ACK_MESSAGE, ack)
            assert r.code == R.MESSAGE_ILLEGAL and "timer message illegal" in (r.remark or "")

            # A checkpoint delivered now whose fields say it is due in 2^62 ms: the revive
            # service takes the timer's word for when it is due.
            wrapped = CheckPoint(0, int(time.time() * 1000), 2**62, 0, TOPIC, "wrapped", "broker-a", [0])
            broker.pop.rules.put_revive(0, CK_TAG, wrapped.to_json(), wrapped.uniq_key(), 0)
            for g in GROUPS:
                assert (await pop_one(c, g, invisibleTime=2000))[0] == R.SUCCESS
            await all_revived_once(broker)
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 90))


def test_a_batch_ack_of_a_huge_bitset_costs_what_the_queue_holds(tmp_path: Path) -> None:
    """Issue 39.4: a 1 MiB all-ones bitSet (8 Mi bits) on a queue of 10 messages reads 10 bits;
    more set bits in range than one checkpoint holds (32) is refused."""

    async def main() -> None:
        async with running(tmp_path, **FAST) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 1, 1))
            c = await Client().connect(broker.port)
            await send(c, 40)
            r = await c.call(RC.POP_MESSAGE, pop_request(TOPIC, "batch", queueId=0, maxMsgNums=10))
            assert r.code == R.SUCCESS
            entry = {
                "c": "batch",
                "t": TOPIC,
                "r": "0",
                "q": 0,
                "rq": int(r.ext["reviveQid"]),
                "so": 0,
                "pt": int(r.ext["popTime"]),
                "it": int(r.ext["invisibleTime"]),
                "b": base64.b64encode(b"\xff" * (1 << 20)).decode(),
            }
            # startOffset 30: ten offsets (30..40) of the queue are in the bitset's range.
            body = orjson.dumps({"acks": [{**entry, "so": 30}]})
            tracemalloc.start()
            try:
                tracemalloc.reset_peak()
                reply = await c.call(RC.BATCH_ACK_MESSAGE, {}, body)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert reply.code == R.SUCCESS, reply.remark
            assert peak < 24 << 20, f"{peak / 2**20:.0f} MiB"
            # From startOffset 0, 41 bits are in range: more than a checkpoint holds.
            reply = await c.call(RC.BATCH_ACK_MESSAGE, {}, orjson.dumps({"acks": [entry]}))
            assert reply.code == R.INVALID_PARAMETER and "at most 32" in (reply.remark or "")
            # Bits that are not base64 are a clear refusal, and the broker serves on.
            bad = orjson.dumps({"acks": [{**entry, "b": "not base64!"}]})
            assert (await c.call(RC.BATCH_ACK_MESSAGE, {}, bad)).code == R.SYSTEM_ERROR
            assert (await c.call(RC.POP_MESSAGE, pop_request(TOPIC, "after", queueId=0))).code == R.SUCCESS
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_peek_of_a_million_answers_one_pulls_worth(tmp_path: Path) -> None:
    """Issue 39.5: PEEK_MESSAGE with maxMsgNums 1,000,000 on a backlog of 200 answers what one
    pull may carry (32 messages here), as Java's store caps its read; nothing moves."""

    async def main() -> None:
        async with running(tmp_path, **FAST) as (_, broker):
            broker.topics.update(TopicConfig(TOPIC, 1, 1))
            c = await Client().connect(broker.port)
            await send(c, 200, size=1024)
            ext = {"consumerGroup": "peeker", "topic": TOPIC, "queueId": -1, "maxMsgNums": 1_000_000}
            r = await c.call(RC.PEEK_MESSAGE, ext)
            got = decode_messages(r.body or b"")
            assert r.code == R.SUCCESS
            assert len(got) == broker.config.max_transfer_count_on_message_in_memory == 32
            assert [m.queue_offset for m in got] == list(range(32))
            assert r.ext["restNum"] == str(200 - 32)
            assert broker.offsets.query("peeker", TOPIC, 0) < 0
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 60))
