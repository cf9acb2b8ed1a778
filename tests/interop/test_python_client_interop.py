"""Interop: ferromq's own Python client (python/ferromq/client) with the OFFICIAL RocketMQ clients, through
a real `ferromq serve` process (the module-scoped `ferromq_server` fixture of conftest.py), both ways.

- Python Producer -> C++ PushConsumer (concurrently and orderly): sync sends with tags, keys and user
  properties (non-ASCII too), bodies > 4 KiB (compressed by the Python client), a batch and an orderly
  stream by sharding key.
- C++ producer (sync, batch, > 4 KiB bodies) -> Python PushConsumer and Python PullConsumer.
- Python Producer -> Java DefaultMQPushConsumer, and Java DefaultMQProducer -> Python PushConsumer, with
  binary bodies (every byte value) and compressed ones.
- C++ orderly producer -> Python orderly PushConsumer: per-key order.

Every message body starts with `<id>|` (what cpp_scenarios.py reports as the id). Checked on every
message: the body (length and SHA-256, the exact bytes with Java), tags, keys, user properties, the
message id the sender got (UNIQ_KEY) and its queue position; exactly-once delivery.

The C++ client (PyPI rocketmq 0.4.4) runs in child processes (cpp_scenarios.py), the Java client
(rocketmq-client 4.9.7) in JVMs (`java -cp ferromq-interop.jar io.ferromq.interop.Generic`, see
java/src/main/java/io/ferromq/interop/Generic.java; the jar is built by test_java_client's `jar` fixture).
The Python client runs in the test process, each part under `asyncio.run(asyncio.wait_for(..., 60))`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ferromq.client import (
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    ConsumeStatus,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    SendResult,
    SendStatus,
)
from tests.interop.cpp_kit import cpp_client_problem, scenario_argv

from . import test_java_client as java

pytestmark = [pytest.mark.timeout(300)]

# The jar fixture of the Java tests: `mvn package` once per module (includes Generic.java).
jar = java.jar

PY_TIMEOUT = 60.0
NOTE = "h\u00e9llo \u2192 \u2713 \u4e2d\u6587 \u00fc\u00df"
COMPRESSED = 0x1
BINARY = bytes(range(256))  # every byte value, NULs included
Record = dict[str, Any]


def run_py(coro: Coroutine[Any, Any, Any]) -> Any:
    """The Python client, in this process, bounded."""
    return asyncio.run(asyncio.wait_for(coro, PY_TIMEOUT))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def text_body(msg_id: str, size: int = 0) -> bytes:
    """`<id>|` and printable filler up to `size` bytes (the C++ wrapper reads bodies as C strings)."""
    head = f"{msg_id}|".encode()
    filler = bytes(33 + (i * 7 + i // 91) % 94 for i in range(max(0, size - len(head))))
    return head + filler


def binary_body(msg_id: str) -> bytes:
    return f"{msg_id}|{NOTE}|".encode() + BINARY


def large_body(msg_id: str, size: int) -> bytes:
    """Compressible text, > 4 KiB: the producers zlib-compress it."""
    out = bytearray(f"{msg_id}|".encode())
    line = 0
    while len(out) < size:
        out += f"{msg_id} line {line:05d}: the quick brown fox jumps over the lazy dog {NOTE}\n".encode()
        line += 1
    return bytes(out)


def id_of(body: bytes) -> str:
    return body.split(b"|", 1)[0].decode("utf-8", "replace")


def duplicates(ids: list[str]) -> dict[str, int]:
    return {k: v for k, v in Counter(ids).items() if v > 1}


def _tail(text: str, limit: int = 8000) -> str:
    return text if len(text) <= limit else f"... ({len(text) - limit} characters omitted)\n{text[-limit:]}"


# -- what the Python side sends and receives ----------------------------------------------------------


@dataclass
class PySent:
    """One message the Python producer sent, with its SendResult (for a batch: the batch's, `index` is
    the message's place in it)."""

    id: str
    kind: str
    msg: Message
    result: SendResult
    index: int = 0
    shard: str | None = None

    @property
    def msg_id(self) -> str:
        return self.result.msg_id.split(",")[self.index]

    @property
    def offset_msg_id(self) -> str:
        return self.result.offset_msg_id.split(",")[self.index]

    @property
    def queue_id(self) -> int:
        return self.result.message_queue.queue_id

    @property
    def queue_offset(self) -> int:
        return self.result.queue_offset + self.index

    @property
    def keys(self) -> str:
        k = self.msg.keys
        return k if isinstance(k, str) else " ".join(k or [])


def py_record(m: ReceivedMessage) -> Record:
    return {
        "id": id_of(m.body),
        "topic": m.topic,
        "body": m.body,
        "body_len": len(m.body),
        "body_sha": sha(m.body),
        "tags": m.tags,
        "keys": m.keys,
        "props": dict(m.properties),
        "msg_id": m.msg_id,
        "offset_msg_id": m.offset_msg_id,
        "queue_id": m.queue.queue_id,
        "queue_offset": m.queue_offset,
        "sys_flag": m.sys_flag,
        "reconsume_times": m.reconsume_times,
        "commitlog_offset": m.commitlog_offset,
        "store_host": m.store_host,
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "t": time.monotonic(),
        "thread": threading.get_ident(),
    }


async def produce_python(namesrv: str, group: str, plan: list[tuple[str, Any]]) -> list[PySent]:
    """Sends `plan` with a Python Producer: ("send", Message), ("orderly", (Message, key)) or
    ("batch", [Message, ...]); the message ids are the body prefixes."""
    sent: list[PySent] = []
    async with Producer(group, namesrv, send_timeout=10.0) as producer:
        for kind, what in plan:
            if kind == "send":
                r = await producer.send(what)
                sent.append(PySent(id_of(what.body), kind, what, r))
            elif kind == "orderly":
                msg, key = what
                r = await producer.send_orderly(msg, key)
                sent.append(PySent(id_of(msg.body), kind, msg, r, shard=key))
            elif kind == "batch":
                r = await producer.send_batch(what)
                assert len(r.msg_id.split(",")) == len(what), f"batch SendResult.msg_id {r.msg_id!r}"
                assert len(r.offset_msg_id.split(",")) == len(what), r
                for i, msg in enumerate(what):
                    sent.append(PySent(id_of(msg.body), kind, msg, r, index=i))
            else:
                raise AssertionError(kind)
    for s in sent:
        assert s.result.status == SendStatus.SEND_OK, s
    return sent


@dataclass
class PyConsumed:
    deliveries: list[Record] = field(default_factory=list)  # in delivery order
    errors: list[str] = field(default_factory=list)


async def consume_python_push(
    namesrv: str,
    topic: str,
    group: str,
    want: set[str],
    *,
    orderly: bool = False,
    sync_listener: bool = False,
    listener_sleep: float = 0.0,
    wait: float = 40.0,
    linger: float = 1.0,
) -> PyConsumed:
    """A Python PushConsumer (CLUSTERING, from the first offset) until every id of `want` was consumed,
    then `linger` seconds more (duplicates would show)."""
    got = PyConsumed()
    lock = threading.Lock()
    busy: Counter[int] = Counter()  # queue id -> listener calls in progress

    def record(msgs: list[ReceivedMessage]) -> None:
        with lock:
            for m in msgs:
                got.deliveries.append(py_record(m))
            for q in {m.queue.queue_id for m in msgs}:
                busy[q] += 1
                if orderly and busy[q] > 1:
                    got.errors.append(f"queue {q}: two orderly listener calls at once")

    def release(msgs: list[ReceivedMessage]) -> None:
        with lock:
            for q in {m.queue.queue_id for m in msgs}:
                busy[q] -= 1

    ok = ConsumeOrderlyStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS

    def sync_listener_fn(msgs: list[ReceivedMessage]) -> Any:
        record(msgs)
        try:
            if listener_sleep:
                time.sleep(listener_sleep)
        finally:
            release(msgs)
        return ok

    async def async_listener_fn(msgs: list[ReceivedMessage]) -> Any:
        record(msgs)
        try:
            if listener_sleep:
                await asyncio.sleep(listener_sleep)
        finally:
            release(msgs)
        return ok

    consumer = PushConsumer(
        group,
        namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        rebalance_interval=5.0,
    )
    consumer.subscribe(topic, "*")
    consumer.register_listener(sync_listener_fn if sync_listener else async_listener_fn, orderly=orderly)
    await consumer.start()
    try:
        until = time.monotonic() + wait
        while time.monotonic() < until:
            with lock:
                seen = {r["id"] for r in got.deliveries}
            if want <= seen:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(linger)
    finally:
        await consumer.stop()
    return got


async def consume_python_pull(
    namesrv: str, topic: str, group: str, want: set[str], wait: float = 30.0
) -> Any:
    """A Python PullConsumer that assigns itself every queue of the topic and polls from the start."""
    got: list[Record] = []
    pc = PullConsumer(
        group,
        namesrv,
        auto_commit=False,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        pull_batch_size=8,
    )
    await pc.start()
    try:
        queues = await pc.fetch_queues(topic)
        pc.assign(queues)
        until = time.monotonic() + wait
        while time.monotonic() < until and not want <= {r["id"] for r in got}:
            got += [py_record(m) for m in await pc.poll(timeout=1.0)]
        # Anything more (a duplicate) would come now.
        got += [py_record(m) for m in await pc.poll(timeout=0.5)]
        positions = {q.queue_id: pc.position(q) for q in queues}
    finally:
        await pc.stop()
    return got, sorted(q.queue_id for q in queues), positions


# -- the C++ client (child processes) --------------------------------------------------------------------


@dataclass
class Cpp:
    """Runs cpp_scenarios.py children one at a time; keeps their outputs for failure reports."""

    namesrv: str
    workdir: Path
    runs: list[tuple[str, list[str], Path]] = field(default_factory=list)

    def run(self, scenario: str, timeout: float = 60.0, **opts: Any) -> Record:
        name = f"{len(self.runs)}-{scenario}"
        home = self.workdir / f"cpp-{name}"  # the C++ log goes to $HOME/logs/rocketmq-cpp
        home.mkdir(parents=True)
        argv = scenario_argv(scenario, self.namesrv, timeout - 5, **opts)
        self.runs.append((name, argv, home))
        env = {**os.environ, "HOME": str(home), "PYTHONUNBUFFERED": "1"}
        with open(home / "stdout", "wb") as out, open(home / "stderr", "wb") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
                pytest.fail(f"C++ child {name} hung (> {timeout} s)\n{self.describe(name, argv, home)}")
        lines = [
            x for x in (home / "stdout").read_text("utf-8", "replace").splitlines() if x.startswith("RESULT ")
        ]
        if proc.returncode != 0 or not lines:
            pytest.fail(
                f"C++ child {name} failed (exit code {proc.returncode})\n{self.describe(name, argv, home)}"
            )
        return dict(json.loads(lines[-1][len("RESULT ") :]))

    def produce(self, topic: str, count: int, mode: str = "sync", **opts: Any) -> list[Record]:
        result = self.run("produce", topic=topic, group=f"PG_{topic}", mode=mode, count=count, **opts)
        assert result["errors"] == [], result["errors"]
        assert len(result["sent"]) == count, result
        assert all(r["status"] == 0 for r in result["sent"]), result["sent"]
        return list(result["sent"])

    @staticmethod
    def describe(name: str, argv: list[str], home: Path) -> str:
        parts = [f"===== {name}: $ {' '.join(argv)}"]
        for title in ("stdout", "stderr"):
            path = home / title
            if path.exists():
                parts.append(f"--- {title} ---\n{_tail(path.read_text('utf-8', 'replace'))}")
        for log in sorted(home.glob("logs/rocketmq-cpp/*")):
            parts.append(f"--- C++ log {log.name} ---\n{_tail(log.read_text('utf-8', 'replace'), 15000)}")
        return "\n".join(parts)

    def report(self) -> str:
        return "\n\n".join(self.describe(*r) for r in self.runs)


@pytest.fixture(scope="module")
def cpp_usable() -> None:
    problem = cpp_client_problem()
    if problem is not None:
        pytest.skip(f"the RocketMQ C++ client (PyPI rocketmq==0.4.4) is not usable: {problem}")


@pytest.fixture
def cpp(
    cpp_usable: None,
    ferromq_namesrv: str,
    tmp_path: Path,
    failure_sections: list[tuple[str, Callable[[], str]]],
) -> Cpp:
    clients = Cpp(ferromq_namesrv, tmp_path)
    failure_sections.append(("C++ client children", clients.report))
    return clients


# -- the Java client (JVMs) ------------------------------------------------------------------------------


@dataclass
class JavaRun:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    logs: Path
    results: list[Record]

    def events(self, name: str) -> list[Record]:
        return [r for r in self.results if r.get("event") == name]

    def describe(self) -> str:
        log = self.logs / "rocketmq_client.log"
        client = log.read_text(errors="replace").splitlines()[-60:] if log.is_file() else []
        return "\n".join(
            [
                f"$ {' '.join(self.argv)}",
                f"exit code {self.returncode}",
                "--- stdout (tail, long lines cut)",
                _tail(
                    "\n".join(x if len(x) < 800 else x[:800] + " ..." for x in self.stdout.splitlines()),
                    12000,
                ),
                "--- stderr (tail)",
                _tail(self.stderr, 6000),
                f"--- client log {log} (tail)",
                *client,
            ]
        )


@dataclass
class Java:
    jar: Path
    namesrv: str
    workdir: Path
    runs: list[JavaRun] = field(default_factory=list)

    def run(self, scenario: str, timeout: int = 45, **opts: Any) -> JavaRun:
        logs = self.workdir / f"java-{len(self.runs)}-{scenario}"
        logs.mkdir(parents=True)
        argv = [
            "java",
            f"-Drocketmq.client.logRoot={logs}",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            str(self.jar),
            "io.ferromq.interop.Generic",
            scenario,
            f"namesrv={self.namesrv}",
            f"timeout={timeout}",
            *(f"{k}={v}" for k, v in opts.items()),
        ]
        try:
            r = subprocess.run(argv, capture_output=True, timeout=timeout + 30, cwd=logs)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode("utf-8", "replace") if isinstance(e.stdout, bytes) else ""
            pytest.fail(f"Java {scenario} still running after {timeout + 30} s: {argv}\n{_tail(out)}")
        stdout, stderr = r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
        results = [json.loads(x[len("RESULT ") :]) for x in stdout.splitlines() if x.startswith("RESULT ")]
        run = JavaRun(argv, r.returncode, stdout, stderr, logs, results)
        self.runs.append(run)
        assert run.returncode == 0, f"Java {scenario} failed\n{run.describe()}"
        return run

    def report(self) -> str:
        return "\n\n".join(f"===== Java run {i}\n{r.describe()}" for i, r in enumerate(self.runs))


@pytest.fixture
def java_client(
    jar: Path, ferromq_namesrv: str, tmp_path: Path, failure_sections: list[tuple[str, Callable[[], str]]]
) -> Java:
    if not java.HAVE_TOOLS:
        pytest.skip("the Java interop tests need `mvn` and `java` on PATH")
    client = Java(jar, ferromq_namesrv, tmp_path)
    failure_sections.append(("Java client runs", client.report))
    return client


@pytest.fixture
def broker(ferromq_server: Any) -> str:
    """The broker's host:port (what offsetMsgIds and store hosts say)."""
    return str(ferromq_server.broker_addr)


def unique(kind: str) -> str:
    return f"{kind}_{uuid.uuid4().hex[:10]}"


# -- checks ----------------------------------------------------------------------------------------------


def check_py_sent_vs_cpp(s: PySent, g: Record, topic: str, extra_props: list[str]) -> None:
    """A message the Python producer sent, as the C++ push consumer reported it."""
    body = s.msg.body
    assert g["topic"] == topic
    assert (g["body_len"], g["body_sha"]) == (len(body), sha(body)), f"{s.id}: body differs"
    assert g["tags"] == (s.msg.tags or ""), s.id
    assert g["keys"] == s.keys, s.id
    for name in extra_props:
        assert g["props"][name] == s.msg.properties.get(name, ""), (s.id, name, g["props"])
    assert g["uniq_key"] == s.msg_id, f"{s.id}: UNIQ_KEY {g['uniq_key']} != Python SendResult {s.msg_id}"
    assert g["msg_id"] == s.msg_id, f"{s.id}: the C++ message id {g['msg_id']} != {s.msg_id}"
    assert (g["queue_id"], g["queue_offset"]) == (s.queue_id, s.queue_offset), s.id
    assert g["reconsume_times"] == 0, s.id
    assert 0 < g["born_timestamp"] <= g["store_timestamp"] + 1000, s.id


def check_cpp_sent_vs_py(s: Record, g: Record, topic: str, broker: str) -> None:
    """A message the C++ producer sent, as a Python consumer received it (from `broker`, host:port)."""
    assert g["topic"] == topic
    assert (g["body_len"], g["body_sha"]) == (s["body_len"], s["body_sha"]), f"{s['id']}: body differs"
    assert g["tags"] == s.get("tags"), s["id"]
    assert " ".join(g["keys"]) == s.get("keys", ""), s["id"]
    for name, value in s["props"].items():
        assert g["props"].get(name) == value, (s["id"], name, g["props"])
    assert g["msg_id"] == g["props"]["UNIQ_KEY"], s["id"]
    if s["msg_id"]:  # the C++ client leaves a batch's SendResult.msg_id empty
        assert g["msg_id"] == s["msg_id"], f"{s['id']}: msg_id {g['msg_id']} != C++ SendResult {s['msg_id']}"
    compressed = bool(g["sys_flag"] & COMPRESSED)
    assert compressed == (s["body_len"] > 4096), f"{s['id']}: sys_flag {g['sys_flag']:#x}"
    assert g["reconsume_times"] == 0, s["id"]
    check_stored_at(g, broker)


def check_stored_at(g: Record, broker: str) -> None:
    """offsetMsgId = the store host and the CommitLog offset of the record (what the broker said)."""
    host, port, offset = java.decode_offset_msg_id(g["offset_msg_id"])
    assert (f"{host}:{port}", offset) == (broker, g["commitlog_offset"]), (g["id"], g["offset_msg_id"])
    assert g["store_host"] == broker, g["id"]
    assert 0 < g["born_timestamp"] <= g["store_timestamp"] + 1000, g["id"]


# -- 1. Python Producer -> C++ PushConsumer -----------------------------------------------------------------


def python_plan_for_cpp(topic: str) -> list[tuple[str, Any]]:
    plan: list[tuple[str, Any]] = []
    for i in range(8):
        mid = f"s-{i}"
        props = {"seq": str(i), "note": f"{NOTE} {i}", "kind": "sync", "punct": f"a=b;c:d,e {i}"}
        msg = Message(
            topic, text_body(mid, 64), "TagA" if i % 2 == 0 else "TagB", [f"{mid}-k1", f"{mid}-k2"], props
        )
        plan.append(("send", msg))
    for i, size in enumerate((10 * 1024, 100 * 1024)):
        mid = f"big-{i}"
        msg = Message(topic, text_body(mid, size), "TagL", f"{mid}-k1 {mid}-k2", {"kind": "large"})
        plan.append(("send", msg))
    batch = [
        Message(
            topic,
            text_body(f"b-{i}", 32),
            "TagB",
            [f"b-{i}-k1", f"b-{i}-k2"],
            {"kind": "batch", "seq": str(i)},
        )
        for i in range(5)
    ]
    plan.append(("batch", batch))
    for j in range(6):
        for key in ("alpha", "beta", "gamma", "delta"):
            mid = f"o-{key}-{j}"
            props = {"kind": "orderly", "order": key, "seq": str(j)}
            plan.append(
                ("orderly", (Message(topic, text_body(mid, 48), "TagO", f"{mid}-k1 {mid}-k2", props), key))
            )
    return plan


def test_python_producer_to_cpp_push_consumers(cpp: Cpp, ferromq_namesrv: str) -> None:
    topic = unique("PyToCpp")
    sent = run_py(produce_python(ferromq_namesrv, f"PG_{topic}", python_plan_for_cpp(topic)))
    assert len(sent) == 8 + 2 + 5 + 24
    sent_by_id = {s.id: s for s in sent}
    assert len(sent_by_id) == len(sent)
    assert len({s.msg_id for s in sent}) == len(sent), "Python message ids are not unique"
    # The orderly stream: one queue per key, consecutive sends of a key at increasing offsets.
    per_key: dict[str, list[PySent]] = defaultdict(list)
    for s in sent:
        if s.shard:
            per_key[s.shard].append(s)
    for key, msgs in per_key.items():
        assert len({s.queue_id for s in msgs}) == 1, f"key {key} went to several queues"
        offsets = [s.queue_offset for s in msgs]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), (key, offsets)

    extra = ["note", "kind", "punct"]
    result = cpp.run(
        "push", topic=topic, group=f"CG_{topic}", expect=len(sent), props=extra, linger=1.0, wait=40
    )
    got = result["received"]
    assert result["failed"] == []
    assert sorted(r["id"] for r in got) == sorted(sent_by_id), "the C++ consumer did not get every message"
    assert not duplicates([r["id"] for r in got]), (
        f"delivered more than once: {duplicates([r['id'] for r in got])}"
    )
    for g in got:
        s = sent_by_id[g["id"]]
        check_py_sent_vs_cpp(s, g, topic, [*extra, "seq", "order"])
        if len(s.msg.body) > 4096:
            # What the broker stored (and the C++ client inflated) is the compressed body.
            assert g["store_size"] < len(s.msg.body), f"{s.id} was not stored compressed: {g['store_size']}"

    # The orderly stream again, through a C++ ORDERLY push consumer: per key, in send order.
    orderly_ids = {s.id for s in sent if s.shard}
    result = cpp.run(
        "push",
        topic=topic,
        group=f"CGO_{topic}",
        orderly=True,
        expect=len(orderly_ids),
        expect_prefix="o-",
        props=extra,
        threads=4,
        linger=1.0,
        wait=40,
    )
    got = [r for r in result["received"] if r["id"] in orderly_ids]
    assert sorted(r["id"] for r in got) == sorted(orderly_ids)
    assert not duplicates([r["id"] for r in got])
    seqs: dict[str, list[int]] = defaultdict(list)
    for g in got:  # in delivery order
        s = sent_by_id[g["id"]]
        check_py_sent_vs_cpp(s, g, topic, [*extra, "seq", "order"])
        seqs[g["props"]["order"]].append(int(g["props"]["seq"]))
    assert dict(seqs) == {key: list(range(6)) for key in per_key}, f"per-key delivery order: {dict(seqs)}"


