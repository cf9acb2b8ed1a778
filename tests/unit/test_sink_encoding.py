"""The Spark sink's batch bodies, encoded in Rust from Arrow columns, are byte for byte what the
Python client's `send_batch` encodes for the same messages (generated inputs)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferromq.client.message import Message
from ferromq.client.producer import Producer
from ferromq.spark.sink import ROW, _encode, _message, uniq_key_prefix

PREFIX = uniq_key_prefix("query", 0, 3)
PROPERTIES = pa.map_(pa.string(), pa.string())

# Property text without RocketMQ's separators; names that the client also sets itself are likely.
text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=12)
name = st.one_of(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "b", ""]), text)
row = st.fixed_dictionaries(
    {
        "body": st.binary(max_size=300),
        "tags": st.one_of(st.none(), st.just(""), text),
        "keys": st.one_of(st.none(), st.just(""), text),
        "properties": st.one_of(st.none(), st.lists(st.tuples(name, st.one_of(st.none(), text)), max_size=5)),
    }
)


def batch(rows: list[dict[str, Any]], first_row: int, columns: list[str]) -> pa.RecordBatch:
    arrays = {
        "body": pa.array([r["body"] for r in rows], pa.binary()),
        "tags": pa.array([r["tags"] for r in rows], pa.string()),
        "keys": pa.array([r["keys"] for r in rows], pa.string()),
        "properties": pa.array([r["properties"] for r in rows], PROPERTIES),
        ROW: pa.array(range(first_row, first_row + len(rows)), pa.int64()),
    }
    return pa.record_batch([arrays[c] for c in columns], names=columns)


def client_encoding(part: pa.RecordBatch) -> tuple[bytes, list[str]]:
    """What `Producer.send_batch` encodes for the part's rows as client messages."""
    msgs: list[Message] = [_message("T", r, PREFIX, 0) for r in part.to_pylist()]
    return Producer("g", "127.0.0.1:9876").batch_body(msgs)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(row, min_size=1, max_size=20),
    skip=st.integers(0, 5),
    first_row=st.integers(0, 2**31),
    columns=st.sets(st.sampled_from(["tags", "keys", "properties"])),
)
def test_rust_batch_bodies_equal_the_clients(
    rows: list[dict[str, Any]], skip: int, first_row: int, columns: set[str]
) -> None:
    whole = batch([*rows[:1] * skip, *rows], first_row, ["body", *sorted(columns), ROW])
    part = whole.slice(skip)  # an array offset, as Spark's batches and the sink's slices have
    assert _encode(PREFIX, part) == client_encoding(part)


def test_separators_are_refused_naming_the_message() -> None:
    rows = [{"body": b"x", "tags": None, "keys": None, "properties": [("ok", "v")]}] * 2
    rows = [*rows, {"body": b"y", "tags": "a\x01b", "keys": None, "properties": None}]
    part = batch(rows, 0, ["body", "tags", "keys", "properties", ROW])
    with pytest.raises(ValueError, match=r"message 2: .*TAGS.*separator"):
        _encode(PREFIX, part)
    with pytest.raises(ValueError, match="separator"):
        client_encoding(part)
