"""Request bodies (RocketMQ's JSON) read defensively: a body of the wrong shape is refused with a
remark naming what was expected, never with Python's error text."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ferromq.errors import BrokerError
from ferromq.jsonutil import loads_lenient
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.command import RemotingCommand


def json_object(cmd: RemotingCommand, what: str, *, empty_ok: bool = False) -> dict[str, Any]:
    """The body as a JSON object, or a SYSTEM_ERROR refusal saying `what` is not one."""
    if not cmd.body and empty_ok:
        return {}
    try:
        data = loads_lenient(cmd.body)
    except ValueError:
        raise BrokerError(f"{what} is not JSON", ResponseCode.SYSTEM_ERROR) from None
    if not isinstance(data, dict):
        raise BrokerError(f"{what} is not a JSON object", ResponseCode.SYSTEM_ERROR)
    return data


@contextlib.contextmanager
def shaped(what: str) -> Iterator[None]:
    """Turns a body of the wrong shape met while reading it (a missing key, a list where an
    object belongs, text where a number does) into a SYSTEM_ERROR refusal naming `what`."""
    try:
        yield
    except (KeyError, ValueError, TypeError, AttributeError, IndexError):
        raise BrokerError(f"{what} is malformed", ResponseCode.SYSTEM_ERROR) from None
