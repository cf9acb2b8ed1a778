"""Partitions of a read: (topic, queue, offset range) slices, planned on the driver.

A Spark task receives a `ReadTask`: one or more `QueueRange`s read one after the other. `split`
cuts ranges to at most `maxRecordsPerPartition` offsets, one task each; without that option
`pack` puts small ranges together, because a Spark task costs far more than reading a few
thousand records (50-150 ms of scheduling and Python worker round trips on a loaded 2-core
machine): a selective query pruned down to a tenth of eight queues runs as one task, not eight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
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


# Ranges expected to yield fewer rows than this are packed together into one task (about one
# Arrow batch of rows: enough work to outweigh a task's fixed cost).
PACK_ROWS = 65536


@dataclass(frozen=True)
class QueueRange:
    """Offsets `[start, end)` of one queue."""

    topic: str
    queue_id: int
    start: int
    end: int
    broker_addr: str | None = None


@dataclass
class ReadTask(InputPartition):
    """One Spark task: its queue ranges, read in order."""

    ranges: tuple[QueueRange, ...]

    def __post_init__(self) -> None:
        self.value = self.ranges


NOTHING = ReadTask(())  # Spark needs at least one partition


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


def pack(
    ranges: Sequence[QueueRange], rows: Callable[[QueueRange], int], limit: int = PACK_ROWS
) -> list[ReadTask]:
    """Tasks of consecutive ranges whose expected rows (`rows(r)`) add up to at most `limit`; a
    range expected to yield more is a task of its own. Ranges expected to yield nothing are left
    out: a read of them would return no row."""
    tasks: list[ReadTask] = []
    group: list[QueueRange] = []
    total = 0
    for r in ranges:
        n = rows(r)
        if n <= 0:
            continue
        if group and total + n > limit:
            tasks.append(ReadTask(tuple(group)))
            group, total = [], 0
        group.append(r)
        total += n
    if group:
        tasks.append(ReadTask(tuple(group)))
    return tasks


def plan(
    ranges: Iterable[QueueRange], max_records: int | None, rows: Callable[[QueueRange], int]
) -> list[ReadTask]:
    """The tasks of a read: one per piece of `maxRecordsPerPartition` offsets when that is set,
    else the ranges packed by their expected rows; never none."""
    pieces = split(ranges, max_records)
    tasks = [ReadTask((r,)) for r in pieces] if max_records else pack(pieces, rows)
    return tasks or [NOTHING]


def offsets_json(bounds: Iterable[tuple[str, int, int]]) -> dict[str, dict[str, int]]:
    """`{topic: {"queue id": offset}}`, the form streaming offsets take in checkpoints."""
    out: dict[str, dict[str, int]] = {}
    for topic, queue_id, offset in sorted(bounds):
        out.setdefault(topic, {})[str(queue_id)] = offset
    return out
