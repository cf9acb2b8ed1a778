"""Typed headers: both send namings, required fields, Java's number rules, and the round trip of
every declared header through `to_ext` / `from_ext`."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, get_type_hints

import pytest

from ferromq.errors import MissingHeaderFieldError
from ferromq.protocol import headers
from ferromq.protocol.headers import (
    SEND_V2_NAMES,
    ConsumerSendMsgBackRequestHeader,
    Header,
    PullMessageRequestHeader,
    QueryMessageRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
)

SEND = SendMessageRequestHeader(
    producer_group="PG",
    topic="T",
    queue_id=3,
    sys_flag=4,
    born_timestamp=1_700_000_000_000,
    flag=7,
    properties="UNIQ_KEY\x01abc\x02WAIT\x01true",
    reconsume_times=2,
    max_reconsume_times=16,
)


def test_send_header_v2_letters_and_v1_names_read_the_same() -> None:
    v2 = SEND.to_ext_v2()
    assert v2 == {
        "a": "PG",
        "b": "T",
        "c": "TBW102",
        "d": "4",
        "e": "3",
        "f": "4",
        "g": "1700000000000",
        "h": "7",
        "i": "UNIQ_KEY\x01abc\x02WAIT\x01true",
        "j": "2",
        "k": "false",
        "l": "16",
    }
    v1 = SEND.to_ext()
    assert set(v1) == {SEND_V2_NAMES[k] for k in v2}
    assert SendMessageRequestHeader.from_ext(v2) == SEND
    assert SendMessageRequestHeader.from_ext(v1) == SEND


def test_send_header_batch_flag_as_java_and_cpp_send_it() -> None:
    batch = dataclasses.replace(SEND, batch=True, max_reconsume_times=None)
    assert batch.to_ext_v2()["m"] == "true"
    assert "m" not in SEND.to_ext_v2()
    ext = SEND.to_ext()
    for text, expected in (("true", True), ("TRUE", True), ("1", True), ("false", False), ("0", False)):
        assert SendMessageRequestHeader.from_ext({**ext, "batch": text}).batch is expected


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"a": None}, "<producerGroup> is null"),
        ({"e": None}, "<queueId> is null"),
        ({"e": "x"}, "<queueId> is not a number"),
        ({"e": str(2**31)}, "<queueId> is out of the range of an int"),
        ({"g": str(2**63)}, "<bornTimestamp> is out of the range of a long"),
    ],
)
def test_send_header_refusals_name_the_long_field(change: dict[str, str | None], message: str) -> None:
    ext = {k: v for k, v in {**SEND.to_ext_v2(), **change}.items() if v is not None}
    with pytest.raises(MissingHeaderFieldError, match=message):
        SendMessageRequestHeader.from_ext(ext)


def test_declarative_header_defaults_and_refusals() -> None:
    ext = {"consumerGroup": "G", "topic": "T", "queueId": "1", "queueOffset": "-5"}
    h = PullMessageRequestHeader.from_ext(ext)
    assert (h.queue_offset, h.max_msg_nums, h.commit_offset, h.suspend_timeout_millis) == (-5, 32, -1, 15000)
    assert h.subscription is None and h.expression_type is None
    assert PullMessageRequestHeader.from_ext({**ext, "maxMsgNums": ""}).max_msg_nums == 32
    for bad, message in (
        ({"queueId": "-1"}, "<queueId> must not be negative: -1"),
        ({"queueId": "1.5"}, "<queueId> is not a number"),
        ({"queueOffset": str(2**63)}, "<queueOffset> is out of the range of a long"),
        ({"topic": None}, "<topic> is null"),
    ):
        broken = {k: v for k, v in {**ext, **bad}.items() if v is not None}
        with pytest.raises(MissingHeaderFieldError, match=message):
            PullMessageRequestHeader.from_ext(broken)


def test_wire_names_booleans_and_left_out_nones() -> None:
    assert UnregisterClientRequestHeader(client_id="c").to_ext() == {"clientID": "c"}
    assert (
        UnregisterClientRequestHeader.from_ext({"clientID": "c", "producerGroup": "P"}).producer_group == "P"
    )
    assert "_UNIQUE_KEY_QUERY" not in QueryMessageRequestHeader(topic="T", key="k", max_num=5).to_ext()
    unique = QueryMessageRequestHeader(topic="T", key="k", unique_key_query=True)
    assert unique.to_ext()["_UNIQUE_KEY_QUERY"] == "true"
    back = ConsumerSendMsgBackRequestHeader.from_ext({"offset": "9", "group": "G", "unitMode": "1"})
    assert back.unit_mode is True and back.max_reconsume_times is None and back.delay_level == 0


def test_send_response_header_broker_and_client_views() -> None:
    ext = SendMessageResponseHeader.broker_ext("ID", 2, 40, "DefaultRegion", True)
    assert ext == {
        "msgId": "ID",
        "queueId": "2",
        "queueOffset": "40",
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
    }
    h = SendMessageResponseHeader.from_ext(ext)
    assert h.to_ext() == ext
    assert SendMessageResponseHeader.from_ext({}, 7).queue_id == 7


def _sample(kind: Any, name: str) -> Any:
    text = str(kind)
    if text.startswith(("bool", "<class 'bool'>")):
        return True
    if text.startswith(("int", "<class 'int'>")):
        return 42 if name not in {"queue_offset", "commit_offset"} else 7
    return f"v-{name}"


@pytest.mark.parametrize(
    "cls",
    [
        c
        for name, c in inspect.getmembers(headers, inspect.isclass)
        if issubclass(c, Header) and c is not Header and not name.startswith("_")
    ],
)
def test_every_declared_header_round_trips(cls: type[Header]) -> None:
    hints = {k: v for k, v in get_type_hints(cls).items() if not str(v).startswith("typing.ClassVar")}
    assert hints, cls
    values = {name: _sample(kind, name) for name, kind in hints.items()}
    h = cls(**values)
    ext = h.to_ext()
    assert all(type(v) is str for v in ext.values())
    assert cls.from_ext(ext) == h


def test_header_constructor_and_equality() -> None:
    h = UnregisterClientRequestHeader(client_id="c")
    assert h == UnregisterClientRequestHeader(client_id="c", producer_group=None)
    assert h != UnregisterClientRequestHeader(client_id="d")
    assert repr(h) == "UnregisterClientRequestHeader(client_id='c', producer_group=None, consumer_group=None)"
    with pytest.raises(TypeError, match="client_id"):
        UnregisterClientRequestHeader()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unknown"):
        UnregisterClientRequestHeader(client_id="c", nope=1)  # type: ignore[call-arg]
