"""The codes, flags and system topics the Rust data plane and store define are the ones
`ferromq.protocol` defines (each side names them once; this test keeps the two equal)."""

from __future__ import annotations

import pytest

from ferromq import _store
from ferromq.protocol import codes, constants, headers


def python_value(name: str) -> object:
    if "." in name:
        enum_name, member = name.split(".")
        return int(getattr(codes, enum_name)[member])
    return getattr(constants, name)


@pytest.mark.parametrize(("name", "rust_value"), _store.WIRE_CONSTANTS)
def test_rust_and_python_agree(name: str, rust_value: str) -> None:
    assert str(python_value(name)) == rust_value, name


def test_the_send_v2_letters_are_the_planes() -> None:
    # The plane reads a SEND_MESSAGE_V2 header by its own letter table (crates/broker/src/send.rs).
    assert len(_store.SEND_V2_LETTERS) == 9
    for name, letter in _store.SEND_V2_LETTERS:
        assert headers.SEND_V2_NAMES[letter] == name, letter
