"""Transactional messages: the broker's half/op bookkeeping and check rounds, with the Python
TransactionProducer and with raw protocol frames, on an in-process broker with short intervals."""

from __future__ import annotations

import asyncio
import struct
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from ferromq.broker import Broker
from ferromq.broker.transaction import CheckRound, encode_check_body
from ferromq.client import Message, ReceivedMessage
from ferromq.client.instance import ClientInstance
from ferromq.client.transaction_producer import (
    LocalTransactionState,
    TransactionProducer,
    TransactionSendResult,
    commit_log_offset_of,
)
from ferromq.message import StoredMessage, decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import TRANS_SYS_GROUP
from ferromq.testing.waiting import until

from .brokerkit import Client, properties, pull_ext, running, send_ext

HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
COMMIT, ROLLBACK, UNKNOW = (
    LocalTransactionState.COMMIT_MESSAGE,
    LocalTransactionState.ROLLBACK_MESSAGE,
    LocalTransactionState.UNKNOW,
)
# Checks every 0.3 s of transactions older than 0.5 s.
FAST: dict[str, Any] = {
    "transaction_check_interval": 300,
    "transaction_time_out": 500,
    "transaction_check_max": 15,
}
# No timer rounds: the test runs them with `broker.transactions.check()`.
MANUAL: dict[str, Any] = {"transaction_check_interval": 3_600_000, "transaction_time_out": 0}


def run(coro: object, timeout: float = 60) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))  # type: ignore[arg-type]


def stored(broker: Broker, topic: str) -> list[StoredMessage]:
    """Every message of a topic, from the store."""
    return [
        m
        for t, q, lo, hi in broker.store.queues()
        if t == topic and hi > lo
        for m in broker.store.get_messages(topic, q, lo, hi - lo)
    ]


async def check_round(broker: Broker) -> CheckRound:
    """One check round, a few ms after the last put: a round stops at messages stored in the
    millisecond it began, as RocketMQ's does."""
    await asyncio.sleep(0.005)
    return await broker.transactions.check()


def sys_offset(broker: Broker, topic: str) -> int:
    return broker.offsets.query(TRANS_SYS_GROUP, topic, 0)


class Listener:
    """Decides by the message's `plan` property; records what it was asked."""

    def __init__(self, on_check: LocalTransactionState = COMMIT) -> None:
        self.on_check = on_check
        self.executed: list[str] = []
        self.checked: list[ReceivedMessage] = []

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState | None:
        self.executed.append(msg.properties["UNIQ_KEY"])
        plan = msg.properties["plan"]
        if plan == "raise":
            raise RuntimeError("the local transaction failed")
        if plan == "none":
            return None
        return {"commit": COMMIT, "rollback": ROLLBACK}.get(plan, UNKNOW)

    async def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        self.checked.append(msg)
        return self.on_check

    def checks_of(self, msg_id: str) -> int:
        return sum(1 for m in self.checked if m.msg_id == msg_id)


class ThreadListener(Listener):
    """Plain (not async) methods: the check runs in a worker thread."""

    def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:  # type: ignore[override]
        self.checked.append(msg)
        return self.on_check


def tx_message(topic: str, plan: str, body: bytes | None = None) -> Message:
    return Message(topic, body or plan.encode(), tags="TagT", keys=f"k-{plan}", properties={"plan": plan})


async def pull_all(c: Client, topic: str, queue_id: int) -> list[StoredMessage]:
    r = await c.call(RC.PULL_MESSAGE, pull_ext("TXC", topic, queue_id, 0))
    return decode_messages(r.body) if r.code == R.SUCCESS else []