# -- 2. C++ producer -> Python PushConsumer and PullConsumer ------------------------------------------------


def test_cpp_producer_to_python_push_and_pull_consumers(cpp: Cpp, ferromq_namesrv: str, broker: str) -> None:
    topic = unique("CppToPy")
    props = [f"note={NOTE} {{i}}", "plain=value-{i}", "punct=x=y;z:w,{i}"]
    sent = cpp.produce(topic, 10, tags="TagA,TagB", keys=True, prop=props, prefix="s", body_size=100)
    sent += cpp.produce(topic, 5, mode="batch", tags="TagC", keys=True, prop=["bp=batch-{i}"], prefix="b")
    sent += cpp.produce(topic, 3, tags="TagL", keys=True, prop=props, prefix="big", body_size=5000)
    sent += cpp.produce(topic, 1, tags="TagL", keys=True, prefix="huge", body_size=100_000)
    sent_by_id = {s["id"]: s for s in sent}
    assert len(sent_by_id) == len(sent) == 19
    want = set(sent_by_id)

    # Python PushConsumer, concurrently (a sync listener: the client runs it in worker threads).
    push = run_py(
        consume_python_push(
            ferromq_namesrv, topic, f"CG_{topic}", want, sync_listener=True, listener_sleep=0.01
        )
    )
    got = push.deliveries
    assert push.errors == []
    assert sorted(r["id"] for r in got) == sorted(want), "the Python PushConsumer did not get every message"
    assert not duplicates([r["id"] for r in got]), (
        f"delivered more than once: {duplicates([r['id'] for r in got])}"
    )
    batch_positions = []
    for g in got:
        s = sent_by_id[g["id"]]
        check_cpp_sent_vs_py(s, g, topic, broker)
        if g["id"].startswith("b-"):
            batch_positions.append((g["queue_id"], g["queue_offset"], int(g["props"]["seq"])))
        else:
            assert g["queue_offset"] == s["offset"], (s, g["queue_offset"])
    assert len({g["msg_id"] for g in got}) == len(got), "message ids are not unique"
    # The batch: one queue, consecutive offsets from the send result's, in batch order.
    batch_positions.sort(key=lambda p: p[2])
    assert len({q for q, _, _ in batch_positions}) == 1, batch_positions
    first = sent_by_id["b-0"]["offset"]
    assert [o for _, o, _ in batch_positions] == list(range(first, first + 5)), batch_positions

    # Python PullConsumer: every queue assigned, polled from the first offset.
    pulled, queues, positions = run_py(consume_python_pull(ferromq_namesrv, topic, f"PC_{topic}", want))
    assert queues == [0, 1, 2, 3]
    assert sorted(r["id"] for r in pulled) == sorted(want), (
        "the Python PullConsumer did not get every message"
    )
    pushed = {g["id"]: g for g in got}
    per_queue: dict[int, list[int]] = defaultdict(list)
    for p in pulled:
        check_cpp_sent_vs_py(sent_by_id[p["id"]], p, topic, broker)
        assert (p["msg_id"], p["queue_id"], p["queue_offset"]) == (
            pushed[p["id"]]["msg_id"],
            pushed[p["id"]]["queue_id"],
            pushed[p["id"]]["queue_offset"],
        )
        per_queue[p["queue_id"]].append(p["queue_offset"])
    for q, offsets in per_queue.items():
        assert offsets == list(range(len(offsets))), f"queue {q} polled out of order: {offsets}"
        assert positions[q] == len(offsets), (q, positions)

    # The Python PushConsumer committed its offsets to the broker: a C++ consumer of the same group
    # continues after them, with only what was sent since.
    after = cpp.produce(topic, 4, prefix="after", tags="TagA", keys=True)
    result = cpp.run(
        "push", topic=topic, group=f"CG_{topic}", expect=4, expect_prefix="after", linger=1.0, wait=30
    )
    again = sorted(r["id"] for r in result["received"])
    assert again == sorted(r["id"] for r in after), f"the C++ member of the group got {again}"


