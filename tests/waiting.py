"""The one way tests wait: for a condition, bounded, never for a fixed time."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

TIMEOUT = 20.0


async def until(check: Callable[[], Any], what: str = "condition", timeout: float = TIMEOUT) -> Any:
    """Polls `check` (a function, or a coroutine function) until it returns something true, and
    returns that; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


def wait_until(check: Callable[[], Any], what: str = "condition", timeout: float = TIMEOUT) -> Any:
    """`until` for code without an event loop (processes, files)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