def test_commit_is_visible_rollback_never(tmp_path: Path) -> None:
    async def main() -> None:
        # Rounds every 0.3 s; nothing here is old enough to be checked.
        async with running(tmp_path, **{**FAST, "transaction_time_out": 5000}) as (ns, broker):
            listener = Listener()
            async with TransactionProducer("TPG", f"127.0.0.1:{ns.port}", listener) as p:
                rc = await p.send_message_in_transaction(tx_message("Pay", "commit"), arg=1)
                rr = await p.send_message_in_transaction(tx_message("Pay", "rollback"))
                assert isinstance(rc, TransactionSendResult)
                assert (rc.local_transaction_state, rr.local_transaction_state) == (COMMIT, ROLLBACK)
                assert listener.executed == [rc.msg_id, rr.msg_id]
                # Half messages go out with sysFlag 0x4, as the Java client sends them.
                assert p._prepare(Message("Pay", b"x", properties={"TRAN_MSG": "true"}))[1] & 0x4
                assert not p._prepare(Message("Pay", b"x"))[1] & 0x4
                # The send result describes the half message.
                assert rc.message_queue.topic == "Pay" and rc.queue_offset == 0 and rr.queue_offset == 1
                half = broker.store.read(commit_log_offset_of(rc.offset_msg_id))
                assert half is not None and half.topic == HALF and half.queue_id == 0
                assert half.sys_flag & 0xC == 0, "the half message is stored as a normal message"
                props = half.properties
                assert (props["TRAN_MSG"], props["PGROUP"], props["REAL_TOPIC"]) == ("true", "TPG", "Pay")
                # As with Java: the send result's queue is the one asked for (the real one), not the half
                # queue's (tests/integration/test_send_reply_queue.py).
                assert rc.message_queue.queue_id == int(props["REAL_QID"]) and props["REAL_QID"] in "0123"

                await until(lambda: len(stored(broker, OP)) == 2, "two op messages")
                (committed,) = stored(broker, "Pay")
                assert committed.body == b"commit" and committed.uniq_key == rc.msg_id
                assert committed.queue_id == int(props["REAL_QID"])
                assert committed.sys_flag & 0xC == 0x8, "sysFlag transaction bits = COMMIT"
                assert committed.prepared_transaction_offset == half.physical_offset
                assert (committed.tags, committed.keys) == ("TagT", ["k-commit"])
                assert committed.born_timestamp == half.born_timestamp
                # What Java keeps: the real topic and queue and TRAN_MSG stay in the properties.
                assert {k: committed.properties[k] for k in ("REAL_TOPIC", "TRAN_MSG", "PGROUP", "plan")} == {
                    "REAL_TOPIC": "Pay",
                    "TRAN_MSG": "true",
                    "PGROUP": "TPG",
                    "plan": "commit",
                }
                ops = stored(broker, OP)
                assert sorted(int(op.body) for op in ops) == [0, 1]
                assert all(op.tags == "d" and op.properties["WAIT"] == "false" for op in ops)
                assert all(op.uniq_key for op in ops)

                # A consumer sees the commit and nothing else, also after check rounds.
                c = await Client().connect(broker.port)
                got = await pull_all(c, "Pay", committed.queue_id)
                assert [m.body for m in got] == [b"commit"]
                # The wait is the observation: four check rounds (300 ms apart) publish nothing more.
                await asyncio.sleep(1.2)
                got = [m for q in range(4) for m in await pull_all(c, "Pay", q)]
                assert [m.body for m in got] == [b"commit"]
                await c.close()
                assert listener.checked == [], "resolved transactions are never checked"
                await until(lambda: sys_offset(broker, HALF) == 2, "half offset past both")
                assert sys_offset(broker, OP) == 2

    run(main())


