"""ferromq's apache.rocketmq.v2 definitions (python/ferromq/proxy/proto) against the contract as the official
Python 5.x client ships it (rocketmq-python-client's `rocketmq.grpc_protocol` stubs): every message, enum,
field (name, number, type, label, type name, oneof), service and method (input, output, streaming) the
same, and the gRPC stubs register the same method paths with the same call kinds. Also: the committed
generated modules are exactly what scripts/gen_protos.py makes from the .proto files.

The official stubs are not imported here: their package `rocketmq` is also the C++ client's (the `test`
extra), which this environment has. (The two sets of protocol modules themselves can share a process: see
test_proto_coexist.py.) A child process in the client's own environment (`client5_python()`,
tools/apache_rocketmq.py) runs `describe` on the official package and prints the result; this process runs
it on ferromq's.
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import client5_python
from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parents[2]
OURS = "ferromq.proxy.proto.apache.rocketmq.v2"
OFFICIAL = "rocketmq.grpc_protocol"
FILES = ("definition", "service", "admin")
CHILD_TIMEOUT = 120.0

# The RPCs every 5.x client relies on (see the 5.x facts sheet); the comparison below covers all of them,
# these only guard against comparing two empty sets.
CORE_RPCS = {
    "QueryRoute",
    "Heartbeat",
    "SendMessage",
    "QueryAssignment",
    "ReceiveMessage",
    "AckMessage",
    "ForwardMessageToDeadLetterQueue",
    "EndTransaction",
    "Telemetry",
    "NotifyClientTermination",
    "ChangeInvisibleDuration",
    "RecallMessage",
}


def describe(package: str) -> dict[str, Any]:
    """For the `definition`, `service` and `admin` modules of `package`: each file's serialized
    FileDescriptorProto (base64), and for each gRPC stub class of `service_pb2_grpc` the (method path, call
    kind, response type) its constructor registers on a channel. (The client's `admin_pb2_grpc` cannot be
    imported: it imports `admin_pb2` as a top-level module. The Admin service is compared through its
    descriptor.) Self-contained: its source also runs in the child process."""
    import base64
    import importlib

    class Channel:
        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def _register(self, kind: str, path: str, **kwargs: Any) -> None:
            owner = getattr(kwargs.get("response_deserializer"), "__self__", None)
            self.calls.append([path, kind, owner.DESCRIPTOR.full_name if owner is not None else ""])

        def unary_unary(self, path: str, **kwargs: Any) -> None:
            self._register("unary_unary", path, **kwargs)

        def unary_stream(self, path: str, **kwargs: Any) -> None:
            self._register("unary_stream", path, **kwargs)

        def stream_unary(self, path: str, **kwargs: Any) -> None:
            self._register("stream_unary", path, **kwargs)

        def stream_stream(self, path: str, **kwargs: Any) -> None:
            self._register("stream_stream", path, **kwargs)

    files: dict[str, str] = {}
    stubs: dict[str, list[list[str]]] = {}
    for name in ("definition", "service", "admin"):
        pb2 = importlib.import_module(f"{package}.{name}_pb2")
        files[name] = base64.b64encode(pb2.DESCRIPTOR.serialized_pb).decode()
    grpc_module = importlib.import_module(f"{package}.service_pb2_grpc")
    for attr in sorted(dir(grpc_module)):
        if attr.endswith("Stub") and isinstance(getattr(grpc_module, attr), type):
            channel = Channel()
            getattr(grpc_module, attr)(channel)
            stubs[attr] = sorted(channel.calls)
    return {"files": files, "stubs": stubs}


def _official(tmp: Path) -> dict[str, Any]:
    code = (
        "from __future__ import annotations\nfrom typing import Any\n"
        f"{inspect.getsource(describe)}\nimport json\nprint(json.dumps(describe({OFFICIAL!r})))\n"
    )
    # The client makes ~/logs/rocketmq_python when imported: HOME is a temporary directory.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HOME": str(tmp)}
    r = subprocess.run(
        [client5_python(), "-c", code],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        cwd=tmp,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, f"describing {OFFICIAL} failed ({r.returncode}):\n{r.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def _contract(described: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What of the described files reaches the wire or a stub, keyed by full name: messages (with their
    fields and oneofs), enums (with their values), services (with their methods), and the package and
    syntax of each file; each entry names the file (definition, service or admin) that declares it."""
    out: dict[str, dict[str, Any]] = {"files": {}, "messages": {}, "enums": {}, "services": {}}
    types = descriptor_pb2.FieldDescriptorProto.Type
    labels = descriptor_pb2.FieldDescriptorProto.Label

    def enum(e: descriptor_pb2.EnumDescriptorProto, scope: str, stem: str) -> None:
        out["enums"][f"{scope}.{e.name}"] = {
            "file": stem,
            "values": {v.name: v.number for v in e.value},
        }

    def message(m: descriptor_pb2.DescriptorProto, scope: str, stem: str) -> None:
        full = f"{scope}.{m.name}"
        oneofs = [o.name for o in m.oneof_decl]
        out["messages"][full] = {
            "file": stem,
            "map_entry": m.options.map_entry,
            "oneofs": sorted(oneofs),
            "fields": {
                f.name: {
                    "number": f.number,
                    "type": types.Name(f.type),
                    "label": labels.Name(f.label),
                    "type_name": f.type_name,
                    "oneof": oneofs[f.oneof_index] if f.HasField("oneof_index") else None,
                    "proto3_optional": f.proto3_optional,
                }
                for f in m.field
            },
        }
        for nested in m.nested_type:
            message(nested, full, stem)
        for e in m.enum_type:
            enum(e, full, stem)

    for stem, raw in described["files"].items():
        fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(raw))
        scope = f".{fd.package}"
        out["files"][stem] = {"package": fd.package, "syntax": fd.syntax}
        for m in fd.message_type:
            message(m, scope, stem)
        for e in fd.enum_type:
            enum(e, scope, stem)
        for s in fd.service:
            out["services"][f"{scope}.{s.name}"] = {
                "file": stem,
                "methods": {
                    x.name: {
                        "input": x.input_type,
                        "output": x.output_type,
                        "client_streaming": x.client_streaming,
                        "server_streaming": x.server_streaming,
                    }
                    for x in s.method
                },
            }
    return out


