"""Tiered storage (issue 44) read by the official Java client (rocketmq-client 4.9.7): what it sent,
after local retention deleted the files it was in, comes back from the bucket to a
DefaultLitePullConsumer that starts from the first offset, field by field as the producer was told
(ids, queue offsets, properties, compressed bodies, the pulls' MIN_OFFSET)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from tests.integration.brokerkit import Client, properties, running, send_ext
from tests.integration.test_tiered_store import FILE, STORE, all_tiered, delete_local, posix_keys
from tests.interop.test_java_client import (
    HAVE_TOOLS,
    RUN,
    TOPIC,
    N,
    Server,
    check_received,
    expected_ids,
    run_scenario,
)
from tests.interop.test_java_client import jar as jar  # the fixture: the interop jar, built once

pytestmark = [
    pytest.mark.skipif(not HAVE_TOOLS, reason="the Java interop tests need `mvn` and `java` on PATH"),
    pytest.mark.timeout(600),
]


def test_the_java_client_reads_back_from_the_bucket(jar: Path, tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **STORE, **posix_keys(tmp_path)) as (ns, broker):
            log = tmp_path / "broker.log"
            log.touch()
            server = Server(root=tmp_path, namesrv=f"127.0.0.1:{ns.port}", port=broker.port, log=log)
            produced = await asyncio.to_thread(
                run_scenario, jar, server, "produce", topic=TOPIC, group="tiered", run=RUN, n=N
            )
            produced.assert_ok()
            # More messages after them, so that the files they are in fill, go to the bucket and
            # are deleted locally.
            c = await Client().connect(broker.port)
            for _ in range(6 * FILE // 1000):
                r = await c.call(
                    RC.SEND_MESSAGE, send_ext("TieredFiller", 0, properties(TAGS="F")), b"f" * 1000
                )
                assert r.code == R.SUCCESS
            await all_tiered(broker)
            assert await delete_local(c, broker, tmp_path) >= 4
            # Every message of the topic is only in the bucket now: the local store reads none.
            queues = [q for q in range(8) if broker.store.max_offset(TOPIC, q) > 0]
            statuses = {broker.store.pull(TOPIC, q, 0, 32).status for q in queues}
            assert len(queues) == 4 and statuses == {"OFFSET_TOO_SMALL"}, statuses
            await c.close()

            pulled = await asyncio.to_thread(
                run_scenario, jar, server, "lite-pull", topic=TOPIC, group="tiered-lite", run=RUN, n=N
            )
            pulled.assert_ok()
            got = pulled.events("polled")
            assert {m["id"] for m in got} == expected_ids()
            check_received(produced, server, got)

    asyncio.run(main())
