"""Locks of orderly consumers on message queues (RocketMQ's RebalanceLockManager): one owner per
(group, queue), expiring 60 s after the owner's last (re-)lock.

What LOCK_BATCH_MQ and UNLOCK_BATCH_MQ answer is Java 4.9.7's. On top of it, the manager remembers
which other clients of the group were refused a queue while its owner held it (`waiters`): an
orderly Java consumer refused a queue at its rebalance asks again only at its next one, 20 s later
(or on NOTIFY_CONSUMER_IDS_CHANGED), while the owner gives the queue up moments later (it first waits
for the message it is consuming, and 20 s when it still holds pulled messages). `unlock_batch` and
`take_expired_waiters` hand the waiters of each queue that became free to the broker, which tells them to
rebalance at once."""

from __future__ import annotations

from dataclasses import dataclass, field

LOCK_MAX_LIVE_SECONDS = 60.0

MessageQueue = tuple[str, str, int]  # topic, brokerName, queueId


@dataclass
class _Lock:
    client_id: str
    last_update: float
    waiters: set[str] = field(default_factory=set)
    """Clients of the group refused this queue while `client_id` held it."""


class RebalanceLockManager:
    def __init__(self, max_live: float = LOCK_MAX_LIVE_SECONDS) -> None:
        self._max_live = max_live
        self._locks: dict[str, dict[MessageQueue, _Lock]] = {}

    def try_lock_batch(
        self, group: str, mqs: list[MessageQueue], client_id: str, now: float
    ) -> list[MessageQueue]:
        """Locks (or renews) what is free or already ours; returns the queues the client holds.
        A queue another client holds (unexpired) is refused, and the client noted as its waiter."""
        table = self._locks.setdefault(group, {})
        held = []
        for mq in mqs:
            lock = table.get(mq)
            if lock is None or now - lock.last_update > self._max_live:
                table[mq] = _Lock(client_id, now)
                held.append(mq)
            elif lock.client_id == client_id:
                lock.last_update = now
                held.append(mq)
            else:
                lock.waiters.add(client_id)
        return held

    def unlock_batch(self, group: str, mqs: list[MessageQueue], client_id: str) -> set[str]:
        """Frees the queues `client_id` holds; returns the clients refused any of them meanwhile
        (the ones to tell)."""
        table = self._locks.get(group, {})
        waiters: set[str] = set()
        for mq in mqs:
            lock = table.get(mq)
            if lock is not None and lock.client_id == client_id:
                del table[mq]
                waiters |= lock.waiters
        waiters.discard(client_id)
        return waiters

    def take_expired_waiters(self, now: float) -> list[tuple[str, set[str]]]:
        """Per group, the waiters of queues whose owner let the lock expire (a member that died
        without unlocking); the expired locks are dropped, so each waiter is told once and its
        next LOCK_BATCH_MQ takes the queue as a free one."""
        out: dict[str, set[str]] = {}
        for group, table in self._locks.items():
            for mq, lock in list(table.items()):
                if lock.waiters and now - lock.last_update > self._max_live:
                    del table[mq]
                    out.setdefault(group, set()).update(lock.waiters - {lock.client_id})
        return [(group, waiters) for group, waiters in out.items() if waiters]

    def owner(self, group: str, mq: MessageQueue, now: float) -> str | None:
        lock = self._locks.get(group, {}).get(mq)
        if lock is None or now - lock.last_update > self._max_live:
            return None
        return lock.client_id
