"""The remoting frame: `RemotingCommand`, `encode` and `decode_frame`.

Frame: int length (of everything after it), int (serialize type << 24 | header length), header,
body. Headers are JSON (type 0) or RocketMQ's binary layout (type 1). Replies mirror the request's
type, which also keeps the C++ client (JSON only) happy.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import orjson

from ferromq.protocol.codes import SERVER_VERSION, LanguageCode

MAX_FRAME_SIZE = 16 * 1024 * 1024
FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2

_INT = struct.Struct(">i")
_PREFIX = struct.Struct(">ii")
_BIN_FIXED = struct.Struct(">hbhii")


def _short(value: int) -> int:
    """Java's `(short) value`."""
    return (value + 0x8000) % 0x10000 - 0x8000


_LANGUAGE_BY_CODE = {c.value: c.name for c in LanguageCode}


class SerializeType(IntEnum):
    JSON = 0
    ROCKETMQ = 1


class MalformedFrame(Exception):
    """Bytes that cannot be a RocketMQ frame; the connection that sent them is closed."""


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    language: str = "JAVA"
    version: int = SERVER_VERSION
    remark: str | None = None
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def reply(
        self,
        code: int,
        remark: str | None = None,
        ext: dict[str, Any] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The response to this request: same opaque and serialize type, flag = response.
        Ext values are turned into strings (the C++ client ignores anything else)."""
        return RemotingCommand(
            code=int(code),
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext={k: _ext_str(v) for k, v in ext.items()} if ext else {},
            body=body,
            serialize_type=self.serialize_type,
        )


def _ext_str(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def encode(cmd: RemotingCommand) -> bytes:
    """The whole frame, length prefix included."""
    head, body = encode_parts(cmd)
    return head + body if body else head


def encode_parts(cmd: RemotingCommand) -> tuple[bytes, bytes]:
    """The frame as (length prefix and header, body): a writer that joins many frames copies a
    large body once instead of twice."""
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        header = _encode_binary_header(cmd)
    else:
        header = _encode_json_header(cmd)
    body = cmd.body
    return (
        _PREFIX.pack(4 + len(header) + len(body), (int(cmd.serialize_type) << 24) | len(header)) + header,
        body,
    )


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    h: dict[str, Any] = {
        "code": cmd.code,
        "extFields": cmd.ext,
        "flag": cmd.flag,
        "language": cmd.language,
        "opaque": cmd.opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": cmd.version,
    }
    if cmd.remark is not None:
        h["remark"] = cmd.remark
    return orjson.dumps(h)


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    lang = LanguageCode[cmd.language].value if cmd.language in LanguageCode.__members__ else 0
    remark = cmd.remark.encode() if cmd.remark else b""
    ext = bytearray()
    for k, v in cmd.ext.items():
        kb, vb = k.encode(), v.encode()
        ext += struct.pack(">h", len(kb)) + kb + _INT.pack(len(vb)) + vb
    return (
        # A short, as Java writes it: codes past 32767 (5.x's POP codes) wrap, and a Java peer
        # reads another code (its clients send those with JSON headers).
        _BIN_FIXED.pack(_short(cmd.code), lang, _short(cmd.version), cmd.opaque, cmd.flag)
        + _INT.pack(len(remark))
        + remark
        + _INT.pack(len(ext))
        + bytes(ext)
    )


def decode_frame(
    buf: bytes | bytearray | memoryview, max_frame: int = MAX_FRAME_SIZE, start: int = 0
) -> tuple[RemotingCommand, int] | None:
    """Decodes the frame at `start` of `buf`: the command and the bytes it used, or None when
    more bytes are needed. Raises MalformedFrame for bytes that cannot become a frame."""
    if len(buf) - start < 4:
        return None
    (length,) = _INT.unpack_from(buf, start)
    if length < 4 or length > max_frame:
        raise MalformedFrame(f"frame length {length} outside 4..{max_frame}")
    end = start + 4 + length
    if len(buf) < end:
        return None
    (type_and_len,) = _INT.unpack_from(buf, start + 4)
    ser = (type_and_len >> 24) & 0xFF
    header_len = type_and_len & 0xFFFFFF
    if header_len > length - 4:
        raise MalformedFrame(f"header length {header_len} exceeds frame length {length}")
    at = start + 8 + header_len
    if type(buf) is bytes:
        header, body = buf[start + 8 : at], buf[at:end]  # one copy each
    else:
        view = memoryview(buf)
        header, body = bytes(view[start + 8 : at]), bytes(view[at:end])
    if ser == SerializeType.JSON:
        cmd = _decode_json_header(header)
    elif ser == SerializeType.ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise MalformedFrame(f"unknown serialize type {ser}")
    cmd.body = body
    return cmd, 4 + length


def _decode_json_header(header: bytes) -> RemotingCommand:
    try:
        h = orjson.loads(header)
    except orjson.JSONDecodeError as e:
        raise MalformedFrame(f"header is not JSON: {e}") from None
    if type(h) is not dict:
        raise MalformedFrame("header is not a JSON object")
    if "code" not in h:
        raise MalformedFrame("header has no code")
    code, opaque = h["code"], h.get("opaque", 0)
    flag, version = h.get("flag", 0), h.get("version", 0)
    # `type(x) is int` also turns booleans away.
    if not (type(code) is int and type(opaque) is int and type(flag) is int and type(version) is int):
        raise MalformedFrame("code, opaque, flag and version must be integers")
    raw_ext = h.get("extFields") or {}
    if type(raw_ext) is not dict:
        raise MalformedFrame("extFields is not an object")
    ext: dict[str, str] = raw_ext
    for v in raw_ext.values():
        if type(v) is not str:
            ext = _text_ext(raw_ext)
            break
    language = h.get("language", "OTHER")
    remark = h.get("remark")
    return RemotingCommand(
        code,
        opaque,
        flag,
        language if type(language) is str else str(language),
        version,
        remark if type(remark) is str else None,
        ext,
        b"",
        SerializeType.JSON,
    )


def _text_ext(raw_ext: dict[str, Any]) -> dict[str, str]:
    """Clients send numbers and booleans too (the C++ client mixes them); keep text, drop nulls."""
    ext = {}
    for k, v in raw_ext.items():
        if v is None:
            continue
        ext[k] = ("true" if v else "false") if isinstance(v, bool) else v if isinstance(v, str) else str(v)
    return ext


def _decode_binary_header(header: bytes) -> RemotingCommand:
    try:
        code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(header, 0)
        at = _BIN_FIXED.size
        (n,) = _INT.unpack_from(header, at)
        at += 4
        if n < 0 or at + n > len(header):
            raise MalformedFrame("remark length overruns the header")
        remark = header[at : at + n].decode() if n else None
        at += n
        (ext_len,) = _INT.unpack_from(header, at)
        at += 4
        end = at + ext_len
        if ext_len < 0 or end > len(header):
            raise MalformedFrame("extFields length overruns the header")
        ext: dict[str, str] = {}
        while at < end:
            (kl,) = struct.unpack_from(">h", header, at)
            at += 2
            key = header[at : at + kl].decode()
            at += kl
            (vl,) = _INT.unpack_from(header, at)
            at += 4
            if kl < 0 or vl < 0 or at + vl > end:
                raise MalformedFrame("an extFields entry overruns the header")
            value = header[at : at + vl].decode()
            at += vl
            if key and value:
                ext[key] = value
    except (struct.error, UnicodeDecodeError) as e:
        raise MalformedFrame(f"bad binary header: {e}") from None
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        language=_LANGUAGE_BY_CODE.get(lang, "OTHER"),
        version=version,
        remark=remark,
        ext=ext,
        serialize_type=SerializeType.ROCKETMQ,
    )
