"""Fuzzing with hypothesis: the frame and header decoders on arbitrary bytes, and every request
code with random ext fields and bodies against a live in-process name server and broker. Nothing
may crash them, every answer is a RocketMQ code whose remark carries no Python exception text, and
afterwards a normal client still sends and pulls. Bounded by example counts (about 20 s)."""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ferromq.errors import RequestTimeoutError
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.command import (
    MAX_FRAME_SIZE,
    MalformedFrame,
    RemotingCommand,
    SerializeType,
    decode_frame,
    encode,
)
from ferromq.remoting.connection import open_connection

from .brokerkit import Client, pull_ext, running, send_ext

FUZZ = settings(
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)

# Remarks that are Java's exception descriptions on purpose (`Throwable.toString()` and a frame).
JAVA_TEXT = ("org.apache.rocketmq.", "java.lang.")
# Python's error vocabulary: none of it may reach a client.
PYTHON_TEXT = re.compile(
    r"Traceback|Error\b|Exception\b|struct\.error|object has no attribute|not subscriptable|"
    r"unsupported operand|invalid literal for|NoneType|takes \d+ positional"
)


# -- the pure decoders --------------------------------------------------------------------------


def _frame(ser: int, header: bytes, body: bytes) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (ser << 24) | len(header)) + header + body


@FUZZ
@given(st.binary(max_size=512), st.integers(0, 8))
def test_decode_frame_on_arbitrary_bytes(data: bytes, start: int) -> None:
    try:
        decoded = decode_frame(data, MAX_FRAME_SIZE, min(start, len(data)))
    except MalformedFrame:
        return
    if decoded is not None:
        cmd, used = decoded
        assert 8 <= used <= len(data) and isinstance(cmd, RemotingCommand)


@FUZZ
@given(st.sampled_from([0, 1, 2, 255]), st.binary(max_size=300), st.binary(max_size=64))
def test_decode_frame_on_arbitrary_headers(ser: int, header: bytes, body: bytes) -> None:
    frame = _frame(ser, header, body)
    try:
        decoded = decode_frame(frame)
    except MalformedFrame:
        return
    assert decoded is not None and decoded[1] == len(frame) and decoded[0].body == body
    for cut in (1, len(frame) // 2, len(frame) - 1):
        assert decode_frame(frame[:cut]) is None  # incomplete is not malformed


TEXT = st.text(max_size=40)
EXT = st.dictionaries(st.text(min_size=1, max_size=12), TEXT, max_size=6)


@FUZZ
@given(
    st.integers(-(2**15), 2**15 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 3),
    st.one_of(st.none(), TEXT),
    EXT,
    st.binary(max_size=64),
    st.sampled_from(list(SerializeType)),
)
def test_encode_decode_round_trip(
    code: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext: dict[str, str],
    body: bytes,
    ser: SerializeType,
) -> None:
    cmd = RemotingCommand(code, opaque, flag, remark=remark, ext=ext, body=body, serialize_type=ser)
    decoded = decode_frame(encode(cmd))
    assert decoded is not None
    got = decoded[0]
    assert (got.code, got.opaque, got.flag, got.body, got.serialize_type) == (code, opaque, flag, body, ser)
    if ser == SerializeType.JSON:
        assert got.ext == ext and got.remark == remark
    else:  # the binary form drops empty keys and values, and an empty remark
        assert got.ext == {k: v for k, v in ext.items() if v} and got.remark == (remark or None)


# -- every request code against a live broker ----------------------------------------------------

# Header names the processors read, so random values reach their parsing.
KEYS = sorted(
    {
        *send_ext("T", 0),
        *pull_ext("G", "T", 0, 0),
        *"abcdefghijklm",
        "brokerName",
        "brokerAddr",
        "clusterName",
        "brokerId",
        "haServerAddr",
        "compressed",
        "bodyCrc32",
        "readQueueNums",
        "writeQueueNums",
        "perm",
        "topicFilterType",
        "topicSysFlag",
        "order",
        "offset",
        "commitLogOffset",
        "tranStateTableOffset",
        "commitOrRollback",
        "fromTransactionCheck",
        "msgId",
        "transactionId",
        "timestamp",
        "key",
        "maxNum",
        "beginTimestamp",
        "endTimestamp",
        "uniqKey",
        "group",
        "groupName",
        "delayLevel",
        "originMsgId",
        "originTopic",
        "unitMode",
        "maxReconsumeTimes",
        "consumerGroup",
        "clientId",
        "namespace",
        "value",
        "cluster",
        "batch",
        "expressionType",
        "jstack",
        "isForce",
    }
)
NUMBERS = st.sampled_from(
    [
        *("0", "1", "-1", "-5", "7", "1024", "1025", "1e3", "0x10", " 3", "", "true", "false", "NaN"),
        *(str(n) for n in (2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63), -(2**63) - 1)),
    ]
)
VALUES = st.one_of(
    NUMBERS, st.text(max_size=30), st.sampled_from(["T", "G", "%RETRY%G", "TBW102", "*", "a || b"])
)
RANDOM_EXT = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=12)
BODIES = st.one_of(
    st.just(b""),
    st.binary(max_size=200),
    st.sampled_from([b"{}", b"[]", b"null", b'{"mqSet":[{"topic":1}]}', b'{"clientID":null}', b"\x00" * 40]),
)
CODES = st.one_of(st.sampled_from(sorted(RC)), st.integers(-5, 400))


