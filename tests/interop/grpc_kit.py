"""What the side-by-side tests of the official RocketMQ 5.x clients over gRPC share (the Python client's,
test_grpc_python_client.py, and the Java client's, test_grpc_java_client.py): the scenarios with the
topic type each needs, the broker settings both servers run with, how a scenario's topic and group are
made, and what each scenario's answer must show."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from apache_rocketmq import client5_python, mqadmin

SCENARIOS = Path(__file__).with_name("client5_scenarios.py")
CLIENT_TIMEOUT = 180.0

# Scenario -> the message.type of its topic, whether its group consumes orderly, and the group's
# retryMaxTimes (None: the default).
CASES: dict[str, tuple[str, bool, int | None]] = {
    "roundtrip": ("NORMAL", False, None),
    "redelivery": ("NORMAL", False, None),
    "push_tags": ("NORMAL", False, None),
    "push_sql": ("NORMAL", False, None),
    "dead_letter": ("NORMAL", False, 0),
    "wrong_type": ("NORMAL", False, None),
    "fifo": ("FIFO", True, None),
    "delay": ("DELAY", False, None),
    "transaction": ("TRANSACTION", False, None),
    "recall": ("DELAY", False, None),
}
CLUSTER = "DefaultCluster"
T = TypeVar("T")
# Open transactions are checked every second on both, once 5 s old; recalls are allowed; SQL92
# filters too.
BROKER_CONF = {
    "transactionCheckInterval": "1000",
    "transactionTimeOut": "5000",
    "recallMessageEnable": "true",
    "enablePropertyFilter": "true",
}
# Java's proxy keeps the routes it looked up, a topic not found among them, until its cache refreshes
# them (topicRouteServiceCacheRefreshSeconds, 20): the dead letter reader, which asks for %DLQ%<group>
# before the first dead letter makes it, would go on being told it does not exist that long. ferromq
# answers from its topics as they are; refreshed every second, Java's answers are as current (what the
# client sees is the same, only sooner).
PROXY_CONF: dict[str, object] = {"topicRouteServiceCacheRefreshSeconds": 1}


def prepare(
    namesrv: str,
    root: Path,
    topic: str,
    group: str,
    case: str,
    broker_addr: str | None = None,
    admin: Callable[..., str] | None = None,
) -> None:
    """The scenario's typed topic (and its group if it is not a default one) on a cluster, or on
    the one broker at `broker_addr`, made by 5.3.3's mqadmin: a JVM per command, or `admin`
    (`MqadminShell(..., version=ROCKETMQ_5_VERSION).run` against `namesrv`: one JVM for them all)."""
    run = admin if admin is not None else functools.partial(mqadmin, root, namesrv)
    message_type, orderly, retry_max_times = CASES[case]
    where = ["-c", CLUSTER] if broker_addr is None else ["-b", broker_addr]
    out = run(
        "updateTopic",
        *where,
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
    group_args = [
        *(["-o", "true"] if orderly else []),
        *([] if retry_max_times is None else ["-r", str(retry_max_times)]),
    ]
    if group_args:
        out = run("updateSubGroup", "-c", CLUSTER, "-g", group, *group_args)
        assert "success" in out, out


def on_both(ours: Callable[[], T], theirs: Callable[[], T]) -> tuple[T, T]:
    """The same step against ferromq and against Apache RocketMQ at once: the scenarios mostly wait (on
    invisible times, delivery times, transaction checks), so side by side in time too halves a test."""
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.submit(ours), pool.submit(theirs)
        return a.result(), b.result()


def assert_same(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """Asserts ferromq's answer equals Java's proxy's, but for what at least once lets vary (a
    message delivered twice, a transaction the broker checks though its commit or rollback was on the
    way), which ferromq must not show; returns ferromq's answer without those."""
    mine, loose = _split(ours)
    assert loose == {"duplicates": 0, "checked_others": []}, ("ferromq", loose)
    assert mine == _split(theirs)[0]
    return mine


