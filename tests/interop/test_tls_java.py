"""The official Java client 4.9.7 with `-Dtls.enable=true` against a `ferromq serve` in TLS enforcing
mode (issue 15): routes from the name server, every kind of send, and a lite-pull consumer, all over
TLS with the broker's test-mode certificate, as against a Java broker; plain connections are closed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from ferromq.errors import FerroMQError
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import open_connection
from tests.interop.javabuild import build_interop_jar
from tests.interop.test_java_client import HAVE_TOOLS, Server, _start, _stop, run_scenario

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(not HAVE_TOOLS, reason="the Java interop tests need `mvn` and `java` on PATH"),
    pytest.mark.timeout(600),
]

N = 8
RUN = uuid.uuid4().hex[:8]
TOPIC = f"InteropTls_{RUN}"
TLS = ("-Dtls.enable=true",)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("ferromq-tls")
    conf = root / "broker.conf"
    conf.write_text("brokerClusterName=TlsCluster\nbrokerName=tls-a\ntls.server.mode=enforcing\n")
    proc, srv = _start(root, conf)
    try:
        yield srv
    finally:
        rc = _stop(proc)
    assert rc == 0, srv.log_tail()
    assert "Traceback" not in srv.log.read_text(errors="replace"), srv.log_tail(200)


def test_java_client_sends_and_pulls_over_tls(server: Server) -> None:
    jar = build_interop_jar()
    produced = run_scenario(jar, server, "produce", jvm=TLS, topic=TOPIC, group="tls", run=RUN, n=N)
    produced.assert_ok()
    sent = produced.events("sent")
    assert len(sent) == 4 * N + 1
    assert all(r["status"] == "SEND_OK" for r in sent if r["kind"] != "oneway")
    pulled = run_scenario(jar, server, "lite-pull", jvm=TLS, topic=TOPIC, group="tls-lite", run=RUN, n=N)
    pulled.assert_ok()
    assert {m["id"] for m in pulled.events("polled")} == {f"{r['kind']}:{r['idx']}" for r in sent}


def test_plain_connections_are_closed_in_enforcing_mode(server: Server) -> None:
    async def main() -> None:
        conn = await open_connection("127.0.0.1", server.port, timeout=10)
        try:
            with pytest.raises(FerroMQError):
                await conn.request(RemotingCommand(RC.GET_BROKER_RUNTIME_INFO), 10)
        finally:
            await conn.close()

    asyncio.run(main())
    assert "tls.server.mode is enforcing" in server.log.read_text(errors="replace")
