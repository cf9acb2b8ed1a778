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
