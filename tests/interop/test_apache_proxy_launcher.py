"""The Apache RocketMQ 5.3.3 proxy launcher (`start_rocketmq_proxy` in tools/apache_rocketmq.py): a Java name
server and `ProxyStartup -pm local` (the broker inside the proxy) start under a temporary root, 5.3.3's
mqadmin makes a topic, and the official Python 5.x client (rocketmq-python-client, in its own environment:
`client5_python()`) sends three messages through the proxy's gRPC port, then receives and acks them with a
SimpleConsumer; a SIGTERM stops both JVMs. This is the harness the side-by-side tests of the 5.x clients
use against Apache RocketMQ.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import ApacheRocketMQProxy, client5_python, have_java, start_rocketmq_proxy

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="the Apache RocketMQ launcher needs `java` and `mvn` on PATH"),
    # The first run resolves the 5.3.3 jars from Maven Central and makes the client's environment.
    pytest.mark.timeout(900),
]

TOPIC = "ProxyLauncherTopic"
GROUP = "ProxyLauncherGroup"
COUNT = 3
# How long the client may take for its whole run (start, sends, receives, acks, shutdown).
CLIENT_DEADLINE = 120.0

# Run by the client's own Python: argv endpoint, topic, group, count, seconds. Sends `count` messages,
# receives until it has them all (or the time is up), acks each one (ack raises when the proxy refuses it),
# and prints one `RESULT {json}` line.
CLIENT = r"""
import json
import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

endpoint, topic, group, count, seconds = sys.argv[1:6]
count = int(count)
deadline = time.monotonic() + float(seconds)
config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=5)
producer = Producer(config, (topic,))
result = {"sent": [], "received": [], "acked": []}
consumer.startup()
try:
    producer.startup()
    try:
        for i in range(count):
            message = Message()
            message.topic = topic
            message.body = f"proxy launcher {i}".encode()
            message.tag = "T"
            message.keys = f"k{i}"
            receipt = producer.send(message)
            result["sent"].append({"body": message.body.decode(), "message_id": receipt.message_id})
    finally:
        producer.shutdown()
    while len(result["received"]) < count and time.monotonic() < deadline:
        for message in consumer.receive(count, 30):
            result["received"].append(
                {"body": message.body.decode(), "message_id": message.message_id, "tag": message.tag}
            )
            consumer.ack(message)
            result["acked"].append(message.message_id)
finally:
    consumer.shutdown()
print("RESULT " + json.dumps(result), flush=True)
"""


def _run_client(proxy: ApacheRocketMQProxy, home: Path) -> dict[str, Any]:
    home.mkdir(parents=True, exist_ok=True)
    # The client logs into ~/logs/rocketmq_python: HOME is under the test's directory.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HOME": str(home)}
    argv = [
        client5_python(),
        "-c",
        CLIENT,
        proxy.grpc_endpoint,
        TOPIC,
        GROUP,
        str(COUNT),
        str(CLIENT_DEADLINE),
    ]
    r = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=CLIENT_DEADLINE + 60,
        cwd=home,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    results = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    assert r.returncode == 0 and results, (
        f"the Python 5.x client failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    )
    result: dict[str, Any] = json.loads(results[-1][len("RESULT ") :])
    return result


def test_proxy_launcher_python_client_roundtrip(
    tmp_path: Path, failure_sections: list[tuple[str, Callable[[], str]]]
) -> None:
    proxy = start_rocketmq_proxy(tmp_path / "rocketmq")
    failure_sections.append(("Apache RocketMQ 5.3.3 proxy logs", proxy.log_tail))
    failure_sections.append(
        ("Python 5.x client log", lambda: _read(tmp_path / "client" / "logs" / "rocketmq_python"))
    )
    try:
        assert proxy.running() and proxy.proxy_pid > 0 and proxy.namesrv_pid > 0
        assert proxy.proxy_pid != proxy.namesrv_pid
        for addr in (proxy.grpc_endpoint, proxy.remoting_endpoint, proxy.namesrv, proxy.broker_addr):
            assert addr.startswith("127.0.0.1:"), addr
        proxy.create_topic(TOPIC)
        result = _run_client(proxy, tmp_path / "client")
    finally:
        proxy.stop()

    bodies = [f"proxy launcher {i}" for i in range(COUNT)]
    assert [m["body"] for m in result["sent"]] == bodies
    assert sorted(m["body"] for m in result["received"]) == bodies, result
    assert {m["message_id"] for m in result["received"]} == {m["message_id"] for m in result["sent"]}
    assert all(m["tag"] == "T" for m in result["received"])
    # Every received message was acked (an ack the proxy refuses raises in the client).
    assert result["acked"] == [m["message_id"] for m in result["received"]]
    # Both JVMs ended on the SIGTERM (an exit code, not a kill after the stop timeout).
    assert not proxy.running()
    assert proxy.broker_exit is not None and proxy.namesrv_exit is not None, proxy.log_tail()


def _read(directory: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-6000:] for p in sorted(directory.glob("*.log")))
