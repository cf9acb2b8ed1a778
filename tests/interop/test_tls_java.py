"""The official Java client 4.9.7 with `-Dtls.enable=true` against a `ferromq serve` in TLS enforcing
mode (issue 15): routes from the name server, every kind of send, and a lite-pull consumer, all over
TLS with the broker's test-mode certificate, as against a Java broker; plain connections are closed.
In permissive mode (Java's default) TLS and plain Java clients share the port; with
`tls.server.need.client.auth=require` a Java client presenting a trusted certificate is served and a
TLS client without one is not."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferromq.errors import FerroMQError
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import open_connection
from ferromq.remoting.tls import client_context, self_signed_pem
from tests.interop.javabuild import build_interop_jar
from tests.interop.test_java_client import HAVE_TOOLS, Server, run_scenario
from tests.interop.test_java_client import serving as java_serving

pytestmark = [
    pytest.mark.skipif(not HAVE_TOOLS, reason="the Java interop tests need `mvn` and `java` on PATH"),
    pytest.mark.timeout(600),
]

N = 8
RUN = uuid.uuid4().hex[:8]
TOPIC = f"InteropTls_{RUN}"
TLS = ("-Dtls.enable=true",)


@contextlib.contextmanager
def serving(root: Path, conf_text: str) -> Iterator[Server]:
    """`ferromq serve` with this broker.conf in `root`, stopped (exit code 0, no traceback) after."""
    conf = root / "broker.conf"
    conf.write_text(conf_text)
    with java_serving(root, conf) as srv:
        yield srv


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("ferromq-tls")
    with serving(root, "brokerClusterName=TlsCluster\nbrokerName=tls-a\ntls.server.mode=enforcing\n") as srv:
        yield srv


def produce_and_pull(server: Server, jvm: tuple[str, ...], name: str) -> None:
    """The Java client's sends of every kind to a new topic, then a lite-pull consumer reads them all."""
    jar = build_interop_jar()
    topic = f"{TOPIC}_{name}"
    produced = run_scenario(jar, server, "produce", jvm=jvm, topic=topic, group=f"{name}-p", run=RUN, n=N)
    produced.assert_ok()
    sent = produced.events("sent")
    assert len(sent) == 4 * N + 1
    assert all(r["status"] == "SEND_OK" for r in sent if r["kind"] != "oneway")
    pulled = run_scenario(jar, server, "lite-pull", jvm=jvm, topic=topic, group=f"{name}-lite", run=RUN, n=N)
    pulled.assert_ok()
    assert {m["id"] for m in pulled.events("polled")} == {f"{r['kind']}:{r['idx']}" for r in sent}


def test_java_client_sends_and_pulls_over_tls(server: Server) -> None:
    produce_and_pull(server, TLS, "tls")


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


def test_permissive_port_serves_java_clients_with_and_without_tls(tmp_path: Path) -> None:
    # No tls.server.mode: permissive, Java's default.
    with serving(tmp_path, "brokerClusterName=TlsCluster\nbrokerName=tls-p\n") as srv:
        produce_and_pull(srv, TLS, "permissive-tls")
        produce_and_pull(srv, (), "permissive-plain")


def test_client_certificate_required(tmp_path: Path) -> None:
    """need.client.auth=require: the Java client with a certificate the broker trusts (and checking
    the broker's against its own trust file) is served; a TLS client without one is refused."""
    broker_cert, broker_key = write_self_signed(tmp_path, "broker", ["127.0.0.1"])
    client_cert, client_key = write_self_signed(tmp_path, "client", [])
    conf = (
        "brokerClusterName=TlsCluster\nbrokerName=tls-c\ntls.server.mode=enforcing\n"
        "tls.test.mode.enable=false\n"
        f"tls.server.certPath={broker_cert}\ntls.server.keyPath={broker_key}\n"
        "tls.server.need.client.auth=require\ntls.server.authClient=true\n"
        f"tls.server.trustCertPath={client_cert}\n"
        # The broker's own connection to serve's name server (which asks it for a certificate too).
        f"tls.client.certPath={client_cert}\ntls.client.keyPath={client_key}\n"
        f"tls.client.authServer=true\ntls.client.trustCertPath={broker_cert}\n"
    )
    jvm = (
        *TLS,
        "-Dtls.test.mode.enable=false",
        "-Dtls.client.authServer=true",
        f"-Dtls.client.trustCertPath={broker_cert}",
        f"-Dtls.client.certPath={client_cert}",
        f"-Dtls.client.keyPath={client_key}",
    )
    serve_root = tmp_path / "serve"
    serve_root.mkdir()
    with serving(serve_root, conf) as srv:
        produce_and_pull(srv, jvm, "client-cert")

        async def without_certificate() -> None:
            conn = await open_connection("127.0.0.1", srv.port, ssl=client_context(), timeout=10)
            try:
                await conn.request(RemotingCommand(RC.GET_BROKER_RUNTIME_INFO), 10)
            finally:
                await conn.close()

        with pytest.raises((ssl.SSLError, OSError, FerroMQError)):
            asyncio.run(without_certificate())


def write_self_signed(folder: Path, name: str, ips: list[str]) -> tuple[Path, Path]:
    """A self-signed certificate (its own CA) and its PKCS#8 key as `name`.pem and `name`.key."""
    cert, key = self_signed_pem(f"ferromq test {name}", ips, days=2)
    cert_file, key_file = folder / f"{name}.pem", folder / f"{name}.key"
    cert_file.write_bytes(cert)
    key_file.write_bytes(key)
    return cert_file, key_file
