"""`kill -9` of `ferromq serve` while messages a 5.x client received over gRPC are invisible: after the
restart on the same store every message not acked comes back (its delivery attempt raised), and nothing
acked does: the checkpoints and acks are messages of the revive topic, in the CommitLog. The official
Python 5.x client (tests/interop/client5_scenarios.py: `hold`, then `take_back`) holds five messages and
acks two before the kill."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ferromq.client.admin import Admin
from ferromq.testing import BrokerProcess
from ferromq.testing.waiting import wait_until
from tests.interop.conftest import stop_ferromq
from tests.interop.grpc_kit import run_client5

TOPIC, GROUP = "Kill9GrpcTopic", "Kill9GrpcGroup"


@pytest.mark.timeout(600)
def test_kill_9_with_messages_invisible_brings_back_every_unacked_one(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = BrokerProcess(tmp_path / "first", store=store).start()
    try:

        async def create() -> None:
            async with Admin(first.namesrv) as admin:
                await admin.create_topic(TOPIC, 4)

        asyncio.run(create())
        held = run_client5(first.grpc_endpoint, "hold", TOPIC, GROUP, tmp_path / "c1")
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
        back = run_client5(second.grpc_endpoint, "take_back", TOPIC, GROUP, tmp_path / "c2")
        assert back == {"received": ["h2", "h3", "h4"], "attempts": [2, 2, 2]}, back
    finally:
        stop_ferromq(second)
