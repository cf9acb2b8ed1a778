"""The official clients' pulls are served on the data plane: the C++ push consumer (its subscription
in every pull) and the Java 4.9.7 push consumer with a tag expression (its subscription from its
heartbeat, none in the pull) get every message while at most each queue's first pull reaches the
broker's Python dispatcher. The broker runs in this process (its dispatcher is watched); the
clients are children."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from ferromq.broker import Broker
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import Connection
from tests.integration.brokerkit import running
from tests.interop.cpp_kit import SCENARIOS, cpp_client_problem
from tests.interop.javabuild import build_interop_jar

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 300))  # type: ignore[arg-type]


async def child(*argv: str, cwd: Path, timeout: float = 120) -> tuple[int, list[dict[str, Any]], str]:
    """A client child process: its exit code, its RESULT lines, and its output's tail."""
    env = {**os.environ, "HOME": str(cwd), "PYTHONUNBUFFERED": "1"}
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    text = out.decode(errors="replace")
    results = [json.loads(line[7:]) for line in text.splitlines() if line.startswith("RESULT ")]
    return proc.returncode or 0, results, text[-3000:]


def python_pulls(broker: Broker) -> list[tuple[str, str]]:
    """Records (topic, queue id) of every pull that reaches the broker's Python dispatcher."""
    seen: list[tuple[str, str]] = []
    registry = broker._registry
    assert registry is not None

    def counting(conn: Connection, cmd: RemotingCommand) -> object:
        if cmd.code == RC.PULL_MESSAGE:
            seen.append((cmd.ext.get("topic", ""), cmd.ext.get("queueId", "")))
        return registry(conn, cmd)

    broker._registry = counting  # type: ignore[assignment]
    return seen


def pulls_answered(broker: Broker) -> int:
    """Pulls answered so far, by the plane and by Python."""
    broker.sync_plane_stats()
    return broker.stats.store.get_found + broker.stats.store.get_miss


def assert_on_the_plane(broker: Broker, seen: list[tuple[str, str]], before: int) -> None:
    """A queue's first pull may come before Python has pushed the consumer's group and
    subscription to the plane (its heartbeat is Python's): at most that one reaches Python, and
    the plane answers the rest."""
    per_queue = Counter(seen)
    assert all(n == 1 for n in per_queue.values()), f"pulls that reached Python: {per_queue}"
    on_plane = pulls_answered(broker) - before - len(seen)
    assert on_plane > 2 * len(seen), f"{on_plane} pulls on the plane, {len(seen)} in Python"


def test_cpp_push_consumer_pulls_on_the_plane(tmp_path: Path) -> None:
    problem = cpp_client_problem()
    if problem is not None:
        pytest.skip(f"the RocketMQ C++ client is not usable here: {problem}")

    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            addr = f"127.0.0.1:{ns.port}"
            cpp = [sys.executable, str(SCENARIOS)]
            code, results, tail = await child(
                *cpp, "produce", addr, "--topic", "PlaneCpp", "--group", "PlaneCppPG", "--mode", "sync",
                "--count", "200", "--deadline", "60", cwd=tmp_path,
            )  # fmt: skip
            assert code == 0 and results and not results[-1]["errors"], tail
            seen, before = python_pulls(broker), pulls_answered(broker)
            code, results, tail = await child(
                *cpp, "push", addr, "--topic", "PlaneCpp", "--group", "PlaneCppCG", "--expect", "200",
                "--wait", "60", "--deadline", "90", "--out", str(tmp_path / "got.jsonl"), cwd=tmp_path,
            )  # fmt: skip
            assert code == 0 and results, tail
            assert len({r["id"] for r in results[-1]["received"]}) == 200, tail
            assert_on_the_plane(broker, seen, before)

    run(main())


@pytest.mark.skipif(
    shutil.which("mvn") is None or shutil.which("java") is None, reason="needs `mvn` and `java` on PATH"
)
def test_java_push_consumer_with_a_tag_expression_pulls_on_the_plane(tmp_path: Path) -> None:
    jar = build_interop_jar()

    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            java = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-jar", str(jar)]
            common = [f"namesrv=127.0.0.1:{ns.port}", "timeout=60", "topic=PlaneJava", "run=plane", "n=8"]
            code, results, tail = await child(*java, "produce", "group=PlaneJavaPG", *common, cwd=tmp_path)
            assert code == 0, tail
            seen, before = python_pulls(broker), pulls_answered(broker)
            code, results, tail = await child(
                *java, "consume-concurrently", "group=PlaneJavaCG", "expr=TagA || TagL", *common, cwd=tmp_path
            )
            assert code == 0, tail
            got = [r for r in results if r.get("event") == "received"]
            assert got and {r["tags"] for r in got} == {"TagA", "TagL"}, tail
            summary = [r for r in results if r.get("event") == "summary"]
            assert summary and summary[-1]["missing"] == [], tail
            assert_on_the_plane(broker, seen, before)

    run(main())
