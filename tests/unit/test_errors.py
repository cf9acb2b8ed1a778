"""The store errors the Rust extension raises by name are the classes of `ferromq.errors`."""

from __future__ import annotations

import pytest

from ferromq import _store, errors
from ferromq.protocol.codes import ResponseCode
from ferromq.store import MessageStore


@pytest.mark.parametrize(("name", "code"), _store.STORE_ERROR_CLASSES)
def test_each_store_error_has_its_class_and_code(name: str, code: int) -> None:
    """Rust names the class and gives the code (the data plane answers with it); the class's own
    code, which Python raises it with, is the same."""
    cls = getattr(errors, name, None)
    assert isinstance(cls, type) and issubclass(cls, errors.StoreError), name
    assert cls.code == ResponseCode(code), name


def test_a_store_error_arrives_as_its_class(tmp_path: object) -> None:
    with pytest.raises(errors.NotAStoreError, match="commitlog") as raised:
        MessageStore.open_read_only(str(tmp_path))
    assert raised.value.code == ResponseCode.SYSTEM_ERROR
