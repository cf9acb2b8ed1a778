"""Golden vectors from the RocketMQ facts sheet: hashes, CRC, record layout, ids, properties."""

from __future__ import annotations

import zlib

import pytest

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
