"""`BrokerRuntimeInfo.table_topics`: the table topics a ferromq broker reports in runtime info
(`ferromqTableTopics`, a JSON list), read defensively: a broker that tiers nothing (or a Java
broker) has no such key, and a malformed value reads as no table topic rather than failing."""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import pytest

from ferromq.broker.processors.broker_status import table_topics_json
from ferromq.client.admin_results import BrokerRuntimeInfo, TableTopicStatus
from ferromq.jsonutil import dumps
from ferromq.protocol.constants import RUNTIME_TABLE_TOPICS_KEY
from ferromq.tables.tiering import TopicProgress

FULL = {
    "topic": "Orders",
    "uri": "/data/store/tables/Orders",
    "rowsTiered": 400,
    "commits": 3,
    "failures": 1,
    "rowsLost": 2,
    "version": 5,
    "lag": 150,
    "lastCommitTimestamp": 1714521600000,
    "lastError": "OSError: disk full",
}


def info(value: str | None) -> BrokerRuntimeInfo:
    table = {"brokerVersionDesc": "V4_9_7"}
    if value is not None:
        table[RUNTIME_TABLE_TOPICS_KEY] = value
    return BrokerRuntimeInfo("127.0.0.1:10911", table)


def test_every_field() -> None:
    assert info(dumps([FULL]).decode()).table_topics == [
        TableTopicStatus(
            topic="Orders",
            uri="/data/store/tables/Orders",
            rows_tiered=400,
            commits=3,
            failures=1,
            rows_lost=2,
            version=5,
            lag=150,
            last_commit_ms=1714521600000,
            last_error="OSError: disk full",
        )
    ]


def test_before_the_first_commit() -> None:
    fresh = {**FULL, "rowsTiered": 0, "commits": 0, "version": None, "lastCommitTimestamp": None}
    [t] = info(dumps([{**fresh, "lastError": None}]).decode()).table_topics
    assert (t.version, t.last_commit_ms, t.last_error, t.rows_tiered) == (None, None, None, 0)


@pytest.mark.parametrize(
    "value",
    [None, "", "[]", "not json", "{", '{"topic": "Orders"}', "42", "null", '"Orders"'],
    ids=["absent", "empty", "no-topic", "not-json", "cut", "an-object", "a-number", "null", "a-string"],
)
def test_absent_or_malformed_reads_as_none(value: str | None) -> None:
    assert info(value).table_topics == []


def test_entries_without_a_topic_are_left_out_and_bad_fields_read_as_unknown() -> None:
    odd = {"topic": "Odd", "rowsTiered": "many", "lag": True, "version": 1.5, "lastError": 7, "new": 1}
    value = dumps([1, None, {"rowsTiered": 3}, {"topic": 5}, FULL, odd]).decode()
    topics = info(value).table_topics
    assert [t.topic for t in topics] == ["Orders", "Odd"]
    assert topics[1] == TableTopicStatus("Odd", "", 0, 0, 0, 0, None, 0, None, None)


class FakeTiering:
    def __init__(self, progress: list[TopicProgress], fail: bool = False) -> None:
        self._progress = progress
        self._fail = fail

    def progress(self) -> list[TopicProgress]:
        if self._fail:
            raise OSError("the store is closed")
        return self._progress

    def lags(self, progress: Iterable[TopicProgress]) -> dict[str, int]:
        return {p.topic: 7 for p in progress}


def broker(tiering: FakeTiering | None) -> Any:
    return SimpleNamespace(tiering=tiering)


def test_what_the_broker_writes_the_client_reads() -> None:
    p = TopicProgress(
        "Orders", "/t/Orders", 10, 2, 1, 3, 4, {0: 10}, 1714521600000, "ValueError: x", 0.25, 1.5
    )
    fresh = TopicProgress("Fresh", "/t/Fresh")
    value = table_topics_json(broker(FakeTiering([p, fresh])))
    assert value is not None
    assert info(value).table_topics == [
        TableTopicStatus("Orders", "/t/Orders", 10, 2, 1, 3, 4, 7, 1714521600000, "ValueError: x", 0.25, 1.5),
        TableTopicStatus("Fresh", "/t/Fresh", 0, 0, 0, 0, None, 7, None, None),
    ]


def test_no_key_without_tiering_or_when_its_progress_fails() -> None:
    assert table_topics_json(broker(None)) is None
    assert table_topics_json(broker(FakeTiering([], fail=True))) is None
    assert table_topics_json(broker(FakeTiering([]))) == "[]"  # tiering, nothing stored yet
