"""What the bucket keeps beside each CommitLog file: its queue units and its key index.

A CommitLog file goes to the bucket byte for byte. Its messages are found again through two small
objects made from it when it is uploaded (`index_segment`: the records are read in Rust,
`ferromq_store::segment_index`), so that the bucket answers alone once the local consume queues
and index files are gone:

- **queues**: for each queue of the file's messages, the runs of consecutive queue
  offsets it holds, each unit in the consume queue's own 20 bytes (CommitLog offset i64, size i32,
  tags code i64, big-endian). The object is `MAGIC`, a u32 length, a JSON header (the file's
  `start`, `end`, store-time range and runs `[topic, queue id, first offset, count, unit index]`),
  then the units.
- **keys**: `MAGIC`, then one entry per KEYS word and per UNIQ_KEY, `java_hash("topic#key")` (i32)
  and the CommitLog offset (i64), sorted by hash: a query by key looks at a few entries of each
  file and reads the records they name (hashes collide: the caller checks the record's keys).

Transaction halves and rollbacks are left out of the units, as the consume queues leave them out.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from pathlib import Path

import orjson

from ferromq import _store
from ferromq.tiered.bucket import QUEUES, Bucket

MAGIC = b"FMQTIER1"
UNIT = struct.Struct(">qiq")  # the consume queue's unit: CommitLog offset, size, tags code
KEY = struct.Struct(">iq")  # java_hash("topic#key"), CommitLog offset
_LEN = struct.Struct(">I")
_SUMMARY_PROBE = 64 * 1024  # the first bytes of a queues object: its header, most often whole


@dataclass(frozen=True)
class Run:
    """Consecutive queue offsets of one queue in one CommitLog file, and where their units are."""

    topic: str
    queue_id: int
    first: int
    count: int
    unit_index: int

    @property
    def end(self) -> int:
        return self.first + self.count


@dataclass(frozen=True)
class SegmentSummary:
    """The header of a file's queues object: what the broker keeps in memory per tiered file."""

    start: int
    end: int
    min_store_timestamp: int
    max_store_timestamp: int
    runs: tuple[Run, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "start": self.start,
            "end": self.end,
            "minStoreTimestamp": self.min_store_timestamp,
            "maxStoreTimestamp": self.max_store_timestamp,
            "runs": [[r.topic, r.queue_id, r.first, r.count, r.unit_index] for r in self.runs],
        }

    @classmethod
    def from_json(cls, d: dict[str, object]) -> SegmentSummary:
        runs = d["runs"]
        assert isinstance(runs, list)
        return cls(
            start=int(d["start"]),  # type: ignore[call-overload]
            end=int(d["end"]),  # type: ignore[call-overload]
            min_store_timestamp=int(d["minStoreTimestamp"]),  # type: ignore[call-overload]
            max_store_timestamp=int(d["maxStoreTimestamp"]),  # type: ignore[call-overload]
            runs=tuple(Run(str(t), int(q), int(f), int(c), int(u)) for t, q, f, c, u in runs),
        )


@dataclass
class IndexedSegment:
    """The two objects made from one CommitLog file, the summary of the first and its header's
    length."""

    summary: SegmentSummary
    header_length: int
    queues: bytes
    keys: bytes


def index_segment(path: Path, start: int) -> IndexedSegment:
    """Reads the CommitLog file at `path` (whose first byte is CommitLog offset `start`) and makes
    its queues and keys objects (the records are read in Rust: `_store.index_segment`)."""
    end, min_ts, max_ts, runs, units, keys = _store.index_segment(path, start)
    summary = SegmentSummary(start, end, min_ts, max_ts, tuple(Run(*r) for r in runs))
    header = orjson.dumps(summary.to_json())
    return IndexedSegment(
        summary=summary,
        header_length=len(header),
        queues=MAGIC + _LEN.pack(len(header)) + header + units,
        keys=MAGIC + keys,
    )


def read_summary(bucket: Bucket, start: int) -> tuple[SegmentSummary, int]:
    """The summary of a file in the bucket (its queues object's header) and the header's length."""
    head = bucket.read(QUEUES, start, 0, min(_SUMMARY_PROBE, bucket.size(QUEUES, start) or 0))
    n = header_length(head)
    if len(head) < units_position(n):
        head = bucket.read(QUEUES, start, 0, units_position(n))
    return parse_summary(head), n


def list_files(bucket: Bucket) -> list[tuple[SegmentSummary, int]]:
    """Every file the bucket holds (a queues object each: a file cut off before it is not there),
    in CommitLog order: its summary and its header's length."""
    return [read_summary(bucket, start) for start in bucket.starts(QUEUES)]


def header_length(prefix: bytes) -> int:
    """The length of a queues object's header, from its first 12 bytes."""
    if prefix[: len(MAGIC)] != MAGIC:
        raise ValueError("not a ferromq tiered queues object")
    return int(_LEN.unpack_from(prefix, len(MAGIC))[0])


def units_position(header_len: int) -> int:
    """Where the units of a queues object start."""
    return len(MAGIC) + _LEN.size + header_len


def parse_summary(head: bytes) -> SegmentSummary:
    """The summary of a queues object, from its first bytes (at least its header)."""
    n = header_length(head)
    start = len(MAGIC) + _LEN.size
    return SegmentSummary.from_json(orjson.loads(head[start : start + n]))


def parse_units(data: bytes) -> list[tuple[int, int, int]]:
    """(CommitLog offset, size, tags code) of each unit in `data`."""
    return [UNIT.unpack_from(data, i) for i in range(0, len(data) - len(data) % UNIT.size, UNIT.size)]


def lookup_keys(index: bytes, key_hash: int) -> list[int]:
    """The CommitLog offsets a keys object holds for `key_hash`."""
    if index[: len(MAGIC)] != MAGIC:
        raise ValueError("not a ferromq tiered keys object")
    body = memoryview(index)[len(MAGIC) :]
    n = len(body) // KEY.size
    hashes = _KeyHashes(body, n)
    at = bisect.bisect_left(hashes, key_hash)
    out: list[int] = []
    while at < n:
        h, phys = KEY.unpack_from(body, at * KEY.size)
        if h != key_hash:
            break
        out.append(phys)
        at += 1
    return out


class _KeyHashes:
    """The hashes of a keys object as a sequence, for bisect (nothing decoded up front)."""

    def __init__(self, body: memoryview, n: int) -> None:
        self._body, self._n = body, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> int:
        return int(KEY.unpack_from(self._body, i * KEY.size)[0])
