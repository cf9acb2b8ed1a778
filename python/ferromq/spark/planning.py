"""Partitions of a read: (topic, queue, offset range) slices, planned on the driver.

`QueueRange` is what a Spark task receives; `plan` turns resolved per-queue ranges into tasks of at
most `maxRecordsPerPartition` offsets each.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition


@dataclass(frozen=True)
class QueueBounds:
    """What a queue holds now: offsets `[min_offset, max_offset)`."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    broker_name: str | None = None  # remote mode: the broker serving the queue
    broker_addr: str | None = None  # remote mode: its master's address


@dataclass
class QueueRange(InputPartition):
    """One task: offsets `[start, end)` of one queue."""

    topic: str
    queue_id: int
    start: int
    end: int
    broker_addr: str | None = None

    def __post_init__(self) -> None:
        self.value = (self.topic, self.queue_id, self.start, self.end)


def split(ranges: Iterable[QueueRange], max_records: int | None) -> list[QueueRange]:
    """Cuts each non-empty range into pieces of at most `max_records` offsets."""
    out: list[QueueRange] = []
    for r in ranges:
        if r.end <= r.start:
            continue
        step = max_records or (r.end - r.start)
        for lo in range(r.start, r.end, step):
            out.append(QueueRange(r.topic, r.queue_id, lo, min(lo + step, r.end), r.broker_addr))
    return out


def offsets_json(bounds: Iterable[tuple[str, int, int]]) -> dict[str, dict[str, int]]:
    """`{topic: {"queue id": offset}}`, the form streaming offsets take in checkpoints."""
    out: dict[str, dict[str, int]] = {}
    for topic, queue_id, offset in sorted(bounds):
        out.setdefault(topic, {})[str(queue_id)] = offset
    return out
