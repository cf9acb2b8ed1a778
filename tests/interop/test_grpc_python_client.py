"""The official RocketMQ 5.x Python client (PyPI rocketmq-python-client, over gRPC) against `ferromq serve`
and against Apache RocketMQ 5.3.3's proxy in local mode (`ProxyStartup -pm local`), side by side: the same
scenarios (tests/interop/client5_scenarios.py, run in the client's own environment) give the same answers.

- roundtrip: a Producer sends three messages with a tag, keys and a user property; a SimpleConsumer receives
  them all (same ids, tag, keys, properties, delivery attempt 1) and acks them;
- redelivery: a message received and not acked comes back once its invisible duration (changed to 1 s) is
  over, with delivery attempt 2; acked, it does not come back;
- push_tags: a PushConsumer subscribed to `TagA || TagC` receives only those, and the one its listener
  failed once again with delivery attempt 2;
- wrong_type: a FIFO message (message group) to a NORMAL topic is refused (the client checks the route's
  accepted message types).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import ApacheRocketMQProxy, client5_python, have_java, start_rocketmq_proxy

from ferromq.client.admin import Admin
from ferromq.testing import BrokerProcess

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="the side-by-side runs need `java` and `mvn` on PATH"),
    pytest.mark.timeout(900),
]

SCENARIOS = Path(__file__).with_name("client5_scenarios.py")
RUN = uuid.uuid4().hex[:6]
CASES = ("roundtrip", "redelivery", "push_tags", "wrong_type")
CLIENT_TIMEOUT = 180.0


def run_scenario(endpoint: str, scenario: str, topic: str, group: str, home: Path) -> dict[str, Any]:
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HOME": str(home)}
    r = subprocess.run(
        [client5_python(), str(SCENARIOS), endpoint, scenario, topic, group],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT,
        cwd=home,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    results = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    assert r.returncode == 0 and results, (
        f"{scenario} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    )
    result: dict[str, Any] = json.loads(results[-1][len("RESULT ") :])
    return result


@pytest.fixture(scope="module")
def java_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheRocketMQProxy]:
    proxy = start_rocketmq_proxy(tmp_path_factory.mktemp("rocketmq-proxy"))
    try:
        yield proxy
    finally:
        proxy.stop()


def topic_of(case: str) -> str:
    return f"G5{case.replace('_', '')}{RUN}"


@pytest.mark.parametrize("case", CASES)
def test_python_client_side_by_side(
    case: str,
    ferromq_server: BrokerProcess,
    java_proxy: ApacheRocketMQProxy,
    tmp_path: Path,
    failure_sections: list[tuple[str, Callable[[], str]]],
) -> None:
    failure_sections.append(("Apache RocketMQ 5.3.3 proxy logs", java_proxy.log_tail))
    topic, group = topic_of(case), f"G5G{case.replace('_', '')}{RUN}"

    async def create() -> None:
        async with Admin(ferromq_server.namesrv) as admin:
            await admin.create_topic(topic, 4)

    asyncio.run(create())
    java_proxy.create_topic(topic, queues=4)
    ours = run_scenario(ferromq_server.grpc_endpoint, case, topic, group, tmp_path / "ferromq")
    theirs = run_scenario(java_proxy.grpc_endpoint, case, topic, group, tmp_path / "rocketmq")
    print(f"\n{case}: ferromq {ours}\n{case}: rocketmq {theirs}")
    assert ours == theirs
    # And what each scenario must show on its own (both brokers gave it, as compared above).
    if case == "roundtrip":
        assert ours["ids_match"] and [m["body"] for m in ours["received"]] == ["rt 0", "rt 1", "rt 2"]
        assert all(
            m["properties"] == {"color": "blue"} and m["delivery_attempt"] == 1 for m in ours["received"]
        )
    elif case == "redelivery":
        assert [m["delivery_attempt"] for m in ours["first"] + ours["second"]] == [1, 2]
        assert ours["after_ack"] == []
    elif case == "push_tags":
        assert ours["received"] == [
            ["p 0", "TagA", 1],
            ["p 2", "TagC", 2],
            ["p 3", "TagA", 1],
            ["p 5", "TagC", 1],
        ]
    elif case == "wrong_type":
        assert ours["refused"] == "IllegalArgumentException"
