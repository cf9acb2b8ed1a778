"""The one way tests wait: for a condition, bounded, never for a fixed time."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

TIMEOUT = 20.0


async def until(
    check: Callable[[], Any],
    what: str = "condition",
    timeout: float = TIMEOUT,
    why: Callable[[], str] | None = None,
    interval: float = 0.02,
) -> Any:
    """Polls `check` (a function, or a coroutine function) every `interval` seconds until it
    returns something true, and returns that; AssertionError naming `what` (and what `why`
    says) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(what, timeout, why))
        await asyncio.sleep(interval)


def wait_until(
    check: Callable[[], Any],
    what: str = "condition",
    timeout: float = TIMEOUT,
    why: Callable[[], str] | None = None,
    interval: float = 0.05,
) -> Any:
    """`until` for code without an event loop (processes, files)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(what, timeout, why))
        time.sleep(interval)


def _timed_out(what: str, timeout: float, why: Callable[[], str] | None) -> str:
    return f"timed out after {timeout} s waiting for {what}" + (f"\n{why()}" if why is not None else "")