@pytest.mark.parametrize("listener_class", [Listener, ThreadListener])
def test_unknown_then_commit_on_check(tmp_path: Path, listener_class: type[Listener]) -> None:
    async def main() -> None:
        async with running(tmp_path, **FAST) as (ns, broker):
            listener = listener_class(on_check=COMMIT)
            async with TransactionProducer("TPG", f"127.0.0.1:{ns.port}", listener, check_workers=2) as p:
                results = {
                    plan: await p.send_message_in_transaction(tx_message("Later", plan))
                    for plan in ("unknown", "raise", "none")
                }
                assert {r.local_transaction_state for r in results.values()} == {UNKNOW}
                assert stored(broker, "Later") == []
                await until(lambda: len(stored(broker, "Later")) == 3, "3 commits after checks")
                bodies = sorted(m.body for m in stored(broker, "Later"))
                assert bodies == [b"none", b"raise", b"unknown"]
                for plan, r in results.items():
                    assert listener.checks_of(r.msg_id) >= 1, plan
                    (m,) = [m for m in listener.checked if m.msg_id == r.msg_id][:1]
                    # The check shows the message as sent: real topic and queue restored.
                    assert (m.topic, m.body, m.tags) == ("Later", plan.encode(), "TagT")
                    half = broker.store.read(commit_log_offset_of(r.offset_msg_id))
                    assert half is not None and m.queue.queue_id == int(half.properties["REAL_QID"])
                    assert m.properties["TRANSACTION_CHECK_TIMES"] == "1"
                # Each commit was written once and refers to the checked copy.
                for c in stored(broker, "Later"):
                    copy = broker.store.read(c.prepared_transaction_offset)
                    assert copy is not None and copy.topic == HALF and copy.uniq_key == c.uniq_key
                    assert copy.properties["TRAN_PREPARED_QUEUE_OFFSET"] == str(
                        results[c.body.decode()].queue_offset
                    )
                checks = len(listener.checked)
                await asyncio.sleep(1.0)  # the observation: three check rounds ask nothing more
                assert len(listener.checked) == checks, "no checks once all are resolved"
                assert len(stored(broker, "Later")) == 3
                half_max = broker.store.max_offset(HALF, 0)
                assert sys_offset(broker, HALF) == half_max
                assert sys_offset(broker, OP) == broker.store.max_offset(OP, 0)

    run(main())


def test_unknown_forever_ends_in_the_check_max_topic(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **{**FAST, "transaction_check_max": 3}) as (ns, broker):
            listener = Listener(on_check=UNKNOW)
            async with TransactionProducer("TPG", f"127.0.0.1:{ns.port}", listener) as p:
                r = await p.send_message_in_transaction(tx_message("Never", "unknown"))
                await until(lambda: len(stored(broker, CHECK_MAX_TOPIC)) == 1, "the discard", timeout=15)
                (dropped,) = stored(broker, CHECK_MAX_TOPIC)
                assert dropped.uniq_key == r.msg_id and dropped.body == b"unknown"
                assert dropped.properties["TRANSACTION_CHECK_TIMES"] == "3"
                assert dropped.properties["REAL_TOPIC"] == "Never"
                assert listener.checks_of(r.msg_id) == 3
                await asyncio.sleep(1.0)  # the observation: three check rounds ask nothing more
                assert listener.checks_of(r.msg_id) == 3, "no check after the discard"
                assert stored(broker, "Never") == []
                assert len(stored(broker, CHECK_MAX_TOPIC)) == 1
                assert sys_offset(broker, HALF) == broker.store.max_offset(HALF, 0)

    run(main())


def test_restart_with_pending_transactions(tmp_path: Path) -> None:
    """Transactions pending across a broker restart are checked and committed after it, each
    exactly once; the check progress survives the restart."""

    async def main() -> None:
        from ferromq.namesrv import NameServer

        ns = NameServer("127.0.0.1", 0)
        await ns.start()
        instance = ClientInstance(f"127.0.0.1:{ns.port}", heartbeat_interval=0.2)
        listener = Listener(on_check=UNKNOW)
        p = TransactionProducer("TPG", f"127.0.0.1:{ns.port}", listener, instance=instance)
        try:
            async with running(tmp_path, namesrv=ns, **FAST) as (_, broker):
                port = broker.port
                await p.start()
                sent = [await p.send_message_in_transaction(tx_message("Resume", f"p{i}")) for i in range(4)]
                await p.send_message_in_transaction(tx_message("Resume", "commit"))
                ids = {r.msg_id for r in sent}
                await until(
                    lambda: all(listener.checks_of(i) >= 2 for i in ids),
                    "two checks of each before the stop",
                    timeout=15,
                )
                assert [m.body for m in stored(broker, "Resume")] == [b"commit"]
            before = Counter(m.msg_id for m in listener.checked)
            conf = orjson.loads((tmp_path / "store" / "config" / "consumerOffset.json").read_bytes())
            assert f"{HALF}@{TRANS_SYS_GROUP}" in conf["offsetTable"]
            listener.on_check = COMMIT
            async with running(tmp_path, namesrv=ns, listen_port=port, **FAST) as (_, broker):
                await until(
                    lambda: len(stored(broker, "Resume")) == 5,
                    "the pending commits after restart",
                    timeout=15,
                )
                checks = len(listener.checked)
                await asyncio.sleep(1.0)  # the observation: three check rounds ask nothing more
                assert len(listener.checked) == checks, "no checks once all are resolved"
                got = Counter(m.uniq_key for m in stored(broker, "Resume"))
                assert set(got) == ids | {m.uniq_key for m in stored(broker, "Resume") if m.body == b"commit"}
                assert max(got.values()) == 1, f"a transaction committed twice: {got}"
                after = Counter(m.msg_id for m in listener.checked) - before
                assert set(after) == ids, "each pending transaction was checked after the restart"
                assert sys_offset(broker, HALF) == broker.store.max_offset(HALF, 0)
                assert sys_offset(broker, OP) == broker.store.max_offset(OP, 0)
        finally:
            await p.stop()
            await instance.stop()
            await ns.stop()

    run(main())


