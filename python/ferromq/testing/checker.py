"""A checker in the spirit of Jepsen for a message queue: from what the clients saw (every send
attempt with its outcome, every delivery to a consumer) and what the brokers hold afterwards, it
says which guarantees held. Pure: records in, a `Report` out; the cluster tests and
`benches/partition_bench.py` gather the records.

Guarantees checked (an acknowledged message is one whose send was answered SEND_OK):
- lost: acknowledged, and no broker of its group holds it;
- moved: acknowledged at (group, queue, offset), and held only elsewhere (a log rewritten after a
  failover);
- conflicts: two acknowledged messages given the same (group, queue, offset);
- offsets back: in one queue, a later acknowledgement with an offset not above an earlier one's
  (one producer sends one message at a time, so its acknowledged offsets only grow);
- duplicates: copies beyond one are allowed (at-least-once) when explained, each copy by a send
  attempt that may have stored it (its answer timed out, the connection closed, or the answer
  said stored but not replicated); a copy no attempt explains is a violation;
- consumption: every acknowledged message delivered; in each queue, messages delivered for the
  first time in offset order (an orderly consumer's promise); redeliveries counted;
- availability: the longest time without an acknowledgement, and how long a client waited on one
  message (from its first attempt to its last, retries included, acknowledged or given up).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum


class Outcome(StrEnum):
    """What one send attempt's answer says about the message."""

    OK = "ok"
    """SEND_OK: stored (and replicated as the broker's role requires)."""
    STORED = "stored"
    """Stored but not yet replicated or flushed (FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE,
    FLUSH_DISK_TIMEOUT): not acknowledged, yet present."""
    UNKNOWN = "unknown"
    """No answer (a timeout or a connection closed after the request left): may be stored."""
    REFUSED = "refused"
    """A refusal, or no connection at all: not stored."""


@dataclass(frozen=True)
class Attempt:
    id: str
    start: float
    end: float
    outcome: Outcome
    group: str = ""
    queue: int = -1
    offset: int = -1


@dataclass(frozen=True)
class Copy:
    """A message a broker of `group` holds at (queue, offset)."""

    id: str
    group: str
    queue: int
    offset: int


@dataclass(frozen=True)
class Delivery:
    id: str
    group: str
    queue: int
    offset: int
    at: float


@dataclass
class Report:
    attempted: int = 0
    acknowledged: int = 0
    lost: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    offsets_back: list[str] = field(default_factory=list)
    duplicated: int = 0
    """Messages held more than once, all explained by their attempts."""
    unexplained_duplicates: list[str] = field(default_factory=list)
    stored_unacknowledged: int = 0
    """Held though never acknowledged (an attempt without answer that had stored it): allowed."""
    not_delivered: list[str] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)
    redelivered: int = 0
    longest_gap: float = 0.0
    gave_up: int = 0
    """Messages whose every attempt failed (the client moved on without an acknowledgement)."""
    stall_p99: float = 0.0
    stall_max: float = 0.0
    consumed: bool = False
    """Whether deliveries were checked (a run may have no consumer)."""

    @property
    def violations(self) -> dict[str, list[str]]:
        """Every broken guarantee with examples; empty when all held."""
        found = {
            "lost": self.lost,
            "moved": self.moved,
            "conflicts": [f"{a}/{b}" for a, b in self.conflicts],
            "offsets back": self.offsets_back,
            "unexplained duplicates": self.unexplained_duplicates,
            "not delivered": self.not_delivered,
            "out of order": self.out_of_order,
        }
        return {name: ids[:10] for name, ids in found.items() if ids}

    def summary(self) -> str:
        delivered = (
            f", {len(self.not_delivered)} not delivered, {len(self.out_of_order)} out of order, "
            f"{self.redelivered} redelivered"
            if self.consumed
            else ""
        )
        return (
            f"{self.acknowledged} acknowledged, {self.gave_up} given up, {len(self.lost)} lost, "
            f"{len(self.moved)} moved, {self.duplicated} duplicated "
            f"({len(self.unexplained_duplicates)} unexplained), "
            f"{self.stored_unacknowledged} stored unacknowledged{delivered}; longest time without "
            f"an ack {self.longest_gap:.1f} s, client wait p99 {self.stall_p99:.2f} s "
            f"(max {self.stall_max:.2f} s)"
        )


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def check(
    attempts: Iterable[Attempt], copies: Iterable[Copy], deliveries: Iterable[Delivery] | None = None
) -> Report:
    by_id: dict[str, list[Attempt]] = defaultdict(list)
    for a in attempts:
        by_id[a.id].append(a)
    held: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    for c in copies:
        held[c.id].add((c.group, c.queue, c.offset))

    report = Report(attempted=len(by_id))
    acks: list[Attempt] = []
    waits: list[float] = []
    for msg_id, tries in by_id.items():
        waits.append(max(a.end for a in tries) - min(a.start for a in tries))
        ok = next((a for a in tries if a.outcome is Outcome.OK), None)
        if ok is None:
            report.stored_unacknowledged += bool(held.get(msg_id))
            may_store = sum(a.outcome is not Outcome.REFUSED for a in tries)
        else:
            acks.append(ok)
            position = (ok.group, ok.queue, ok.offset)
            if msg_id not in held:
                report.lost.append(msg_id)
            elif position not in held[msg_id]:
                report.moved.append(msg_id)
            # The acknowledged attempt stored one copy; each earlier one that may have, another.
            may_store = 1 + sum(a.outcome in (Outcome.STORED, Outcome.UNKNOWN) for a in tries if a is not ok)
        copies_held = len(held.get(msg_id, ()))
        if copies_held > 1:
            if copies_held > may_store:
                report.unexplained_duplicates.append(msg_id)
            else:
                report.duplicated += 1
    report.acknowledged = len(acks)
    report.gave_up = report.attempted - report.acknowledged

    acks.sort(key=lambda a: a.end)
    given: dict[tuple[str, int, int], str] = {}
    top: dict[tuple[str, int], int] = {}
    for a in acks:
        position = (a.group, a.queue, a.offset)
        if position in given and given[position] != a.id:
            report.conflicts.append((given[position], a.id))
        given[position] = a.id
        if a.offset <= top.get((a.group, a.queue), -1):
            report.offsets_back.append(a.id)
        top[(a.group, a.queue)] = max(a.offset, top.get((a.group, a.queue), -1))

    report.longest_gap = max((b.end - a.end for a, b in itertools.pairwise(acks)), default=0.0)
    report.stall_p99 = percentile(waits, 99)
    report.stall_max = max(waits, default=0.0)

    if deliveries is not None:
        report.consumed = True
        seen: set[str] = set()
        first_top: dict[tuple[str, int], int] = {}
        for d in sorted(deliveries, key=lambda d: d.at):
            if d.id in seen:
                report.redelivered += 1
                continue
            seen.add(d.id)
            if d.offset < first_top.get((d.group, d.queue), -1):
                report.out_of_order.append(d.id)
            first_top[(d.group, d.queue)] = max(d.offset, first_top.get((d.group, d.queue), -1))
        report.not_delivered = sorted({a.id for a in acks} - seen)
    return report
