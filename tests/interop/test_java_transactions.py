"""Interop with the official Java TransactionMQProducer (rocketmq-client 4.9.7) against a real
`ferromq serve` process with short transaction check intervals.

The Java side (`java/src/main/java/io/ferromq/interop/Transactions.java`, in the same jar as the
other scenarios) sends committed, rolled-back and unknown transactions and answers the broker's
check-backs; the test then pulls the topic straight from the broker and compares.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferromq.message import StoredMessage, decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from tests.integration.brokerkit import Client, properties, pull_ext, send_ext

from . import test_java_client as java
from .test_java_client import HAVE_TOOLS, Run, Server, decode_offset_msg_id

pytestmark = [
    pytest.mark.skipif(not HAVE_TOOLS, reason="the Java interop tests need `mvn` and `java` on PATH"),
    pytest.mark.timeout(600),
]

# The jar fixture of the other Java tests (built once per module with `mvn package`).
jar = java.jar

RUN = uuid.uuid4().hex[:8]
HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_SYS_GROUP = "CID_RMQ_SYS_TRANS"  # the check service's progress on the half queue
N = 3
# CHECK_IMMUNITY_TIME_IN_SECONDS of the commit and rollback transactions (Transactions.java
# `immunity`): the broker checks them only if their END_TRANSACTION has not come within this, so a
# JVM slowed down by load between a send's answer and its END_TRANSACTION does not get them checked.
IMMUNITY_S = 120
SETTLE_TIMEOUT = 30.0
BROKER_CONF = """\
# Transactions are checked every second once they are a second old.
transactionCheckInterval=1000
transactionTimeOut=1000
transactionCheckMax=15
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`ferromq -v serve -c broker.conf` with fast transaction checks."""
    root = tmp_path_factory.mktemp("ferromq-java-tx")
    conf = root / "broker.conf"
    conf.write_text(BROKER_CONF)
    with java.serving(root, conf) as srv:
        yield srv


def run_transactions(jar: Path, server: Server, timeout: int = 60, **opts: object) -> Run:
    return java.run_scenario(
        jar, server, "transactions", timeout, main="io.ferromq.interop.Transactions", **opts
    )


async def _pull_topic(port: int, topic: str) -> list[StoredMessage]:
    c = await Client().connect(port)
    try:
        out = []
        for q in range(4):
            r = await c.call(RC.PULL_MESSAGE, pull_ext(f"tx-verify-{RUN}", topic, q, 0))
            if r.code == R.SUCCESS:
                out += decode_messages(r.body)
        return out
    finally:
        await c.close()


async def _view(port: int, offset: int) -> StoredMessage:
    c = await Client().connect(port)
    try:
        r = await c.call(RC.VIEW_MESSAGE_BY_ID, {"offset": offset})
        assert r.code == R.SUCCESS, r.remark
        (m,) = decode_messages(r.body)
        return m
    finally:
        await c.close()


async def _check_progress(port: int) -> tuple[int, int]:
    """(where the check service has got to in the half queue, the half queue's end)."""
    c = await Client().connect(port)
    try:
        q = {"consumerGroup": TRANS_SYS_GROUP, "topic": HALF, "queueId": 0}
        done = await c.call(RC.QUERY_CONSUMER_OFFSET, q)
        end = await c.call(RC.GET_MAX_OFFSET, {"topic": HALF, "queueId": 0})
        assert end.code == R.SUCCESS, end.remark
        return int(done.ext["offset"]) if done.code == R.SUCCESS else -1, int(end.ext["offset"])
    finally:
        await c.close()


async def _warm_up(port: int) -> None:
    c = await Client().connect(port)
    try:
        ext = send_ext(f"InteropTxWarmUp_{RUN}", 0, properties(TAGS="warm-up"))
        r = await c.call(RC.SEND_MESSAGE, ext, b"warm-up", timeout=120)
        assert r.code == R.SUCCESS, r.remark
    finally:
        await c.close()


def view_message(server: Server, offset: int) -> StoredMessage:
    return asyncio.run(asyncio.wait_for(_view(server.port, offset), 30))


def pull_topic(server: Server, topic: str) -> list[StoredMessage]:
    return asyncio.run(asyncio.wait_for(_pull_topic(server.port, topic), 30))


def check_progress(server: Server) -> tuple[int, int]:
    return asyncio.run(asyncio.wait_for(_check_progress(server.port), 30))


@pytest.fixture(scope="module")
def transactions(jar: Path, server: Server) -> tuple[Run, list[StoredMessage]]:
    topic = f"InteropTx_{RUN}"
    # The first message a fresh store takes waits for its first CommitLog file, made and
    # pre-touched (1 GiB) in the background, and the broker's event loop waits with it: seconds
    # under load. A Java heartbeat held up behind it times out after 3 s and the client closes the
    # connection, failing the half message in flight and sending it again (the first copy is then
    # checked as a transaction nobody ends). Take that wait before the Java client starts.
    asyncio.run(asyncio.wait_for(_warm_up(server.port), 150))
    run = run_transactions(
        jar, server, topic=topic, group=f"interop-tx-{RUN}", run=RUN, n=N, immunity=IMMUNITY_S
    )
    run.assert_ok()
    # The client has exited; its last END_TRANSACTIONs were one-way. Settled means: every commit
    # is visible and the check service has passed the whole half queue, i.e. found every
    # transaction resolved (one left unresolved, an immune one included, keeps getting copied to
    # the end); after that nothing can become visible any more.
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        got = pull_topic(server, topic)
        done, end = check_progress(server)
        if len(got) >= 2 * N and done == end:
            return run, got
        if time.monotonic() > deadline:
            pytest.fail(
                f"not settled within {SETTLE_TIMEOUT} s: {len(got)} of {2 * N} commits visible, "
                f"check service at half queue offset {done} of {end}\n{server.log_tail()}"
            )
        time.sleep(0.2)


def _sent(run: Run) -> dict[str, dict[str, Any]]:
    return {f"{r['kind']}:{r['idx']}": r for r in run.events("sent")}


def _received(got: list[StoredMessage]) -> dict[str, StoredMessage]:
    out: dict[str, StoredMessage] = {}
    for m in got:
        key = f"{m.properties['tx_kind']}:{m.properties['tx_idx']}"
        assert key not in out, f"{key} was committed twice"
        out[key] = m
    return out


def test_commit_is_visible_at_once(transactions: tuple[Run, list[StoredMessage]], server: Server) -> None:
    run, got = transactions
    sent = _sent(run)
    received = _received(got)
    for i in range(N):
        s, m = sent[f"commit:{i}"], received[f"commit:{i}"]
        assert (s["status"], s["localState"]) == ("SEND_OK", "COMMIT_MESSAGE")
        assert m.uniq_key == s["msgId"] == s["uniqId"]
        assert m.body == f"commit:{i}:{RUN}".encode()
        assert (m.tags, m.keys) == ("Tx", [f"commit-{i}"])
        assert m.sys_flag & 0xC == 0x8
        # The commit refers to the half message the send result described (the Java client took
        # the commit log offset from its offsetMsgId).
        half = view_message(server, m.prepared_transaction_offset)
        assert (half.topic, half.queue_offset, half.uniq_key) == (HALF, s["queueOffset"], s["msgId"])
        assert m.properties["PGROUP"] == f"interop-tx-{RUN}" and m.properties["REAL_TOPIC"] == m.topic
    executed = {(e["kind"], str(e["idx"])) for e in run.events("executed")}
    assert executed == {(k, str(i)) for k in ("commit", "rollback", "check") for i in range(N)}


def test_rollback_is_never_visible(transactions: tuple[Run, list[StoredMessage]]) -> None:
    run, got = transactions
    sent = _sent(run)
    assert all(sent[f"rollback:{i}"]["localState"] == "ROLLBACK_MESSAGE" for i in range(N))
    assert not [m for m in got if m.properties["tx_kind"] == "rollback"]


def test_unknown_then_commit_via_check_back(
    transactions: tuple[Run, list[StoredMessage]], server: Server
) -> None:
    run, got = transactions
    sent = _sent(run)
    received = _received(got)
    checks = run.events("checked")
    assert {c["id"] for c in checks} == {f"check:{i}" for i in range(N)}, "only unknown ones are checked"
    assert run.summary["checks"] == {f"check:{i}": 2 for i in range(N)}
    for i in range(N):
        s, m = sent[f"check:{i}"], received[f"check:{i}"]
        assert s["localState"] == "UNKNOW"
        assert m.uniq_key == s["msgId"]
        mine = sorted((c for c in checks if c["id"] == f"check:{i}"), key=lambda c: c["times"])
        assert [c["answer"] for c in mine] == ["UNKNOW", "COMMIT_MESSAGE"]
        for n, c in enumerate(mine, 1):
            # The client sees the message as sent: real topic, a client msgId, and the broker's
            # check count; the offsets are those of the copy the check was made for.
            assert c["topic"] == m.topic and c["transactionId"] == s["msgId"]
            assert decode_offset_msg_id(c["msgId"]) == ("127.0.0.1", server.port, c["commitLogOffset"])
            assert c["body"] == f"check:{i}:{RUN}"
            assert c["properties"]["TRANSACTION_CHECK_TIMES"] == str(n)
            assert c["properties"]["TRAN_PREPARED_QUEUE_OFFSET"] == str(s["queueOffset"])
            assert c["queueOffset"] > s["queueOffset"]
        # The commit refers to the copy of the second check.
        assert m.prepared_transaction_offset == mine[1]["commitLogOffset"]
        assert m.properties["TRANSACTION_CHECK_TIMES"] == "2"
