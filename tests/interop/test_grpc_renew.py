"""Auto-renew: messages a 5.x push consumer receives stay invisible while its listener runs, however
long (Apache RocketMQ proxy's receipt handle renewal): with 3 s of invisible time
(defaultInvisibleTimeMills) renewed 2 s ahead, a listener that takes 6 s over a message gets it
once, and its ack (made with the newest handle) ends it: it does not come back."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import client5_python

from ferromq.broker.topics import TopicConfig
from ferromq.testing import Broker

SCENARIOS = Path(__file__).with_name("client5_scenarios.py")
TOPIC, GROUP = "RenewTopic", "RenewGroup"
CLIENT_TIMEOUT = 120.0


async def scenario(endpoint: str, name: str, home: Path) -> dict[str, Any]:
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HOME": str(home)}
    python = await asyncio.to_thread(client5_python)
    proc = await asyncio.create_subprocess_exec(
        python,
        str(SCENARIOS),
        endpoint,
        name,
        TOPIC,
        GROUP,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        cwd=home,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), CLIENT_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    lines = [x for x in out.decode().splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"{out.decode()[-3000:]}\n{err.decode()[-5000:]}"
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


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
            result = await scenario(b.grpc_endpoint, "slow_push", tmp_path / "client")
            assert result == {"deliveries": [["slow", 1]]}, result
            service = b.broker.grpc.service if b.broker.grpc is not None else None
            assert service is not None
            assert service.renewals.renewed >= 1  # kept invisible past its 3 s
            assert not service.renewals.held  # acked (with the newest handle): no longer renewed

    asyncio.run(asyncio.wait_for(main(), 250))
