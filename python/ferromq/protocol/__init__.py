"""RocketMQ remoting protocol: frames, codes, headers and bodies. Pure code: no sockets, no clock."""

from ferromq.protocol.codes import LanguageCode, RequestCode, ResponseCode
from ferromq.protocol.command import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    MAX_FRAME_SIZE,
    MalformedFrame,
    RemotingCommand,
    SerializeType,
    decode_frame,
    encode,
)

__all__ = [
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "MAX_FRAME_SIZE",
    "LanguageCode",
    "MalformedFrame",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "decode_frame",
    "encode",
]