# -- 3. Python <-> Java ----------------------------------------------------------------------------------


def test_python_producer_to_java_push_consumer(java_client: Java, ferromq_namesrv: str) -> None:
    topic = unique("PyToJava")
    plan: list[tuple[str, Any]] = []
    for i in range(6):
        mid = f"s-{i}"
        props = {"seq": str(i), "note": f"{NOTE} {i}", "kind": "sync"}
        msg = Message(topic, binary_body(mid), "TagA" if i % 2 else "TagB", [f"{mid}-k1", f"{mid}-k2"], props)
        plan.append(("send", msg))
    for i, size in enumerate((5000, 64 * 1024)):
        mid = f"big-{i}"
        plan.append(
            (
                "send",
                Message(topic, large_body(mid, size), "TagL", f"{mid}-k", {"kind": "large", "note": NOTE}),
            )
        )
    # Not compressible: sent as is.
    plan.append(("send", Message(topic, b"rnd-0|" + os.urandom(6000), "TagR", None, {"kind": "random"})))
    plan.append(
        (
            "batch",
            [
                Message(topic, binary_body(f"b-{i}"), "TagB", f"b-{i}-k", {"kind": "batch", "seq": str(i)})
                for i in range(4)
            ],
        )
    )
    for j in range(3):
        for key in ("k1", "k2"):
            mid = f"o-{key}-{j}"
            props = {"kind": "orderly", "order": key, "seq": str(j)}
            plan.append(("orderly", (Message(topic, binary_body(mid), "TagO", mid, props), key)))
    sent = run_py(produce_python(ferromq_namesrv, f"PG_{topic}", plan))
    sent_by_id = {s.id: s for s in sent}
    assert len(sent_by_id) == len(sent) == 6 + 2 + 1 + 4 + 6

    run = java_client.run("consume", topic=topic, group=f"CG_{topic}", expect=len(sent), linger=1500)
    got = run.events("received")
    (summary,) = run.events("summary")
    assert summary["distinct"] == len(sent)
    assert sorted(id_of(base64.b64decode(g["body"])) for g in got) == sorted(sent_by_id)
    assert summary["deliveries"] == len(sent), f"delivered more than once: {summary}"
    for g in got:
        body = base64.b64decode(g["body"])
        s = sent_by_id[id_of(body)]
        assert body == s.msg.body, f"{s.id}: body differs ({len(body)} vs {len(s.msg.body)} bytes)"
        assert (g["bodyLen"], g["bodySha"]) == (len(s.msg.body), sha(s.msg.body))
        assert g["topic"] == topic
        assert g.get("tags") == s.msg.tags, s.id
        assert g.get("keys") == (s.keys or None), s.id
        for name, value in s.msg.properties.items():
            assert g["properties"].get(name) == value, (s.id, name, g["properties"])
        assert g["msgId"] == s.msg_id, f"{s.id}: Java msgId {g['msgId']} != Python SendResult {s.msg_id}"
        assert g["properties"]["UNIQ_KEY"] == s.msg_id, s.id
        assert g["offsetMsgId"] == s.offset_msg_id, (
            f"{s.id}: offsetMsgId {g['offsetMsgId']} != {s.offset_msg_id}"
        )
        assert (g["queueId"], g["queueOffset"]) == (s.queue_id, s.queue_offset), s.id
        assert g["reconsumeTimes"] == 0, s.id
        compressed = bool(g["sysFlag"] & COMPRESSED)
        assert compressed == s.id.startswith("big-"), f"{s.id}: sysFlag {g['sysFlag']:#x}"