# -- raw protocol --------------------------------------------------------------------------------


def half_ext(topic: str, queue_id: int = 1, group: str = "PG", **props: str) -> dict[str, Any]:
    p = properties(TRAN_MSG="true", PGROUP=group, UNIQ_KEY=f"U{time.monotonic_ns():X}", TAGS="TagR", **props)
    return send_ext(topic, queue_id, p, producerGroup=group, sysFlag=4, bornTimestamp=int(time.time() * 1000))


def check_answer_ext(req: Any, msg_id: str | None, kind: str = "8") -> dict[str, Any]:
    """END_TRANSACTION header answering the check request `req` (commit by default)."""
    return {
        "producerGroup": "PG",
        "tranStateTableOffset": req.ext["tranStateTableOffset"],
        "commitLogOffset": req.ext["commitLogOffset"],
        "commitOrRollback": kind,
        "fromTransactionCheck": "1",
        "msgId": msg_id,
    }


def end_ext(r: Any, kind: int, group: str = "PG", **extra: Any) -> dict[str, Any]:
    ext = {
        "producerGroup": group,
        "tranStateTableOffset": r.ext["queueOffset"],
        "commitLogOffset": int(r.ext["msgId"][-16:], 16),
        "commitOrRollback": kind,
        "msgId": "UNIQ",
        "fromTransactionCheck": "false",
    }
    ext.update(extra)
    return ext


def java_encode(m: StoredMessage, topic: str, queue_id: int) -> bytes:
    """MessageDecoder.encode(msg, false) for IPv4 hosts, written out field by field."""

    def host(h: str) -> bytes:
        ip, _, port = h.rpartition(":")
        return bytes(int(x) for x in ip.split(".")) + struct.pack(">i", int(port))

    t, p = topic.encode(), m.properties_string.encode()
    total = 91 + len(m.body) + len(t) + len(p)
    return (
        struct.pack(
            ">iiiiiqqiq",
            total,
            -626843481,
            m.body_crc,
            queue_id,
            m.flag,
            m.queue_offset,
            m.physical_offset,
            m.sys_flag,
            m.born_timestamp,
        )
        + host(m.born_host)
        + struct.pack(">q", m.store_timestamp)
        + host(m.store_host)
        + struct.pack(">iqi", m.reconsume_times, m.prepared_transaction_offset, len(m.body))
        + m.body
        + bytes([len(t)])
        + t
        + struct.pack(">h", len(p))
        + p
    )


