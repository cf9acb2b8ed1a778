"""POP's strings and revive messages are written by the Rust rules (crates/broker/src/popper.rs,
which the data planes and Python's pops run) and by python/ferromq/broker/pop/formats.py (which
the revive service, the proxy and Python's acks use). The same inputs go to both here, so the two
cannot drift apart."""

from __future__ import annotations

import pytest

from ferromq import _store
from ferromq.broker.pop import formats
from ferromq.protocol.constants import DLQ_PREFIX, RETRY_PREFIX

TOPICS = ["T", "%RETRY%g_T", "%RETRY%g+T", "%RETRY%g", "%DLQ%g", "a_b+c", "%RETRY%", ""]


@pytest.mark.parametrize("topic", TOPICS)
@pytest.mark.parametrize("group", ["g", "G_1", "g+x"])
def test_retry_topics_and_marks(topic: str, group: str) -> None:
    for v2 in (False, True):
        assert formats.retry_topic(topic, group, v2) == _store.pop_retry_topic(topic, group, v2)
    assert formats.retry_mark(topic) == _store.pop_retry_mark(topic)
    for mark in ("0", "1", "2", "9"):
        assert formats.real_topic(topic, group, mark) == _store.pop_real_topic(topic, group, mark)


def test_the_prefixes_are_rusts() -> None:
    constants = dict(_store.WIRE_CONSTANTS)
    assert constants["RETRY_PREFIX"] == RETRY_PREFIX
    assert constants["DLQ_PREFIX"] == DLQ_PREFIX


RECEIPTS = [
    "0 1700000000000 60000 3 0 broker-a 1 5",
    "5 1700000000000 60000 999 2 broker-a 0 7",
    # Seven fields: the offset is the checkpoint's.
    "4 1 2 3 1 b 0",
    "-1 -9223372036854775808 9223372036854775807 0 0 b -1 0",
    "1 2 3 4 0 b 5 6 extra",
    # Not receipts.
    "",
    "1 2 3",
    "x 1 2 3 0 b 0 0",
    "1 2 3 4 0 b 5 x",
    "1 2 3 4 0 b 5 9223372036854775808",
    "1  2 3 4 0 b 5 6",
    "1 2 3 4 0 b 1_0 6",
]


@pytest.mark.parametrize("text", RECEIPTS)
def test_receipts_are_read_and_written_alike(text: str) -> None:
    try:
        python: str | None = str(formats.ExtraInfo.parse(text))
    except ValueError:
        python = None
    assert python == _store.pop_receipt(text)


@pytest.mark.parametrize(
    ("start", "diffs", "pop_time", "invisible"),
    [
        (0, [0], 1_700_000_000_000, 60_000),
        (42, [0, 2, 5], 1, 100),
        (7, [0], 9_223_372_036_854_775_000, 10_000),  # the revive time saturates
    ],
)
def test_checkpoints_are_written_alike(start: int, diffs: list[int], pop_time: int, invisible: int) -> None:
    ck = formats.CheckPoint(
        start_offset=start,
        pop_time=pop_time,
        invisible_time=invisible,
        queue_id=3,
        topic="%RETRY%g+T",
        group="g",
        broker_name="broker-a",
        offset_diffs=diffs,
    )
    body, key = _store.pop_checkpoint("%RETRY%g+T", "g", 3, start, diffs, pop_time, invisible, "broker-a")
    assert (ck.to_json(), ck.uniq_key()) == (body, key)
    assert formats.CheckPoint.from_json(body) == ck


def test_acks_are_written_alike() -> None:
    ack = formats.AckMsg(
        start_offset=40,
        pop_time=1_700_000_000_000,
        queue_id=2,
        topic="T",
        group="g",
        broker_name="b",
        ack_offset=42,
    )
    body, key = _store.pop_ack("T", "g", 2, 42, 40, 1_700_000_000_000, "b")
    assert (ack.to_json(), ack.uniq_key()) == (body, key)
    assert formats.AckMsg.from_json(body) == ack
