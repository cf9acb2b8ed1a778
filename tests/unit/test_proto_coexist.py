"""ferromq's apache.rocketmq.v2 modules and the official Python 5.x client's (rocketmq-python-client,
`rocketmq.grpc_protocol`) in one process, so that an application can run `ferromq.testing.Broker` beside
the official client.

Both register the same file names (`definition.proto`, `service.proto`, `admin.proto`) in protobuf's
default descriptor pool. The pool takes a second registration of a file only when its serialized
FileDescriptorProto is byte-identical to the first; then both modules share one descriptor. Any other
difference fails the second import ("duplicate file name" or "duplicate symbol"). So:

- ferromq's serialized descriptors equal the official ones, byte for byte (a text diff if not);
- in the client's environment (`client5_python()`, tools/apache_rocketmq.py, a child process as in
  test_proto_contract.py), both sets of modules import in either order, and messages built with one parse,
  nest and re-serialize with the other.
"""

from __future__ import annotations

import base64
import difflib
import importlib
import inspect
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import client5_python
from google.protobuf import descriptor_pb2, text_format

ROOT = Path(__file__).resolve().parents[2]
OURS = "ferromq.proxy.proto.apache.rocketmq.v2"
OFFICIAL = "rocketmq.grpc_protocol"
FILES = ("definition", "service", "admin")
CHILD_TIMEOUT = 120.0


def official_files() -> dict[str, list[str]]:
    """In the client's environment, with only the official client imported: for each of FILES, the
    registered file name and the serialized FileDescriptorProto (base64). Self-contained: its source runs
    in the child process."""
    import base64
    import importlib

    importlib.import_module("rocketmq")
    out: dict[str, list[str]] = {}
    for stem in ("definition", "service", "admin"):
        d = importlib.import_module(f"rocketmq.grpc_protocol.{stem}_pb2").DESCRIPTOR
        out[stem] = [d.name, base64.b64encode(d.serialized_pb).decode()]
    return out


def coexist(first: str) -> dict[str, Any]:
    """Imports ferromq's modules and the official client ("ours" or "official" first), then builds
    messages with each side's classes and reads them with the other's; raises on any mismatch and returns
    what it saw. Self-contained: its source runs in the child process."""
    import importlib

    from google.protobuf import duration_pb2, timestamp_pb2

    ours_pkg = "ferromq.proxy.proto.apache.rocketmq.v2"

    def load(side: str) -> dict[str, Any]:
        if side == "official":
            importlib.import_module("rocketmq")  # the client as applications import it
            pkg = "rocketmq.grpc_protocol"
            stubs = ["service_pb2_grpc"]  # its admin_pb2_grpc imports a top-level `admin_pb2`
        else:
            pkg = ours_pkg
            stubs = ["service_pb2_grpc", "admin_pb2_grpc"]
        mods = {s: importlib.import_module(f"{pkg}.{s}_pb2") for s in ("definition", "service", "admin")}
        for s in stubs:
            importlib.import_module(f"{pkg}.{s}")
        return mods

    second = "official" if first == "ours" else "ours"
    sides = {first: load(first)}
    sides[second] = load(second)

    def send_request(side: str) -> Any:
        defs, svc = sides[side]["definition"], sides[side]["service"]
        req = svc.SendMessageRequest()
        msg = req.messages.add()
        msg.topic.name = "Orders"
        msg.body = b"hello"
        msg.user_properties["k"] = "v"
        props = msg.system_properties
        props.message_id = "0102FC0000000001"
        props.message_type = defs.TRANSACTION
        props.born_timestamp.CopyFrom(timestamp_pb2.Timestamp(seconds=1_700_000_000, nanos=5))
        props.orphaned_transaction_recovery_duration.CopyFrom(duration_pb2.Duration(seconds=30))
        return req

    def end_transaction(side: str) -> Any:
        defs, svc = sides[side]["definition"], sides[side]["service"]
        return svc.EndTransactionRequest(
            topic=defs.Resource(name="Orders"),
            message_id="0102FC0000000001",
            transaction_id="tx-1",
            resolution=defs.COMMIT,
            source=defs.SOURCE_SERVER_CHECK,
        )

    def telemetry(side: str) -> Any:
        defs, svc = sides[side]["definition"], sides[side]["service"]
        settings = defs.Settings(client_type=defs.PRODUCER, publishing=defs.Publishing(max_body_size=4096))
        settings.request_timeout.CopyFrom(duration_pb2.Duration(seconds=3))
        return svc.TelemetryCommand(settings=settings)

    def log_level(side: str) -> Any:
        admin = sides[side]["admin"]
        return admin.ChangeLogLevelRequest(level=admin.ChangeLogLevelRequest.WARN)

    wire: dict[str, str] = {}
    for build in (send_request, end_transaction, telemetry, log_level):
        ours, official = build("ours"), build("official")
        data = ours.SerializeToString(deterministic=True)
        if data != official.SerializeToString(deterministic=True):
            raise AssertionError(f"{build.__name__}: ours and the official classes encode differently")
        if type(official).FromString(data) != official or type(ours).FromString(data) != ours:
            raise AssertionError(f"{build.__name__}: a side does not read back the other's bytes")
        wire[build.__name__] = data.hex()

    # A message of one side inside a message of the other, both ways.
    mixed = sides["ours"]["service"].SendMessageRequest(
        messages=[sides["official"]["definition"].Message(body=b"x")]
    )
    mixed_back = sides["official"]["service"].SendMessageRequest()
    mixed_back.messages.add().CopyFrom(sides["ours"]["definition"].Message(body=b"x"))
    if mixed.SerializeToString() != mixed_back.SerializeToString():
        raise AssertionError("a message of one side nested in the other's encodes differently")

    return {
        "imported": [first, second],
        "file_names": {s: sides["ours"][s].DESCRIPTOR.name for s in sides["ours"]},
        "same_descriptor": {
            s: sides["ours"][s].DESCRIPTOR is sides["official"][s].DESCRIPTOR for s in sides["ours"]
        },
        "wire": wire,
    }


