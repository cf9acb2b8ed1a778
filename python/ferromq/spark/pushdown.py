"""Filter pushdown for batch reads (Spark 4.1+): on when the read's `filterPushdown` option and
Spark's `spark.sql.python.filterPushdown.enabled` are both true.

Spark hands `pushFilters` the conjuncts of a query's WHERE clause it can express; `push` turns the
ones over these columns into a `Selection` and returns the others to Spark:

- `topic`, `queue_id` (=, IN; ranges on `queue_id`): only the matching queues are planned;
- `queue_offset` (=, ranges): the planned offset ranges are cut to them;
- `store_timestamp` (=, ranges): the planned offset ranges are cut on the driver to the offsets
  the consume queue's time search finds (a binary search over its units by their records' store
  time, as RocketMQ's getOffsetInQueueByTime), then checked exactly per record;
- `tags` (=, IN): units whose tag code (the tag's String.hashCode, kept in the consume queue's
  20-byte unit) is none of the wanted tags' are skipped without reading their CommitLog record;
  the decoder then checks the tag itself (codes collide);
- `commitlog_offset`, `born_timestamp` (=, ranges), `keys` (=, IN): checked per record by the
  Rust decoder before a row is built.

Tasks are planned by the records they are expected to decode (see `ferromq.spark.planning.pack`),
so a query pruned to a few thousand records runs as one task.

A filter is kept from Spark only when the read applies it exactly. IN lists over the numeric
columns narrow the read to their smallest and largest values and go back to Spark too.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from ferromq import _store
from ferromq.spark.options import ReadOptions

logger = logging.getLogger("ferromq.spark")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SET_COLUMNS = frozenset({"topic", "tags", "keys"})
_INT_COLUMNS = frozenset({"queue_id", "queue_offset", "commitlog_offset"})
_TIME_COLUMNS = frozenset({"store_timestamp", "born_timestamp"})


@dataclass(frozen=True)
class Range:
    """`[lo, hi)`, either side open when None."""

    lo: int | None = None
    hi: int | None = None

    def cut(self, lo: int | None, hi: int | None) -> Range:
        new_lo = lo if self.lo is None else (self.lo if lo is None else max(self.lo, lo))
        new_hi = hi if self.hi is None else (self.hi if hi is None else min(self.hi, hi))
        return Range(new_lo, new_hi)

    @property
    def empty(self) -> bool:
        return self.lo is not None and self.hi is not None and self.lo >= self.hi

    def __contains__(self, value: int) -> bool:
        return (self.lo is None or value >= self.lo) and (self.hi is None or value < self.hi)


@dataclass(frozen=True)
class Selection:
    """What pushed filters (and the tag and time options) ask of a read. Times are in ms."""

    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    queue_id: Range = Range()
    queue_offset: Range = Range()
    commitlog_offset: Range = Range()
    store_ms: Range = Range()
    born_ms: Range = Range()
    tags: frozenset[str] | None = None
    keys: frozenset[str] | None = None

    @property
    def empty(self) -> bool:
        """Contradictory filters: no row can match."""
        sets = (self.topics, self.queue_ids, self.tags, self.keys)
        ranges = (self.queue_id, self.queue_offset, self.commitlog_offset, self.store_ms, self.born_ms)
        return any(s is not None and not s for s in sets) or any(r.empty for r in ranges)

    def wants(self, topic: str, queue_id: int) -> bool:
        return (
            (self.topics is None or topic in self.topics)
            and (self.queue_ids is None or queue_id in self.queue_ids)
            and queue_id in self.queue_id
        )

    def row_filter(self, opts: ReadOptions, *, filter_time: bool) -> _store.RowFilter:
        """The per-record checks for the Rust decoder: these, plus the `tags` option and (for
        batch reads) `startingTimestamp` / `endingTimestamp`."""
        store_ms = self.store_range(opts, filter_time=filter_time)
        tags = self.tag_list(opts)
        return _store.RowFilter(
            tags=tags,
            keys=None if self.keys is None else sorted(self.keys),
            min_store_timestamp=store_ms.lo,
            max_store_timestamp=store_ms.hi,
            min_born_timestamp=self.born_ms.lo,
            max_born_timestamp=self.born_ms.hi,
            min_commitlog_offset=self.commitlog_offset.lo,
            max_commitlog_offset=self.commitlog_offset.hi,
            include_properties=opts.include_properties,
        )

    def store_range(self, opts: ReadOptions, *, filter_time: bool) -> Range:
        """The store times (ms) a row may have: the pushed ones', within the options' for batch
        reads (`filter_time`)."""
        if filter_time:
            return self.store_ms.cut(opts.starting_timestamp, opts.ending_timestamp)
        return self.store_ms

    def tag_list(self, opts: ReadOptions) -> list[str] | None:
        """The tags a row may have: the `tags` option's and the pushed ones', or None for any."""
        tags = self.tags
        if opts.tags is not None:
            tags = frozenset(opts.tags) if tags is None else tags & frozenset(opts.tags)
        return None if tags is None else sorted(tags)

    def describe(self) -> str:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return ", ".join(f"{k}={v}" for k, v in fields.items() if v is not None and v != Range())


NO_FILTER = Selection()


def _micros(value: datetime) -> int:
    if value.tzinfo is None:  # Spark hands timestamps as UTC
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // timedelta(microseconds=1)


def _time_bounds(f: Filter, micros: int) -> tuple[int | None, int | None]:
    """[lo, hi) in the stored ms for a comparison with a Spark timestamp in µs (rows hold ms * 1000)."""
    floor, ceil = micros // 1000, -(-micros // 1000)
    if isinstance(f, GreaterThan):
        return floor + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return ceil, None
    if isinstance(f, LessThan):
        return None, ceil
    if isinstance(f, LessThanOrEqual):
        return None, floor + 1
    return ceil, floor + 1  # EqualTo


def _int_bounds(f: Filter, value: int) -> tuple[int | None, int | None]:
    if isinstance(f, GreaterThan):
        return value + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return value, None
    if isinstance(f, LessThan):
        return None, value
    if isinstance(f, LessThanOrEqual):
        return None, value + 1
    return value, value + 1  # EqualTo


_COMPARISONS = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
_RANGE_FIELDS = {
    "queue_id": "queue_id",
    "queue_offset": "queue_offset",
    "commitlog_offset": "commitlog_offset",
    "store_timestamp": "store_ms",
    "born_timestamp": "born_ms",
}


def _with(sel: Selection, name: str, value: Any) -> Selection:
    changes: dict[str, Any] = {name: value}
    return dataclasses.replace(sel, **changes)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _values(f: Filter) -> list[Any] | None:
    """The literal values of an = or IN filter, nulls left out (they match no row)."""
    if isinstance(f, EqualTo):
        return [f.value]
    if isinstance(f, In):
        return [v for v in f.value if v is not None]
    return None


def _push_one(sel: Selection, f: Filter) -> tuple[Selection, bool] | None:
    """The selection narrowed by `f` and whether that applies `f` exactly, or None when `f` is
    not for us."""
    attr = getattr(f, "attribute", None)
    if not isinstance(attr, tuple) or len(attr) != 1:
        return None
    column = attr[0]
    values = _values(f)
    if column in _SET_COLUMNS:
        if values is None or not all(isinstance(v, str) for v in values):
            return None
        name = "topics" if column == "topic" else column
        current: frozenset[str] | None = getattr(sel, name)
        wanted = frozenset(values)
        return _with(sel, name, wanted if current is None else current & wanted), True
    if column not in _RANGE_FIELDS:
        return None
    timed = column in _TIME_COLUMNS
    if timed:
        if not all(isinstance(v, datetime) for v in (values or [getattr(f, "value", None)])):
            return None

        def bounds(g: Filter, v: Any) -> tuple[int | None, int | None]:
            return _time_bounds(g, _micros(v))
    else:
        if not all(_is_int(v) for v in (values or [getattr(f, "value", None)])):
            return None

        def bounds(g: Filter, v: Any) -> tuple[int | None, int | None]:
            return _int_bounds(g, v)

    name = _RANGE_FIELDS[column]
    rng: Range = getattr(sel, name)
    if isinstance(f, In):
        assert values is not None
        if not values:
            return _with(sel, name, Range(0, 0)), True
        lo, _ = bounds(EqualTo(attr, min(values)), min(values))
        _, hi = bounds(EqualTo(attr, max(values)), max(values))
        narrowed = _with(sel, name, rng.cut(lo, hi))
        if column == "queue_id":  # whole queues: exact
            ids = frozenset(values) if sel.queue_ids is None else sel.queue_ids & frozenset(values)
            return dataclasses.replace(narrowed, queue_ids=ids), True
        return narrowed, len(set(values)) == 1
    if isinstance(f, _COMPARISONS):
        lo, hi = bounds(f, f.value)
        return _with(sel, name, rng.cut(lo, hi)), True
    return None


def push(filters: Sequence[Filter]) -> tuple[Selection, list[Filter]]:
    """The selection the filters make, and those Spark must still apply itself."""
    sel = Selection()
    rest: list[Filter] = []
    for f in filters:
        pushed = _push_one(sel, f)
        if pushed is None:
            rest.append(f)
            continue
        sel, exact = pushed
        if not exact:
            rest.append(f)
    logger.info("ferromq data source: pushed %s; left to Spark: %s", sel.describe() or "nothing", rest)
    return sel, rest


def narrow(sel: Selection, start: int, end: int) -> tuple[int, int]:
    """A queue's planned `[start, end)` cut to the pushed queue offsets."""
    rng = Range(start, end).cut(sel.queue_offset.lo, sel.queue_offset.hi)
    assert rng.lo is not None and rng.hi is not None
    return rng.lo, max(rng.lo, rng.hi)
