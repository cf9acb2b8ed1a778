"""Table topics tiered by a process of their own (issue 44, `tableTopicProcess`, the default): the
broker's CPU goes to messages. The process reads the broker's store files, commits each row once,
is started again when it dies (SIGKILL mid-way: no row lost or doubled), reports its progress to
the broker (GET_BROKER_RUNTIME_INFO's tableTopics) and its logs into the broker's log."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import orjson
import pytest

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.tables import read_arrow
from ferromq.tables.process import TieringProcess
from ferromq.testing.waiting import until

from .brokerkit import Client, properties, running, send_ext

TOPIC = "ProcT"
EAGER = {
    "table_topics": TOPIC,
    "table_topic_interval_seconds": 1,
    "table_topic_min_rows": 1,
    "table_topic_max_delay_seconds": 0,
}


def rows(root: Path) -> list[tuple[int, int]]:
    table = read_arrow(str(root), TOPIC, columns=["queue_id", "queue_offset"])
    return sorted(
        zip(table.column("queue_id").to_pylist(), table.column("queue_offset").to_pylist(), strict=True)
    )


async def send(c: Client, start: int, n: int) -> None:
    for i in range(start, start + n):
        r = await c.call(RC.SEND_MESSAGE, send_ext(TOPIC, i % 2, properties(TAGS="T")), f"row-{i}".encode())
        assert r.code == R.SUCCESS


def test_a_tiering_process_killed_mid_way_loses_and_doubles_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with running(tmp_path, **EAGER) as (_, broker):
            tiering = broker.tiering
            assert isinstance(tiering, TieringProcess)
            c = await Client().connect(broker.port)
            r = await c.call(
                RC.UPDATE_AND_CREATE_TOPIC,
                {"topic": TOPIC, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
            )
            assert r.code == R.SUCCESS
            root = tmp_path / "store" / "tables"
            await send(c, 0, 100)
            want = [(q, o) for q in (0, 1) for o in range(50)]
            await until(lambda: (root / TOPIC).exists() and rows(root) == want, "100 rows", timeout=60)
            proc = tiering.process
            assert proc is not None and proc.pid != os.getpid()

            # Killed while rows keep coming: its successor carries on from the table's offsets.
            await send(c, 100, 40)
            os.kill(proc.pid, signal.SIGKILL)
            await send(c, 140, 60)
            await until(lambda: tiering.starts >= 2, "the tiering process started again", timeout=30)
            want = [(q, o) for q in (0, 1) for o in range(100)]
            await until(lambda: rows(root) == want, "200 rows, each once", timeout=60)

            # Its progress reaches the broker's runtime info (ferromqTableTopics), as the thread's did.
            async def shown() -> dict[str, object] | None:
                table = orjson.loads((await c.call(RC.GET_BROKER_RUNTIME_INFO)).body)["table"]
                (topic,) = orjson.loads(table.get("ferromqTableTopics", "[{}]"))
                return topic if topic.get("lag") == 0 and topic.get("rowsTiered", 0) > 0 else None

            status = await until(shown, "the process's progress in the runtime info", timeout=30)
            assert status["topic"] == TOPIC
            await c.close()

    with caplog.at_level(logging.INFO):
        asyncio.run(main())
    # The process's logs are the broker's, under their own logger names.
    created = [r for r in caplog.records if r.name == "ferromq.tables.writer"]
    assert any(f"created the table of topic {TOPIC}" in r.getMessage() for r in created)
