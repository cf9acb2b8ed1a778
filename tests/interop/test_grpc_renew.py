"""Auto-renew: messages a 5.x push consumer receives stay invisible while its listener runs, however
long (Apache RocketMQ proxy's receipt handle renewal): with 3 s of invisible time
(defaultInvisibleTimeMills) renewed 2 s ahead, a listener that takes 6 s over a message gets it
once, and its ack (made with the newest handle) ends it: it does not come back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ferromq.broker.topics import TopicConfig
from ferromq.testing import Broker
from tests.interop.grpc_kit import arun_client5

TOPIC, GROUP = "RenewTopic", "RenewGroup"


@pytest.mark.timeout(300)
def test_a_slow_push_consumer_keeps_its_message_invisible(tmp_path: Path) -> None:
    settings = {
        "default_invisible_time_mills": 3000,
        "renew_ahead_time_millis": 2000,
        "renew_schedule_period_millis": 500,
    }

    async def main() -> None:
        async with Broker(store_dir=tmp_path / "broker", settings=settings) as b:
            b.broker.topics.update(TopicConfig(TOPIC, 2, 2))
            result = await arun_client5(b.grpc_endpoint, "slow_push", TOPIC, GROUP, tmp_path / "client")
            assert result == {"deliveries": [["slow", 1]]}, result
            service = b.broker.grpc.service if b.broker.grpc is not None else None
            assert service is not None
            assert service.renewals.renewed >= 1  # kept invisible past its 3 s
            assert not service.renewals.held  # acked (with the newest handle): no longer renewed

    asyncio.run(asyncio.wait_for(main(), 250))
