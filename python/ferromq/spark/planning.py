"""Partitions of a read: (topic, queue, offset range) slices, planned on the driver.

A Spark task receives a `ReadTask`: one or more `QueueRange`s read one after the other. `split`
cuts ranges to at most `maxRecordsPerPartition` offsets, one task each; without that option
`pack` puts small ranges together, because a Spark task costs far more than reading a few
thousand records (50-150 ms of scheduling and Python worker round trips on a loaded 2-core
machine): a selective query pruned down to a tenth of eight queues runs as one task, not eight.
A read expected to yield enough rows to keep every core busy (`MIN_TASK_ROWS` a core) is
`spread` over at least as many tasks as the machine has cores, each reading a slice of every
range, so that the tasks run side by side.

A local-mode read with a tiered storage bucket (`ferromq.spark.tiered`) plans a queue from the
bucket's first offset: its ranges carry the summaries of the bucket's files that hold them
(`QueueRange.tiered`), and their tasks read below the local min offset from the bucket.

A stream from a topic's table (`ferromq.spark.tablestream`) plans some ranges on the table: such
a range carries the table version's files of its queue (`QueueRange.table`), and its task reads
them instead of the log.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

if TYPE_CHECKING:
    # Not at run time: every task's Python worker imports this module, few read a table.
    from ferromq.tables.ranges import QueueFiles
    from ferromq.tiered.segments import SegmentSummary


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
    table: QueueFiles | None = None  # read from these table files, not from the log
    # Local mode with a tiered storage bucket: the bucket's files that hold offsets of the range
    # (each summary cut to this queue's runs, with its header's length; see ferromq.spark.tiered).
    tiered: tuple[tuple[SegmentSummary, int], ...] = ()


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
            out.append(replace(r, start=lo, end=min(lo + step, r.end)))
    return out


# A read expected to yield at least this many rows per core runs on every core (a task of them
# decodes and converts for about 0.1 s, more than a task's fixed cost).
MIN_TASK_ROWS = 16384

Sized = tuple[QueueRange, int]  # a range and the rows a read of it is expected to yield


def pack(sized: Sequence[Sized], limit: int = PACK_ROWS) -> list[ReadTask]:
    """Tasks of consecutive ranges whose expected rows add up to at most `limit`; a range
    expected to yield more is a task of its own."""
    tasks: list[ReadTask] = []
    group: list[QueueRange] = []
    total = 0
    for r, n in sized:
        if group and total + n > limit:
            tasks.append(ReadTask(tuple(group)))
            group, total = [], 0
        group.append(r)
        total += n
    if group:
        tasks.append(ReadTask(tuple(group)))
    return tasks


def spread(sized: Sequence[Sized], tasks: int) -> list[ReadTask]:
    """`tasks` tasks, task j reading the j-th of `tasks` equal offset slices of every range: the
    tasks share the rows evenly (a range's rows taken as spread evenly over its offsets), and as a
    queue's offsets follow store time, each task reads about one stretch of the CommitLog instead
    of every task mapping all of it (a fresh mapping pays a page fault per 64 KiB it touches)."""
    groups: list[list[QueueRange]] = [[] for _ in range(tasks)]
    for r, _ in sized:
        cuts = [r.start + (r.end - r.start) * j // tasks for j in range(tasks + 1)]
        for j in range(tasks):
            if cuts[j] < cuts[j + 1]:
                groups[j].append(replace(r, start=cuts[j], end=cuts[j + 1]))
    return [ReadTask(tuple(g)) for g in groups if g]


def plan(
    ranges: Iterable[QueueRange],
    max_records: int | None,
    rows: Callable[[QueueRange], int],
    cores: int | None = None,
) -> list[ReadTask]:
    """The tasks of a read: one per piece of `maxRecordsPerPartition` offsets when that is set,
    else the ranges packed by their expected rows (`rows(r)`; ranges expected to yield nothing
    are left out), spread over the `cores` (default: this machine's) when the read is large
    enough; never none."""
    pieces = split(ranges, max_records)
    if max_records:
        return [ReadTask((r,)) for r in pieces] or [NOTHING]
    sized = [(r, n) for r in pieces if (n := rows(r)) > 0]
    tasks = pack(sized)
    wanted = min(cores or os.cpu_count() or 1, sum(n for _, n in sized) // MIN_TASK_ROWS)
    if len(tasks) < wanted:
        tasks = spread(sized, wanted)
    return tasks or [NOTHING]


def offsets_json(bounds: Iterable[tuple[str, int, int]]) -> dict[str, dict[str, int]]:
    """`{topic: {"queue id": offset}}`, the form streaming offsets take in checkpoints."""
    out: dict[str, dict[str, int]] = {}
    for topic, queue_id, offset in sorted(bounds):
        out.setdefault(topic, {})[str(queue_id)] = offset
    return out
