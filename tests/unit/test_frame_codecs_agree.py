"""The remoting frame is written twice: Python's codec (`ferromq.protocol.command`, every frame
Python serves or sends) and the data plane's (`ferromq_remoting::frame`: the length rule, the JSON
header as far as the plane reads it, its replies), reached here through `_store.frame_length`,
`read_frame` and `json_reply`. Both stay because crossing into Rust saves nothing on Python's hot
path (docs/design/hot-path-rules.md, "Still in two places"); these tests feed both the same
frames, generated and edge cases, and fail when they drift.

The rule between the readers: a frame the plane reads, ext fields included (it serves nothing
without them), Python reads the same way. The plane hands Python whole every frame it does not
read, so a plane that reads less only moves a frame to Python. Replies are the same bytes, but
for where the remark stands (last in Python's).
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ferromq import _store
from ferromq.protocol.codes import SERVER_VERSION
from ferromq.protocol.command import (
    MAX_FRAME_SIZE,
    MalformedFrame,
    RemotingCommand,
    SerializeType,
    decode_frame,
    encode,
)
from tests.unit.test_frame import frame

I32 = st.integers(-(2**31), 2**31 - 1)
TEXT = st.text(max_size=40)  # any code point but lone surrogates, as a client's UTF-8 has them
EXT = st.dictionaries(TEXT, TEXT, max_size=8)
BODY = st.binary(max_size=64)
# What a header's ext values may be: clients send text, numbers and booleans (the C++ client
# mixes them), and null.
SCALAR = st.one_of(
    TEXT,
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
ANY_JSON = st.recursive(
    SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3)
)


def escaped(s: str) -> bool:
    """Whether JSON writes `s` with an escape (orjson, like Java, escapes only what it must)."""
    return any(c in '"\\' or c < " " for c in s)


def python_reads(data: bytes) -> RemotingCommand | None:
    """The command Python's codec reads from a whole frame, None when it refuses the frame."""
    try:
        decoded = decode_frame(data)
    except MalformedFrame:
        return None
    assert decoded is not None, "a whole frame"
    cmd, used = decoded
    assert used == len(data)
    return cmd


def assert_python_reads_what_the_plane_reads(data: bytes) -> None:
    read = _store.read_frame(data)
    assert read is not None
    ser, header, body = read
    if header is None:
        return  # the plane hands the frame to Python, which decides
    code, opaque, flag, version, ext = header
    cmd = python_reads(data)
    if ext is None and cmd is None:
        return  # the plane serves nothing without its ext fields: Python decides, and refuses
    assert cmd is not None, f"the plane reads a frame Python refuses: {data!r}"
    assert (cmd.serialize_type, cmd.code, cmd.opaque, cmd.flag, cmd.version, cmd.body) == (
        ser,
        code,
        opaque,
        flag,
        version,
        body,
    )
    if ext is not None:
        assert cmd.ext.keys() == ext.keys()
        for name, text in ext.items():
            assert cmd.ext[name] == text or floats_apart_by_an_ulp(cmd.ext[name], text)


def floats_apart_by_an_ulp(python: str, plane: str) -> bool:
    """serde_json (without `float_roundtrip`) reads some long floats one ULP off. No ext field the
    plane reads is a float (it reads integers, and refuses these as such), so it is let be."""
    try:
        a, b = float(python), float(plane)
    except ValueError:
        return False
    return not python.lstrip("-").isdigit() and abs(a - b) <= math.ulp(a)


# -- requests Python writes, read by the plane -------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    code=I32, opaque=I32, flag=I32, version=I32, language=TEXT, remark=st.none() | TEXT, ext=EXT, body=BODY
)
@example(code=310, opaque=1, flag=0, version=401, language="CPP", remark="", ext={"": "", "k": ""}, body=b"")
def test_the_plane_reads_the_json_frames_python_writes(
    code: int,
    opaque: int,
    flag: int,
    version: int,
    language: str,
    remark: str | None,
    ext: dict[str, str],
    body: bytes,
) -> None:
    data = encode(RemotingCommand(code, opaque, flag, language, version, remark, ext, body))
    assert _store.frame_length(data, MAX_FRAME_SIZE) == len(data)
    # The plane reads ext names in place: one written with an escape leaves them unread.
    readable = not any(escaped(k) for k in ext)
    assert _store.read_frame(data) == (0, (code, opaque, flag, version, ext if readable else None), body)
    assert_python_reads_what_the_plane_reads(data)


