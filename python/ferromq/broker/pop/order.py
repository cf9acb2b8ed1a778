"""Orderly (FIFO) pop (RocketMQ 5.x's ConsumerOrderInfoManager): what each group's last pop of each
queue took, so that the queue's next messages wait until those are acked or become visible again.

An orderly pop writes no checkpoint: the group's offset stays at the first message not acked,
a queue is blocked while a message it handed out is neither acked nor visible again, and a
message handed out again counts one more consumption (`orderCountInfo`, the client's reconsume
times). Kept in `config/consumerOrderInfo.json` as Java keeps it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferromq.broker.json_files import load_json_file, save_json_file

# Orders not consumed for this long are forgotten (Java's CLEAN_SPAN_FROM_LAST).
CLEAN_SPAN_MS = 24 * 3600 * 1000


def _now() -> int:
    return int(time.time() * 1000)


@dataclass
class OrderInfo:
    """The last pop of one queue by one group."""

    pop_time: int
    invisible_time: int
    offsets: list[int]
    attempt_id: str | None = None
    next_visible: dict[int, int] = field(default_factory=dict)
    consumed: dict[int, int] = field(default_factory=dict)
    """Offsets handed out before, with how many times."""
    commit_bits: int = 0
    last_consume: int = 0

    def acked(self, index: int) -> bool:
        return bool(self.commit_bits >> index & 1)

    def blocks(self, attempt_id: str | None, invisible_time: int, now: int) -> bool:
        """Whether a message of this pop is neither acked nor visible again (the same attempt
        may pop again)."""
        if not self.offsets or (self.attempt_id is not None and self.attempt_id == attempt_id):
            return False
        invisible = self.invisible_time if self.invisible_time > 0 else invisible_time
        for i, offset in enumerate(self.offsets):
            if not self.acked(i) and now < self.next_visible.get(offset, self.pop_time + invisible):
                return True
        return False

    def free_at(self, invisible_time: int, now: int) -> int | None:
        """When this pop stops blocking its queue (None: it does not)."""
        invisible = self.invisible_time if self.invisible_time > 0 else invisible_time
        for i, offset in enumerate(self.offsets):
            if not self.acked(i):
                visible = self.next_visible.get(offset, self.pop_time + invisible)
                if now < visible:
                    return visible
        return None

    def next_offset(self) -> int:
        """The first offset not acked (past the last when all are)."""
        for i, offset in enumerate(self.offsets):
            if not self.acked(i):
                return offset
        return self.offsets[-1] + 1

    def to_json(self) -> dict[str, Any]:
        first = self.offsets[0]
        data: dict[str, Any] = {
            "a": self.attempt_id,
            "cm": self.commit_bits,
            "i": self.invisible_time,
            "l": self.last_consume,
            # The first offset, then the others as differences from it.
            "o": [first] + [o - first for o in self.offsets[1:]],
            "popTime": self.pop_time,
        }
        if self.next_visible:
            data["ot"] = {str(k): v for k, v in self.next_visible.items()}
        if self.consumed:
            data["oc"] = {str(k): v for k, v in self.consumed.items()}
        return {k: v for k, v in data.items() if v is not None}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OrderInfo:
        raw = [int(x) for x in d.get("o") or []]
        offsets = raw[:1] + [raw[0] + x for x in raw[1:]] if raw else []
        return cls(
            pop_time=int(d.get("popTime", 0)),
            invisible_time=int(d.get("i") or 0),
            offsets=offsets,
            attempt_id=d.get("a"),
            next_visible={int(k): int(v) for k, v in (d.get("ot") or {}).items()},
            consumed={int(k): int(v) for k, v in (d.get("oc") or {}).items()},
            commit_bits=int(d.get("cm", 0)),
            last_consume=int(d.get("l", 0)),
        )


class ConsumerOrderInfoManager:
    def __init__(self, path: Path | None) -> None:
        """`path`: where the table is kept; None keeps it in memory only (lite topics' orders, as
        5.5.0's MemoryConsumerOrderInfoManager)."""
        self._path = path
        self._lock = threading.Lock()
        self.table: dict[str, dict[int, OrderInfo]] = {}
        data = (load_json_file(path) if path is not None else None) or {}
        for key, queues in (data.get("table") or {}).items():
            self.table[str(key)] = {int(q): OrderInfo.from_json(info) for q, info in (queues or {}).items()}
        self._dirty = False

    @staticmethod
    def _key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def get(self, topic: str, group: str, queue_id: int) -> OrderInfo | None:
        return self.table.get(self._key(topic, group), {}).get(queue_id)

    def blocked(
        self, attempt_id: str | None, topic: str, group: str, queue_id: int, invisible_time: int
    ) -> bool:
        info = self.get(topic, group, queue_id)
        return info is not None and info.blocks(attempt_id, invisible_time, _now())

    def update(
        self,
        attempt_id: str | None,
        topic: str,
        group: str,
        queue_id: int,
        pop_time: int,
        invisible_time: int,
        offsets: list[int],
    ) -> list[str]:
        """Records a pop of `offsets` and returns its orderCountInfo entries (mark 0 topics)."""
        now = _now()
        info = OrderInfo(pop_time, invisible_time, list(offsets), attempt_id, last_consume=now)
        with self._lock:
            queues = self.table.setdefault(self._key(topic, group), {})
            prev = queues.get(queue_id)
            if prev is not None:
                if prev.attempt_id is not None and prev.attempt_id == attempt_id:
                    info.consumed = dict(prev.consumed)
                else:
                    before = set(prev.offsets)
                    info.consumed = {o: prev.consumed.get(o, 0) + 1 for o in offsets if o in before}
            queues[queue_id] = info
            self._dirty = True
        entries = [f"0 qo{queue_id}%{o} {n}" for o, n in info.consumed.items()]
        least = min(info.consumed.values()) if len(info.consumed) == len(offsets) and info.consumed else 0
        entries.append(f"0 {queue_id} {least}")
        return entries

    def commit_and_next(self, topic: str, group: str, queue_id: int, offset: int, pop_time: int) -> int:
        """An ack: the offset the group goes on from; -1 when the pop does not hold `offset`, -2
        when the ack is of an older pop (ignored)."""
        with self._lock:
            info = self.get(topic, group, queue_id)
            if info is None:
                return offset + 1
            if not info.offsets:
                return -1
            if pop_time != info.pop_time:
                return -2
            try:
                index = info.offsets.index(offset)
            except ValueError:
                return -1
            info.commit_bits |= 1 << index
            self._dirty = True
            return info.next_offset()

    def change_invisible(
        self, topic: str, group: str, queue_id: int, offset: int, pop_time: int, visible_at: int
    ) -> None:
        with self._lock:
            info = self.get(topic, group, queue_id)
            if info is not None and info.pop_time == pop_time:
                info.next_visible[offset] = visible_at
                self._dirty = True

    def clear(self, topic: str, group: str, queue_id: int) -> None:
        with self._lock:
            self.table.get(self._key(topic, group), {}).pop(queue_id, None)
            self._dirty = True

    def persist(self, force: bool = False) -> None:
        if not (self._dirty or force):
            return
        cutoff = _now() - CLEAN_SPAN_MS
        with self._lock:
            for key in list(self.table):
                self.table[key] = {q: i for q, i in self.table[key].items() if i.last_consume >= cutoff}
                if not self.table[key]:
                    del self.table[key]
            data = {
                "table": {k: {str(q): i.to_json() for q, i in qs.items()} for k, qs in self.table.items()}
            }
            self._dirty = False
        if self._path is not None:
            save_json_file(self._path, data)
