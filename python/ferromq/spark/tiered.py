"""Local mode over a broker's tiered storage: the offsets retention deleted locally, read from the
bucket the broker uploaded its sealed CommitLog files to (`ferromq.tiered`, RIP-57).

On the driver, `TieredQueues` lists the bucket (one small read of each file's queues object): a
queue's min offset is the bucket's first offset when that is lower than the local one, and each
planned range carries the summaries of the bucket's files that hold its offsets, cut to its queue
(`QueueRange.tiered`). A task reads the offsets below the local min offset (as it finds it when it
runs) from the bucket with a `TieredReader` made of those summaries: the stored records, byte for
byte, decoded by the same Rust decoder and `RowFilter` as remote mode's pulled bytes, into the
columns the local reader gives. The rest of the range is read from the local files.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import posixpath
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from ferromq import _store
from ferromq.errors import InvalidArgumentError
from ferromq.spark.dataloss import report_loss
from ferromq.spark.options import TieredOptions
from ferromq.spark.planning import QueueRange
from ferromq.spark.schema import record_batch
from ferromq.tiered.bucket import Bucket
from ferromq.tiered.reader import TieredReader
from ferromq.tiered.segments import SegmentSummary, list_files

__all__ = ["TieredQueues", "TieredReader", "read_bucket", "tiered_reader"]

# A task's cache of the bucket's 1 MiB blocks: reads go forward, a few blocks are enough.
CACHE_BYTES = 8 * 1024 * 1024
REQUEST_TIMEOUT_S = 30.0

Segments = tuple[tuple[SegmentSummary, int], ...]


def _bad(msg: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"ferromq data source: {msg}")


def open_bucket(t: TieredOptions) -> Bucket:
    """The broker's part of the bucket (never creates a directory: a read must not)."""
    if t.provider == "posix" and "://" not in t.uri and not os.path.isdir(t.uri):
        raise _bad(f"tieredStoreFilePath {t.uri!r} is not a directory")
    broker = t.broker if t.broker is not None else _only_broker(t)
    return Bucket(t.uri, t.cluster, broker, dict(t.s3_options), request_timeout=REQUEST_TIMEOUT_S)


def _only_broker(t: TieredOptions) -> str:
    """The broker whose files the bucket holds under the cluster, when there is exactly one."""
    probe = Bucket(t.uri, t.cluster, "", dict(t.s3_options), request_timeout=REQUEST_TIMEOUT_S)
    selector = pafs.FileSelector(probe.root.rstrip("/"), allow_not_found=True)
    names = sorted(
        posixpath.basename(i.path)
        for i in probe.fs.get_file_info(selector)
        if i.type == pafs.FileType.Directory
    )
    if len(names) != 1:
        found = ", ".join(names) if names else "none"
        raise _bad(
            f"set brokerName: the bucket {t.uri!r} has {len(names)} brokers of {t.cluster!r} ({found})"
        )
    return str(names[0])


def reader_of(bucket: Bucket, segments: Iterable[tuple[SegmentSummary, int]]) -> TieredReader:
    """A reader of these files; the summaries of one file cut to different queues (the ranges of
    a task) are put back together."""
    merged: dict[int, tuple[SegmentSummary, int]] = {}
    for summary, header_length in segments:
        held = merged.get(summary.start)
        if held is not None:
            runs = held[0].runs + tuple(r for r in summary.runs if r not in held[0].runs)
            summary = dataclasses.replace(held[0], runs=runs)
        merged[summary.start] = (summary, header_length)
    reader = TieredReader(bucket, CACHE_BYTES)
    for start in sorted(merged):
        reader.add(*merged[start])
    return reader


class TieredQueues:
    """What the bucket holds, per queue (used on the driver)."""

    def __init__(self, t: TieredOptions) -> None:
        self.bucket = open_bucket(t)
        self.segments = list_files(self.bucket)
        self.reader = reader_of(self.bucket, self.segments)
        self.bounds: dict[tuple[str, int], tuple[int, int]] = {}
        for summary, _ in self.segments:
            for run in summary.runs:
                key = (run.topic, run.queue_id)
                lo, hi = self.bounds.get(key, (run.first, run.end))
                self.bounds[key] = (min(lo, run.first), max(hi, run.end))

    def segments_of(self, topic: str, queue_id: int, start: int, end: int) -> Segments:
        """The files that hold offsets of `[start, end)` of the queue, cut to its runs."""
        out = []
        for summary, header_length in self.segments:
            runs = tuple(
                r
                for r in summary.runs
                if r.topic == topic and r.queue_id == queue_id and r.first < end and start < r.end
            )
            if runs:
                out.append((dataclasses.replace(summary, runs=runs), header_length))
        return tuple(out)

    def store_time(self, topic: str, queue_id: int, offset: int) -> int | None:
        read = self.reader.read_queue(topic, queue_id, offset, 1, None, offset + 1)
        if read is None or not read.body:
            return None
        return int(_store.decode_records(read.body)[0][9])

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int, below: int) -> int | None:
        """The first offset under `below` the bucket holds stored at or after the time (a binary
        search over its records' store times, as the consume queue's), None when there is none."""
        lo, hi = self.bounds.get((topic, queue_id), (0, 0))
        hi = min(hi, below)
        first, last = lo, hi
        while first < last:
            mid = (first + last) // 2
            t = self.store_time(topic, queue_id, mid)
            if t is not None and t >= timestamp_ms:
                last = mid
            else:
                first = mid + 1
        return first if first < hi else None


def read_bucket(
    fail_on_data_loss: bool,
    reader: TieredReader,
    part: QueueRange,
    stop: int,
    schema: pa.Schema,
    rows: _store.RowFilter,
    codes: list[int] | None,
    batch_rows: int,
    batch_bytes: int,
) -> Iterator[pa.RecordBatch]:
    """The rows of offsets `[part.start, stop)` of the range, read from the bucket."""
    runs = sorted(
        (r.first, r.end)
        for s, _ in part.tiered
        for r in s.runs
        if (r.topic, r.queue_id) == (part.topic, part.queue_id)
    )
    firsts = [first for first, _ in runs]
    pending = bytearray()
    count = 0
    offset = part.start
    while offset < stop:
        got = reader.read_queue(
            part.topic, part.queue_id, offset, min(batch_rows, stop - offset), codes, stop
        )
        if got is None or got.next_begin_offset <= offset:
            # Not in the bucket (expired there since planning, or never uploaded): skip to the
            # next offset it holds.
            at = bisect.bisect_right(firsts, offset)
            reached = min(firsts[at], stop) if at < len(firsts) else stop
            report_loss(
                fail_on_data_loss,
                part.topic,
                part.queue_id,
                offset,
                reached,
                "neither the local store nor the tiered storage bucket holds them",
            )
            offset = reached
            continue
        pending += got.body
        count += got.message_count
        offset = got.next_begin_offset
        if len(pending) >= batch_bytes or count >= batch_rows:
            yield record_batch(_store.decode_columns(bytes(pending), rows), schema)
            pending.clear()
            count = 0
    if pending:
        yield record_batch(_store.decode_columns(bytes(pending), rows), schema)


def tiered_reader(t: TieredOptions, parts: Sequence[QueueRange]) -> TieredReader:
    """A task's reader of the bucket: of the summaries its ranges carry, or (none given) of the
    bucket's listing."""
    bucket = open_bucket(t)
    if parts:
        return reader_of(bucket, (s for p in parts for s in p.tiered))
    return reader_of(bucket, list_files(bucket))