def _differences(ours: dict[str, Any], official: dict[str, Any], what: str) -> list[str]:
    """One line per name missing, extra or different (and per differing member of it)."""
    found = [
        f"{what} {name}: missing (the official stubs have it)" for name in sorted(official.keys() - ours)
    ]
    found += [f"{what} {name}: not in the official stubs" for name in sorted(ours.keys() - official)]
    for name in sorted(ours.keys() & official):
        mine, theirs = ours[name], official[name]
        if mine == theirs:
            continue
        if isinstance(mine, dict) and isinstance(theirs, dict):
            for key in sorted(mine.keys() | theirs.keys()):
                a, b = mine.get(key), theirs.get(key)
                if a != b and isinstance(a, dict) and isinstance(b, dict):
                    found += _differences(a, b, f"{what} {name} {key}")
                elif a != b:
                    found.append(f"{what} {name} {key}: ours {a!r}, official {b!r}")
        else:
            found.append(f"{what} {name}: ours {mine!r}, official {theirs!r}")
    return found


@pytest.fixture(scope="module")
def described(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return {"ours": describe(OURS), "official": _official(tmp_path_factory.mktemp("client5"))}


@pytest.fixture(scope="module")
def contracts(described: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    return {side: _contract(d) for side, d in described.items()}


def test_the_official_stubs_were_read(contracts: dict[str, dict[str, dict[str, Any]]]) -> None:
    official = contracts["official"]
    assert set(official["files"]) == set(FILES)
    methods = official["services"][".apache.rocketmq.v2.MessagingService"]["methods"]
    assert CORE_RPCS <= set(methods)
    assert len(official["messages"]) > 50 and len(official["enums"]) > 10


@pytest.mark.parametrize("what", ["files", "messages", "enums", "services"])
def test_definitions_match_the_official_stubs(
    contracts: dict[str, dict[str, dict[str, Any]]], what: str
) -> None:
    problems = _differences(contracts["ours"][what], contracts["official"][what], what)
    assert not problems, "\n".join(problems)


def test_grpc_stubs_match_the_official_stubs(described: dict[str, dict[str, Any]]) -> None:
    """Each stub class calls the same method paths with the same call kinds and response types."""
    ours, official = described["ours"]["stubs"], described["official"]["stubs"]
    assert set(official) == {"MessagingServiceStub"}
    assert ours == official


def test_streaming_rpcs(contracts: dict[str, dict[str, dict[str, Any]]]) -> None:
    """ReceiveMessage and PullMessage stream their answers, Telemetry both ways; the rest are unary."""
    methods = contracts["ours"]["services"][".apache.rocketmq.v2.MessagingService"]["methods"]
    streaming = {
        name: (m["client_streaming"], m["server_streaming"])
        for name, m in methods.items()
        if m["client_streaming"] or m["server_streaming"]
    }
    assert streaming == {
        "ReceiveMessage": (False, True),
        "PullMessage": (False, True),
        "Telemetry": (True, True),
    }


def test_generated_modules_are_fresh() -> None:
    """The committed *_pb2.py / *_pb2.pyi / *_pb2_grpc.py are what scripts/gen_protos.py generates now
    (with pyproject's pinned grpcio-tools) from the committed .proto files."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, (
        f"run `python scripts/gen_protos.py` and commit its output:\n{r.stdout}{r.stderr[-6000:]}"
    )