def java_spec_messages() -> list[Record]:
    msgs: list[Record] = []

    def add(mid: str, mode: str, body: bytes, tags: str | None, keys: list[str] | None, **props: str) -> None:
        m: Record = {"id": mid, "mode": mode, "body": base64.b64encode(body).decode()}
        if tags:
            m["tags"] = tags
        if keys:
            m["keys"] = keys
        m["props"] = props
        msgs.append(m)

    for i in range(6):
        tags, keys = "TagA" if i % 2 else "TagB", [f"s-{i}-k1", f"s-{i}-k2"]
        add(f"s-{i}", "sync", binary_body(f"s-{i}"), tags, keys, seq=str(i), note=f"{NOTE} {i}", kind="sync")
    for i, size in enumerate((5000, 12 * 1024)):
        add(f"big-{i}", "sync", large_body(f"big-{i}", size), "TagL", [f"big-{i}-k"], kind="large", note=NOTE)
    for i in range(4):
        add(f"b-{i}", "batch", binary_body(f"b-{i}"), "TagB", [f"b-{i}-k"], kind="batch", seq=str(i))
    for j in range(3):
        for shard in (1, 2):
            mid = f"o-{shard}-{j}"
            msgs.append(
                {
                    "id": mid,
                    "mode": "orderly",
                    "shard": shard,
                    "body": base64.b64encode(binary_body(mid)).decode(),
                    "tags": "TagO",
                    "keys": [mid],
                    "props": {"kind": "orderly", "order": str(shard), "seq": str(j)},
                }
            )
    return msgs


