"""The official clients' pulls are served on the data plane: the C++ push consumer (its subscription
in every pull) and the Java 4.9.7 push consumer with a tag expression (its subscription from its
heartbeat, none in the pull) get every message, and once their long polls are held on the plane no
pull reaches the broker's Python dispatcher. The broker runs in this process (its dispatcher is
watched); the clients are children.

A consumer's first pulls may reach Python: the Java push consumer raises its subscription's version
when its queues are assigned and sends the heartbeat that carries it while its first pulls already
go out (a pull newer than the registered subscription is Python's). So each test starts the
consumer on an empty topic, waits until every pull it has out is held on the plane, and only then
sends: every message is delivered by pulls the plane answers."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from ferromq.broker import Broker
from ferromq.broker.topics import TopicConfig
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import Connection
from ferromq.testing.waiting import until
from tests.integration.brokerkit import running
from tests.interop.cpp_kit import SCENARIOS, cpp_client_problem
from tests.interop.javabuild import build_interop_jar

pytestmark = [pytest.mark.timeout(600)]


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


async def until_held_on_the_plane(
    broker: Broker, topic: str, pulls: int, consumer: asyncio.Task[Any]
) -> None:
    """Waits until the consumer's `pulls` long polls are held and none of `topic`'s in Python (the
    group's retry queue may wait there: nothing is sent to it)."""

    def held() -> bool:
        if broker.held_pulls >= pulls and broker.hold.held_of(topic) == 0:
            return True
        if consumer.done():
            pytest.fail(f"the consumer ended before its pulls were held: {consumer.result()}")
        return False

    await until(
        held,
        f"{pulls} pulls held on the plane",
        timeout=60.0,
        why=lambda: f"{broker.held_pulls} pulls held, {broker.hold.held_of(topic)} of {topic} in Python",
        interval=0.05,
    )


def assert_served_on_the_plane(broker: Broker, seen: list[tuple[str, str]], early: int, before: int) -> None:
    """No pull reached Python once the consumer's pulls were held on the plane, and the plane
    answered the pulls that delivered (at least one per queue that had messages)."""
    assert seen[early:] == [], f"pulls that reached Python after the plane held them: {seen[early:]}"
    on_plane = pulls_answered(broker) - before - early
    assert on_plane >= 4, f"{on_plane} pulls answered on the plane"


def test_cpp_push_consumer_pulls_on_the_plane(tmp_path: Path) -> None:
    problem = cpp_client_problem()
    if problem is not None:
        pytest.skip(f"the RocketMQ C++ client is not usable here: {problem}")

    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            addr = f"127.0.0.1:{ns.port}"
            broker.topics.update(TopicConfig("PlaneCpp", 4, 4))
            await broker.register_all()
            seen, before = python_pulls(broker), pulls_answered(broker)
            cpp = [sys.executable, str(SCENARIOS)]
            push = [
                *cpp, "push", addr, "--topic", "PlaneCpp", "--group", "PlaneCppCG", "--expect", "200",
                "--wait", "90", "--deadline", "120", "--out", str(tmp_path / "got.jsonl"),
            ]  # fmt: skip
            consumer = asyncio.create_task(child(*push, cwd=tmp_path))
            # Its four queues (the pull of the group's retry queue comes with a later rebalance).
            await until_held_on_the_plane(broker, "PlaneCpp", 4, consumer)
            early = len(seen)
            code, results, tail = await child(
                *cpp, "produce", addr, "--topic", "PlaneCpp", "--group", "PlaneCppPG", "--mode", "sync",
                "--count", "200", "--deadline", "60", cwd=tmp_path,
            )  # fmt: skip
            assert code == 0 and results and not results[-1]["errors"], tail
            code, results, tail = await consumer
            assert code == 0 and results, tail
            assert len({r["id"] for r in results[-1]["received"]}) == 200, tail
            assert_served_on_the_plane(broker, seen, early, before)

    run(main())


@pytest.mark.skipif(
    shutil.which("mvn") is None or shutil.which("java") is None, reason="needs `mvn` and `java` on PATH"
)
def test_java_push_consumer_with_a_tag_expression_pulls_on_the_plane(tmp_path: Path) -> None:
    jar = build_interop_jar()

    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            broker.topics.update(TopicConfig("PlaneJava", 4, 4))
            await broker.register_all()
            seen, before = python_pulls(broker), pulls_answered(broker)
            java = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-jar", str(jar)]
            common = [f"namesrv=127.0.0.1:{ns.port}", "timeout=90", "topic=PlaneJava", "run=plane", "n=8"]
            consume = [*java, "consume-concurrently", "group=PlaneJavaCG", "expr=TagA || TagL", *common]
            consumer = asyncio.create_task(child(*consume, cwd=tmp_path))
            # The topic's four queues and the group's retry queue.
            await until_held_on_the_plane(broker, "PlaneJava", 5, consumer)
            early = len(seen)
            code, results, tail = await child(*java, "produce", "group=PlaneJavaPG", *common, cwd=tmp_path)
            assert code == 0, tail
            code, results, tail = await consumer
            assert code == 0, tail
            got = [r for r in results if r.get("event") == "received"]
            assert got and {r["tags"] for r in got} == {"TagA", "TagL"}, tail
            summary = [r for r in results if r.get("event") == "summary"]
            assert summary and summary[-1]["missing"] == [], tail
            assert_served_on_the_plane(broker, seen, early, before)

    run(main())
