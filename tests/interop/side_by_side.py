"""Helpers of test_side_by_side.py: start ferromq and Apache RocketMQ 4.9.7 with the same broker.conf, run
the official clients' scenarios against either, and normalise what they observed into plain data.

Normalising keeps what a broker decides (statuses, queue offsets, queue ids relative to the producer's
round-robin start, bodies, tags, keys, properties, reconsume times, response codes) and drops what differs
by nature between two runs: ports, timestamps, physical offsets and the ids that embed an address.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apache_rocketmq import ROCKETMQ_VERSION, start_rocketmq

from ferromq.testing import BrokerProcess
from tests.interop.conftest import stop_ferromq
from tests.interop.cpp_kit import scenario_argv
from tests.interop.javabuild import JAR, build_interop_jar

KINDS = ("ferromq", "rocketmq")
QUEUES = 4  # the clients' default queue count for auto-created topics

# The same broker.conf for both brokers: every delay level is 1 s, so retries come back at once.
BROKER_CONF = {
    "brokerClusterName": "DefaultCluster",
    "brokerName": "broker-a",
    "brokerId": "0",
    "brokerIP1": "127.0.0.1",
    "autoCreateTopicEnable": "true",
    "autoCreateSubscriptionGroup": "true",
    "flushDiskType": "ASYNC_FLUSH",
    "messageDelayLevel": " ".join(["1s"] * 18),
    # Transactions are checked every second once they are a second old.
    "transactionCheckInterval": "1000",
    "transactionTimeOut": "1000",
    "transactionCheckMax": "15",
}

# Properties whose values are times or depend on when a pull ran; their presence is still compared.
VOLATILE_PROPS = {"CONSUME_START_TIME"}

Record = dict[str, Any]


@dataclass
class Endpoint:
    kind: str
    namesrv: str
    broker_addr: str
    workdir: Path
    logs: list[str] = field(default_factory=list)

    def log_tail(self) -> str:
        return "\n".join(self.logs)


@contextmanager
def running_broker(kind: str, workdir: Path) -> Iterator[Endpoint]:
    """ferromq (`ferromq serve -c broker.conf`) or the Java name server and broker, same broker.conf."""
    workdir.mkdir(parents=True, exist_ok=True)
    if kind == "ferromq":
        server = BrokerProcess(workdir, BROKER_CONF).start()
        ep = Endpoint(kind, server.namesrv, server.broker_addr, workdir)
        try:
            yield ep
        finally:
            stop_ferromq(server)
    else:
        mq = start_rocketmq(workdir / "rocketmq", dict(BROKER_CONF))
        try:
            yield Endpoint(kind, mq.namesrv, mq.broker_addr, workdir)
        finally:
            mq.stop(kill=True)  # a reference broker: nothing reads its store afterwards


def build_jar() -> Path:
    return build_interop_jar()


# -- the clients ---------------------------------------------------------------------------------------


def run_cpp(ep: Endpoint, scenario: str, timeout: float = 60.0, **opts: Any) -> Record:
    """One cpp_scenarios.py child (its own HOME for the C++ log); the final RESULT line."""
    home = ep.workdir / f"cpp-{scenario}-{uuid.uuid4().hex[:6]}"
    home.mkdir(parents=True)
    argv = scenario_argv(scenario, ep.namesrv, timeout - 5, **opts)
    env = {**os.environ, "HOME": str(home), "PYTHONUNBUFFERED": "1"}
    r = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout + 30, env=env, stdin=subprocess.DEVNULL
    )
    lines = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    if r.returncode != 0 or not lines:
        ep.logs.append(f"$ {' '.join(argv)}\nexit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        raise AssertionError(f"[{ep.kind}] C++ {scenario} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    result: Record = json.loads(lines[-1][len("RESULT ") :])
    return result


def run_java(ep: Endpoint, main: str, scenario: str, timeout: int = 60, **opts: Any) -> list[Record]:
    """One JVM of the interop jar (`io.ferromq.interop.<main>`); its RESULT lines."""
    logs = ep.workdir / f"java-{scenario or main}-{uuid.uuid4().hex[:6]}"
    logs.mkdir(parents=True)
    cmd = [
        "java",
        f"-Drocketmq.client.logRoot={logs}",
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-cp",
        str(JAR),
        f"io.ferromq.interop.{main}",
        *([scenario] if scenario else []),  # Transactions takes options only
        f"namesrv={ep.namesrv}",
        f"timeout={timeout}",
        *(f"{k}={v}" for k, v in opts.items()),
    ]
    r = subprocess.run(cmd, capture_output=True, timeout=timeout + 60, cwd=logs, stdin=subprocess.DEVNULL)
    stdout, stderr = r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
    if r.returncode != 0:
        ep.logs.append(f"$ {' '.join(cmd)}\nexit {r.returncode}\n{stdout[-3000:]}\n{stderr[-3000:]}")
        raise AssertionError(f"[{ep.kind}] Java {main} {scenario} failed ({r.returncode}):\n{stderr[-3000:]}")
    prefix = "RESULT "
    return [json.loads(line[len(prefix) :]) for line in stdout.splitlines() if line.startswith(prefix)]


def events(results: list[Record], name: str) -> list[Record]:
    return [r for r in results if r.get("event") == name]


# -- normalising -----------------------------------------------------------------------------------------


def rel_queue(queue_id: int, base: int) -> int:
    """A queue id relative to the first queue the producer picked (its round-robin starts at random)."""
    return (queue_id - base) % QUEUES


def labels_for(ids: Mapping[str, str | None]) -> dict[str, str]:
    """value -> label, for ids that differ between runs (unique keys embed the client's address and pid,
    offsetMsgIds the broker's address)."""
    return {v: f"<{k}>" for k, v in ids.items() if v}


def norm_props(props: Mapping[str, str], labels: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for k, v in props.items():
        if k in VOLATILE_PROPS:
            out[k] = "<set>"
        else:
            out[k] = labels.get(v, v)
    return out


def body_text(record: Record) -> str:
    if "body" in record and record.get("bodyLen") is not None:  # Java: base64
        return base64.b64decode(record["body"]).decode("utf-8", "replace")
    return str(record.get("body"))


def versions() -> dict[str, str]:
    return {"rocketmq": ROCKETMQ_VERSION}


def first_difference(a: Any, b: Any, path: str = "") -> str:
    """Where two normalised results first differ (for the assertion message)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{path}/{k}: only in {'ferromq' if k in a else 'rocketmq'}"
            d = first_difference(a[k], b[k], f"{path}/{k}")
            if d:
                return d
        return ""
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        if len(a) != len(b):
            return f"{path}: {len(a)} items (ferromq) vs {len(b)} (rocketmq)"
        return ""
    return "" if a == b else f"{path}: ferromq {a!r} vs rocketmq {b!r}"