@settings(max_examples=100, deadline=None)
@given(code=st.integers(0, 2**15 - 1), opaque=I32, remark=st.none() | TEXT, ext=EXT, body=BODY)
def test_the_plane_hands_rocketmq_headers_to_python(
    code: int, opaque: int, remark: str | None, ext: dict[str, str], body: bytes
) -> None:
    cmd = RemotingCommand(
        code, opaque, remark=remark, ext=ext, body=body, serialize_type=SerializeType.ROCKETMQ
    )
    data = encode(cmd)
    # The plane finds the body by the header length but reads no binary header.
    assert _store.read_frame(data) == (1, None, body)
    back = python_reads(data)
    assert back is not None and back.body == body and back.code == code


# -- any JSON header: what the plane reads, Python reads the same ------------------------------


def header_objects() -> st.SearchStrategy[dict[str, Any]]:
    number = st.one_of(I32, SCALAR)  # mostly what a header's numbers are, and any other scalar
    ext = st.one_of(
        st.dictionaries(TEXT, SCALAR, max_size=6), st.dictionaries(TEXT, ANY_JSON, max_size=3), ANY_JSON
    )
    fields = st.fixed_dictionaries(
        {},
        optional={
            "code": number,
            "opaque": number,
            "flag": number,
            "version": number,
            "language": ANY_JSON,
            "remark": ANY_JSON,
            "extFields": ext,
            "serializeTypeCurrentRPC": ANY_JSON,
            "other": ANY_JSON,
        },
    )
    return fields


@settings(max_examples=500, deadline=None)
@given(header=header_objects(), body=BODY)
@example(header={"code": 11, "extFields": {"queueId": 3, "maxMsgNums": 32, "x": True, "z": None}}, body=b"")
@example(header={"code": 10, "extFields": None}, body=b"b")
@example(header={"code": 10, "extFields": []}, body=b"")
@example(header={"code": 10, "extFields": {"a": {"b": 1}}}, body=b"")
@example(header={"code": 2**31, "opaque": 1}, body=b"")
@example(header={"code": 1, "extFields": {"n": 2**64, "f": 1e20, "g": -0.0, "h": 5e-324}}, body=b"")
def test_the_plane_reads_no_header_python_reads_otherwise(header: dict[str, Any], body: bytes) -> None:
    # The stdlib writes integers of any size (orjson stops at 64 bits).
    assert_python_reads_what_the_plane_reads(frame(json.dumps(header, ensure_ascii=False).encode(), body))


@pytest.mark.parametrize(
    "header",
    [
        # The C++ client's request as recorded (its JSON writer ends the header with a newline).
        b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"N/YT7X6tJe5UfutmW+uNwTTJ7Fc=",'
        b'"topic":"TopicTest"},"flag":0,"language":"CPP","opaque":0,"remark":"","version":63}\n',
        b'{"code":1,"extFields":{"a":"1","a":"2"}}',  # a repeated ext name: the last value
        b'  {"code" : 1 , "extFields" : { "a" : "\\u00e9\\ud83d\\ude00" } }  ',
        b'{"code":1,"extFields":{"a":"x\\u0000\\u0002"}}',
        b'{"code":-1,"opaque":-2147483648,"flag":3,"version":2147483647}',
        b"not json",
        b"[1,2]",
        b'[310,7,0,0,{"a":"PG","b":"T"}]',  # serde would fill a header's fields from an array
        b'{"opaque":1}',
        b'{"code":"10"}',
        b'{"code":1.0}',
        b'{"code":1,"opaque":null}',
        b'{"code":1} trailing',
        b"\xef\xbb\xbf{}",
        b"",
    ],
)
def test_edge_headers(header: bytes) -> None:
    assert_python_reads_what_the_plane_reads(frame(header, b"body"))


def test_known_differences_between_the_readers() -> None:
    """Where they part, as it stands: each is safe (the plane hands Python the frame, or reads
    nothing it serves from the field in question); a change on either side fails here."""
    # A top-level name twice: the plane reads no header, Python takes the last value.
    assert _store.read_frame(frame(b'{"code":1,"code":2}'))[1] is None  # type: ignore[index]
    assert python_reads(frame(b'{"code":1,"code":2}')).code == 2  # type: ignore[union-attr]
    # A code past 32 bits: the plane reads no header; Python reads it (and answers it unknown).
    assert _store.read_frame(frame(b'{"code":2147483648}'))[1] is None  # type: ignore[index]
    assert python_reads(frame(b'{"code":2147483648}')).code == 2**31  # type: ignore[union-attr]
    # Bytes that are not UTF-8 in a field the plane skips (remark, language): the plane reads
    # the header, Python refuses the frame (and closes the connection). Java would read it with
    # U+FFFD in their place.
    bad = frame(b'{"code":1,"remark":"\xff"}')
    assert _store.read_frame(bad) == (0, (1, 0, 0, 0, {}), b"")
    assert python_reads(bad) is None
    # An ext name written with an escape: the plane reads the header but not its ext fields
    # (it reads names in place), Python reads them.
    named = frame(b'{"code":10,"extFields":{"a\\"b":"1"}}')
    assert _store.read_frame(named) == (0, (10, 0, 0, 0, None), b"")
    assert python_reads(named).ext == {'a"b': "1"}  # type: ignore[union-attr]
    # A lone surrogate in the ext fields: the plane reads the header but not its ext fields
    # (what it serves needs them, so it hands the frame over), Python refuses it.
    lone = frame(b'{"code":10,"extFields":{"a":"\\ud800"}}')
    assert _store.read_frame(lone) == (0, (10, 0, 0, 0, None), b"")
    assert python_reads(lone) is None


