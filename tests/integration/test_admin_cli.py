"""`ferromq admin` end to end: the real `ferromq` command against a `ferromq serve` process
(module-scoped, free ports): tables, `--json`, exit codes and the one-line errors."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferromq.client import ConsumeStatus, Message, Producer, PushConsumer, ReceivedMessage, SendResult
from ferromq.testing import BrokerProcess
from ferromq.testing.waiting import until, wait_until
from tests.interop.conftest import stop_ferromq

FERROMQ = Path(sys.executable).with_name("ferromq")
TIMEOUT = 60.0  # a bound only: a command takes well under a second
WAIT = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    s = BrokerProcess(tmp_path_factory.mktemp("admin-cli")).start()
    yield s
    stop_ferromq(s)


def admin(server: BrokerProcess | str, *args: str) -> subprocess.CompletedProcess[str]:
    namesrv = server if isinstance(server, str) else server.namesrv
    return subprocess.run(
        [str(FERROMQ), "admin", "-n", namesrv, "--timeout", "5", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


def ok(server: BrokerProcess, *args: str) -> str:
    r = admin(server, *args)
    assert r.returncode == 0, f"ferromq admin {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    assert r.stderr == "", r.stderr
    return r.stdout


def js(server: BrokerProcess, *args: str) -> Any:
    return json.loads(ok(server, *args, "--json"))


def failed(server: BrokerProcess | str, code: int, *args: str) -> str:
    """Runs a command that must fail with exit `code`: one line on stderr, no traceback."""
    r = admin(server, *args)
    assert r.returncode == code, f"exit {r.returncode}, wanted {code}\n{r.stdout}\n{r.stderr}"
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def unique(kind: str) -> str:
    return f"{kind}{uuid.uuid4().hex[:8]}"


def send(namesrv: str, topic: str, messages: list[tuple[str, str]]) -> list[SendResult]:
    """(key, body) messages sent with the Python client, round robin over the queues."""

    async def main() -> list[SendResult]:
        async with Producer(unique("PG"), namesrv) as p:
            return [
                await p.send(Message(topic, body.encode(), tags="T", keys=[key])) for key, body in messages
            ]

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def created(server: BrokerProcess, topic: str, queues: int) -> None:
    ok(server, "create-topic", topic, "--queues", str(queues))
    wait_until(lambda: admin(server, "route", topic).returncode == 0, f"the route of {topic}")


def test_help_documents_exit_codes() -> None:
    r = subprocess.run([str(FERROMQ), "admin", "--help"], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0
    for line in (
        "0  done",
        "1  a broker or name server refused",
        "2  bad usage",
        "3  not found",
        "4  unreachable",
    ):
        assert line in r.stdout, r.stdout
    r = subprocess.run(
        [str(FERROMQ), "admin", "topic-status", "--help"], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert "--json" in r.stdout and "exit codes" in r.stdout


def test_cluster_and_broker_status(server: BrokerProcess) -> None:
    text = ok(server, "cluster")
    assert "DefaultCluster" in text and server.broker_addr in text
    rows = js(server, "cluster")
    assert len(rows) == 1
    row = rows[0]
    assert (row["cluster"], row["brokerId"], row["addr"]) == ("DefaultCluster", 0, server.broker_addr)
    assert "error" not in row and row["version"]
    status = js(server, "broker-status", "-b", server.broker_addr)
    assert "msgPutTotalTodayNow" in status[server.broker_addr]
    assert server.broker_addr in ok(server, "broker-status")


def test_topic_lifecycle(server: BrokerProcess) -> None:
    topic = unique("CliT")
    out = ok(server, "create-topic", topic, "--queues", "3")
    assert out.startswith(f"topic {topic}: 3 queues on ")
    wait_until(lambda: topic in js(server, "topics"), f"{topic} in the topic list")
    assert topic in ok(server, "topics").splitlines()
    route = js(server, "route", topic)
    assert [(q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in route["queueDatas"]] == [(3, 3, 6)]
    assert server.broker_addr in ok(server, "route", topic)

    out = ok(server, "update-topic", topic, "--write-queues", "2", "--perm", "4")
    assert f"topic {topic} updated" in out

    def updated() -> bool:
        q = js(server, "route", topic)["queueDatas"][0]
        return (q["readQueueNums"], q["writeQueueNums"], q["perm"]) == (3, 2, 4)

    wait_until(updated, "the updated route")
    assert failed(server, 2, "update-topic", topic).endswith(
        "nothing to change: give --read-queues, --write-queues, --perm, --order or --message-type"
        f" (name server {server.namesrv})"
    )

    assert ok(server, "delete-topic", topic).strip() == f"topic {topic} deleted"
    wait_until(lambda: admin(server, "route", topic).returncode == 3, f"{topic} to go")
    line = failed(server, 3, "route", topic)
    assert line.startswith(f"ferromq admin route: No topic route info in name server for the topic: {topic}")
    assert "[TOPIC_NOT_EXIST]" in line
    r = admin(server, "route", topic, "--json")
    assert json.loads(r.stdout)["error"] == {
        "message": f"No topic route info in name server for the topic: {topic} [TOPIC_NOT_EXIST]",
        "code": 17,
        "codeName": "TOPIC_NOT_EXIST",
        "exitCode": 3,
    }


def test_topic_message_type(server: BrokerProcess) -> None:
    """RocketMQ 5.x typed topics: created with a type, shown by `topics --long` and `update-topic`,
    changed, and refused as the broker refuses (MIXED)."""
    topic = unique("CliFifo")
    out = ok(server, "create-topic", topic, "--queues", "2", "--message-type", "FIFO")
    assert out.startswith(f"topic {topic} (FIFO): 2 queues on ")
    wait_until(lambda: topic in js(server, "topics"), f"{topic} in the topic list")
    rows = [r for r in js(server, "topics", "--long") if r["topic"] == topic]
    assert [(r["messageType"], r["attributes"], r["writeQueueNums"]) for r in rows] == [
        ("FIFO", {"message.type": "FIFO"}, 2)
    ]
    line = next(line for line in ok(server, "topics", "-l").splitlines() if topic in line)
    assert line.split()[-1] == "FIFO"
    # A type change alone, and one with other settings: the type is kept when not given.
    configs = js(server, "update-topic", topic, "--message-type", "DELAY")["configs"]
    assert [(c["messageType"], c["writeQueueNums"]) for c in configs] == [("DELAY", 2)]
    configs = js(server, "update-topic", topic, "--write-queues", "1")["configs"]
    assert [(c["messageType"], c["writeQueueNums"]) for c in configs] == [("DELAY", 1)]
    assert "DELAY" in ok(server, "update-topic", topic, "--perm", "6")
    line = failed(server, 1, "update-topic", topic, "--message-type", "MIXED")
    assert line.startswith("ferromq admin update-topic: UPDATE_AND_CREATE_TOPIC")
    assert "MIXED message type is not supported. [INVALID_PARAMETER]" in line
    plain = unique("CliPlain")
    ok(server, "create-topic", plain)
    rows = [r for r in js(server, "topics", "--long") if r["topic"] == plain]
    assert rows and all(r["messageType"] == "NORMAL" and r["attributes"] == {} for r in rows)
    ok(server, "delete-topic", topic)
    ok(server, "delete-topic", plain)


def test_orderly_group(server: BrokerProcess) -> None:
    group = unique("CliOrderly")
    plain = unique("CliPlainG")
    ok(server, "create-group", group, "--orderly")
    ok(server, "create-group", plain)
    groups = {g["groupName"]: g for g in js(server, "groups")}
    assert groups[group]["consumeMessageOrderly"] is True
    assert groups[plain]["consumeMessageOrderly"] is False
    lines = ok(server, "groups").splitlines()
    assert lines[0].split()[:6] == ["group", "consume", "broadcast", "from", "min", "orderly"]
    rows = {line.split()[0]: line.split() for line in lines[1:] if line.strip()}
    assert rows[group][4] == "yes" and rows[plain][4] == "no"
    ok(server, "delete-group", group)
    ok(server, "delete-group", plain)


def test_groups(server: BrokerProcess) -> None:
    group = unique("CliG")
    ok(server, "create-group", group, "--retry-max-times", "3", "--no-broadcast")
    groups = {g["groupName"]: g for g in js(server, "groups")}
    assert groups[group]["retryMaxTimes"] == 3
    assert groups[group]["consumeBroadcastEnable"] is False and groups[group]["consumeEnable"] is True
    assert group in ok(server, "groups")
    assert ok(server, "delete-group", group).startswith(f"group {group} deleted on ")
    assert group not in {g["groupName"] for g in js(server, "groups")}


def test_messages(server: BrokerProcess, tmp_path: Path) -> None:
    topic = unique("CliM")
    created(server, topic, 2)
    body = "é" * 100
    results = send(server.namesrv, topic, [("k-a", "first"), ("k-b", body), ("k-a", "third")])

    wait_until(lambda: admin(server, "query-key", topic, "k-a").returncode == 0, "the index")
    got = js(server, "query-key", topic, "k-a")
    assert [m["body"] for m in got] == ["first", "third"] and got[0]["keys"] == ["k-a"]
    table = ok(server, "query-key", topic, "k-a")
    assert "first" in table and "third" in table and table.rstrip().endswith("2 message(s)")

    r = results[1]
    m = js(server, "query-id", topic, r.msg_id)[0]
    assert (m["msgId"], m["offsetMsgId"], m["body"], m["bodyEncoding"]) == (
        r.msg_id,
        r.offset_msg_id,
        body,
        "utf-8",
    )
    assert (m["queue"]["queueId"], m["queueOffset"]) == (r.message_queue.queue_id, r.queue_offset)
    preview = ok(server, "query-id", topic, r.msg_id)
    assert "(200 bytes; --body for all)" in preview and body not in preview
    assert body in ok(server, "query-id", topic, r.msg_id, "--body")

    assert js(server, "view-message", r.offset_msg_id)[0]["msgId"] == r.msg_id
    out = tmp_path / "body.bin"
    mq = r.message_queue
    ok(
        server,
        "query-offset",
        topic,
        "-b",
        mq.broker_name,
        "-q",
        str(mq.queue_id),
        "-o",
        str(r.queue_offset),
        "--body-file",
        str(out),
    )
    assert out.read_bytes() == body.encode()

    assert "[QUERY_NOT_FOUND]" in failed(server, 3, "query-key", topic, "nope")
    assert "[QUERY_NOT_FOUND]" in failed(server, 3, "query-id", topic, "00" * 16)
    assert "[QUERY_NOT_FOUND]" in failed(
        server, 3, "query-offset", topic, "-b", mq.broker_name, "-q", "0", "-o", "99"
    )
    assert "not an offsetMsgId" in failed(server, 2, "view-message", "xyz")


def test_progress_and_reset_offset(server: BrokerProcess) -> None:
    topic, group = unique("CliR"), unique("CliRG")
    created(server, topic, 2)
    results = send(server.namesrv, topic, [(f"k{i}", f"m{i}") for i in range(5)])
    per_queue: dict[int, int] = {}
    for r in results:
        per_queue[r.message_queue.queue_id] = per_queue.get(r.message_queue.queue_id, 0) + 1

    # No consumer of the group is online: the committed offsets are written directly.
    done = js(server, "reset-offset", group, topic, "--time", "now")
    assert done["clientsNotified"] is False
    assert {q["queue"]["queueId"]: q["offset"] for q in done["queues"]} == per_queue
    progress = js(server, "progress", group, "--topic", topic)
    assert progress["totalLag"] == 0
    assert {q["queue"]["queueId"]: q["consumerOffset"] for q in progress["queues"]} == per_queue

    out = ok(server, "reset-offset", group, topic, "--time", "2000-01-01T00:00:00")
    assert "no consumer online" in out
    progress = js(server, "progress", group, "--topic", topic)
    assert progress["totalLag"] == 5
    assert {q["queue"]["queueId"]: q["lag"] for q in progress["queues"]} == per_queue
    assert "total lag 5" in ok(server, "progress", group)
    assert "not a time: 'yesterday'" in failed(server, 2, "reset-offset", group, topic, "--time", "yesterday")


def test_usage_and_unreachable_errors(server: BrokerProcess) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    line = failed(dead, 4, "topics")
    assert line.startswith("ferromq admin topics: no name server answered") and line.endswith(
        f"(name server {dead})"
    )
    r = admin(dead, "cluster", "--json")
    assert r.returncode == 4 and json.loads(r.stdout)["error"]["exitCode"] == 4

    assert "expected KEY=VALUE, got 'x'" in failed(
        server, 2, "update-broker-config", "-b", server.broker_addr, "x"
    )
    r = admin(server, "no-such-command")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    # A topic name the broker refuses: the broker's own code and words.
    line = failed(server, 1, "create-topic", "bad topic!")
    assert line.startswith("ferromq admin create-topic: ") and line.endswith(
        f"(name server {server.namesrv})"
    )
    assert "[" in line


def test_signed_requests_for_an_acl_broker(tmp_path: Path) -> None:
    conf_dir = tmp_path / "home" / "conf"
    conf_dir.mkdir(parents=True)
    (conf_dir / "plain_acl.yml").write_text(
        "accounts:\n  - accessKey: opsAccess\n    secretKey: opsSecret1\n    admin: true\n"
    )
    conf = tmp_path / "broker.conf"
    conf.write_text(f"aclEnable=true\nrocketmqHome={tmp_path / 'home'}\n")
    acl_server = BrokerProcess(tmp_path, conf).start()
    try:
        topic = unique("AclT")
        line = failed(acl_server, 1, "create-topic", topic)
        assert "AclException" in line and "[SYSTEM_ERROR]" in line
        signed = ("--access-key", "opsAccess", "--secret-key", "opsSecret1")
        r = admin(acl_server, *signed, "create-topic", topic)
        assert r.returncode == 0, r.stderr
        r = admin(acl_server, "--access-key", "opsAccess", "--secret-key", "wrong", "create-topic", topic)
        assert r.returncode == 1 and "AclException" in r.stderr
        assert "--access-key and --secret-key go together" in failed(
            acl_server, 2, "--access-key", "x", "topics"
        )
    finally:
        stop_ferromq(acl_server)


def test_topic_status_and_broker_config(server: BrokerProcess) -> None:
    topic = unique("CliS")
    created(server, topic, 2)
    send(server.namesrv, topic, [(f"k{i}", f"m{i}") for i in range(4)])
    rows = js(server, "topic-status", topic)
    assert sorted(r["queue"]["queueId"] for r in rows) == [0, 1]
    assert sum(r["messages"] for r in rows) == 4 and all(r["lastUpdateTimestamp"] > 0 for r in rows)
    assert "4 message(s) in 2 queue(s)" in ok(server, "topic-status", topic)

    addr = server.broker_addr
    assert js(server, "broker-config", "-b", addr)[addr]["brokerClusterName"] == "DefaultCluster"
    out = ok(server, "update-broker-config", "-c", "DefaultCluster", "maxQueryNum=48")
    assert out.strip() == f"updated maxQueryNum=48 on {addr}"
    assert js(server, "broker-config", "-b", addr)[addr]["maxQueryNum"] == "48"
    # A key the broker cannot change while running: refused with its reason, nothing changed.
    line = failed(server, 1, "update-broker-config", "-b", addr, "listenPort=1")
    assert "listenPort" in line and "[SYSTEM_ERROR]" in line


async def _cli(namesrv: str, *args: str) -> Any:
    """`ferromq admin ... --json` from async code (a consumer of the test runs meanwhile)."""
    proc = await asyncio.create_subprocess_exec(
        str(FERROMQ),
        *("admin", "-n", namesrv, *args, "--json"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert proc.returncode == 0, f"ferromq admin {' '.join(args)}: exit {proc.returncode}\n{out!r}\n{err!r}"
    return json.loads(out)


def test_online_group_connections_and_reset(server: BrokerProcess) -> None:
    """A live Python consumer and producer: connections, producers, topic-groups, and a reset the
    broker relays to the consumer (which consumes everything again)."""
    topic, group, pgroup = unique("CliO"), unique("CliOG"), unique("CliOP")
    created(server, topic, 2)

    async def main() -> None:
        got: list[ReceivedMessage] = []

        async def on_messages(msgs: list[ReceivedMessage]) -> ConsumeStatus:
            got.extend(msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        consumer = PushConsumer(group, server.namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        consumer.subscribe(topic, "*")
        consumer.register_listener(on_messages)
        async with Producer(pgroup, server.namesrv) as producer, consumer:
            for i in range(4):
                await producer.send(Message(topic, f"o{i}".encode()))
            await until(lambda: len(got) >= 4, "the 4 messages", WAIT, interval=0.05)
            await consumer.persist_offsets(wait=True)

            cc = await _cli(server.namesrv, "connections", group)
            assert [c["clientId"] for c in cc["connections"]] == [consumer.client_id]
            assert cc["connections"][0]["language"] == "PYTHON"
            assert cc["subscriptions"][topic]["expression"] == "*"
            assert cc["messageModel"] == "CLUSTERING"
            (info,) = await _cli(server.namesrv, "consumer-status", group)
            assert info["clientId"] == consumer.client_id
            assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
            assert int(info["properties"]["PROP_CONSUMER_START_TIMESTAMP"]) > 0
            held = [q for q in info["queues"] if q["queue"]["topic"] == topic]
            assert sorted(q["queue"]["queueId"] for q in held) == [0, 1]
            assert sum(q["commitOffset"] for q in held) == 4 and all(q["cachedCount"] == 0 for q in held)
            assert any(q["lastConsumeTimestamp"] > 0 for q in held)
            assert [s["topic"] for s in info["subscriptions"]] == sorted([topic, f"%RETRY%{group}"])
            pc = await _cli(server.namesrv, "producers", pgroup, topic)
            assert [c["language"] for c in pc["connections"]] == ["PYTHON"]
            assert group in await _cli(server.namesrv, "topic-groups", topic)

            reset = await _cli(server.namesrv, "reset-offset", group, topic, "--time", "0")
            assert reset["clientsNotified"] is True
            assert sorted(q["offset"] for q in reset["queues"]) == [0, 0]
            await until(
                lambda: len(got) >= 8, "the messages consumed again after the reset", WAIT, interval=0.05
            )
            assert sorted(m.body for m in got[4:]) == sorted(m.body for m in got[:4])

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_stats_per_topic_and_group(server: BrokerProcess) -> None:
    topic, group = unique("CliT"), unique("CliTG")
    created(server, topic, 2)
    send(server.namesrv, topic, [(f"k{i}", f"m{i}") for i in range(3)])
    ok(server, "reset-offset", group, topic, "--time", "0")  # the group's offsets at 0: lag 3

    # The broker samples its counters every 10 s (as Java); the stored count shows from then on.
    wait_until(
        lambda: js(server, "stats", "--topic", topic)[0]["inToday"] == 3, "3 stored messages in the stats"
    )
    row = js(server, "stats", "--topic", topic)[0]
    assert row["topic"] == topic and row["inTps"] >= 0.0
    assert [(g["group"], g["lag"], g["outToday"]) for g in row["groups"]] == [(group, 3, 0)]
    table = ok(server, "stats")
    assert topic in table and group in table and "TBW102" not in table
    assert "TBW102" in ok(server, "stats", "--all")
