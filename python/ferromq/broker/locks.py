"""Locks of orderly consumers on message queues (RocketMQ's RebalanceLockManager): one owner per
(group, queue), expiring 60 s after the owner's last (re-)lock."""

from __future__ import annotations

from dataclasses import dataclass

LOCK_MAX_LIVE_SECONDS = 60.0

MessageQueue = tuple[str, str, int]  # topic, brokerName, queueId


@dataclass
class _Lock:
    client_id: str
    last_update: float


class RebalanceLockManager:
    def __init__(self, max_live: float = LOCK_MAX_LIVE_SECONDS) -> None:
        self._max_live = max_live
        self._locks: dict[str, dict[MessageQueue, _Lock]] = {}

    def try_lock_batch(
        self, group: str, mqs: list[MessageQueue], client_id: str, now: float
    ) -> list[MessageQueue]:
        """Locks (or renews) what is free or already ours; returns the queues the client holds."""
        table = self._locks.setdefault(group, {})
        held = []
        for mq in mqs:
            lock = table.get(mq)
            if lock is None or lock.client_id == client_id or now - lock.last_update > self._max_live:
                table[mq] = _Lock(client_id, now)
                held.append(mq)
        return held

    def unlock_batch(self, group: str, mqs: list[MessageQueue], client_id: str) -> None:
        table = self._locks.get(group, {})
        for mq in mqs:
            lock = table.get(mq)
            if lock is not None and lock.client_id == client_id:
                del table[mq]

    def owner(self, group: str, mq: MessageQueue, now: float) -> str | None:
        lock = self._locks.get(group, {}).get(mq)
        if lock is None or now - lock.last_update > self._max_live:
            return None
        return lock.client_id
