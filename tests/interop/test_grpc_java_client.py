"""The official RocketMQ 5.x Java client (Maven rocketmq-client-java, over gRPC) against `ferromq serve`
and against Apache RocketMQ 5.3.3's proxy in local mode, side by side: the scenarios of the Python 5.x
client's test (test_grpc_python_client.py, whose settings, topics and expectations come from
grpc_kit.py), run by the Java driver `io.ferromq.interop5.Grpc5` (tests/interop/java5grpc), give the
same normalised answers on both servers, and each what it must show:

- roundtrip: three messages with a tag, keys and a user property arrive once each, with their ids;
- redelivery: a message not acked comes back after its (changed) invisible duration with delivery
  attempt 2, and not once acked;
- push_tags: a PushConsumer subscribed to `TagA || TagC` gets only those, the one it failed once again;
- push_sql: a PushConsumer with an SQL92 filter gets only the messages matching it;
- dead_letter: a message failed once by a group with retryMaxTimes 0 lands in its %DLQ% topic;
- wrong_type: a FIFO message to a NORMAL topic is refused by the client (the route's accepted types);
- fifo: two message groups each in order for an orderly group's SimpleConsumer;
- delay: a message with a delivery timestamp 3 s ahead arrives, not before it;
- transaction: the committed and the checked-back (Telemetry) half messages arrive, the rolled back not;
- recall: a recalled delayed message never arrives, another one does.

And mixed, against ferromq only: messages sent by the official C++ client (PyPI rocketmq 0.4.4, over
remoting; tests/interop/cpp_scenarios.py) are received by the Java 5.x client over gRPC, and messages
the Java client sends over gRPC are received by the C++ client's push consumer, with their bodies, tags,
keys, user properties and message ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import ApacheRocketMQProxy, have_java

from ferromq.testing import BrokerProcess
from tests.interop.cpp_kit import cpp_client_problem, scenario_argv
from tests.interop.grpc_kit import CASES, assert_outcome, assert_same, on_both, prepare
from tests.interop.java5build import build_grpc5_jar, run_driver
from tests.interop.mqadmin import MqadminShell

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="the Java 5.x client tests need `java` and `mvn` on PATH"),
    # The first run builds the driver (Maven Central) and resolves the 5.3.3 proxy's jars.
    pytest.mark.timeout(900),
]

RUN = uuid.uuid4().hex[:6]
# The driver's own watchdog ends it after 110 s.
DRIVER_TIMEOUT = 150.0
CPP_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def jar() -> Path:
    return build_grpc5_jar()


def client_logs(workdir: Path, limit: int = 6000) -> str:
    """The tails of the Java client's logs of the runs under `workdir`."""
    parts = []
    for log in sorted(workdir.glob("client-logs/*/rocketmq-client.log")):
        text = log.read_text("utf-8", "replace")
        parts.append(f"--- {log} ---\n{text[-limit:]}")
    return "\n".join(parts)


def run_java(jar: Path, workdir: Path, endpoint: str, scenario: str, *args: str) -> dict[str, Any]:
    """One run of the driver: the answer of its `RESULT {json}` line."""
    workdir.mkdir(parents=True, exist_ok=True)
    r = run_driver(jar, workdir, "Grpc5", endpoint, scenario, *args, timeout=DRIVER_TIMEOUT)
    results = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    assert r.code == 0 and results, (
        f"{scenario} {' '.join(args)} failed ({r.code}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}\n"
        f"{client_logs(workdir)}"
    )
    result: dict[str, Any] = json.loads(results[-1][len("RESULT ") :])
    return result


@pytest.mark.parametrize("case", list(CASES))
def test_java_client_side_by_side(
    case: str,
    jar: Path,
    ferromq_grpc: BrokerProcess,
    java_proxy: ApacheRocketMQProxy,
    grpc_admins: tuple[MqadminShell, MqadminShell],
    tmp_path: Path,
    failure_sections: list[tuple[str, Callable[[], str]]],
) -> None:
    failure_sections.append(("Apache RocketMQ 5.3.3 proxy logs", java_proxy.log_tail))
    failure_sections.append(("ferromq log", ferromq_grpc.log_tail))
    failure_sections.append(("Java client logs", lambda: client_logs(tmp_path)))
    topic, group = f"J5{case.replace('_', '')}{RUN}", f"J5G{case.replace('_', '')}{RUN}"
    on_both(
        lambda: prepare(ferromq_grpc.namesrv, tmp_path, topic, group, case, admin=grpc_admins[0].run),
        lambda: prepare(java_proxy.namesrv, tmp_path, topic, group, case, admin=grpc_admins[1].run),
    )
    ours, theirs = on_both(
        lambda: run_java(jar, tmp_path / "ferromq", ferromq_grpc.grpc_endpoint, case, topic, group),
        lambda: run_java(jar, tmp_path / "rocketmq", java_proxy.grpc_endpoint, case, topic, group),
    )
    print(f"\n{case}: ferromq {ours}\n{case}: rocketmq {theirs}")
    ours = assert_same(ours, theirs)
    # What each scenario must show (the Python client's expectations: the same answers).
    assert_outcome(case, ours)
    if case == "wrong_type":
        # The Java client's own check, with the route's accepted types.
        assert ours["message"] == (
            "Current message type not match with topic accept message types, "
            f"topic={topic}, actualMessageType=FIFO, acceptMessageTypes=[NORMAL]"
        )


