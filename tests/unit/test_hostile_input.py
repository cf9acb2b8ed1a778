"""Hostile and malformed input at the pure decoders: REGISTER_BROKER bodies (Java's compressed
form, decompression bombs), header numbers past Java's types, batch records, reply sizes, and the
dispatcher's error remarks."""

from __future__ import annotations

import asyncio
import struct
import zlib
from pathlib import Path

import pytest

from ferromq.broker import load_broker_config
from ferromq.broker.broker import server_limits
from ferromq.broker.config import ConfigError
from ferromq.broker.processors.admin import offset_table_json
from ferromq.errors import BrokerError, MissingHeaderFieldError
from ferromq.jsonutil import loads_lenient
from ferromq.namesrv.server import _decode_register_body
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.command import MAX_FRAME_SIZE, RemotingCommand
from ferromq.protocol.headers import ext_int, ext_offset
from ferromq.remoting.connection import RequestBudget
from ferromq.remoting.dispatch import Dispatcher
from ferromq.remoting.server import ServerLimits


def java_compressed_register_body(topics: list[tuple[str, int, int, int, str]]) -> bytes:
    """The bytes `RegisterBrokerBody.encode(true)` of RocketMQ 4.9.7 writes: a deflate stream
    (best compression) of int length + DataVersion JSON, int topic count, per topic int length +
    `TopicConfig.encode()` (space separated), int length + the filter server list JSON."""

    def chunk(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b

    raw = chunk(b'{"counter":3,"timestamp":1700000000000}')
    raw += struct.pack(">i", len(topics))
    for name, read_q, write_q, perm, filter_type in topics:
        raw += chunk(f"{name} {read_q} {write_q} {perm} {filter_type}".encode())
    raw += chunk(b"[]")
    return zlib.compress(raw, 9)


def test_java_compressed_register_body_is_read_whole() -> None:
    body = java_compressed_register_body(
        [
            ("TopicA", 8, 8, 6, "SINGLE_TAG"),
            ("TopicB", 4, 2, 4, "MULTI_TAG"),
            ("%RETRY%g", 1, 1, 6, "SINGLE_TAG"),
        ]
    )
    topics = _decode_register_body(body, compressed=True)
    assert set(topics) == {"TopicA", "TopicB", "%RETRY%g"}
    assert topics["TopicB"] == {
        "topicName": "TopicB",
        "readQueueNums": 4,
        "writeQueueNums": 2,
        "perm": 4,
        "topicFilterType": "MULTI_TAG",
    }


def test_compressed_register_body_inflating_past_the_frame_limit_is_refused() -> None:
    bomb = zlib.compress(b"\0" * (MAX_FRAME_SIZE + 1024), 9)
    assert len(bomb) < 64 * 1024
    with pytest.raises(BrokerError, match="inflates past 16777216 bytes") as e:
        _decode_register_body(bomb, compressed=True)
    assert e.value.code == ResponseCode.SYSTEM_ERROR


@pytest.mark.parametrize(
    "raw",
    [
        struct.pack(">i", 1_000_000) + b"{}",  # data version length overruns
        struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", -5),
        struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", 3) + b"a b",
        b"\x00\x00",
    ],
)
def test_broken_compressed_register_bodies_are_refused(raw: bytes) -> None:
    with pytest.raises(BrokerError, match="Failed to decode RegisterBrokerBody"):
        _decode_register_body(zlib.compress(raw), compressed=True)
    with pytest.raises(BrokerError, match="Failed to decode RegisterBrokerBody"):
        _decode_register_body(zlib.compress(raw)[:-3], compressed=True)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("queueOffset", str(2**63), "out of the range of a long"),
        ("queueOffset", str(2**64), "out of the range of a long"),
        ("queueOffset", str(-(2**63) - 1), "out of the range of a long"),
        ("queueId", str(2**31), "out of the range of an int"),
        ("queueOffset", "1e3", "not a number"),
    ],
)
def test_header_numbers_past_java_types_are_refused(key: str, value: str, message: str) -> None:
    cmd = RemotingCommand(code=11, ext={key: value})
    with pytest.raises(MissingHeaderFieldError, match=message) as e:
        ext_int(cmd, key)
    assert key in str(e.value) and "OverflowError" not in str(e.value)


def test_negative_offsets_are_refused_where_java_refuses_them() -> None:
    # (A pull's negative queueOffset is not refused: Java answers PULL_OFFSET_MOVED to the min, and
    # so does ferromq: tests/integration/test_retention.py.)
    cmd = RemotingCommand(code=11, ext={"queueOffset": "-1", "queueId": "3"})
    with pytest.raises(MissingHeaderFieldError, match="queueOffset> must not be negative"):
        ext_offset(cmd, "queueOffset")
    assert ext_offset(cmd, "queueId") == 3
    assert ext_int(cmd, "queueOffset") == -1
    assert ext_int(RemotingCommand(code=11, ext={"o": str(2**63 - 1)}), "o") == 2**63 - 1


def test_all_consumer_offsets_body_is_javas() -> None:
    body = offset_table_json({"TopicTest@G1": {0: 5, 3: 9}, "%RETRY%G1@G1": {0: 0}})
    assert body == b'{"offsetTable":{"TopicTest@G1":{0:5,3:9},"%RETRY%G1@G1":{0:0}}}'
    assert loads_lenient(body) == {
        "offsetTable": {"TopicTest@G1": {"0": 5, "3": 9}, "%RETRY%G1@G1": {"0": 0}}
    }
    assert offset_table_json({}) == b'{"offsetTable":{}}'


