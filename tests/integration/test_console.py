"""`ferromq console` against a live `ferromq serve`: every page over HTTP (read-only: other methods
are refused), then in headless Chromium (the Debian package, which scripts/test.sh installs), whose
screenshots are kept in the test's tmp directory and whose DOM shows the chart script ran."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferromq.client import Admin, Message, Producer, SendResult
from ferromq.testing import BrokerProcess
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
            deadline = time.monotonic() + TIMEOUT
            while True:
                try:
                    await admin.topic_route(topic)
                    break
                except Exception:
                    assert time.monotonic() < deadline, "no route"
                    await asyncio.sleep(0.05)
            sent = [
                await p.send(Message(topic, f"order {i}".encode(), keys=[f"order-{i}"])) for i in range(3)
            ]
            await admin.create_group(group)
            await admin.reset_offset_by_time(group, topic, 0)
            return sent

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    server = BrokerProcess(tmp_path_factory.mktemp("console")).start()
    console: subprocess.Popen[str] | None = None
    try:
        topic, group = f"Orders{uuid.uuid4().hex[:6]}", f"Billing{uuid.uuid4().hex[:6]}"
        sent = _prepare(server.namesrv, topic, group)
        console = subprocess.Popen(
            [str(FERROMQ), "console", "-n", server.namesrv, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert console.stdout is not None
        line = console.stdout.readline()  # the ready line is the first on stdout
        assert line.startswith("ferromq console on http://127.0.0.1:"), line + console.stderr.read()
        yield Cluster(server, line.split()[3], topic, group, sent)
    finally:
        if console is not None:
            os.kill(console.pid, signal.SIGTERM)
            _, err = console.communicate(timeout=TIMEOUT)
            assert console.returncode == 0, err
            assert "Traceback" not in err, err
        stop_ferromq(server)


def get(url: str, method: str = "GET") -> tuple[int, str]:
    req = urllib.request.Request(url, method=method)
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
    }
    for name, path in shots.items():
        png = tmp_path / f"console-{name}.png"
        r = chromium(
            "--window-size=1280,800", "--virtual-time-budget=3000", f"--screenshot={png}", c.url + path
        )
        assert r.returncode == 0 and png.exists(), r.stderr
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    print(f"console screenshots in {tmp_path}")
