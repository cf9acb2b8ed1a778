"""Typed access to a request's `extFields`, with RocketMQ's rules: every value arrives as text,
booleans are Java's (`true`, any case) or the C++ client's (`1`)."""

from __future__ import annotations

from ferromq.errors import MissingHeaderFieldError
from ferromq.protocol.command import RemotingCommand


def ext_str(cmd: RemotingCommand, key: str, default: str | None = None) -> str:
    value = cmd.ext.get(key)
    if value is None:
        if default is None:
            raise MissingHeaderFieldError(f"the custom field <{key}> is null")
        return default
    return value


JAVA_INT_MIN, JAVA_INT_MAX = -(2**31), 2**31 - 1
JAVA_LONG_MIN, JAVA_LONG_MAX = -(2**63), 2**63 - 1

# Header fields that are a Java `int` in RocketMQ's request headers (the others are `long`s):
# a value past an int is refused as Java's Integer.parseInt refuses it.
INT_FIELDS = frozenset(
    {
        "queueId",
        "maxMsgNums",
        "sysFlag",
        "flag",
        "readQueueNums",
        "writeQueueNums",
        "perm",
        "topicSysFlag",
        "reconsumeTimes",
        "maxReconsumeTimes",
        "delayLevel",
        "defaultTopicQueueNums",
        "maxNum",
    }
)


def java_number(value: str, key: str) -> int:
    """The header value as Java parses it: an int for `INT_FIELDS`, a long otherwise. Raises
    MissingHeaderFieldError naming the field for text that is not such a number."""
    try:
        n = int(value)
    except ValueError:
        raise MissingHeaderFieldError(f"the custom field <{key}> is not a number: {value[:64]!r}") from None
    kind, low, high = (
        ("an int", JAVA_INT_MIN, JAVA_INT_MAX)
        if key in INT_FIELDS
        else ("a long", JAVA_LONG_MIN, JAVA_LONG_MAX)
    )
    if not low <= n <= high:
        raise MissingHeaderFieldError(f"the custom field <{key}> is out of the range of {kind}: {value[:64]}")
    return n


def ext_int(cmd: RemotingCommand, key: str, default: int | None = None) -> int:
    value = cmd.ext.get(key)
    if value is None or value == "":
        if default is None:
            raise MissingHeaderFieldError(f"the custom field <{key}> is null")
        return default
    return java_number(value, key)


def ext_offset(cmd: RemotingCommand, key: str, default: int | None = None) -> int:
    """`ext_int` for an offset or a queue id: it must not be negative."""
    n = ext_int(cmd, key, default)
    if n < 0:
        raise MissingHeaderFieldError(f"the custom field <{key}> must not be negative: {n}")
    return n


def ext_bool(cmd: RemotingCommand, key: str, default: bool = False) -> bool:
    value = cmd.ext.get(key)
    if value is None:
        return default
    return value.lower() == "true" or value == "1"
