"""JSON as RocketMQ's Java side writes it: fastjson emits integer map keys unquoted
(`{0:"127.0.0.1:10911"}`), which standard parsers reject."""

from __future__ import annotations

import re
from typing import Any

import orjson

_BARE_INT_KEY = re.compile(rb"([{,]\s*)(-?\d+)(\s*:)")


def loads_lenient(data: bytes | str) -> Any:
    """Parses standard JSON, or fastjson's with unquoted integer keys."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return orjson.loads(_BARE_INT_KEY.sub(rb'\1"\2"\3', raw))


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)
