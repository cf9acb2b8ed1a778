"""The orderly-consumption locks: Java's answers, and the clients refused a queue told when it frees."""

from __future__ import annotations

from ferromq.broker.locks import RebalanceLockManager

Q0, Q1 = ("T", "broker-a", 0), ("T", "broker-a", 1)


def test_a_refused_client_is_told_when_the_owner_unlocks() -> None:
    locks = RebalanceLockManager(max_live=60.0)
    assert locks.try_lock_batch("G", [Q0, Q1], "A", now=0.0) == [Q0, Q1]
    assert locks.try_lock_batch("G", [Q0], "B", now=1.0) == []  # held by A: B waits
    assert locks.try_lock_batch("G", [Q0, Q1], "A", now=2.0) == [Q0, Q1]  # A renews
    assert locks.unlock_batch("G", [Q1], "A") == set()  # nobody waited for Q1
    assert locks.unlock_batch("G", [Q0], "B") == set()  # not B's to unlock
    assert locks.unlock_batch("G", [Q0], "A") == {"B"}
    assert locks.try_lock_batch("G", [Q0], "B", now=3.0) == [Q0]


def test_a_refused_client_is_told_once_when_the_owners_lock_expires() -> None:
    locks = RebalanceLockManager(max_live=60.0)
    locks.try_lock_batch("G", [Q0, Q1], "A", now=0.0)
    locks.try_lock_batch("G", [Q0], "B", now=1.0)
    locks.try_lock_batch("G", [Q1], "C", now=1.0)
    assert locks.take_expired_waiters(now=59.0) == []
    assert locks.take_expired_waiters(now=61.0) == [("G", {"B", "C"})]
    assert locks.take_expired_waiters(now=62.0) == []  # told once
    assert locks.try_lock_batch("G", [Q0], "B", now=62.0) == [Q0]
