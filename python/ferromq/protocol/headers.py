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


def ext_int(cmd: RemotingCommand, key: str, default: int | None = None) -> int:
    value = cmd.ext.get(key)
    if value is None or value == "":
        if default is None:
            raise MissingHeaderFieldError(f"the custom field <{key}> is null")
        return default
    try:
        return int(value)
    except ValueError:
        raise MissingHeaderFieldError(f"the custom field <{key}> is not a number: {value!r}") from None


def ext_bool(cmd: RemotingCommand, key: str, default: bool = False) -> bool:
    value = cmd.ext.get(key)
    if value is None:
        return default
    return value.lower() == "true" or value == "1"
