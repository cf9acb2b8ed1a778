"""Reading a broker's tiered storage: the bucket's files, found by queue offset, CommitLog
offset or key, through a bounded cache.

`TieredReader` holds what the bucket has (each file's summary: ferromq.tiered.segments) and reads
it: `read_queue` (a queue from an offset, as a pull reads), `read_record` (by CommitLog offset),
`query` (by key), a queue's first offset and earliest store time. Reads go through a cache of
1 MiB blocks of the bucket's objects (least recently used first out); a read of the bucket gives
up after READ_TIMEOUT_S, and once one failed, reads fail at once for UNREACHABLE_S, so a server
away does not hold the threads that read. The broker's `TieredService` is one (it also uploads);
the Spark source makes one per task from the bucket's listing (`TieredReader.listing`).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from ferromq import _store
from ferromq.protocol.codes import ResponseCode
from ferromq.tiered.bucket import COMMITLOG, KEYS, QUEUES, Bucket
from ferromq.tiered.segments import (
    UNIT,
    Run,
    SegmentSummary,
    list_files,
    lookup_keys,
    parse_units,
    units_position,
)

BLOCK_BYTES = 1024 * 1024
# Pops leave their offsets where they are while the bucket cannot be read, pulls are told to retry.
READ_TIMEOUT_S = 5.0
UNREACHABLE_S = 5.0


@dataclass(frozen=True)
class TieredRead:
    """A pull's answer read from the bucket, shaped as the store's `GetResult`."""

    status: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    message_count: int
    body: bytes
    queue_offsets: tuple[int, ...] = ()
    suggest_pulling_from_slave: bool = False

    def pull_code(self, request_offset: int) -> int:
        if self.status == "FOUND":
            return ResponseCode.SUCCESS
        return ResponseCode.PULL_RETRY_IMMEDIATELY  # NO_MATCHED_MESSAGE: the next offset is past them


@dataclass(frozen=True)
class _Segment:
    summary: SegmentSummary
    header_length: int


class NotCached(OSError):
    """A read that may not wait for the bucket found a block the cache does not hold."""


class BlockCache:
    """Blocks of the bucket's objects, least recently used out once `capacity` bytes are held."""

    def __init__(self, bucket: Bucket, capacity: int) -> None:
        self.bucket = bucket
        self.capacity = capacity
        self._blocks: OrderedDict[tuple[str, int, int], bytes] = OrderedDict()
        self._held = 0
        self._unreachable_until = 0.0
        self._sizes: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def read(self, kind: str, start: int, offset: int, length: int, cached_only: bool = False) -> bytes:
        """`length` bytes of an object from `offset`; with `cached_only`, NotCached rather than a
        request to the bucket."""
        out = bytearray()
        while length > 0:
            block = offset // BLOCK_BYTES
            data = self._block(kind, start, block, cached_only)
            at = offset - block * BLOCK_BYTES
            piece = data[at : at + length]
            if not piece:
                raise EOFError(f"the bucket's {kind} object {start} ends before offset {offset}")
            out += piece
            offset += len(piece)
            length -= len(piece)
        return bytes(out)

    def read_all(self, kind: str, start: int) -> bytes:
        """A whole object (through the cache)."""
        return self.read(kind, start, 0, self.size(kind, start))

    def size(self, kind: str, start: int) -> int:
        size = self._sizes.get((kind, start))
        if size is None:
            size = self.bucket.size(kind, start)
            if size is None:
                raise FileNotFoundError(f"the bucket has no {kind} object {start}")
            self._sizes[(kind, start)] = size  # objects never change
        return size

    def _block(self, kind: str, start: int, block: int, cached_only: bool = False) -> bytes:
        key = (kind, start, block)
        with self._lock:
            data = self._blocks.get(key)
            if data is not None:
                self._blocks.move_to_end(key)
                self.hits += 1
                return data
        if cached_only:
            raise NotCached(f"block {block} of the bucket's {kind} object {start} is not cached")
        self.misses += 1
        if time.monotonic() < self._unreachable_until:
            raise OSError("the tiered storage bucket could not be read moments ago")
        try:
            data = self._fetch(kind, start, block)
        except OSError:
            self._unreachable_until = time.monotonic() + UNREACHABLE_S
            raise
        with self._lock:
            if key not in self._blocks and len(data) <= self.capacity:
                self._blocks[key] = data
                self._held += len(data)
                while self._held > self.capacity:
                    _, old = self._blocks.popitem(last=False)
                    self._held -= len(old)
        return data

    def _fetch(self, kind: str, start: int, block: int) -> bytes:
        size = self.size(kind, start)
        at = block * BLOCK_BYTES
        return self.bucket.read(kind, start, at, max(0, min(BLOCK_BYTES, size - at)))

    def forget(self, start: int) -> None:
        with self._lock:
            for key in [k for k in self._blocks if k[1] == start]:
                self._held -= len(self._blocks.pop(key))
            for kind in (COMMITLOG, QUEUES, KEYS):
                self._sizes.pop((kind, start), None)


