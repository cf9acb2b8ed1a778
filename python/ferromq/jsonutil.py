"""JSON as RocketMQ's Java side writes it: fastjson emits integer map keys unquoted
(`{0:"127.0.0.1:10911"}`) and object map keys as objects (`{{"brokerName":"b","queueId":0,
"topic":"T"}:{...}}` for a `Map<MessageQueue, ...>`), which standard parsers reject."""

from __future__ import annotations

import re
from typing import Any

import orjson

_BARE_INT_KEY = re.compile(rb"([{,]\s*)(-?\d+)(\s*:)")
# An object used as a map key: `{` or `,`, a flat object (strings without braces), then `:`.
_OBJECT_KEY = re.compile(rb'([{,]\s*)(\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\})(\s*:)')


def loads_lenient(data: bytes | str) -> Any:
    """Parses standard JSON, or fastjson's with unquoted integer keys."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return orjson.loads(_BARE_INT_KEY.sub(rb'\1"\2"\3', raw))


def loads_object_keys(data: bytes | str) -> Any:
    """Parses fastjson's JSON where maps may have object keys: such a key becomes a string, its
    JSON text (`object_key` turns it back into a dict). Integer keys are quoted as in
    `loads_lenient`."""
    raw = data.encode() if isinstance(data, str) else data

    def quote(m: re.Match[bytes]) -> bytes:
        return m.group(1) + orjson.dumps(m.group(2).decode("utf-8")) + m.group(3)

    return loads_lenient(_OBJECT_KEY.sub(quote, raw))


def object_key(key: str) -> dict[str, Any]:
    """A map key that `loads_object_keys` kept as JSON text, parsed (`{}` when it is not an object)."""
    try:
        value = orjson.loads(key)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def dumps_sorted(obj: Any) -> bytes:
    """JSON with object keys sorted, as fastjson writes Java beans (fields by name)."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
