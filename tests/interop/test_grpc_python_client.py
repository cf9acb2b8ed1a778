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
  accepted message types);
- fifo: two message groups interleaved on a FIFO topic reach an orderly group's SimpleConsumer each in
  the order sent;
- delay: a message sent with a delivery timestamp 3 s ahead arrives, not before it;
- transaction: of three half messages, the committed one and the one the broker checks back about (the
  client's checker commits it over Telemetry) are delivered, the rolled back one never;
- recall: a delayed message recalled with its send's recall handle never arrives; another one does.

Typed topics (message.type) and the orderly group are made by Apache RocketMQ 5.3.3's own mqadmin on both
servers. Both check open transactions every second once they are 5 s old (transactionCheckInterval,
transactionTimeOut) and allow recalls (recallMessageEnable).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import ApacheRocketMQProxy, client5_python, have_java, mqadmin, start_rocketmq_proxy

from ferromq.testing import BrokerProcess
from tests.interop.conftest import stop_ferromq

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="the side-by-side runs need `java` and `mvn` on PATH"),
    pytest.mark.timeout(900),
]

SCENARIOS = Path(__file__).with_name("client5_scenarios.py")
RUN = uuid.uuid4().hex[:6]
# Scenario -> the message.type of its topic, and whether its group consumes orderly.
CASES = {
    "roundtrip": ("NORMAL", False),
    "redelivery": ("NORMAL", False),
    "push_tags": ("NORMAL", False),
    "wrong_type": ("NORMAL", False),
    "fifo": ("FIFO", True),
    "delay": ("DELAY", False),
    "transaction": ("TRANSACTION", False),
    "recall": ("DELAY", False),
}
CLUSTER = "DefaultCluster"
# Open transactions are checked every second on both, once 5 s old; recalls are allowed.
BROKER_CONF = {
    "transactionCheckInterval": "1000",
    "transactionTimeOut": "5000",
    "recallMessageEnable": "true",
}
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
    proxy = start_rocketmq_proxy(tmp_path_factory.mktemp("rocketmq-proxy"), broker_conf=BROKER_CONF)
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture(scope="module")
def ferromq_grpc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    server = BrokerProcess(tmp_path_factory.mktemp("ferromq-grpc"), BROKER_CONF).start()
    try:
        yield server
    finally:
        stop_ferromq(server)


def topic_of(case: str) -> str:
    return f"G5{case.replace('_', '')}{RUN}"


def prepare(namesrv: str, root: Path, topic: str, message_type: str, group: str, orderly: bool) -> None:
    """The scenario's typed topic (and orderly group) on a cluster, made by 5.3.3's mqadmin."""
    out = mqadmin(
        root,
        namesrv,
        "updateTopic",
        "-c",
        CLUSTER,
        "-t",
        topic,
        "-r",
        "4",
        "-w",
        "4",
        "-a",
        f"+message.type={message_type}",
    )
    assert "success" in out, out
    if orderly:
        out = mqadmin(root, namesrv, "updateSubGroup", "-c", CLUSTER, "-g", group, "-o", "true")
        assert "success" in out, out


@pytest.mark.parametrize("case", list(CASES))
def test_python_client_side_by_side(
    case: str,
    ferromq_grpc: BrokerProcess,
    java_proxy: ApacheRocketMQProxy,
    tmp_path: Path,
    failure_sections: list[tuple[str, Callable[[], str]]],
) -> None:
    failure_sections.append(("Apache RocketMQ 5.3.3 proxy logs", java_proxy.log_tail))
    failure_sections.append(("ferromq log", ferromq_grpc.log_tail))
    topic, group = topic_of(case), f"G5G{case.replace('_', '')}{RUN}"
    message_type, orderly = CASES[case]
    prepare(ferromq_grpc.namesrv, tmp_path / "mqadmin-ferromq", topic, message_type, group, orderly)
    prepare(java_proxy.namesrv, tmp_path / "mqadmin-rocketmq", topic, message_type, group, orderly)
    ours = run_scenario(ferromq_grpc.grpc_endpoint, case, topic, group, tmp_path / "ferromq")
    theirs = run_scenario(java_proxy.grpc_endpoint, case, topic, group, tmp_path / "rocketmq")
    print(f"\n{case}: ferromq {ours}\n{case}: rocketmq {theirs}")
    # Duplicates (at least once) are counted, not compared: ferromq must have none.
    assert ours.pop("duplicates", 0) == 0
    theirs.pop("duplicates", None)
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
    elif case == "fifo":
        assert ours["order"] == {g: [f"{g}-{i}" for i in range(4)] for g in ("gA", "gB")}
    elif case == "delay":
        assert ours == {"received": ["later"], "early": False}
    elif case == "transaction":
        assert ours == {"received": ["check me", "commit me"], "checked": ["check me"]}
    elif case == "recall":
        assert ours == {"received": ["kept"], "had_handle": True}
