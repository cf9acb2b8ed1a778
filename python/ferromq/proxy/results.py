"""The values a proxy backend (`ferromq.proxy.backend`) answers with: a route's queues of one broker,
a send's outcome, a pop's records. Plain data, imported by the backends, the service and the
conversions alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PERM_WRITE, PERM_READ = 2, 4


@dataclass(frozen=True)
class BrokerQueues:
    """One broker's queues of a topic, as a route names them."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


@dataclass(frozen=True)
class SendOutcome:
    """A send the broker answered: its code (SUCCESS, or one of a message stored whose wait failed)
    and its reply's header fields (queueOffset, msgId, recallHandle, ...)."""

    code: int
    fields: Mapping[str, str]


@dataclass(frozen=True)
class Popped:
    """What a pop found on one broker: the records (each with POP_CK for a retried one) and what the
    receipts of the others are made of."""

    found: bool
    body: bytes
    pop_time: int
    invisible_time: int
    revive_qid: int
    starts: Mapping[tuple[str, int], int]
    """(retry mark, queue id) -> the checkpoint's start offset (the reply's startOffsetInfo)."""
    broker_name: str
    lite_counts: list[int] | None = None
    """A lite pop's (POP_LITE_MESSAGE): each record's consume count (orderCountInfo)."""


def lite_order_counts(order_count_info: str, count: int) -> list[int]:
    """The consume count of each of a POP_LITE reply's `count` records from its orderCountInfo, as 5.5.0's
    client API reads it (ExtraInfoUtil.parseLiteOrderCountInfo): one entry per record (a number, or
    "... ... n"); any other count of entries leaves every count 0."""
    infos = order_count_info.split(";") if order_count_info else []
    if len(infos) != count:
        return [0] * count
    out = []
    for info in infos:
        parts = info.split(" ")
        text = parts[2] if len(parts) == 3 else (info if len(parts) == 1 else "0")
        out.append(int(text) if text.strip().isdigit() else 0)
    return out