def _split(result: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    out = dict(result)
    loose = {"duplicates": out.pop("duplicates", 0), "checked_others": []}
    if "checked" in out:
        checked = out.pop("checked")
        out["checked_open"] = "check me" in checked  # the one left open must be checked
        loose["checked_others"] = sorted(set(checked) - {"check me"})
    return out, loose


def assert_outcome(case: str, result: dict[str, Any]) -> None:
    """What scenario `case` must show on its own (its answer as `assert_same` returns it)."""
    if case == "roundtrip":
        assert result["ids_match"] and [m["body"] for m in result["received"]] == ["rt 0", "rt 1", "rt 2"]
        assert all(
            m["properties"] == {"color": "blue"} and m["delivery_attempt"] == 1 for m in result["received"]
        )
    elif case == "redelivery":
        assert [m["delivery_attempt"] for m in result["first"] + result["second"]] == [1, 2]
        assert result["after_ack"] == []
    elif case == "push_tags":
        assert result["received"] == [
            ["p 0", "TagA", 1],
            ["p 2", "TagC", 2],
            ["p 3", "TagA", 1],
            ["p 5", "TagC", 1],
        ]
    elif case == "push_sql":
        assert result["received"] == [["s 2", 1], ["s 4", 1]]
    elif case == "dead_letter":
        # Delivered once (retryMaxTimes 0), failed, back once more (its reconsume count 1 past the one
        # attempt allowed) and forwarded to %DLQ% by the server, with its count raised once more.
        assert result["deliveries"] == [["dead", 1]]
        assert [
            (m["body"], m["tag"], m["keys"], m["properties"], m["delivery_attempt"]) for m in result["dead"]
        ] == [("dead", "TagD", ["dk"], {"color": "grey"}, 3)]
    elif case == "wrong_type":
        assert result["refused"] == "IllegalArgumentException"
    elif case == "fifo":
        assert result["order"] == {g: [f"{g}-{i}" for i in range(4)] for g in ("gA", "gB")}
    elif case == "delay":
        assert result == {"received": ["later"], "early": False}
    elif case == "transaction":
        assert result == {"received": ["check me", "commit me"], "checked_open": True}
    elif case == "recall":
        assert result == {"received": ["kept"], "had_handle": True}
    else:
        raise AssertionError(f"no expected outcome for {case!r}")


def _client5(
    python: str, endpoint: str, scenario: str, topic: str, group: str, home: Path, env: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    home.mkdir(parents=True, exist_ok=True)
    # The client logs into ~/logs/rocketmq_python: HOME is the scenario's directory.
    full = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FERROMQ_TEST_AK", "FERROMQ_TEST_SK")
    }
    return [python, str(SCENARIOS), endpoint, scenario, topic, group], full | {"HOME": str(home)} | env


def _result(endpoint: str, scenario: str, code: int | None, out: str, err: str) -> dict[str, Any]:
    lines = [x for x in out.splitlines() if x.startswith("RESULT ")]
    assert code == 0 and lines, (
        f"{scenario} against {endpoint} failed ({code}):\n{out[-3000:]}\n{err[-6000:]}"
    )
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


def run_client5(
    endpoint: str, scenario: str, topic: str, group: str, home: Path, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """A scenario of tests/interop/client5_scenarios.py run by the official Python 5.x client (in its own
    environment) against `endpoint`: its RESULT. `env` adds variables (FERROMQ_TEST_AK / _SK sign)."""
    argv, full_env = _client5(client5_python(), endpoint, scenario, topic, group, home, env or {})
    r = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT,
        cwd=home,
        env=full_env,
        stdin=subprocess.DEVNULL,
    )
    return _result(endpoint, scenario, r.returncode, r.stdout, r.stderr)


async def arun_client5(
    endpoint: str, scenario: str, topic: str, group: str, home: Path, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """`run_client5` for a test whose broker runs on its own event loop (which must keep serving)."""
    python = await asyncio.to_thread(client5_python)
    argv, full_env = _client5(python, endpoint, scenario, topic, group, home, env or {})
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        cwd=home,
        env=full_env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), CLIENT_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return _result(endpoint, scenario, proc.returncode, out.decode(), err.decode())
