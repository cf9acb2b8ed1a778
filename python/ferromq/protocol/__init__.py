"""RocketMQ remoting protocol: frames, codes, headers and bodies. Pure code: no sockets, no clock."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Imported on first use, as the package `ferromq` does: `ferromq.errors` needs the codes only.
_HOME = {name: "ferromq.protocol.codes" for name in ("LanguageCode", "RequestCode", "ResponseCode")}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'ferromq.protocol' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME.get(name, "ferromq.protocol.command")), name)