class _Peer:
    peer = "127.0.0.1:1"


def _dispatch(handler: object, code: int = 17) -> RemotingCommand:
    async def run() -> RemotingCommand:
        d = Dispatcher({code: handler}, "test")  # type: ignore[dict-item]
        answer = d(_Peer(), RemotingCommand(code=code, opaque=7))  # type: ignore[arg-type]
        assert answer is not None and not isinstance(answer, RemotingCommand)
        reply = await answer
        assert reply is not None
        return reply

    return asyncio.run(run())


def test_unexpected_errors_answer_a_generic_remark() -> None:
    async def broken(conn: object, cmd: RemotingCommand) -> RemotingCommand:
        raise TypeError("Dict key must be str")

    reply = _dispatch(broken)
    assert reply.code == ResponseCode.SYSTEM_ERROR and reply.opaque == 7
    assert reply.remark is not None and "TypeError" not in reply.remark and "Dict key" not in reply.remark
    assert "request code 17" in reply.remark


def test_typed_errors_keep_their_code_and_remark() -> None:
    async def refused(conn: object, cmd: RemotingCommand) -> RemotingCommand:
        raise BrokerError("no such thing", ResponseCode.TOPIC_NOT_EXIST)

    reply = _dispatch(refused)
    assert (reply.code, reply.remark) == (ResponseCode.TOPIC_NOT_EXIST, "no such thing")


def test_replies_past_the_frame_limit_are_refused() -> None:
    async def huge(conn: object, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.reply(ResponseCode.SUCCESS, body=b"x" * MAX_FRAME_SIZE)

    reply = _dispatch(huge)
    assert reply.code == ResponseCode.SYSTEM_ERROR and not reply.body
    assert reply.remark is not None and "exceed the frame limit" in reply.remark


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b"null",
        b'{"topicConfigSerializeWrapper": []}',
        b'{"topicConfigSerializeWrapper": {"topicConfigTable": [1]}}',
        b'{"topicConfigTable": {"T": {"readQueueNums": "many"}}}',
        b'{"topicConfigTable": {"T": {"perm": null}}}',
        b"\xff",
    ],
)
def test_plain_register_bodies_of_the_wrong_shape_are_refused_plainly(body: bytes) -> None:
    with pytest.raises(BrokerError, match="Failed to decode RegisterBrokerBody") as e:
        _decode_register_body(body, compressed=False)
    assert "object has no attribute" not in str(e.value) and "Error" not in str(e.value)


def test_plain_register_body_numbers_as_text_are_read() -> None:
    topics = _decode_register_body(b'{"topicConfigTable": {"T": {"readQueueNums": "4", "perm": 6}}}', False)
    assert topics["T"]["readQueueNums"] == 4 and topics["T"]["perm"] == 6


def test_remoting_bounds_come_from_broker_conf(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "serverChannelMaxIdleTimeSeconds=7\nserverReadTimeoutSeconds=0\nserverMaxConnections=50\n"
        "serverRequestBufferBytes=1048576\nserverReplyBufferBytes=65536\nmaxTopicQueueNums=8\n"
        "serverMaxInflightRequests=500\n"
    )
    cfg = load_broker_config(conf, strict=True)
    assert server_limits(cfg) == ServerLimits(
        idle_timeout=7,
        read_timeout=None,
        max_connections=50,
        request_buffer_bytes=1048576,
        reply_buffer_bytes=65536,
        max_inflight_requests=500,
    )
    assert cfg.max_topic_queue_nums == 8
    defaults = server_limits(load_broker_config(None))
    assert (defaults.idle_timeout, defaults.read_timeout) == (120, 30)  # Java's 120 s idle time
    conf.write_text("serverMaxConnections=0\nmaxTopicQueueNums=-1\n")
    with pytest.raises(ConfigError, match=r"serverMaxConnections must be > 0.*maxTopicQueueNums must be > 0"):
        load_broker_config(conf)


class _Waiter:
    def __init__(self) -> None:
        self.granted: int | None = None

    def _budget_granted(self, need: int) -> None:
        self.granted = need


def test_request_budget_grants_in_order_and_never_to_a_caller_it_refused() -> None:
    budget = RequestBudget(100)
    a, b, c = _Waiter(), _Waiter(), _Waiter()
    assert budget.reserve(a, 0, 80)  # type: ignore[arg-type]
    assert not budget.reserve(b, 0, 50)  # type: ignore[arg-type]
    # c gives back what it held and asks for more while b waits: it queues behind b.
    assert not budget.reserve(c, 0, 10)  # type: ignore[arg-type]
    assert budget.used == 80 and b.granted is None and c.granted is None
    budget.release(a, 80)  # type: ignore[arg-type]
    assert (b.granted, c.granted, budget.used) == (50, 10, 60)
    # A frame larger than the whole budget is granted when nothing else is reserved.
    big = _Waiter()
    assert not budget.reserve(big, 0, 500)  # type: ignore[arg-type]
    budget.release(b, 50)  # type: ignore[arg-type]
    assert big.granted is None
    budget.release(c, 10)  # type: ignore[arg-type]
    assert big.granted == 500 and budget.used == 500
    # Shrinking a reservation always succeeds, and wakes nobody who does not fit.
    assert budget.reserve(big, 500, 20)  # type: ignore[arg-type]
    assert budget.used == 20
