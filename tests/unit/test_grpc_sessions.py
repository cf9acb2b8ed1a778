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


def test_a_groups_retry_policy_is_given_to_its_consumers() -> None:
    """The group's groupRetryPolicy as Java's proxy converts it: customized steps (its own, or
    CustomizedRetryPolicy's default when it names none), or an exponential backoff with
    ExponentialRetryPolicy's defaults for what it leaves out; retryMaxTimes + 1 attempts."""
    from ferromq.broker.subscriptions import SubscriptionGroupConfig
    from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb

    consumer = pb.Settings(
        client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name="g"))
    )
    default = sessions.merged_settings(consumer, None).backoff_policy
    assert default.max_attempts == 17
    assert [d.seconds for d in default.customized_backoff.next][:4] == [1, 5, 10, 30]
    assert len(default.customized_backoff.next) == 18
    own = SubscriptionGroupConfig(
        "g",
        retry_max_times=2,
        group_retry_policy={"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [2000]}},
    )
    policy = sessions.merged_settings(consumer, own).backoff_policy
    assert policy.max_attempts == 3 and [d.seconds for d in policy.customized_backoff.next] == [2]
    exponential = SubscriptionGroupConfig(
        "g", group_retry_policy={"type": "EXPONENTIAL", "exponentialRetryPolicy": {"initial": 1000}}
    )
    backoff = sessions.merged_settings(consumer, exponential).backoff_policy.exponential_backoff
    assert (backoff.initial.seconds, backoff.max.seconds, backoff.multiplier) == (1, 7200, 2)
