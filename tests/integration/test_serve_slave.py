"""`ferromq serve --slave`: a name server, a master and its slave in one process; what is sent to the
master reaches the slave's store byte for byte, and SIGTERM stops all three cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from tests.integration.brokerkit import Client, properties, send_ext
from tests.interop.conftest import free_port
from tests.interop.replication_kit import differences, store_files, wait_until

READY = "ferromq serving:"


def test_serve_with_a_slave(tmp_path: Path) -> None:
    ns_port, port, slave_port = free_port(), free_port(), free_port()
    store = tmp_path / "store"
    log = tmp_path / "serve.log"
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
    argv += ["--slave-port", str(slave_port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until(
            "serve to start", lambda: READY in log.read_text() or proc.poll() is not None, 30, log.read_text
        )
        assert proc.poll() is None, log.read_text()
        assert f"its slave on 127.0.0.1:{slave_port}" in log.read_text()

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
            "the slave's copy",
            lambda: (
                bool(store_files(slave_store, "commitlog"))
                and not differences(store_files(store, "commitlog"), store_files(slave_store, "commitlog"))
            ),
            30,
        )
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
    assert proc.wait(timeout=5) == 0, log.read_text()
    assert " ERROR " not in log.read_text(), log.read_text()