def run_cpp(workdir: Path, scenario: str, namesrv: str, **opts: Any) -> dict[str, Any]:
    """One cpp_scenarios.py child (its C++ log under workdir/logs): the answer of its RESULT line."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HOME": str(workdir), "PYTHONUNBUFFERED": "1"}
    argv = scenario_argv(scenario, namesrv, deadline=CPP_TIMEOUT - 10, **opts)
    r = subprocess.run(
        argv, capture_output=True, text=True, timeout=CPP_TIMEOUT, env=env, stdin=subprocess.DEVNULL
    )
    results = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    assert r.returncode == 0 and results, (
        f"C++ {scenario} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    )
    result: dict[str, Any] = json.loads(results[-1][len("RESULT ") :])
    return result


def test_mixed_cpp_remoting_and_java_grpc(
    jar: Path,
    ferromq_grpc: BrokerProcess,
    tmp_path: Path,
    failure_sections: list[tuple[str, Callable[[], str]]],
) -> None:
    problem = cpp_client_problem()
    if problem is not None:
        pytest.skip(f"the RocketMQ C++ client is not usable (PyPI rocketmq==0.4.4): {problem}")
    failure_sections.append(("ferromq log", ferromq_grpc.log_tail))
    failure_sections.append(("Java client logs", lambda: client_logs(tmp_path)))
    namesrv, endpoint = ferromq_grpc.namesrv, ferromq_grpc.grpc_endpoint
    to_java, to_cpp = f"J5mixA{RUN}", f"J5mixB{RUN}"
    for topic in (to_java, to_cpp):
        prepare(namesrv, tmp_path / "mqadmin", topic, "", "roundtrip")

    # The C++ client sends over remoting; the Java 5.x client receives over gRPC.
    produced = run_cpp(
        tmp_path / "cpp-produce",
        "produce",
        namesrv,
        topic=to_java,
        group=f"J5mixP{RUN}",
        count=3,
        prefix="cpp",
        tags="TagC",
        keys=True,
        prop=["color=red"],
    )
    assert produced["errors"] == [] and [s["status"] for s in produced["sent"]] == [0, 0, 0], produced
    got = run_java(jar, tmp_path / "java-receive", endpoint, "receive", to_java, f"J5mixJ{RUN}", "3")
    assert got["received"] == [
        {
            "body": f"cpp-{i}|",
            "tag": "TagC",
            "keys": [f"cpp-{i}-k1", f"cpp-{i}-k2"],
            "properties": {"color": "red", "seq": str(i)},
            "delivery_attempt": 1,
            "topic": to_java,
            "message_id": produced["sent"][i]["msg_id"],
        }
        for i in range(3)
    ]

    # The Java 5.x client sends over gRPC; the C++ client's push consumer receives over remoting.
    sent = run_java(jar, tmp_path / "java-send", endpoint, "send", to_cpp, f"J5mixS{RUN}")["sent"]
    pushed = run_cpp(
        tmp_path / "cpp-push",
        "push",
        namesrv,
        topic=to_cpp,
        group=f"J5mixC{RUN}",
        expect=3,
        wait=CPP_TIMEOUT - 20,
        props=["color"],
    )
    assert pushed["stop_reason"] == "expected", pushed
    received = sorted(pushed["received"], key=lambda r: r["id"])
    assert [r["body"] for r in received] == [s["body"] for s in sent]
    for i, (s, r) in enumerate(zip(sent, received, strict=True)):
        assert r["topic"] == to_cpp and r["tags"] == "TagJ" and r["reconsume_times"] == 0, r
        assert sorted(r["keys"].split(" ")) == [f"j5-{i}-k1", f"j5-{i}-k2"], r
        assert r["props"]["color"] == "green" and r["props"]["seq"] == str(i), r
        assert r["uniq_key"] == s["message_id"], (s, r)