class TieredReader:
    """What the bucket holds of one broker, and reads of it (see the module's docstring)."""

    def __init__(self, bucket: Bucket, cache_bytes: int) -> None:
        self.bucket = bucket
        self.cache = BlockCache(bucket, cache_bytes)
        self._segments: dict[int, _Segment] = {}
        self._starts: list[int] = []
        # (topic, queue id) -> its runs in the bucket, ordered by first offset.
        self._queues: dict[tuple[str, int], list[tuple[int, Run, int]]] = {}
        self._lock = threading.Lock()

    @classmethod
    def listing(cls, bucket: Bucket, cache_bytes: int) -> TieredReader:
        """A reader of every file the bucket holds now (one small read of each)."""
        reader = cls(bucket, cache_bytes)
        for summary, header_length in list_files(bucket):
            reader.add(summary, header_length)
        return reader

    def add(self, summary: SegmentSummary, header_length: int) -> None:
        with self._lock:
            if summary.start in self._segments:
                return
            self._segments[summary.start] = _Segment(summary, header_length)
            bisect.insort(self._starts, summary.start)
            for run in summary.runs:
                runs = self._queues.setdefault((run.topic, run.queue_id), [])
                bisect.insort(runs, (run.first, run, summary.start), key=lambda r: r[0])

    def remove(self, start: int) -> None:
        with self._lock:
            segment = self._segments.pop(start, None)
            if segment is None:
                return
            self._starts.remove(start)
            for run in segment.summary.runs:
                key = (run.topic, run.queue_id)
                runs = [r for r in self._queues.get(key, []) if r[2] != start]
                if runs:
                    self._queues[key] = runs
                else:
                    self._queues.pop(key, None)
        self.cache.forget(start)

    def tiered_files(self) -> list[SegmentSummary]:
        with self._lock:
            return [self._segments[s].summary for s in self._starts]

    def min_offset(self, topic: str, queue_id: int) -> int | None:
        """The queue's first offset in the bucket, None when it has none there."""
        with self._lock:
            runs = self._queues.get((topic, queue_id))
            return runs[0][0] if runs else None

    def queue_min(self, topic: str, queue_id: int, local_min: int) -> int:
        """The queue's min offset, counting the bucket's messages."""
        tiered = self.min_offset(topic, queue_id)
        return local_min if tiered is None else min(tiered, local_min)

    def earliest_store_time(self, topic: str, queue_id: int) -> int | None:
        with self._lock:
            runs = self._queues.get((topic, queue_id))
            if not runs:
                return None
            run, start = runs[0][1], runs[0][2]
            segment = self._segments[start]
        units = self._units(segment, run, run.first, 1)
        if not units:
            return None
        record = self.read_record(units[0][0])
        return None if record is None else int(_store.decode_records(record)[0][9])

    def _find_run(self, topic: str, queue_id: int, offset: int) -> tuple[_Segment, Run] | None:
        with self._lock:
            runs = self._queues.get((topic, queue_id))
            if not runs:
                return None
            at = bisect.bisect_right(runs, offset, key=lambda r: r[0]) - 1
            if at < 0:
                return None
            _, run, start = runs[at]
            if offset >= run.end:
                return None
            return self._segments[start], run

    def _units(
        self, segment: _Segment, run: Run, offset: int, count: int, cached_only: bool = False
    ) -> list[tuple[int, int, int]]:
        count = min(count, run.end - offset)
        position = units_position(segment.header_length) + (run.unit_index + offset - run.first) * UNIT.size
        data = self.cache.read(QUEUES, segment.summary.start, position, count * UNIT.size, cached_only)
        return parse_units(data)

    def covers(self, topic: str, queue_id: int, offset: int) -> bool:
        return self._find_run(topic, queue_id, offset) is not None

    def read_queue(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        tag_codes: list[int] | None,
        local_max: int,
        max_bytes: int = 4 * 1024 * 1024,
        cached_only: bool = False,
    ) -> TieredRead | None:
        """Up to `max_msgs` records of the queue from `offset`, within one file of the bucket; None
        when the bucket does not hold `offset`. With `cached_only`, NotCached rather than a request
        to the bucket (a caller that must not wait)."""
        found = self._find_run(topic, queue_id, offset)
        if found is None:
            return None
        segment, run = found
        units = self._units(segment, run, offset, max(1, max_msgs), cached_only)
        codes = None if tag_codes is None else set(tag_codes)
        body = bytearray()
        queue_offsets: list[int] = []
        scanned = 0
        for phys, size, code in units:
            if queue_offsets and len(body) + size > max_bytes:
                break
            scanned += 1
            if codes is not None and _as_int32(code) not in codes:
                continue
            body += self._read_at(segment.summary.start, phys, size, cached_only)
            queue_offsets.append(offset + scanned - 1)
        count = len(queue_offsets)
        tiered_min = self.min_offset(topic, queue_id)
        return TieredRead(
            status="FOUND" if count else "NO_MATCHED_MESSAGE",
            next_begin_offset=offset + scanned,
            min_offset=offset if tiered_min is None else tiered_min,
            max_offset=local_max,
            message_count=count,
            body=bytes(body),
            queue_offsets=tuple(queue_offsets),
        )

    def pop_read(
        self, topic: str, queue_id: int, offset: int, max_count: int, tag_codes: list[int] | None
    ) -> tuple[bool, bytes, list[int], int, int] | None:
        """A pop's read below the queue's local min (the Rust pop rules call it, see
        `_store._PopColdReader`): (found, records, their queue offsets, next offset, min offset),
        None when the bucket does not hold `offset`; raises when the bucket cannot be read."""
        read = self.read_queue(topic, queue_id, offset, max_count, tag_codes, offset + max_count)
        if read is None:
            return None
        return (
            read.status == "FOUND",
            read.body,
            list(read.queue_offsets),
            read.next_begin_offset,
            read.min_offset,
        )

    def _read_at(self, start: int, phys: int, size: int, cached_only: bool = False) -> bytes:
        return self.cache.read(COMMITLOG, start, phys - start, size, cached_only)

    def _file_of(self, phys: int) -> int | None:
        with self._lock:
            at = bisect.bisect_right(self._starts, phys) - 1
            if at < 0:
                return None
            start = self._starts[at]
            return start if phys < self._segments[start].summary.end else None

    def read_record(self, phys: int) -> bytes | None:
        """The record at a CommitLog offset the bucket holds, None when it holds none there."""
        start = self._file_of(phys)
        if start is None:
            return None
        size = int.from_bytes(self._read_at(start, phys, 4), "big", signed=True)
        if size <= 0:
            return None
        return self._read_at(start, phys, size)

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[bytes]:
        """Records of `topic` with `key` (a KEYS word or the UNIQ_KEY) stored in [begin, end], from
        the files of the bucket that hold that time (newest first), at most `max_num`."""
        key_hash = _store.java_hash(f"{topic}#{key}")
        out: list[bytes] = []
        for summary in reversed(self.tiered_files()):
            if summary.max_store_timestamp < begin or summary.min_store_timestamp > end:
                continue
            index = self.cache.read_all(KEYS, summary.start)
            for phys in lookup_keys(index, key_hash):
                record = self.read_record(phys)
                if record is not None and _has_key(record, topic, key, begin, end):
                    out.append(record)
                    if len(out) >= max_num:
                        return out
        return out


def _has_key(record: bytes, topic: str, key: str, begin: int, end: int) -> bool:
    """Whether a record is of `topic`, stored in [begin, end], with `key` as a KEYS word or its
    UNIQ_KEY (the key index's hashes collide)."""
    fields = _store.decode_records(record)[0]
    stored_topic, store_timestamp, properties = fields[0], fields[9], fields[13]
    if stored_topic != topic or not begin <= store_timestamp <= end:
        return False
    props = _store.decode_properties(properties)
    return key in (props.get("KEYS") or "").split(" ") or props.get("UNIQ_KEY") == key


def _as_int32(code: int) -> int:
    code &= 0xFFFFFFFF
    return code - (1 << 32) if code & 0x80000000 else code
