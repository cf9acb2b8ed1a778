"""Interop: the unmodified official RocketMQ C++ client (PyPI `rocketmq` 0.4.4) against a real ferromq.

Every client runs in a child process (`cpp_scenarios.py`, bounded by a subprocess timeout and its own
watchdog) because librocketmq runs its own threads and can crash or hang. The broker is a module-scoped
`ferromq serve` (see conftest.py); every test uses its own topics and groups.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import subprocess
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ferromq.testing.waiting import WaitTimeout, wait_until
from tests.interop.cpp_kit import cpp_client_problem, scenario_argv

_problem = cpp_client_problem()
if _problem is not None:
    pytest.skip(
        "the RocketMQ C++ client is not usable: `import rocketmq.client` failed "
        f"(needs PyPI rocketmq==0.4.4, whose librocketmq.so is Linux x86_64 only): {_problem}",
        allow_module_level=True,
    )


Record = dict[str, Any]


def _tail(text: str, limit: int = 8000) -> str:
    return text if len(text) <= limit else f"... ({len(text) - limit} characters omitted)\n{text[-limit:]}"


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    home: Path
    stdout: Path
    stderr: Path
    out: Path
    timeout: float
    result: Record | None = None

    def records(self) -> list[Record]:
        """The deliveries the consumer reported so far (its --out file)."""
        if not self.out.exists():
            return []
        records = []
        for line in self.out.read_text(encoding="utf-8").split("\n")[:-1]:  # [-1]: not yet complete
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        return records


@dataclass
class CppClients:
    """Starts scenario children and keeps their outputs for failure reports."""

    namesrv: str
    workdir: Path
    unique: str
    children: list[Child] = field(default_factory=list)

    def name(self, kind: str) -> str:
        return f"{kind}_{self.unique}"

    def start(self, scenario: str, timeout: float = 60.0, **opts: Any) -> Child:
        n = len(self.children)
        name = f"{n}-{scenario}"
        home = self.workdir / f"home-{name}"  # the C++ log goes to $HOME/logs/rocketmq-cpp
        home.mkdir(parents=True)
        out = self.workdir / f"{name}.jsonl"
        opts.setdefault("deadline", max(5.0, timeout - 5.0))
        if scenario == "push":
            opts.setdefault("out", out)
        env = {**os.environ, "HOME": str(home), "PYTHONUNBUFFERED": "1"}
        stdout, stderr = self.workdir / f"{name}.stdout", self.workdir / f"{name}.stderr"
        with open(stdout, "wb") as o, open(stderr, "wb") as e:
            proc = subprocess.Popen(
                scenario_argv(scenario, self.namesrv, **opts),
                stdout=o,
                stderr=e,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        child = Child(name, proc, home, stdout, stderr, out, timeout)
        self.children.append(child)
        return child

    def finish(self, child: Child) -> Record:
        try:
            child.proc.wait(timeout=child.timeout)
        except subprocess.TimeoutExpired:
            child.proc.kill()
            child.proc.wait(timeout=10)
            pytest.fail(f"C++ client child {child.name} hung (> {child.timeout} s)\n{self.describe(child)}")
        stdout = child.stdout.read_text("utf-8", "replace")
        lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
        if child.proc.returncode != 0 or not lines:
            code = child.proc.returncode
            pytest.fail(f"C++ client child {child.name} failed (exit code {code})\n{self.describe(child)}")
        child.result = json.loads(lines[-1][len("RESULT ") :])
        return child.result

    def run(self, scenario: str, timeout: float = 60.0, **opts: Any) -> Record:
        return self.finish(self.start(scenario, timeout, **opts))

    def produce(self, topic: str, count: int, mode: str = "sync", **opts: Any) -> list[Record]:
        result = self.run("produce", topic=topic, group=self.name("PG"), mode=mode, count=count, **opts)
        assert result["errors"] == [], result["errors"]
        if mode != "oneway":
            assert len(result["sent"]) == count
            assert all(r["status"] == 0 for r in result["sent"]), result["sent"]
        return list(result["sent"])

    def describe(self, child: Child) -> str:
        parts = [f"$ {' '.join(map(str, child.proc.args))}"]  # type: ignore[arg-type]
        for title, path in (("stdout", child.stdout), ("stderr", child.stderr)):
            parts.append(f"--- {title} ---\n{_tail(path.read_text('utf-8', 'replace'))}")
        for log in sorted(child.home.glob("logs/rocketmq-cpp/*")):
            parts.append(f"--- C++ log {log.name} ---\n{_tail(log.read_text('utf-8', 'replace'), 20000)}")
        return "\n".join(parts)

    def report(self) -> str:
        return "\n\n".join(f"===== {c.name} =====\n{self.describe(c)}" for c in self.children)

    def stop_all(self) -> None:
        for c in self.children:
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait(timeout=10)


@pytest.fixture
def cpp(
    ferromq_namesrv: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    failure_sections: list[tuple[str, Callable[[], str]]],
) -> Iterator[CppClients]:
    short = request.node.name.replace("test_", "").replace("[", "_").replace("]", "")[:40]
    clients = CppClients(ferromq_namesrv, tmp_path, f"{short}_{uuid.uuid4().hex[:6]}")
    failure_sections.append(("C++ client children", clients.report))
    try:
        yield clients
    finally:
        clients.stop_all()


def ids(records: list[Record]) -> list[str]:
    return [r["id"] for r in records]


def by_id(records: list[Record]) -> dict[str, Record]:
    return {r["id"]: r for r in records}


def assert_same_message(sent: Record, got: Record, topic: str) -> None:
    assert got["topic"] == topic
    assert got["body_len"] == sent["body_len"] and got["body_sha"] == sent["body_sha"], (sent, got)
    if "tags" in sent:
        assert got["tags"] == sent["tags"]
    if "keys" in sent:
        assert got["keys"] == sent["keys"]
    for name, value in sent["props"].items():
        assert got["props"].get(name) == value, (name, sent, got)


# ------------------------------------------------------------------------------------------- sending


@pytest.mark.parametrize("mode", ["sync", "async", "oneway"])
def test_send_modes_then_push_consume(cpp: CppClients, mode: str) -> None:
    topic = cpp.name("T")
    before_ms = time.time() * 1000
    sent = cpp.produce(topic, 20, mode=mode, tags="TagA", keys=True, prefix=mode)
    after_ms = time.time() * 1000
    result = cpp.run("push", topic=topic, group=cpp.name("CG"), expect=20, wait=30, timeout=45)

    got = result["received"]
    assert sorted(ids(got)) == sorted(ids(sent))
    assert len(got) == 20, f"duplicates: {Counter(ids(got)) - Counter(set(ids(got)))}"
    got_by_id = by_id(got)
    for r in got:
        assert r["topic"] == topic and r["tags"] == "TagA" and r["keys"] == f"{r['id']}-k1 {r['id']}-k2"
        assert r["reconsume_times"] == 0
    if mode != "oneway":
        for s in sent:
            g = got_by_id[s["id"]]
            # SendResult.msg_id is the client id (UNIQ_KEY); offset is the send response's queueOffset.
            assert s["msg_id"] == g["uniq_key"], (s, g)
            assert s["offset"] == g["queue_offset"], (s, g)
    # The default send spreads the messages over the 4 queues of an auto-created topic.
    assert {r["queue_id"] for r in got} == {0, 1, 2, 3}
    per_queue = defaultdict(list)
    for r in got:
        per_queue[r["queue_id"]].append(r["queue_offset"])
    for q, offsets in per_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), (q, offsets)
    # record metadata the broker fills in
    for r in got:
        assert before_ms - 1000 <= r["born_timestamp"] <= r["store_timestamp"] <= after_ms + 1000, r
        assert r["store_size"] > 0 and r["commit_log_offset"] >= 0, r
    spans = sorted((r["commit_log_offset"], r["store_size"]) for r in got)
    for (off, size), (next_off, _) in itertools.pairwise(spans):
        assert off + size <= next_off, f"records overlap in the commit log: {spans}"


def test_orderly_send_and_orderly_consumer(cpp: CppClients) -> None:
    topic = cpp.name("T")
    n, orders = 48, 6
    sent = cpp.produce(topic, n, mode="orderly", orders=orders)
    for s in sent:
        # hashing selector: sharding arg % number of queues (4 for a topic auto-created by C++)
        assert s["mq_size"] == 4 and s["queue"] == s["order"] % 4, s

    result = cpp.run(
        "push", topic=topic, group=cpp.name("CG"), orderly=True, expect=n, threads=4, wait=40, timeout=55
    )
    got = result["received"]
    assert sorted(ids(got)) == sorted(ids(sent)), "orderly consumer did not get every message"
    assert len(got) == n, f"duplicates: {Counter(ids(got)) - Counter(set(ids(got)))}"
    sent_by_id = by_id(sent)
    per_queue: dict[int, list[Record]] = defaultdict(list)
    for r in got:  # in delivery order
        assert r["queue_id"] == sent_by_id[r["id"]]["queue"], r
        assert r["queue_offset"] == sent_by_id[r["id"]]["offset"], r
        per_queue[r["queue_id"]].append(r)
    for q, recs in per_queue.items():
        offsets = [r["queue_offset"] for r in recs]
        assert offsets == list(range(len(recs))), f"queue {q} delivered out of order: {offsets}"
        seqs = [int(r["props"]["seq"]) for r in recs]
        assert seqs == sorted(seqs), f"queue {q}: sequence numbers out of order: {seqs}"
        expected = [int(s["props"]["seq"]) for s in sent if s["queue"] == q]
        assert seqs == expected


def test_batch_send_stores_each_message(cpp: CppClients) -> None:
    topic = cpp.name("T")
    sent = cpp.produce(topic, 5, mode="batch", tags="TagB", keys=True, prop=["bp=batch-{i}"])
    result = cpp.run("push", topic=topic, group=cpp.name("CG"), expect=5, linger=1.0, props=["bp"], wait=30)
    got = result["received"]
    assert sorted(ids(got)) == sorted(ids(sent)), (
        "each message of a C++ batch must arrive as its own message; got " + json.dumps(got)[:2000]
    )
    assert len(got) == 5
    got_by_id = by_id(got)
    for s in sent:
        assert_same_message(s, got_by_id[s["id"]], topic)
    # one batch goes to one queue, consecutive offsets in batch order
    assert len({r["queue_id"] for r in got}) == 1
    assert [got_by_id[s["id"]]["queue_offset"] for s in sent] == list(range(5))
    assert sent[0]["offset"] == 0  # the send result carries the queue offset of the first message
    assert len({r["uniq_key"] for r in got}) == 5, "each inner message keeps its own UNIQ_KEY"


def test_large_body_is_compressed_and_restored(cpp: CppClients) -> None:
    topic = cpp.name("T")
    sent = cpp.produce(topic, 3, body_size=5000, prefix="big5k")  # > 4 KiB: the client zlib-compresses it
    sent += cpp.produce(topic, 2, body_size=100_000, prefix="big100k")
    sent += cpp.produce(topic, 2, body_size=4095, prefix="small")  # just under the threshold
    result = cpp.run("push", topic=topic, group=cpp.name("CG"), expect=len(sent), wait=30)
    got = by_id(result["received"])
    assert sorted(got) == sorted(ids(sent))
    for s in sent:
        assert_same_message(s, got[s["id"]], topic)


def test_tags_keys_and_properties_round_trip(cpp: CppClients) -> None:
    topic = cpp.name("T")
    props = ["plain=value-{i}", "utf8=héllo wörld ✓ 雪 {i}", "spaces=a b  c", "punct=x=y;z:w,{i}"]
    sent = cpp.produce(topic, 12, tags="TagA,TagB,Tägü雪", keys=True, prop=props, prefix="p")
    names = ["plain", "utf8", "spaces", "punct"]
    result = cpp.run("push", topic=topic, group=cpp.name("CGall"), expect=12, props=names, wait=30)
    got = by_id(result["received"])
    assert sorted(got) == sorted(ids(sent))
    for s in sent:
        assert_same_message(s, got[s["id"]], topic)
        assert got[s["id"]]["keys"] == f"{s['id']}-k1 {s['id']}-k2"

    # A tag subscription only gets its tags (broker filters by tag hash, the client by tag string).
    want = [s for s in sent if s["tags"] in ("TagA", "Tägü雪")]
    result = cpp.run(
        "push",
        topic=topic,
        group=cpp.name("CGtag"),
        expression="TagA || Tägü雪",
        expect=len(want),
        linger=1.0,
        wait=30,
    )
    got_tagged = result["received"]
    assert sorted(ids(got_tagged)) == sorted(ids(want))
    assert {r["tags"] for r in got_tagged} == {"TagA", "Tägü雪"}


# ------------------------------------------------------------------------------------------- consuming


def _send_probes_until(cpp: CppClients, topic: str, consumers: list[Child], timeout: float = 30.0) -> int:
    """Send a round of probe messages (one per queue) until every consumer got at least one message: then
    all of them are running and have rebalanced. Returns the number of rounds sent."""
    until = time.monotonic() + timeout
    rounds = 0
    while time.monotonic() < until:
        for c in consumers:
            assert c.proc.poll() is None, f"consumer {c.name} exited early\n{cpp.describe(c)}"
        cpp.produce(topic, 4, prefix=f"probe{rounds}")
        rounds += 1
        with contextlib.suppress(WaitTimeout):
            wait_until(
                lambda: all(any(r["id"].startswith("probe") for r in c.records()) for c in consumers),
                "a probe message at every consumer",
                timeout=1.0,
                interval=0.1,
            )
            return rounds
    pytest.fail(f"not every consumer received a probe message within {timeout} s")


def _shares(consumers: list[Child], wanted: set[str]) -> list[list[str]]:
    return [[r["id"] for r in c.records() if r["id"] in wanted] for c in consumers]


def _all_arrived(consumers: list[Child], wanted: set[str]) -> bool:
    return {i for share in _shares(consumers, wanted) for i in share} == wanted


def _probe_until_split(cpp: CppClients, topic: str, consumers: list[Child], timeout: float = 30.0) -> None:
    """Send probe rounds (one message per queue) until a round is delivered once in all, some of it to
    each consumer: then both have rebalanced. A consumer that has not yet given up the queues it held
    before the other joined still pulls them too, and the probes there reach both."""
    until = time.monotonic() + timeout
    rounds = 0
    while time.monotonic() < until:
        sent = set(ids(cpp.produce(topic, 4, prefix=f"split{rounds}")))
        rounds += 1
        with contextlib.suppress(WaitTimeout):
            wait_until(
                functools.partial(_all_arrived, consumers, sent),
                "the probe round",
                timeout=10.0,
                interval=0.1,
            )
        shares = _shares(consumers, sent)
        if sorted(i for share in shares for i in share) == sorted(sent) and all(shares):
            return
    pytest.fail(f"the consumers did not split the queues within {timeout} s ({rounds} probe rounds)")


def test_clustering_two_consumers_share_the_queues(cpp: CppClients) -> None:
    topic, group = cpp.name("T"), cpp.name("CG")
    cpp.produce(topic, 4, prefix="warmup")  # creates the topic (4 queues) so that consumers find a route
    stop = cpp.workdir / "stop-clustering"
    consumers = [
        cpp.start("push", topic=topic, group=group, stop_file=stop, wait=80, timeout=95) for _ in range(2)
    ]
    _send_probes_until(cpp, topic, consumers)
    _probe_until_split(cpp, topic, consumers)  # the rebalance the second consumer triggered is done

    n = 80
    sent = cpp.produce(topic, n, prefix="main")
    main_ids = set(ids(sent))

    def union() -> set[str]:
        return {r["id"] for c in consumers for r in c.records()} & main_ids

    with contextlib.suppress(WaitTimeout):  # the checks below say what is missing
        wait_until(lambda: union() == main_ids, f"the {n} messages", timeout=30.0, interval=0.1)
    time.sleep(1.0)  # would-be duplicates
    stop.touch()
    results = [cpp.finish(c) for c in consumers]

    shares = [[r for r in res["received"] if r["id"] in main_ids] for res in results]
    everything = [r["id"] for share in shares for r in share]
    for i, share in enumerate(shares):
        print(f"consumer {i}: {len(share)} messages from queues {sorted({r['queue_id'] for r in share})}")
    assert set(everything) == main_ids, f"missing: {sorted(main_ids - set(everything))}"
    for i, share in enumerate(shares):
        assert share, f"consumer {i} got no share of the {n} messages (4 queues, 2 consumers)"
    queues = [{r["queue_id"] for r in share} for share in shares]
    assert not (queues[0] & queues[1]), f"both consumers consumed queues {queues[0] & queues[1]}"
    dups = Counter(everything) - Counter(set(everything))
    assert not dups, f"delivered more than once after the group had settled: {dict(dups)}"


def test_broadcasting_every_consumer_gets_everything(cpp: CppClients) -> None:
    topic, group = cpp.name("T"), cpp.name("CG")
    cpp.produce(topic, 4, prefix="warmup")
    stop = cpp.workdir / "stop-broadcast"
    consumers = [
        cpp.start("push", topic=topic, group=group, broadcast=True, stop_file=stop, wait=80, timeout=95)
        for _ in range(2)
    ]
    # a broadcasting consumer without a local offset starts at the end of each queue: probe until both run
    _send_probes_until(cpp, topic, consumers)
    n = 40
    sent = cpp.produce(topic, n, prefix="main")
    main_ids = set(ids(sent))
    with contextlib.suppress(WaitTimeout):  # the checks below say who missed what
        wait_until(
            lambda: all({r["id"] for r in c.records()} >= main_ids for c in consumers),
            f"the {n} messages at every consumer",
            timeout=30.0,
            interval=0.1,
        )
    time.sleep(0.5)
    stop.touch()
    results = [cpp.finish(c) for c in consumers]
    for i, res in enumerate(results):
        got = [r["id"] for r in res["received"] if r["id"] in main_ids]
        assert set(got) == main_ids, f"consumer {i} missed {sorted(main_ids - set(got))}"
        assert len(got) == n, f"consumer {i} got duplicates: {dict(Counter(got) - Counter(set(got)))}"


def test_pull_consumer_reads_all_queues(cpp: CppClients) -> None:
    topic = cpp.name("T")
    sent = cpp.produce(topic, 30, tags="TagP", keys=True, prefix="pull")
    result = cpp.run("pull", topic=topic, group=cpp.name("CG"), expect=30, wait=30, timeout=60)
    got = result["received"]
    assert sorted(ids(got)) == sorted(ids(sent))
    assert len(got) == 30
    got_by_id = by_id(got)
    for s in sent:
        assert_same_message(s, got_by_id[s["id"]], topic)
    per_queue = defaultdict(list)
    for r in got:
        per_queue[r["queue_id"]].append(r["queue_offset"])
    assert set(per_queue) == {0, 1, 2, 3}
    for q, offsets in per_queue.items():
        assert offsets == list(range(len(offsets))), (q, offsets)
    # the wrapper's next offsets = the queue ends
    assert {k: v for k, v in result["offsets"].items() if k.startswith(topic + "@")} == {
        f"{topic}@{q}": len(offsets) for q, offsets in per_queue.items()
    }


def test_restarted_consumer_resumes_from_committed_offset(cpp: CppClients) -> None:
    topic, group = cpp.name("T"), cpp.name("CG")
    n = 24
    first = cpp.produce(topic, n, prefix="first")
    r1 = cpp.run("push", topic=topic, group=group, expect=n, wait=30)  # clean shutdown commits offsets
    assert sorted(ids(r1["received"])) == sorted(ids(first))

    second = cpp.produce(topic, n, prefix="second")
    r2 = cpp.run("push", topic=topic, group=group, expect=n, expect_prefix="second", linger=1.0, wait=30)
    got = ids(r2["received"])
    assert {i for i in got if i.startswith("second")} == set(ids(second))
    again = [i for i in got if i.startswith("first")]
    # at-least-once: a small overlap is allowed, but the committed offsets must have been used
    assert len(again) <= n // 8, f"{len(again)} of the first {n} messages were delivered again: {again}"


def test_failed_message_comes_back_through_retry_topic(cpp: CppClients) -> None:
    topic, group = cpp.name("T"), cpp.name("CG")
    sent = cpp.produce(topic, 3, tags="TagR", keys=True, prop=["rp=retry-{i}"], prefix="r")
    victim = "r-1"
    # broker: delay level 3 + reconsumeTimes 0 = 10 s before the retry is delivered
    result = cpp.run(
        "push",
        topic=topic,
        group=group,
        expect=3,
        fail_once=[victim],
        props=["rp"],
        linger=1.0,
        wait=40,
        timeout=60,
    )
    failed, got = result["failed"], result["received"]
    assert [f["id"] for f in failed] == [victim]
    assert failed[0]["reconsume_times"] == 0
    assert sorted(ids(got)) == sorted(ids(sent)), "the failed message did not come back"
    assert len(got) == 3, f"duplicates: {Counter(ids(got)) - Counter(set(ids(got)))}"
    retried = by_id(got)[victim]
    assert retried["reconsume_times"] == 1, retried
    assert_same_message(by_id(sent)[victim], retried, topic)  # the client restores the topic from RETRY_TOPIC
    assert retried["props"]["RETRY_TOPIC"] == topic
    delay = retried["t"] - failed[0]["t"]
    assert 8.0 <= delay <= 40.0, f"retry delivered {delay:.1f} s after the failure (level 3 = 10 s)"
    for other in set(ids(sent)) - {victim}:
        assert by_id(got)[other]["reconsume_times"] == 0