def test_end_transaction_refusals_and_cpp_style_requests(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **MANUAL) as (_, broker):
            c = await Client().connect(broker.port)
            r = await c.call(RC.SEND_MESSAGE, half_ext("Cart"), b"half")
            assert r.code == R.SUCCESS and r.ext["queueOffset"] == "0"
            plain = await c.call(RC.SEND_MESSAGE, send_ext("Cart", 0, properties(TAGS="x")), b"plain")
            assert plain.code == R.SUCCESS

            async def end(ext: dict[str, Any]) -> tuple[int, str | None]:
                reply = await c.call(RC.END_TRANSACTION, ext, language="CPP", version=63)
                return reply.code, reply.remark

            assert await end(end_ext(r, 8, group="OTHER")) == (1, "The producer group wrong")
            assert await end(end_ext(r, 8, tranStateTableOffset=5)) == (
                1,
                "The transaction state table offset wrong",
            )
            missing = (1, "Find prepared transaction message failed")
            assert await end(end_ext(r, 8, commitLogOffset=10**9)) == missing
            assert await end(end_ext(r, 8, commitLogOffset=3)) == missing, "not at a record"
            assert await end(end_ext(plain, 8)) == missing, "a normal message is no half message"
            assert (await end(end_ext(r, 5)))[0] == 1
            assert await end(end_ext(r, 0, fromTransactionCheck="1")) == (0, None), (
                "unknown: answered, ignored"
            )
            assert stored(broker, OP) == []
            assert [m.body for m in stored(broker, "Cart")] == [b"plain"]
            # Every field a string, as the C++ client sends them; it gets an answer (flag 0).
            ok = {k: str(v) for k, v in end_ext(r, 8).items()}
            assert await end(ok) == (0, None)
            assert sorted(m.body for m in stored(broker, "Cart")) == [b"half", b"plain"]
            # A second commit of the same transaction is answered but not written again.
            assert await end(ok) == (0, None)
            assert sorted(m.body for m in stored(broker, "Cart")) == [b"half", b"plain"]
            assert [int(op.body) for op in stored(broker, OP)] == [0, 0]
            # The round passes the half message and both op messages.
            round_ = await check_round(broker)
            assert (round_.passed, round_.checked) == (1, 0)
            assert (sys_offset(broker, HALF), sys_offset(broker, OP)) == (1, 2)
            # Java's one-way request: no answer, same effect.
            r2 = await c.call(RC.SEND_MESSAGE, half_ext("Cart"), b"half2")
            await c.conn.oneway(
                RemotingCommand(code=RC.END_TRANSACTION, ext={k: str(v) for k, v in end_ext(r2, 12).items()})
            )
            await until(lambda: len(stored(broker, OP)) == 3, "the rollback's op message")
            await c.close()

    run(main())


def test_check_request_bytes_and_answer_to_the_copy(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **MANUAL) as (_, broker):
            c = await Client().connect(broker.port)
            hb = orjson.dumps(
                {"clientID": "cpp@1", "producerDataSet": [{"groupName": "PG"}], "consumerDataSet": []}
            )
            assert (await c.call(RC.HEART_BEAT, body=hb)).code == R.SUCCESS
            big = bytes(range(256)) * 8
            r = await c.call(RC.SEND_MESSAGE, half_ext("Cart", 2, KEYS="kk"), big)
            half = broker.store.read(int(r.ext["msgId"][-16:], 16))
            assert half is not None

            round_ = await check_round(broker)
            assert (round_.checked, round_.next_half_offset) == (1, 1)
            await until(lambda: len(c.server_requests) == 1, "the check request")
            (req,) = c.server_requests
            assert req.code == RC.CHECK_TRANSACTION_STATE and req.is_oneway
            copy = broker.store.get_messages(HALF, 0, 1, 1)[0]
            assert req.ext == {
                "tranStateTableOffset": "1",
                "commitLogOffset": str(copy.physical_offset),
                "msgId": half.uniq_key,
                "transactionId": half.uniq_key,
                "offsetMsgId": copy.msg_id,
            }
            assert copy.properties["TRANSACTION_CHECK_TIMES"] == "1"
            assert copy.properties["TRAN_PREPARED_QUEUE_OFFSET"] == "0"
            assert (copy.body, copy.born_timestamp, copy.flag) == (big, half.born_timestamp, half.flag)
            # The body: the copy's stored record with the real topic and queue, as Java encodes it.
            assert req.body == java_encode(copy, "Cart", 2)
            assert req.body == encode_check_body(
                broker.store.read_raw(copy.physical_offset) or b"", "Cart", 2
            )
            (seen,) = decode_messages(req.body, check_crc=True)
            assert (seen.topic, seen.queue_id, seen.queue_offset) == ("Cart", 2, 1)

            # END_TRANSACTION names the copy; the original's offsets still work for a late answer.
            answer = check_answer_ext(req, half.uniq_key)
            assert (await c.call(RC.END_TRANSACTION, answer)).code == R.SUCCESS
            (committed,) = stored(broker, "Cart")
            assert committed.prepared_transaction_offset == copy.physical_offset
            late = await c.call(RC.END_TRANSACTION, end_ext(r, 8))
            assert late.code == R.SUCCESS
            assert len(stored(broker, "Cart")) == 1, "a late commit of the original is not written again"
            round_ = await check_round(broker)
            assert (round_.checked, round_.passed) == (0, 1)
            assert (sys_offset(broker, HALF), sys_offset(broker, OP)) == (2, 2)
            await c.close()
        # After a restart the broker still knows (through the index) it was committed.
        async with running(tmp_path, **MANUAL) as (_, broker):
            c = await Client().connect(broker.port)
            again = await c.call(RC.END_TRANSACTION, end_ext(r, 8))
            assert again.code == R.SUCCESS
            assert len(stored(broker, "Cart")) == 1
            await c.close()

    run(main())


