"""`kill -9` of `ferromq serve` while messages a 5.x client received over gRPC are invisible: after the
restart on the same store every message not acked comes back (its delivery attempt raised), and nothing
acked does: the checkpoints and acks are messages of the revive topic, in the CommitLog. The official
Python 5.x client (tests/interop/client5_scenarios.py: `hold`, then `take_back`) holds five messages and
acks two before the kill."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import client5_python

from ferromq.client.admin import Admin
from ferromq.testing import BrokerProcess
from ferromq.testing.waiting import wait_until
from tests.interop.conftest import stop_ferromq

SCENARIOS = Path(__file__).with_name("client5_scenarios.py")
TOPIC, GROUP = "Kill9GrpcTopic", "Kill9GrpcGroup"
CLIENT_TIMEOUT = 180.0


def run(endpoint: str, scenario: str, home: Path) -> dict[str, Any]:
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HOME": str(home)}
    r = subprocess.run(
        [client5_python(), str(SCENARIOS), endpoint, scenario, TOPIC, GROUP],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT,
        cwd=home,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    lines = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    assert r.returncode == 0 and lines, f"{scenario} failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


@pytest.mark.timeout(600)
def test_kill_9_with_messages_invisible_brings_back_every_unacked_one(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = BrokerProcess(tmp_path / "first", store=store).start()
    try:

        async def create() -> None:
            async with Admin(first.namesrv) as admin:
                await admin.create_topic(TOPIC, 4)

        asyncio.run(create())
        held = run(first.grpc_endpoint, "hold", tmp_path / "c1")
        assert held == {"received": [f"h{i}" for i in range(5)], "acked": ["h0", "h1"]}, held
        # The pop moved the group's offsets past the five at once; they reach consumerOffset.json
        # within flushConsumerOffsetInterval (5 s), as in Java. Killed before that, the broker would
        # deliver all five again (at least once); killed after, only what no ack took comes back.
        offsets = store / "config" / "consumerOffset.json"
        wait_until(
            lambda: offsets.is_file() and f"{TOPIC}@{GROUP}" in offsets.read_text(), "offsets persisted", 30
        )
    finally:
        first.stop(kill=True)  # SIGKILL: no clean shutdown, no final flush of offsets or configs
    assert first.returncode == -9
    second = BrokerProcess(tmp_path / "second", store=store).start()
    try:
        back = run(second.grpc_endpoint, "take_back", tmp_path / "c2")
        assert back == {"received": ["h2", "h3", "h4"], "attempts": [2, 2, 2]}, back
    finally:
        stop_ferromq(second)
