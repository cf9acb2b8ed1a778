"""`ferromq serve --slave`: a name server, a master and its slave in one process; what is sent to the
master reaches the slave's store byte for byte, and SIGTERM stops all three cleanly."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.testing import free_port
from ferromq.testing.waiting import wait_until
from tests.integration.brokerkit import Client, properties, send_ext
from tests.interop.replication_kit import differences, spawn, store_files


def test_serve_with_a_slave(tmp_path: Path) -> None:
    ns_port, port, slave_port = free_port(), free_port(), free_port()
    store = tmp_path / "store"
    exe = Path(sys.executable).with_name("ferromq")
    argv = [
        str(exe),
        "serve",
        "--slave",
        "--store",
        str(store),
        "--namesrv-port",
        str(ns_port),
        "-p",
        str(port),
    ]
    argv += ["--slave-port", str(slave_port), "--grpc-port", "0"]
    serve = spawn("serve", argv, tmp_path / "serve.log", "ferromq serving:", f"127.0.0.1:{port}")
    try:
        assert serve.logged(f"its slave on 127.0.0.1:{slave_port}"), serve.log()

        async def send() -> None:
            client = await Client().connect(port)
            try:
                for i in range(50):
                    r = await client.call(
                        RC.SEND_MESSAGE, send_ext("ServeSlave", i % 4, properties(TAGS="A")), b"x" * i
                    )
                    assert r.code == R.SUCCESS, r.remark
            finally:
                await client.close()

        asyncio.run(send())
        slave_store = Path(f"{store}-slave")
        wait_until(
            lambda: (
                bool(store_files(slave_store, "commitlog"))
                and not differences(store_files(store, "commitlog"), store_files(slave_store, "commitlog"))
            ),
            "the slave's copy",
            timeout=30,
        )
    finally:
        code = serve.stop()
    assert code == 0, serve.log()
    assert not serve.logged(" ERROR "), serve.log()
