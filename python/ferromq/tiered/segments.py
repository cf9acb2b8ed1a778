"""What the bucket keeps beside each CommitLog file: its queue units and its key index.

A CommitLog file goes to the bucket byte for byte. Its messages are found again through two small
objects made from it when it is uploaded (`index_segment`), so that the bucket answers alone once
the local consume queues and index files are gone:

- **queues** (`QueueUnits`): for each queue of the file's messages, the runs of consecutive queue
  offsets it holds, each unit in the consume queue's own 20 bytes (CommitLog offset i64, size i32,
  tags code i64, big-endian). The object is `MAGIC`, a u32 length, a JSON header (the file's
  `start`, `end`, store-time range and runs `[topic, queue id, first offset, count, unit index]`),
  then the units.
- **keys** (`KeyIndex`): one entry per KEYS word and per UNIQ_KEY, `java_hash("topic#key")` (i32)
  and the CommitLog offset (i64), sorted by hash: a query by key looks at a few entries of each
  file and reads the records they name (hashes collide: the caller checks the record's keys).

Transaction halves and rollbacks are left out of the units, as the consume queues leave them out.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import orjson
import pyarrow as pa

from ferromq import _store
from ferromq.arrow_columns import record_batch

MAGIC = b"FMQTIER1"
UNIT = struct.Struct(">qiq")  # the consume queue's unit: CommitLog offset, size, tags code
KEY = struct.Struct(">iq")  # java_hash("topic#key"), CommitLog offset
_LEN = struct.Struct(">I")
_RECORD_HEAD = struct.Struct(">ii")  # total size, magic code
_BLANK_MAGIC = -875286124  # 0xCBD43194: the filler at the end of a CommitLog file
_TRANSACTION_TYPE = 0xC  # sys flag bits: 0x4 prepared, 0xC rollback
_READ_CHUNK = 16 * 1024 * 1024

_COLUMNS = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("queue_id", pa.int32()),
        pa.field("queue_offset", pa.int64()),
        pa.field("commitlog_offset", pa.int64()),
        pa.field("sys_flag", pa.int32()),
        pa.field("store_timestamp", pa.int64()),
        pa.field("tags", pa.string()),
        pa.field("keys", pa.string()),
        pa.field("uniq_key", pa.string()),
    ]
)
_NO_BODIES = _store.RowFilter(include_properties=False, body_views=True)


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
    """The two objects made from one CommitLog file, and the summary of the first."""

    summary: SegmentSummary
    queues: bytes
    keys: bytes


def _whole_records(buf: bytes | bytearray) -> tuple[int, bool]:
    """(length of the whole records at the start of buf, whether the file's filler was reached)."""
    at, n = 0, len(buf)
    while at + 8 <= n:
        size, magic = _RECORD_HEAD.unpack_from(buf, at)
        if magic == _BLANK_MAGIC or size <= 0:
            return at, True
        if at + size > n:
            break
        at += size
    return at, False


def _records(f: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(position in the file, whole records) of a CommitLog file, read in chunks, up to its filler
    or its end."""
    pos = 0
    carry = b""
    while True:
        chunk = f.read(_READ_CHUNK)
        buf = carry + chunk
        if not buf:
            return
        whole, done = _whole_records(buf)
        if whole:
            yield pos, bytes(buf[:whole])
        pos += whole
        carry = buf[whole:]
        if done or not chunk:
            return


def index_segment(path: Path, start: int) -> IndexedSegment:
    """Reads the CommitLog file at `path` (whose first byte is CommitLog offset `start`) and makes
    its queues and keys objects."""
    units: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    keys: list[tuple[int, int]] = []
    end = start
    min_ts, max_ts = -1, -1
    with open(path, "rb") as f:
        for pos, buf in _records(f):
            cols = _store.decode_columns(buf, _NO_BODIES)
            rows = record_batch(cols, _COLUMNS).to_pydict()
            offsets = rows["commitlog_offset"]
            n = len(offsets)
            chunk_end = start + pos + len(buf)
            for i in range(n):
                phys = offsets[i]
                size = (offsets[i + 1] if i + 1 < n else chunk_end) - phys
                topic = rows["topic"][i]
                ts = rows["store_timestamp"][i]
                min_ts = ts if min_ts < 0 else min(min_ts, ts)
                max_ts = max(max_ts, ts)
                tags = rows["tags"][i]
                if rows["sys_flag"][i] & _TRANSACTION_TYPE not in (0x4, 0xC):
                    units.setdefault((topic, rows["queue_id"][i]), []).append(
                        (rows["queue_offset"][i], phys, size, _store.tags_code(tags) if tags else 0)
                    )
                words = (rows["keys"][i] or "").split(" ")
                for key in [*words, rows["uniq_key"][i] or ""]:
                    if key:
                        keys.append((_store.java_hash(f"{topic}#{key}"), phys))
            end = chunk_end
    runs: list[Run] = []
    blob = bytearray()
    for (topic, queue_id), entries in sorted(units.items()):
        entries.sort()
        first = 0
        for i, (offset, phys, size, code) in enumerate(entries):
            # A gap in the queue's offsets (never seen in one file, but not assumed) starts a run.
            if i + 1 == len(entries) or entries[i + 1][0] != offset + 1:
                begin = len(blob) // UNIT.size - (i - first)
                runs.append(Run(topic, queue_id, entries[first][0], i + 1 - first, begin))
                first = i + 1
            blob += UNIT.pack(phys, size, code)
    summary = SegmentSummary(start, end, min_ts, max_ts, tuple(runs))
    header = orjson.dumps(summary.to_json())
    keys.sort()
    return IndexedSegment(
        summary=summary,
        queues=MAGIC + _LEN.pack(len(header)) + header + bytes(blob),
        keys=MAGIC + b"".join(KEY.pack(h, o) for h, o in keys),
    )


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
