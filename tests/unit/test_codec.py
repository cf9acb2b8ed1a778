"""Golden vectors from the RocketMQ facts sheet: hashes, CRC, record layout, ids, properties."""

from __future__ import annotations

import zlib
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferromq import _store
from ferromq.errors import CorruptStoreError, InvalidArgumentError
from ferromq.message import decode_messages, decode_properties, encode_properties, tag_codes

GOLDEN_RECORD = bytes.fromhex(
    "0000007A DAA320A7 77D18982 00000001 00000000 0000000000000007 00000000000004D2 00000000"
    " 00000174876E8000 C0A80002 0000D431 00000174876E807B 7F000001 00002A9F 00000000 0000000000000000"
    " 00000005 48656C6C6F 09 546F70696354657374 0011 544147530154616741024B455953016B31".replace(" ", "")
)


# Java's String.hashCode golden vectors are in the Rust test that holds the function
# (crates/store/src/hash.rs `golden_hash_codes`); here, what crosses the binding: an empty
# string, a negative result, UTF-16 surrogates of an astral character.
@pytest.mark.parametrize(("s", "h"), [("", 0), ("Order_Created", -982890825), ("\U0001f600", 1772899)])
def test_java_string_hash(s: str, h: int) -> None:
    assert _store.java_hash(s) == h


def test_tags_code_is_sign_extended() -> None:
    assert _store.tags_code("Order_Created") == -982890825
    assert _store.tags_code("Order_Created") & 0xFFFFFFFFFFFFFFFF == 0xFFFFFFFFC56A46B7
    assert _store.tags_code(None) == 0
    assert _store.tags_code("") == 0


def test_body_crc_matches_the_record() -> None:
    assert zlib.crc32(b"Hello") & 0x7FFFFFFF == 0x77D18982
    assert zlib.crc32(b"123456789") & 0x7FFFFFFF == 1274296614


def test_decode_golden_record() -> None:
    (m,) = decode_messages(GOLDEN_RECORD, check_crc=True)
    assert m.topic == "TopicTest"
    assert m.body == b"Hello"
    assert (m.queue_id, m.queue_offset, m.physical_offset) == (1, 7, 1234)
    assert m.born_host == "192.168.0.2:54321"
    assert m.born_timestamp == 1600000000000
    assert m.store_timestamp == 1600000000123
    assert m.store_host == "127.0.0.1:10911"
    assert m.tags == "TagA"
    assert m.keys == ["k1"]
    assert m.msg_id == "7F00000100002A9F00000000000004D2"


def test_decode_rejects_corrupt_records() -> None:
    bad = bytearray(GOLDEN_RECORD)
    bad[90] ^= 0xFF
    with pytest.raises(CorruptStoreError, match="CRC"):
        decode_messages(bytes(bad), check_crc=True)
    with pytest.raises(CorruptStoreError, match=r"no message record|overruns|shorter"):
        decode_messages(GOLDEN_RECORD[:50])


def test_offset_msg_id_round_trip() -> None:
    assert _store.offset_msg_id("127.0.0.1:10911", 1234) == "7F00000100002A9F00000000000004D2"
    assert _store.decode_offset_msg_id("7F00000100002A9F00000000000004D2") == ("127.0.0.1:10911", 1234)
    with pytest.raises(InvalidArgumentError):
        _store.decode_offset_msg_id("not-an-id")


def test_properties_follow_java_rules() -> None:
    s = encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "EMPTY": ""})
    assert decode_properties(s) == {"TAGS": "TagA", "KEYS": "k1 k2"}
    # The C++ client writes a trailing separator; Java drops empty names and values.
    assert decode_properties("A\x011\x02\x01x\x02B\x01\x02") == {"A": "1"}
    with pytest.raises(ValueError, match="separator"):
        encode_properties({"A": "x\x02y"})


def test_properties_cross_the_binding_as_written() -> None:
    # The store crate's one codec, through the binding: a mapping that is not a dict, values that
    # are not text (written as their str()), None values and empty names left out, an empty value
    # kept, a repeated name read in its first place with its last value.
    props = MappingProxyType({"N": 7, "B": True, "": "x", "U": None, "E": "", "é": "😀 ü"})
    s = encode_properties(props)
    assert s == "N\x017\x02B\x01True\x02E\x01\x02é\x01😀 ü"
    assert decode_properties(s) == {"N": "7", "B": "True", "é": "😀 ü"}
    assert list(decode_properties("A\x011\x02B\x012\x02A\x013\x02C\x01x\x01y")) == ["A", "B", "C"]
    assert decode_properties("A\x011\x02B\x012\x02A\x013\x02C\x01x\x01y") == {
        "A": "3",
        "B": "2",
        "C": "x\x01y",
    }
    assert encode_properties({}) == "" and decode_properties("") == {}
    for bad in ({"A\x01": "v"}, {"A": "v\x01"}, {"K\x02": "v"}, {"ok": "1", "TAGS": "a\x02b"}):
        with pytest.raises(ValueError, match="contains a RocketMQ separator"):
            encode_properties(bad)


NAMES = st.text(min_size=1, max_size=12).filter(lambda s: "\x01" not in s and "\x02" not in s)
VALUES = st.text(max_size=12).filter(lambda s: "\x01" not in s and "\x02" not in s)


@settings(max_examples=200, deadline=None)
@given(props=st.dictionaries(NAMES, VALUES, max_size=10))
def test_properties_read_back_as_written(props: dict[str, str]) -> None:
    s = encode_properties(props)
    read = decode_properties(s)
    assert read == {k: v for k, v in props.items() if v}
    # The plane's reader of one property agrees with the whole reader.
    for name in props:
        assert _store.get_property(s, name) == read.get(name)


@settings(max_examples=200, deadline=None)
@given(s=st.text(alphabet=st.sampled_from("ab\x01\x02é"), max_size=30))
def test_any_properties_string_is_read_as_java_reads_it(s: str) -> None:
    read = decode_properties(s)
    # The plane's reader of one property (asked for names, never for "") agrees with it.
    for name in {entry.partition("\x01")[0] for entry in s.split("\x02")} - {""}:
        assert _store.get_property(s, name) == read.get(name)
    # What was read writes back to a string read the same way (a value may hold a \x01, which
    # Java reads as part of it but a client may not write).
    if not any("\x01" in v for v in read.values()):
        assert decode_properties(encode_properties(read)) == read


def test_tag_expressions() -> None:
    assert tag_codes(None) is None
    assert tag_codes("*") is None
    assert tag_codes("TagA || TagB") == [2598919, 2598920]
    assert tag_codes(["TagA"]) == [2598919]
    # Read by the broker's one reader (`tags.rs`, `_store.parse_tag_expression`): sorted, each
    # once, and `||` names no tag (the broker refuses such a subscription).
    assert tag_codes(" TagB || TagA || TagA ") == [2598919, 2598920]
    assert tag_codes("") is None
    assert tag_codes("TagA || *") is None
    with pytest.raises(ValueError, match="no tags"):
        tag_codes("||")
