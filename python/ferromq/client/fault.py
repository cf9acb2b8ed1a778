"""Latency fault tolerance (RocketMQ's `sendLatencyFaultEnable`): after a slow or failed send,
a broker is avoided for a while that grows with the latency."""

from __future__ import annotations

import time

# Latency thresholds (ms) and how long a broker is avoided after a send that slow (ms).
LATENCY_MAX = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_FOR = (0, 0, 30000, 60000, 120000, 180000, 600000)
# A failed send counts as this slow.
FAILURE_LATENCY = 30000


class LatencyFaultTolerance:
    def __init__(self, clock: object = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[str, float] = {}

    def _now(self) -> float:
        return float(self._clock())  # type: ignore[operator]

    def update(self, broker: str, latency_ms: float, failed: bool = False) -> None:
        latency = FAILURE_LATENCY if failed else latency_ms
        avoid = 0
        for limit, duration in zip(reversed(LATENCY_MAX), reversed(NOT_AVAILABLE_FOR), strict=True):
            if latency >= limit:
                avoid = duration
                break
        if avoid:
            self._until[broker] = self._now() + avoid / 1000.0
        else:
            self._until.pop(broker, None)

    def available(self, broker: str) -> bool:
        until = self._until.get(broker)
        return until is None or self._now() >= until
