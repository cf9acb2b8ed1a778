"""Waiting in tests: for a condition, bounded, never for a fixed time.

    from ferromq.testing import until, wait_until

    wait_until(lambda: len(received) >= 3, "3 messages", timeout=10)   # no event loop
    route = await until(fetch_route, "the topic's route")            # on the running loop

Both call `check` every `interval` seconds until it returns something true, and return that
value. `until` also takes a coroutine function. After `timeout` seconds they raise
`WaitTimeout`, naming `what` and adding what `why()` says about the state at that moment.
"""

from __future__ import annotations

import asyncio
import inspect
import socket
import time
from collections.abc import Callable
from typing import Any

__all__ = ["TIMEOUT", "WaitTimeout", "closed_by_peer", "until", "wait_until"]

TIMEOUT = 20.0


class WaitTimeout(AssertionError, TimeoutError):
    """A wait timed out. It is an AssertionError, so pytest reports it as a failed check, and also
    a TimeoutError, which is what the helpers of `Broker` have always raised."""


async def until(
    check: Callable[[], Any],
    what: str = "condition",
    timeout: float = TIMEOUT,
    why: Callable[[], str] | None = None,
    interval: float = 0.02,
) -> Any:
    """Polls `check` (a function, or a coroutine function) every `interval` seconds until it
    returns something true, and returns that value. After `timeout` seconds it raises
    `WaitTimeout` naming `what`, plus what `why()` says."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise WaitTimeout(_timed_out(what, timeout, why))
        await asyncio.sleep(interval)


def wait_until(
    check: Callable[[], Any],
    what: str = "condition",
    timeout: float = TIMEOUT,
    why: Callable[[], str] | None = None,
    interval: float = 0.05,
) -> Any:
    """`until` for code without an event loop (threads, processes, files)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise WaitTimeout(_timed_out(what, timeout, why))
        time.sleep(interval)


def _timed_out(what: str, timeout: float, why: Callable[[], str] | None) -> str:
    return f"timed out after {timeout} s waiting for {what}" + (f"\n{why()}" if why is not None else "")


def closed_by_peer(sock: socket.socket, within: float) -> bool:
    """Whether the other end closes `sock` within `within` seconds (what it sends is skipped)."""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
    return False
