"""`ferromq console` against a live `ferromq serve`: every page over HTTP (read-only: other methods
are refused), then in headless Chromium (the Debian package, which scripts/test.sh installs), whose
screenshots are kept in the test's tmp directory and whose DOM shows the chart script ran."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ferromq.client import Admin, Message, Producer, SendResult
from ferromq.console.app import TEMPLATES_KEY, make_app
from ferromq.protocol.constants import RUNTIME_TABLE_TOPICS_KEY
from ferromq.testing import BrokerProcess
from ferromq.testing.waiting import until
from tests.interop.conftest import stop_ferromq

FERROMQ = Path(sys.executable).with_name("ferromq")
TIMEOUT = 60.0
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Cluster:
    server: BrokerProcess
    url: str
    topic: str
    group: str
    sent: list[SendResult]


def _prepare(namesrv: str, topic: str, group: str) -> list[SendResult]:
    """A topic with keyed messages, and a group whose committed offsets are at 0 (lag 3)."""

    async def main() -> list[SendResult]:
        async with Admin(namesrv) as admin, Producer(f"PG{uuid.uuid4().hex[:6]}", namesrv) as p:
            await admin.create_topic(topic, queue_nums=2)

            async def routed() -> bool:
                try:
                    await admin.topic_route(topic)
                except Exception:  # not on the name server yet
                    return False
                return True

            await until(routed, "the topic's route", timeout=TIMEOUT)
            sent = [
                await p.send(Message(topic, f"order {i}".encode(), keys=[f"order-{i}"])) for i in range(3)
            ]
            await admin.create_group(group)
            await admin.reset_offset_by_time(group, topic, 0)
            return sent

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


@contextmanager
def run_console(namesrv: str, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """`ferromq console` on a free port; its URL. It must stop cleanly on SIGTERM."""
    console = subprocess.Popen(
        [str(FERROMQ), "console", "-n", namesrv, "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=None if env is None else {**os.environ, **env},
    )
    try:
        assert console.stdout is not None
        line = console.stdout.readline()  # the ready line is the first on stdout
        assert line.startswith("ferromq console on http://127.0.0.1:"), line + console.stderr.read()
        yield line.split()[3]
    finally:
        os.kill(console.pid, signal.SIGTERM)
        _, err = console.communicate(timeout=TIMEOUT)
        assert console.returncode == 0, err
        assert "Traceback" not in err, err


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    server = BrokerProcess(tmp_path_factory.mktemp("console")).start()
    try:
        topic, group = f"Orders{uuid.uuid4().hex[:6]}", f"Billing{uuid.uuid4().hex[:6]}"
        sent = _prepare(server.namesrv, topic, group)
        with run_console(server.namesrv) as url:
            yield Cluster(server, url, topic, group, sent)
    finally:
        stop_ferromq(server)


def get(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def page(c: Cluster, path: str) -> str:
    status, text = get(c.url + path.lstrip("/"))
    assert status == 200, f"{path}: {status}\n{text}"
    return text


def test_pages(cluster: Cluster) -> None:
    c = cluster
    text = page(c, "/")
    assert c.server.broker_addr in text and "DefaultCluster" in text and 'id="chart"' in text
    topics = page(c, "/topics")
    row = topics[topics.index(f">{c.topic}</a>") :].split("</tr>")[0]
    assert row.rstrip().endswith('<td class="n">3</td>'), row  # lag 3 over the topic's groups
    assert "TBW102" not in page(c, "/topics") and "TBW102" in page(c, "/topics?system=1")
    topic = page(c, f"/topics/{c.topic}")
    assert f"Topic {c.topic}" in topic and c.server.broker_addr in topic
    queues = topic[topic.index('id="queues"') : topic.index("</table>", topic.index('id="queues"'))]
    assert queues.count("<tr>") == 3  # the header and the two queues
    assert f">{c.group}</a>" in topic  # consumes it (it has offsets there)

    groups = page(c, "/groups")
    row = groups[groups.index(f">{c.group}</a>") :]
    assert '<td class="n">3</td>' in row.split("</tr>")[0]  # lag 3: nothing consumed
    group = page(c, f"/groups/{c.group}")
    assert "total lag 3" in group and f"no consumer of {c.group} is online" in group

    by_key = page(c, "/message?" + urllib.parse.urlencode({"topic": c.topic, "key": "order-1"}))
    assert "order 1" in by_key and c.sent[1].msg_id in by_key
    by_id = page(c, "/message?" + urllib.parse.urlencode({"offsetMsgId": c.sent[2].offset_msg_id}))
    assert "order 2" in by_id
    by_msg_id = page(c, "/message?" + urllib.parse.urlencode({"topic": c.topic, "msgId": c.sent[0].msg_id}))
    assert "order 0" in by_msg_id
    q = c.sent[0].message_queue
    at = {"topic": c.topic, "broker": q.broker_name, "queue": q.queue_id, "offset": c.sent[0].queue_offset}
    assert "order 0" in page(c, "/message?" + urllib.parse.urlencode(at))
    missing = page(c, "/message?" + urllib.parse.urlencode({"topic": c.topic, "key": "nope"}))
    assert "no message found" in missing
    assert "not an offsetMsgId" in page(c, "/message?offsetMsgId=xyz")

    assert get(c.url + "topics/NoSuchTopic")[0] == 404
    for method in ("POST", "PUT", "DELETE"):
        assert get(c.url, method)[0] == 405, method  # read-only


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"]
    return subprocess.run(
        [CHROMIUM, *flags, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 2,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (scripts/test.sh installs Debian's chromium package)"
)
def test_in_headless_chromium(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    # The chart script fetched /api/cluster and drew a sample (the DOM after scripts ran).
    dom = chromium("--dump-dom", "--virtual-time-budget=5000", c.url)
    assert dom.returncode == 0, dom.stderr
    assert 'data-samples="1"' in dom.stdout or 'data-samples="2"' in dom.stdout, dom.stdout
    assert "sample(s); now in" in dom.stdout

    shots = {
        "cluster": "",
        "topics": "topics",
        "topic": f"topics/{c.topic}",
        "groups": "groups",
        "group": f"groups/{c.group}",
        "message": "message?" + urllib.parse.urlencode({"topic": c.topic, "key": "order-1"}),
        "tables": "tables",
    }
    for name, path in shots.items():
        png = tmp_path / f"console-{name}.png"
        r = chromium(
            "--window-size=1280,800", "--virtual-time-budget=3000", f"--screenshot={png}", c.url + path
        )
        assert r.returncode == 0 and png.exists(), r.stderr
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    print(f"console screenshots in {tmp_path}")


# -- table topics --------------------------------------------------------------------------------

# Every commit as soon as a message waits, checked every second.
EAGER_TABLES = {"tableTopicIntervalSeconds": 1, "tableTopicMinRows": 1, "tableTopicMaxDelaySeconds": 0}


@dataclass
class Tiered:
    server: BrokerProcess
    url: str
    topic: str


def _wait_tiered(server: BrokerProcess, topic: str, n: int) -> None:
    """Until the topic's table holds its `n` messages (read from the table's files) and the broker
    reports them tiered."""
    from ferromq.tables import committed_offsets, open_table
    from ferromq.tables.layout import table_root

    async def main() -> None:
        async with Admin(server.namesrv) as admin:
            reported: list[tuple[str, int, int]] = []

            async def done() -> bool:
                table = open_table(table_root(server.store), topic)
                if table is None or sum(committed_offsets(table).values()) < n:
                    return False
                rt = await admin.broker_runtime_info(server.broker_addr)
                reported[:] = [(t.topic, t.rows_tiered, t.lag) for t in rt.table_topics]
                return reported == [(topic, n, 0)]

            await until(
                done, f"{n} messages of {topic} in its table", TIMEOUT, lambda: f"reported {reported}", 0.2
            )

    asyncio.run(main())


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    topic = f"Ledger{uuid.uuid4().hex[:6]}"
    server = BrokerProcess(tmp_path_factory.mktemp("tables"), {"tableTopics": topic, **EAGER_TABLES}).start()
    try:
        _prepare(server.namesrv, topic, f"Audit{uuid.uuid4().hex[:6]}")  # 3 messages
        _wait_tiered(server, topic, 3)
        with run_console(server.namesrv) as url:
            yield Tiered(server, url, topic)
    finally:
        stop_ferromq(server)


def test_table_topics_page_and_api(tiered: Tiered) -> None:
    t = tiered
    status, text = get(t.url + "tables")
    assert status == 200, text
    assert 'href="/tables" class="on"' in text
    rows = text[text.index('id="tables"') : text.index("</table>", text.index('id="tables"'))]
    row = rows[rows.index(f">{t.topic}</a>") :].split("</tr>")[0]
    # rows tiered 3, lag 0, 1 commit or more, a version, no failure
    cells = [c.split(">", 1)[1].split("<", 1)[0] for c in row.split("<td")[1:]]
    assert cells[0:2] == ["3", "0"] and int(cells[2]) >= 1 and cells[3] != "-", cells
    assert cells[5] == "0" and cells[8] == "", cells
    tier_cpu, maintain_cpu = (float(x) for x in cells[7].split(" / "))  # the tiering thread's CPU
    assert tier_cpu >= 0 and maintain_cpu >= 0, cells
    assert f"/tables/{t.topic}" in row  # the table's URI

    status, body = get(t.url + "api/tables")
    assert status == 200, body
    [broker] = json.loads(body)["brokers"]
    assert broker["addr"] == t.server.broker_addr
    [table] = broker["tables"]
    assert (table["topic"], table["rows_tiered"], table["lag"], table["failures"]) == (t.topic, 3, 0, 0)
    assert table["commits"] >= 1 and table["version"] >= 1 and table["last_commit_ms"] > 0
    assert table["uri"].endswith(f"/tables/{t.topic}") and table["last_error"] is None
    assert table["tier_cpu_seconds"] > 0, table


def test_table_topics_in_runtime_info_and_admin(tiered: Tiered) -> None:
    t = tiered
    status = admin_json(t.server.namesrv, "broker-status", "-b", t.server.broker_addr)
    [raw] = json.loads(status[t.server.broker_addr][RUNTIME_TABLE_TOPICS_KEY])
    assert (raw["topic"], raw["rowsTiered"], raw["lag"], raw["lastError"]) == (t.topic, 3, 0, None)
    for where in ([], ["-b", t.server.broker_addr], ["--topic", t.topic]):
        [row] = admin_json(t.server.namesrv, "table-topics", *where)
        assert row["brokerAddr"] == t.server.broker_addr, where
        assert (row["topic"], row["rowsTiered"], row["lag"], row["failures"]) == (t.topic, 3, 0, 0), where
    assert admin_json(t.server.namesrv, "table-topics", "--topic", "NoSuchTopic") == []


def test_a_broker_without_table_topics(cluster: Cluster) -> None:
    c = cluster
    text = page(c, "/tables")
    row = text[text.index(f"<td>{c.server.broker_addr}</td>") :].split("</tr>")[0]
    assert "tiers no topic" in row, row
    [broker] = json.loads(page(c, "/api/tables"))["brokers"]
    assert (broker["addr"], broker["tables"]) == (c.server.broker_addr, [])
    status = admin_json(c.server.namesrv, "broker-status", "-b", c.server.broker_addr)
    assert RUNTIME_TABLE_TOPICS_KEY not in status[c.server.broker_addr]  # only where topics are tiered
    assert admin_json(c.server.namesrv, "table-topics") == []


def test_an_unreachable_broker_is_shown_as_such() -> None:
    """The page's other cases, rendered without a cluster: a broker that did not answer, and one
    tiering nothing."""
    env = make_app("127.0.0.1:1")[TEMPLATES_KEY]
    brokers = [
        {"cluster": "C", "name": "broker-a", "id": 0, "addr": "127.0.0.1:1", "error": "connection refused"},
        {"cluster": "C", "name": "broker-b", "id": 0, "addr": "127.0.0.1:2", "tables": []},
    ]
    text = env.get_template("tables.html").render(namesrv="-", page="tables.html", brokers=brokers, ms=str)
    assert '<td colspan="11" class="error">not available: connection refused</td>' in text
    assert '<td>127.0.0.1:2</td>\n      <td colspan="11">tiers no topic</td>' in text


def admin_json(namesrv: str, *args: str) -> Any:
    out = subprocess.run(
        [str(FERROMQ), "admin", "-n", namesrv, "--json", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_access_page_is_behind_its_own_login(tmp_path: Path) -> None:
    """ACL 2.0's users and entries, read with the console's own keys (a Super user), shown only to
    whoever gives the console's login; never a password."""
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerName=broker-a\nauthenticationEnabled=true\nauthorizationEnabled=true\n"
        'initAuthenticationUser={"username":"rocketmq","password":"12345678"}\n'
    )
    server = BrokerProcess(tmp_path, conf).start()
    try:

        async def provision() -> None:
            async with Admin(server.namesrv, access_key="rocketmq", secret_key="12345678") as admin:
                await admin.create_user("alice1", "alicePass1")
                await admin.put_acl("User:alice1", ["Topic:Orders*"], ["Pub"], "Deny", ["10.0.0.0/8"])

        asyncio.run(provision())
        env = {"FERROMQ_SECRET_KEY": "12345678", "FERROMQ_CONSOLE_PASSWORD": "console-pass"}
        with run_console(server.namesrv, "--access-key", "rocketmq", "--login", "ops", env=env) as url:
            assert get(url + "access")[0] == 401
            bad = base64.b64encode(b"ops:wrong").decode()
            assert get(url + "access", headers={"Authorization": f"Basic {bad}"})[0] == 401
            good = base64.b64encode(b"ops:console-pass").decode()
            status, text = get(url + "access", headers={"Authorization": f"Basic {good}"})
            assert status == 200, text
            assert "alice1" in text and "Topic:Orders*" in text and "10.0.0.0/8" in text and "Deny" in text
            assert "alicePass1" not in text and "12345678" not in text
        with run_console(server.namesrv) as url:
            status, text = get(url + "access")
            assert status == 403 and "--login" in text
    finally:
        stop_ferromq(server)
