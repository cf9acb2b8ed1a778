"""The one way tests wait: for a condition, bounded, never for a fixed time. The helpers are
ferromq.testing's (`ferromq/testing/waiting.py`), which its brokers use too: `until` (async) and
`wait_until` (sync) return what `check` returned, or raise `WaitTimeout`, an AssertionError."""

from ferromq.testing.waiting import TIMEOUT, WaitTimeout, until, wait_until

__all__ = ["TIMEOUT", "WaitTimeout", "until", "wait_until"]
