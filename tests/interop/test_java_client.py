"""Interop with the official Java client (org.apache.rocketmq:rocketmq-client 4.9.7) against a real
`ferromq serve` process.

The Maven project in `java/` is built once per module into `java/target/ferromq-interop.jar` (a
shaded jar); every scenario is one JVM run that prints `RESULT {json}` lines, which the tests check.
The scenarios bound their own waits; `subprocess.run` bounds them again.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ferromq.testing import BrokerProcess
from tests.interop.javabuild import build_interop_jar

HAVE_TOOLS = shutil.which("mvn") is not None and shutil.which("java") is not None

pytestmark = [
    pytest.mark.skipif(not HAVE_TOOLS, reason="the Java interop tests need `mvn` and `java` on PATH"),
    # The first test also builds the jar, which on a fresh machine downloads the client from Maven Central.
    pytest.mark.timeout(600),
]

# What scenario (a) sends, mirrored from Interop.java.
N = 8
KINDS = ("sync", "async", "oneway", "batch", "large")
NOTE = "h\u00e9llo \u2192 \u2713 \u4e2d\u6587"
COMPRESSED_FLAG = 0x1
RUN = uuid.uuid4().hex[:8]
TOPIC = f"InteropAll_{RUN}"


def tag_of(kind: str, idx: int) -> str:
    return "TagL" if kind == "large" else ("TagA" if idx % 2 == 0 else "TagB")


def expected_ids(tags: set[str] | None = None) -> set[str]:
    return {
        f"{kind}:{i}"
        for kind in KINDS
        for i in range(1 if kind == "large" else N)
        if tags is None or tag_of(kind, i) in tags
    }


# -- the broker process ------------------------------------------------------------------------


@dataclass
class Server:
    root: Path
    namesrv: str
    port: int
    log: Path

    def log_tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


@contextlib.contextmanager
def serving(root: Path, conf: Path | None = None) -> Iterator[Server]:
    """`ferromq -v serve [-c conf]` (a `ferromq.testing.BrokerProcess` in `root`) as a Server; after,
    stopped through its PID, it must exit with code 0 and no traceback in its log."""
    process = BrokerProcess(root, conf, start_timeout=30).start()
    srv = Server(root, process.namesrv, process.port, process.log_path)
    try:
        yield srv
    finally:
        rc = process.stop(timeout=30)
    assert rc == 0, f"ferromq serve did not exit cleanly on SIGTERM (exit code {rc}):\n{srv.log_tail()}"
    text = srv.log.read_text(errors="replace")
    assert "Traceback" not in text, f"the broker logged a traceback:\n{srv.log_tail(200)}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("ferromq-java")) as srv:
        yield srv


# -- the Java driver -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jar() -> Path:
    return build_interop_jar()


@dataclass
class Run:
    scenario: str
    returncode: int
    stdout: str
    stderr: str
    results: list[dict[str, Any]]
    client_log: Path
    server: Server

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.results if r.get("event") == name]

    @property
    def summary(self) -> dict[str, Any]:
        found = self.events("summary")
        assert found, f"{self.scenario} printed no summary\n{self.diagnostics()}"
        return found[-1]

    def diagnostics(self) -> str:
        fails = [line for line in self.stderr.splitlines() if line.startswith("FAIL")]
        log = self.client_log / "rocketmq_client.log"
        client = log.read_text(errors="replace").splitlines()[-40:] if log.is_file() else []
        return "\n".join(
            [
                f"scenario {self.scenario} exited with {self.returncode}",
                *fails,
                "--- stderr (tail)",
                self.stderr[-3000:],
                f"--- client log {log} (tail)",
                *client,
                "--- broker log (tail)",
                self.server.log_tail(40),
            ]
        )

    def assert_ok(self) -> None:
        assert self.returncode == 0, self.diagnostics()


def run_scenario(
    jar: Path,
    server: Server,
    scenario: str,
    timeout: int = 60,
    jvm: tuple[str, ...] = (),
    main: str | None = None,
    **opts: object,
) -> Run:
    """Runs one scenario of the interop jar (its default main, Interop, or the class `main`, then
    without a scenario argument); `jvm` adds JVM options (system properties)."""
    logs = server.root / "client-logs" / f"{scenario}-{uuid.uuid4().hex[:6]}"
    logs.mkdir(parents=True)
    entry = ["-jar", str(jar), scenario] if main is None else ["-cp", str(jar), main]
    cmd = [
        "java",
        f"-Drocketmq.client.logRoot={logs}",
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        *jvm,
        *entry,
        f"namesrv={server.namesrv}",
        f"timeout={timeout}",
        *(f"{k}={v}" for k, v in opts.items()),
    ]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60, cwd=logs)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
        pytest.fail(f"{scenario} still running after {timeout + 60} s\n{out[-3000:]}\n{server.log_tail()}")
    prefix = "RESULT "
    results = [json.loads(line[len(prefix) :]) for line in r.stdout.splitlines() if line.startswith(prefix)]
    return Run(scenario, r.returncode, r.stdout, r.stderr, results, logs, server)


def decode_offset_msg_id(offset_msg_id: str) -> tuple[str, int, int]:
    """offsetMsgId = store host IPv4 (4 bytes), port (4), CommitLog offset (8), in hex."""
    raw = bytes.fromhex(offset_msg_id)
    assert len(raw) == 16, offset_msg_id
    return ".".join(str(b) for b in raw[:4]), int.from_bytes(raw[4:8], "big"), int.from_bytes(raw[8:], "big")


@pytest.fixture(scope="module")
def produced(jar: Path, server: Server) -> Run:
    """Scenario (a), run once: the consumers of (b) and (d) read what it sent."""
    return run_scenario(jar, server, "produce", topic=TOPIC, group="interop", run=RUN, n=N)


def sent_by_id(produced: Run) -> dict[str, dict[str, Any]]:
    return {f"{r['kind']}:{r['idx']}": r for r in produced.events("sent")}


def check_received(produced: Run, server: Server, got: list[dict[str, Any]]) -> None:
    """What a consumer got from scenario (a) matches, field by field, what the producer was told."""
    sent = sent_by_id(produced)
    per_queue: dict[int, list[int]] = defaultdict(list)
    for m in got:
        mid = m["id"]
        s = sent[mid]
        kind = mid.split(":")[0]
        assert m["errors"] == [], f"{mid}: {m['errors']}"
        assert m["topic"] == TOPIC
        assert m["msgId"] == s["msgId"], f"{mid}: unique id differs from the one the client assigned"
        assert m["reconsumeTimes"] == 0, mid
        assert m["properties"]["interop_note"] == NOTE, mid
        assert m["properties"]["interop_run"] == RUN, mid
        assert m["bodyLen"] == s["bodyLen"], mid
        if kind != "oneway":
            assert (m["queueId"], m["queueOffset"]) == (s["queueId"], s["queueOffset"]), mid
            assert m["offsetMsgId"] == s["offsetMsgId"], f"{mid}: offsetMsgId differs from the send result"
        host, port, clo = decode_offset_msg_id(m["offsetMsgId"])
        assert (host, port, clo) == ("127.0.0.1", server.port, m["commitLogOffset"]), mid
        assert m["storeHost"].endswith(f"127.0.0.1:{server.port}"), m["storeHost"]
        assert 0 < m["bornTimestamp"] <= m["storeTimestamp"] + 1000, mid
        compressed = bool(m["sysFlag"] & COMPRESSED_FLAG)
        assert compressed == (kind == "large"), f"{mid}: sysFlag {m['sysFlag']:#x}"
        per_queue[m["queueId"]].append(m["queueOffset"])
    if len(got) == len(expected_ids()):
        # The topic holds only these messages: every queue is dense from offset 0, and the pull
        # responses (MIN_OFFSET/MAX_OFFSET, copied into each message by the client) say so.
        for q, offsets in per_queue.items():
            assert sorted(offsets) == list(range(len(offsets))), f"queue {q} offsets {sorted(offsets)}"
        for m in got:
            bounds = (m["properties"].get("MIN_OFFSET"), m["properties"].get("MAX_OFFSET"))
            assert bounds == ("0", str(len(per_queue[m["queueId"]]))), f"{m['id']}: pull min/max {bounds}"


# -- (a) producer ----------------------------------------------------------------------------------


def test_produce_sync_async_oneway_batch_large(produced: Run, server: Server) -> None:
    produced.assert_ok()
    sent = produced.events("sent")
    assert Counter(r["kind"] for r in sent) == {"sync": N, "async": N, "oneway": N, "batch": N, "large": 1}
    assert {f"{r['kind']}:{r['idx']}" for r in sent} == expected_ids()
    acked = [r for r in sent if r["kind"] != "oneway"]
    assert all(r["status"] == "SEND_OK" for r in acked)
    assert all(r["msgId"] == r["uniqId"] for r in acked)
    positions = [(r["queueId"], r["queueOffset"]) for r in acked]
    assert len(set(positions)) == len(positions), f"two messages at one queue position: {sorted(positions)}"
    commit_log_offsets = set()
    for r in acked:
        host, port, clo = decode_offset_msg_id(r["offsetMsgId"])
        assert (host, port) == ("127.0.0.1", server.port), r
        commit_log_offsets.add(clo)
    assert len(commit_log_offsets) == len(acked)

    (batch,) = produced.events("batch-result")
    assert batch["status"] == "SEND_OK"
    assert len(batch["offsetMsgId"].split(",")) == N, "a batch's send result has one offsetMsgId per message"
    in_batch = sorted((r for r in sent if r["kind"] == "batch"), key=lambda r: r["idx"])
    assert {r["queueId"] for r in in_batch} == {batch["queueId"]}

    summary = produced.summary
    assert summary["sent"] == 4 * N + 1
    assert len(summary["routeQueues"]) == 4, "auto-created topic: 4 queues (the producer's default)"


# -- (b) push consumer, concurrently -----------------------------------------------------------------


def test_push_consumer_concurrently(jar: Path, server: Server, produced: Run) -> None:
    produced.assert_ok()
    run = run_scenario(jar, server, "consume-concurrently", topic=TOPIC, group="interop-push", run=RUN, n=N)
    run.assert_ok()
    got = run.events("received")
    assert {m["id"] for m in got} == expected_ids()
    assert run.summary["missing"] == []
    check_received(produced, server, got)
    (large,) = (m for m in got if m["id"] == "large:0")
    assert large["bodyLen"] > 4096 and large["sysFlag"] & COMPRESSED_FLAG


def test_push_consumer_tag_filter(jar: Path, server: Server, produced: Run) -> None:
    produced.assert_ok()
    expr = "TagA || TagL"
    run = run_scenario(
        jar, server, "consume-concurrently", topic=TOPIC, group="interop-tags", run=RUN, n=N, expr=expr
    )
    run.assert_ok()
    got = run.events("received")
    assert {m["id"] for m in got} == expected_ids({"TagA", "TagL"})
    assert {m["tags"] for m in got} == {"TagA", "TagL"}
    check_received(produced, server, got)


# -- (c) orderly -------------------------------------------------------------------------------------


def test_orderly_by_sharding_key(jar: Path, server: Server) -> None:
    topic, group, shards, n = f"InteropOrderly_{RUN}", "interop-orderly", 6, 10
    prod = run_scenario(jar, server, "produce-orderly", topic=topic, group=group, run=RUN, shards=shards, n=n)
    prod.assert_ok()
    sent = prod.events("sent")
    assert len(sent) == shards * n and all(r["status"] == "SEND_OK" for r in sent)
    queue_of: dict[str, set[int]] = defaultdict(set)
    for r in sent:
        queue_of[r["shard"]].add(r["queueId"])
    # The selector picks mqs[shard % len(mqs)]: one queue per shard.
    assert dict(queue_of) == {f"shard-{s}": {s % 4} for s in range(shards)}

    run = run_scenario(jar, server, "consume-orderly", topic=topic, group=group, run=RUN, shards=shards, n=n)
    run.assert_ok()
    got = run.events("received")
    seqs: dict[str, list[int]] = defaultdict(list)
    offsets: dict[str, list[int]] = defaultdict(list)
    for m in got:  # stdout order is consumption order
        assert m["errors"] == [], m
        seqs[m["shard"]].append(m["seq"])
        offsets[m["shard"]].append(m["queueOffset"])
        assert m["queueId"] in queue_of[m["shard"]]
    assert dict(seqs) == {f"shard-{s}": list(range(n)) for s in range(shards)}
    assert all(o == sorted(o) for o in offsets.values())


# -- (d) lite pull consumer ----------------------------------------------------------------------------


def test_lite_pull_subscribe_poll_commit(jar: Path, server: Server, produced: Run) -> None:
    produced.assert_ok()
    run = run_scenario(jar, server, "lite-pull", topic=TOPIC, group="interop-lite", run=RUN, n=N)
    run.assert_ok()
    got = run.events("polled")
    assert {m["id"] for m in got} == expected_ids()
    check_received(produced, server, got)
    per_queue = Counter(str(m["queueId"]) for m in got)
    (committed,) = run.events("committed")
    assert {k.rsplit(":", 1)[1]: v for k, v in committed["queues"].items()} == dict(per_queue), (
        "committed offset of each queue = messages polled from it"
    )
    (read_back,) = run.events("committed-read-back")
    assert read_back["queues"] == committed["queues"], "a new instance reads the committed offsets back"
    assert run.events("redelivered") == []


# -- (e) retry -----------------------------------------------------------------------------------------


def test_reconsume_later_comes_back_with_reconsume_times_1(jar: Path, server: Server) -> None:
    topic = f"InteropRetry_{RUN}"
    run = run_scenario(jar, server, "retry", timeout=60, topic=topic, group="interop-retry", run=RUN)
    run.assert_ok()
    (sent,) = run.events("sent")
    first, second = run.events("received")
    assert (first["answer"], first["reconsumeTimes"]) == ("RECONSUME_LATER", 0)
    assert (second["answer"], second["reconsumeTimes"]) == ("CONSUME_SUCCESS", 1)
    assert first["offsetMsgId"] == sent["offsetMsgId"]
    for m in (first, second):
        assert m["errors"] == []
        assert m["msgId"] == sent["msgId"]
        assert m["topic"] == topic
        assert m["bodySha"] == first["bodySha"]
    props = second["properties"]
    assert props["RETRY_TOPIC"] == topic
    assert props["ORIGIN_MESSAGE_ID"] == sent["offsetMsgId"]
    assert props["REAL_TOPIC"] == "%RETRY%interop-retry"
    assert second["bornTimestamp"] == first["bornTimestamp"], "the broker keeps the original born timestamp"
    # Delay level 3 (10 s) for the first retry.
    assert 9_000 <= run.summary["redeliveryGapMillis"] <= 30_000, run.summary
    # Had CONSUMER_SEND_MSG_BACK failed, the client would have re-sent the message itself; it must not.
    client_log = (run.client_log / "rocketmq_client.log").read_text(errors="replace")
    assert "sendMessageBack Exception" not in client_log