def test_a_flood_is_checked_in_bounded_rounds(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **MANUAL) as (_, broker):
            c = await Client().connect(broker.port)
            hb = orjson.dumps({"clientID": "flood@1", "producerDataSet": [{"groupName": "PG"}]})
            await c.call(RC.HEART_BEAT, body=hb)
            sends = [await c.call(RC.SEND_MESSAGE, half_ext("Flood", 0), b"f%d" % i) for i in range(25)]
            # Resolve a few in the middle before any round.
            for i in (3, 4, 10):
                await c.call(RC.END_TRANSACTION, end_ext(sends[i], 12))
            service = broker.transactions
            service.max_checks_per_round = 10
            first = await check_round(broker)
            # 0-2 and 5-9, 11 and 12 checked; 3, 4 and 10 passed; the budget stops it at 13.
            assert (first.checked, first.passed, first.stopped_by) == (10, 3, "budget")
            assert first.next_half_offset == sys_offset(broker, HALF) == 13
            assert sys_offset(broker, OP) == 3
            rounds = [first]
            while len({req.ext["msgId"] for req in c.server_requests}) < 22:
                assert len(rounds) < 10
                rounds.append(await check_round(broker))
                assert rounds[-1].checked <= 10
                await asyncio.sleep(0.05)  # let the producer answer the round's checks
            assert rounds[1].next_half_offset == 23

            def uniq_key(send_reply: RemotingCommand) -> str | None:
                m = broker.store.look_message_by_id(send_reply.ext["msgId"])
                return m.uniq_key if m is not None else None

            checked_ids = {req.ext["msgId"] for req in c.server_requests}
            assert checked_ids == {uniq_key(r) for i, r in enumerate(sends) if i not in (3, 4, 10)}

            # No producer online: copies are made but the check count does not grow.
            def most_checks() -> int:
                return max(
                    int(m.properties.get("TRANSACTION_CHECK_TIMES", "0"))
                    for m in broker.store.get_messages(HALF, 0, 0, 10_000)
                )

            await c.close()
            await until(lambda: "PG" not in broker.clients.producers, "the producer to go")
            before = most_checks()
            fourth = await check_round(broker)
            assert fourth.no_producer == fourth.checked > 0
            assert most_checks() == before

    run(main())