# -- the frame length: one rule ----------------------------------------------------------------


def python_length(buf: bytes, max_frame: int) -> int | str | None:
    """The frame's size by Python's codec, "bad" for a length it refuses, None for "more bytes"."""
    try:
        decoded = decode_frame(buf, max_frame)
    except MalformedFrame as e:
        if str(e).startswith("frame length"):
            return "bad"
        return 4 + int.from_bytes(buf[:4], "big", signed=True)  # whole, refused for its header
    return None if decoded is None else decoded[1]


def rust_length(buf: bytes, max_frame: int) -> int | str | None:
    try:
        n = _store.frame_length(buf, max_frame)
    except ValueError:
        return "bad"
    return n


@settings(max_examples=300, deadline=None)
@given(
    header=st.binary(max_size=24),
    body=BODY,
    cut=st.integers(0, 200),
    max_frame=st.sampled_from([4, 16, 64, MAX_FRAME_SIZE]),
    prefix=st.none() | st.binary(min_size=4, max_size=4),
)
def test_whole_incomplete_and_bad_lengths_agree(
    header: bytes, body: bytes, cut: int, max_frame: int, prefix: bytes | None
) -> None:
    data = frame(header, body)
    if prefix is not None:
        data = prefix + data[4:]
    buf = data[:cut]
    assert python_length(buf, max_frame) == rust_length(buf, max_frame)


@pytest.mark.parametrize(
    ("buf", "max_frame", "expected"),
    [
        (b"", MAX_FRAME_SIZE, None),
        (b"\x00\x00\x00", MAX_FRAME_SIZE, None),
        ((3).to_bytes(4, "big"), MAX_FRAME_SIZE, "bad"),  # below the 4 bytes of the header length
        ((0xFFFFFFFF).to_bytes(4, "big"), MAX_FRAME_SIZE, "bad"),  # negative
        ((MAX_FRAME_SIZE + 1).to_bytes(4, "big"), MAX_FRAME_SIZE, "bad"),  # oversized, judged at once
        ((MAX_FRAME_SIZE).to_bytes(4, "big"), MAX_FRAME_SIZE, None),  # the largest: wait for it
        ((4).to_bytes(4, "big") + (0).to_bytes(4, "big"), 4, 8),
        ((5).to_bytes(4, "big") + (0).to_bytes(4, "big"), 4, "bad"),
    ],
)
def test_edge_lengths(buf: bytes, max_frame: int, expected: int | str | None) -> None:
    assert rust_length(buf, max_frame) == expected
    assert python_length(buf, max_frame) == expected


# -- replies: the same bytes -------------------------------------------------------------------


def with_remark_last(header: bytes) -> bytes:
    """The plane's JSON reply header with the remark moved last, where Python's stands (fastjson
    writes it in its alphabetical place, as the plane does; JSON readers take either)."""
    h = orjson.loads(header)
    remark = h.pop("remark")
    return orjson.dumps({**h, "remark": remark})


@settings(max_examples=300, deadline=None)
@given(code=I32, opaque=I32, remark=st.none() | TEXT, ext=EXT, body=BODY)
@example(code=0, opaque=0, remark=None, ext={"a": 'x\x00\x1f\x7f\u2028"\\/\t😀'}, body=b"")
@example(code=1, opaque=-1, remark="", ext={}, body=b"\x00")
def test_replies_are_the_same_bytes(
    code: int, opaque: int, remark: str | None, ext: dict[str, str], body: bytes
) -> None:
    request = RemotingCommand(10, opaque=opaque, language="CPP", version=401)
    python = encode(request.reply(code, remark=remark, ext=ext, body=body))
    plane = _store.json_reply(code, opaque, remark, list(ext.items()), body)
    if remark is None:
        assert python == plane
    else:
        header_len = int.from_bytes(plane[4:8], "big")
        assert python == frame(with_remark_last(plane[8 : 8 + header_len]), body)
    back = python_reads(plane)
    assert back is not None
    assert (
        back.code,
        back.opaque,
        back.flag,
        back.language,
        back.version,
        back.remark,
        back.ext,
        back.body,
    ) == (
        code,
        opaque,
        1,
        "JAVA",
        SERVER_VERSION,
        remark,
        ext,
        body,
    )
