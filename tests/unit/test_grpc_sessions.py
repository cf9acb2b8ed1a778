"""The 5.x clients' sessions stay bounded whatever a client does: transactions it leaves open are
forgotten oldest first past a bound, and a client no call came from for IDLE_SESSION_SECONDS is
dropped (and its session closed, which takes it out of the broker's client manager)."""

from __future__ import annotations

import pytest

from ferromq.proxy import sessions
from ferromq.proxy.sessions import Sessions


def test_open_transactions_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions, "MAX_OPEN_TRANSACTIONS", 3)
    s = Sessions().open("c1", "127.0.0.1:1", "PYTHON", "5.1.2")
    for i in range(5):
        s.remember_transaction(f"t{i}", (i, i * 100, "broker-a"))
    assert list(s.transactions) == ["t2", "t3", "t4"]


def test_idle_clients_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(sessions.time, "monotonic", lambda: now[0])
    all_sessions = Sessions()
    old = all_sessions.open("old", "127.0.0.1:1", "PYTHON", "5.1.2")
    closed: list[object] = []
    old.on_close(closed.append)
    now[0] += sessions.IDLE_SESSION_SECONDS / 2
    all_sessions.open("young", "127.0.0.1:2", "JAVA", "5.2.0")
    now[0] += sessions.IDLE_SESSION_SECONDS / 2 + 1
    all_sessions.open("young", "127.0.0.1:2", "JAVA", "5.2.0")  # a call: prunes the idle ones
    assert set(all_sessions.by_id) == {"young"} and old.closed and closed == [old]