def test_java_producer_to_python_push_consumer(
    java_client: Java, ferromq_namesrv: str, broker: str, tmp_path: Path
) -> None:
    topic = unique("JavaToPy")
    spec_msgs = java_spec_messages()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"topic": topic, "group": f"PG_{topic}", "messages": spec_msgs}), "utf-8")
    run = java_client.run("produce", spec=spec)
    sent = {r["id"]: r for r in run.events("sent")}
    assert sorted(sent) == sorted(m["id"] for m in spec_msgs)
    assert all(r["status"] == "SEND_OK" for r in sent.values()), sent
    specs = {m["id"]: m for m in spec_msgs}

    got_all = run_py(consume_python_push(ferromq_namesrv, topic, f"CG_{topic}", set(specs)))
    got = got_all.deliveries
    assert sorted(g["id"] for g in got) == sorted(specs), "the Python PushConsumer did not get every message"
    assert not duplicates([g["id"] for g in got]), (
        f"delivered more than once: {duplicates([g['id'] for g in got])}"
    )
    for g in got:
        m, s = specs[g["id"]], sent[g["id"]]
        body = base64.b64decode(m["body"])
        assert g["body"] == body, f"{g['id']}: body differs ({g['body_len']} vs {len(body)} bytes)"
        assert g["body_sha"] == s["bodySha"]
        assert g["topic"] == topic
        assert g["tags"] == m.get("tags"), g["id"]
        assert g["keys"] == m.get("keys", []), g["id"]
        for name, value in m["props"].items():
            assert g["props"].get(name) == value, (g["id"], name, g["props"])
        assert g["msg_id"] == s["uniqKey"] == s["msgId"], f"{g['id']}: msg_id {g['msg_id']} != Java's {s}"
        assert g["offset_msg_id"] == s["offsetMsgId"], (g["id"], g["offset_msg_id"], s["offsetMsgId"])
        assert (g["queue_id"], g["queue_offset"]) == (s["queueId"], s["queueOffset"]), g["id"]
        assert g["reconsume_times"] == 0
        compressed = bool(g["sys_flag"] & COMPRESSED)
        assert compressed == g["id"].startswith("big-"), f"{g['id']}: sys_flag {g['sys_flag']:#x}"
        check_stored_at(g, broker)
    # The orderly sends: one queue per shard (mqs[shard % 4]), offsets in send order.
    for shard in (1, 2):
        recs = sorted((sent[f"o-{shard}-{j}"] for j in range(3)), key=lambda r: r["queueOffset"])
        assert {r["queueId"] for r in recs} == {shard % 4}
        assert [r["id"] for r in recs] == [f"o-{shard}-{j}" for j in range(3)]