def _in_client5(tmp: Path, func: Any, *args: str, pythonpath: str | None) -> Any:
    """Runs `func(*args)` (a self-contained function of this module) in the client's environment, with
    `pythonpath` as PYTHONPATH, and returns its JSON result."""
    code = (
        "from __future__ import annotations\nfrom typing import Any\n"
        f"{inspect.getsource(func)}\nimport json\nprint(json.dumps({func.__name__}(*{args!r})))\n"
    )
    # The client makes ~/logs/rocketmq_python when imported: HOME is a temporary directory.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HOME": str(tmp)}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    r = subprocess.run(
        [client5_python(), "-c", code],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        cwd=tmp,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    # protobuf's import errors quote the whole serialized descriptor: keep each line short.
    stderr = "\n".join(line[:400] for line in r.stderr.splitlines()[-40:])
    call = f"{func.__name__}{args!r}"
    assert r.returncode == 0, f"{call} failed in {client5_python()} ({r.returncode}):\n{stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def _as_text(raw: bytes) -> list[str]:
    return text_format.MessageToString(descriptor_pb2.FileDescriptorProto.FromString(raw)).splitlines()


@pytest.fixture(scope="module")
def official(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    result: dict[str, list[str]] = _in_client5(
        tmp_path_factory.mktemp("client5"), official_files, pythonpath=None
    )
    return result


@pytest.mark.parametrize("stem", FILES)
def test_serialized_descriptors_are_identical(official: dict[str, list[str]], stem: str) -> None:
    """The bytes our generated module registers are the bytes the official module registers."""
    name, encoded = official[stem]
    theirs = base64.b64decode(encoded)
    ours = importlib.import_module(f"{OURS}.{stem}_pb2").DESCRIPTOR
    assert (ours.name, name) == (f"{stem}.proto", f"{stem}.proto")
    if ours.serialized_pb != theirs:
        diff = difflib.unified_diff(
            _as_text(theirs), _as_text(ours.serialized_pb), "official", "ferromq", lineterm=""
        )
        pytest.fail(
            f"{stem}.proto: the serialized descriptors differ (order, options or imports; then run "
            "scripts/gen_protos.py):\n" + "\n".join(list(diff)[:80])
        )


@pytest.mark.parametrize("first", ["ours", "official"])
def test_both_import_in_one_process(tmp_path: Path, first: str) -> None:
    seen = _in_client5(tmp_path, coexist, first, pythonpath=str(ROOT / "python"))
    assert seen["imported"] == [first, "official" if first == "ours" else "ours"]
    assert seen["file_names"] == {s: f"{s}.proto" for s in FILES}
    # One descriptor per file: the second import reused the first's.
    assert seen["same_descriptor"] == dict.fromkeys(FILES, True)
    assert set(seen["wire"]) == {"send_request", "end_transaction", "telemetry", "log_level"}