def test_immunity_defers_a_transaction_without_holding_back_others(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **MANUAL) as (_, broker):
            c = await Client().connect(broker.port)
            hb = orjson.dumps({"clientID": "imm@1", "producerDataSet": [{"groupName": "PG"}]})
            await c.call(RC.HEART_BEAT, body=hb)
            immune = await c.call(
                RC.SEND_MESSAGE, half_ext("Imm", CHECK_IMMUNITY_TIME_IN_SECONDS="3600"), b"i"
            )
            plain = await c.call(RC.SEND_MESSAGE, half_ext("Imm"), b"p")
            first = await check_round(broker)
            assert (first.deferred, first.checked, first.next_half_offset) == (1, 1, 2)
            await until(lambda: len(c.server_requests) == 1, "the check of the other one")
            plain_half = broker.store.look_message_by_id(plain.ext["msgId"])
            assert plain_half is not None and c.server_requests[0].ext["msgId"] == plain_half.uniq_key
            deferred = broker.store.get_messages(HALF, 0, 2, 1)[0]
            assert deferred.body == b"i" and deferred.properties["TRAN_PREPARED_QUEUE_OFFSET"] == "0"
            assert "TRANSACTION_CHECK_TIMES" not in deferred.properties
            # The producer commits the original: its deferred copy is resolved with it.
            assert (await c.call(RC.END_TRANSACTION, end_ext(immune, 8))).code == R.SUCCESS
            second = await check_round(broker)
            assert (second.passed, second.checked, second.deferred) == (1, 1, 0)
            assert [m.body for m in stored(broker, "Imm")] == [b"i"]
            await c.close()

    run(main())


def test_a_producer_is_checked_on_the_connection_it_came_back_on(tmp_path: Path) -> None:
    """The Java client closes a connection whose call timed out (a heartbeat held up behind a slow
    store) and sends on a new one, where it heartbeats only 30 s later: the half messages it sends
    there make the connection its group's, so checks reach it at once."""

    async def main() -> None:
        async with running(tmp_path, **MANUAL) as (_, broker):
            hb = orjson.dumps({"clientID": "back@1", "producerDataSet": [{"groupName": "PG"}]})
            old = await Client().connect(broker.port)
            assert (await old.call(RC.HEART_BEAT, body=hb)).code == R.SUCCESS
            await old.close()
            await until(lambda: "PG" not in broker.clients.producers, "the old connection to go")

            new = await Client().connect(broker.port)
            r = await new.call(RC.SEND_MESSAGE, half_ext("Back"), b"tx")
            assert r.code == R.SUCCESS
            round_ = await check_round(broker)
            assert (round_.checked, round_.no_producer) == (1, 0)
            await until(lambda: len(new.server_requests) == 1, "the check on the new connection")
            (req,) = new.server_requests
            half = broker.store.look_message_by_id(r.ext["msgId"])
            assert req.code == RC.CHECK_TRANSACTION_STATE and half is not None
            assert req.ext["msgId"] == half.uniq_key
            # Its answer over that connection commits it.
            answer = check_answer_ext(req, half.uniq_key)
            assert (await new.call(RC.END_TRANSACTION, answer)).code == R.SUCCESS
            assert [m.body for m in stored(broker, "Back")] == [b"tx"]

            # Its next heartbeat names the connection: one entry, under the client id.
            assert (await new.call(RC.HEART_BEAT, body=hb)).code == R.SUCCESS
            assert list(broker.clients.producers["PG"]) == ["back@1"]
            # A producer that did not send over a connection is not taken for one of the group.
            other = await Client().connect(broker.port)
            plain = await other.call(RC.SEND_MESSAGE, send_ext("Back", 0, properties(TAGS="x")), b"p")
            assert plain.code == R.SUCCESS and list(broker.clients.producers["PG"]) == ["back@1"]
            await other.close()
            # UNREGISTER_CLIENT (at shutdown) drops it; so does the connection's close.
            unreg = {"clientID": "back@1", "producerGroup": "PG"}
            assert (await new.call(RC.UNREGISTER_CLIENT, unreg)).code == R.SUCCESS
            assert "PG" not in broker.clients.producers
            # A half message makes it the group's again, under the client id its connection had.
            assert (await new.call(RC.SEND_MESSAGE, half_ext("Back"), b"tx2")).code == R.SUCCESS
            assert list(broker.clients.producers["PG"]) == ["back@1"]
            await new.close()
            await until(lambda: "PG" not in broker.clients.producers, "the new connection to go")

    run(main())