@pytest.mark.timeout(120)
def test_every_request_code_with_random_fields(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.new_event_loop()
    ctx = running(tmp_path)
    ns, broker = loop.run_until_complete(ctx.__aenter__())
    clients: dict[str, Client] = {}
    seen: collections.Counter[int] = collections.Counter()  # requests sent, by code

    async def connect() -> None:
        clients["broker"] = await Client().connect(broker.port)
        clients["namesrv"] = await Client().connect(ns.port)
        r = await clients["broker"].call(RC.SEND_MESSAGE, send_ext("T", 0), b"seed")
        assert r.code == R.SUCCESS

    async def one(target: str, code: int, ext: dict[str, str], body: bytes, ser: SerializeType) -> None:
        c = clients[target]
        if c.conn.closed:  # a malformed-looking request may close it; reconnect
            clients[target] = c = await Client().connect(broker.port if target == "broker" else ns.port)
        if code == RC.PULL_MESSAGE:
            ext["suspendTimeoutMillis"] = "50"  # a held pull answers within the request timeout
        try:
            r = await c.call(code, ext, body, ser=ser, timeout=5.0)
        except RequestTimeoutError:
            # Requests Java answers with no reply (oneway by nature) may stay silent.
            assert code in (RC.END_TRANSACTION, RC.PULL_MESSAGE), f"no reply to code {code} {ext}"
            return
        assert r.is_response and r.code >= 0, r
        remark = r.remark or ""
        # Java's own exception texts, answered as Java 5.3.3 answers (the ACL 2.0 admin requests
        # with ACL 2.0 off), name Java classes and frames: only Python's may not leak.
        if not remark.startswith(JAVA_TEXT):
            assert not PYTHON_TEXT.search(remark), (code, ext, remark)

    loop.run_until_complete(connect())

    @settings(FUZZ, max_examples=3000)
    @given(
        st.sampled_from(["broker", "broker", "broker", "namesrv"]),
        CODES,
        RANDOM_EXT,
        BODIES,
        st.sampled_from(list(SerializeType)),
    )
    def fuzz(target: str, code: int, ext: dict[str, str], body: bytes, ser: SerializeType) -> None:
        send_one(target, code, ext, body, ser)

    def send_one(target: str, code: int, ext: dict[str, str], body: bytes, ser: SerializeType) -> None:
        seen[code] += 1
        loop.run_until_complete(asyncio.wait_for(one(target, code, ext, body, ser), 10))

    def fuzz_unseen() -> None:
        """Hypothesis draws codes unevenly: the codes the first run missed get a run of their own."""
        unseen = [c for c in RC if not seen[c]]
        if not unseen:
            return

        @settings(FUZZ, max_examples=30 * len(unseen))
        @given(
            st.sampled_from(["broker", "broker", "broker", "namesrv"]),
            st.sampled_from(unseen),
            RANDOM_EXT,
            BODIES,
            st.sampled_from(list(SerializeType)),
        )
        def more(target: str, code: int, ext: dict[str, str], body: bytes, ser: SerializeType) -> None:
            send_one(target, code, ext, body, ser)

        more()

    @settings(FUZZ, max_examples=60)
    @given(st.binary(min_size=1, max_size=300))
    def garbage(data: bytes) -> None:
        async def send() -> None:
            _, writer = await asyncio.open_connection("127.0.0.1", broker.port)
            writer.write(data)
            await writer.drain()
            writer.close()

        loop.run_until_complete(asyncio.wait_for(send(), 10))

    try:
        with caplog.at_level(logging.ERROR, logger="ferromq"):
            fuzz()
            fuzz_unseen()
            garbage()
        assert not [c for c in RC if not seen[c]], "every request code is fuzzed"
        unexpected = [r for r in caplog.records if r.levelno >= logging.ERROR and "failed" in r.getMessage()]
        loop.run_until_complete(asyncio.wait_for(_normal_client(broker.port), 30))
        assert not unexpected, "\n".join(
            f"{r.getMessage()}: {r.exc_info[1]!r}" if r.exc_info else r.getMessage() for r in unexpected[:10]
        )
    finally:
        for c in clients.values():
            loop.run_until_complete(c.close())
        loop.run_until_complete(ctx.__aexit__(None, None, None))
        loop.close()


async def _normal_client(port: int) -> None:
    """After the fuzzing: a fresh client sends and pulls what it sent."""
    conn = await open_connection("127.0.0.1", port)
    c = Client()
    c.conn = conn
    r = await c.call(
        RC.UPDATE_AND_CREATE_TOPIC, {"topic": "AfterFuzz", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}
    )
    assert r.code == R.SUCCESS, r.remark
    r = await c.call(RC.SEND_MESSAGE, send_ext("AfterFuzz", 0), b"still fine")
    assert r.code == R.SUCCESS, r.remark
    r = await c.call(RC.PULL_MESSAGE, pull_ext("AfterFuzzGroup", "AfterFuzz", 0, 0))
    assert r.code == R.SUCCESS, r.remark
    assert b"still fine" in r.body
    await c.close()
