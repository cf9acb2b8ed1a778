"""Frame codec: golden bytes from the facts sheet and the recorded C++ traffic, both header types."""

from __future__ import annotations

import orjson
import pytest

from ferromq.protocol import MalformedFrame, RemotingCommand, SerializeType, decode_frame, encode
from ferromq.protocol.codes import RequestCode
from ferromq.protocol.headers import ext_bool, ext_int, ext_str

# A request exactly as the PyPI C++ client sent it (cpp-client-wire-log.txt, scenario A), with the
# trailing newline its JSON writer adds, counted in the header length.
CPP_ROUTE_REQUEST_HEADER = (
    b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"N/YT7X6tJe5UfutmW+uNwTTJ7Fc=",'
    b'"topic":"TopicTest"},"flag":0,"language":"CPP","opaque":0,"remark":"","version":63}\n'
)


def frame(header: bytes, body: bytes = b"", ser: int = 0) -> bytes:
    return (
        (4 + len(header) + len(body)).to_bytes(4, "big")
        + ((ser << 24) | len(header)).to_bytes(4, "big")
        + header
        + body
    )


def test_decodes_the_cpp_client_request() -> None:
    data = frame(CPP_ROUTE_REQUEST_HEADER)
    cmd, used = decode_frame(data)  # type: ignore[misc]
    assert used == len(data)
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.language, cmd.version) == (105, 0, 0, "CPP", 63)
    assert ext_str(cmd, "topic") == "TopicTest"
    assert cmd.serialize_type == SerializeType.JSON


def test_numbers_and_booleans_in_ext_become_text() -> None:
    header = (
        b'{"code":11,"extFields":{"queueId":3,"maxMsgNums":32,"queueOffset":"7","batch":"1","x":true},'
        b'"opaque":9}'
    )
    cmd, _ = decode_frame(frame(header))  # type: ignore[misc]
    assert cmd.ext["queueId"] == "3"
    assert ext_int(cmd, "queueId") == 3 and ext_int(cmd, "queueOffset") == 7
    assert ext_bool(cmd, "batch") and ext_bool(cmd, "x") and not ext_bool(cmd, "missing")


def test_reply_is_json_with_string_ext_and_response_flag() -> None:
    req, _ = decode_frame(frame(CPP_ROUTE_REQUEST_HEADER))  # type: ignore[misc]
    data = encode(req.reply(0, ext={"offset": 42, "ok": True}))
    length = int.from_bytes(data[:4], "big")
    assert length == len(data) - 4
    assert data[4] == 0, "JSON type byte"
    header = orjson.loads(data[8 : 8 + int.from_bytes(data[5:8], "big")])
    assert header["flag"] == 1
    assert header["opaque"] == 0
    assert header["extFields"] == {"offset": "42", "ok": "true"}


def test_java_heartbeat_reply_prefix() -> None:
    # Facts sheet 1.2: a 95-byte header gives the prefix 00000063 0000005F.
    header = (
        b'{"code":0,"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":407}'
    )
    assert len(header) == 95
    assert frame(header)[:8] == bytes.fromhex("000000630000005F")


def test_binary_header_golden_bytes() -> None:
    # Facts sheet 1.5: HEART_BEAT request, opaque 5, version 407, no remark, no ext.
    cmd = RemotingCommand(
        code=RequestCode.HEART_BEAT,
        opaque=5,
        version=407,
        language="JAVA",
        serialize_type=SerializeType.ROCKETMQ,
    )
    data = encode(cmd)
    assert data == bytes.fromhex(
        "00000019 01000015 0022 00 0197 00000005 00000000 00000000 00000000".replace(" ", "")
    )
    back, used = decode_frame(data)  # type: ignore[misc]
    assert used == len(data)
    assert (back.code, back.opaque, back.version, back.language) == (34, 5, 407, "JAVA")


def test_binary_round_trip_with_remark_ext_body() -> None:
    cmd = RemotingCommand(
        code=310,
        opaque=77,
        flag=2,
        remark="héllo",
        ext={"a": "grp", "b": "Topic"},
        body=b"\x00\x01body",
        serialize_type=SerializeType.ROCKETMQ,
    )
    back, _ = decode_frame(encode(cmd))  # type: ignore[misc]
    assert back == cmd
    reply = back.reply(0)
    assert reply.serialize_type == SerializeType.ROCKETMQ


def test_incomplete_is_not_malformed() -> None:
    data = frame(CPP_ROUTE_REQUEST_HEADER, b"body")
    for cut in (0, 3, 4, 8, len(data) - 1):
        assert decode_frame(data[:cut]) is None
    two = data + data
    cmd, used = decode_frame(two)  # type: ignore[misc]
    assert used == len(data) and cmd.body == b"body"


@pytest.mark.parametrize(
    "data",
    [
        (0).to_bytes(4, "big"),  # length below the minimum
        (17 * 1024 * 1024).to_bytes(4, "big"),  # over 16 MiB
        frame(b"not json"),
        frame(b"[1,2]"),
        frame(b'{"opaque":1}'),  # no code
        frame(b'{"code":"10"}'),  # code as a string
        frame(b'{"code":10,"extFields":[1]}'),
        frame(b"\x00" * 8, ser=7),  # unknown serialize type
        (12).to_bytes(4, "big") + (200).to_bytes(4, "big") + b"\x00" * 8,  # header longer than frame
        frame(b"\x00\x0a\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x00\x7f\xff\xff\xff", ser=1),
    ],
)
def test_malformed_frames_are_rejected(data: bytes) -> None:
    with pytest.raises(MalformedFrame):
        decode_frame(data)
