"""Every v2 status code the proxy answers is the one the vendored `definition.proto` gives its name:
Python's (`ferromq.proxy.status.Code`, protoc's module) here, Rust's (`ferromq_grpc::convert::code`)
in `every_code_is_the_protos`, and the codes of the refusals the binding raises."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from ferromq import _store
from ferromq.proxy import proto
from ferromq.proxy.status import Code

DEFINITION = Path(proto.__file__).parent / "apache" / "rocketmq" / "v2" / "definition.proto"


def proto_codes() -> dict[str, int]:
    text = DEFINITION.read_text(encoding="utf-8")
    body = re.search(r"^enum Code \{(.*?)^\}", text, re.S | re.M)
    assert body is not None
    lines = (line.split("//")[0] for line in body.group(1).splitlines())
    return {m[1]: int(m[2]) for line in lines if (m := re.fullmatch(r"\s*(\w+)\s*=\s*(\d+);\s*", line))}


def test_python_codes_are_the_protos() -> None:
    codes = proto_codes()
    assert len(codes) > 40
    assert dict(Code.items()) == codes


@pytest.mark.parametrize(
    ("refused", "name"),
    [
        (lambda: _store.grpc_check_invisible(1), "ILLEGAL_INVISIBLE_TIME"),
        (lambda: _store.grpc_check_invisible(-1, 0), "ILLEGAL_INVISIBLE_TIME"),
        (lambda: _store.grpc_check_topic("TBW102"), "ILLEGAL_TOPIC"),
        (lambda: _store.grpc_check_group("CID_RMQ_SYS_X"), "ILLEGAL_CONSUMER_GROUP"),
        (lambda: _store.grpc_polling_time(5_000, None, 1_000), "ILLEGAL_POLLING_TIME"),
    ],
)
def test_the_bindings_refusals_carry_the_protos_codes(refused: Callable[[], object], name: str) -> None:
    with pytest.raises(ValueError) as e:
        refused()
    assert e.value.args[0] == proto_codes()[name]