# -- 4. C++ orderly producer -> Python orderly PushConsumer ------------------------------------------------


def test_cpp_orderly_producer_to_python_orderly_push_consumer(
    cpp: Cpp, ferromq_namesrv: str, broker: str
) -> None:
    topic = unique("CppOrderlyToPy")
    n, orders = 48, 6
    sent = cpp.produce(topic, n, mode="orderly", orders=orders, tags="TagO", keys=True, prefix="o")
    for s in sent:
        assert s["mq_size"] == 4 and s["queue"] == s["order"] % 4, s
    sent_by_id = {s["id"]: s for s in sent}

    consumed = run_py(
        consume_python_push(
            ferromq_namesrv, topic, f"CG_{topic}", set(sent_by_id), orderly=True, listener_sleep=0.005
        )
    )
    got = consumed.deliveries
    assert consumed.errors == [], consumed.errors
    assert sorted(g["id"] for g in got) == sorted(sent_by_id), (
        "the orderly consumer did not get every message"
    )
    assert not duplicates([g["id"] for g in got]), (
        f"delivered more than once: {duplicates([g['id'] for g in got])}"
    )
    per_order: dict[str, list[int]] = defaultdict(list)
    per_queue: dict[int, list[int]] = defaultdict(list)
    for g in got:  # in delivery order
        s = sent_by_id[g["id"]]
        check_cpp_sent_vs_py(s, g, topic, broker)
        assert (g["queue_id"], g["queue_offset"]) == (s["queue"], s["offset"]), (s, g)
        per_order[g["props"]["order"]].append(int(g["props"]["seq"]))
        per_queue[g["queue_id"]].append(g["queue_offset"])
    expected = defaultdict(list)
    for s in sent:
        expected[str(s["order"])].append(int(s["props"]["seq"]))
    assert dict(per_order) == dict(expected), "a key's messages were consumed out of order"
    for q, offsets in per_queue.items():
        assert offsets == list(range(len(offsets))), f"queue {q} consumed out of order: {offsets}"
