"""TLS as RocketMQ 4.x's remoting serves it (issue 15): permissive (Java's default) serves plain and
TLS clients on one port, enforcing closes plain clients, disabled closes TLS clients; test mode
serves with a self-signed certificate, and a configured certificate is checked by a client that
asks to. The name server of `serve` follows the same settings."""

from __future__ import annotations

import asyncio
import re
import ssl
from pathlib import Path
from typing import Any

import pytest

from ferromq.broker import load_broker_config
from ferromq.broker.config import ConfigError
from ferromq.client import Message, Producer, PullConsumer
from ferromq.client.instance import ClientInstance
from ferromq.errors import FerroMQError
from ferromq.namesrv import NameServer
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import CloseReason, open_connection
from ferromq.remoting.tls import TlsSettings, client_context, self_signed_pem
from ferromq.testing.waiting import until

from .brokerkit import running

WAIT = 20.0


def run(coro: Any) -> None:
    asyncio.run(asyncio.wait_for(coro, 120))


async def call(port: int, ctx: ssl.SSLContext | None) -> RemotingCommand:
    conn = await open_connection("127.0.0.1", port, ssl=ctx, timeout=WAIT)
    try:
        cmd = RemotingCommand(RC.GET_MAX_OFFSET, ext={"topic": "TBW102", "queueId": "0"})
        return await conn.request(cmd, WAIT)
    finally:
        await conn.close()


async def round_trip(namesrv_port: int, topic: str, tls: bool | ssl.SSLContext) -> list[bytes]:
    """Sends three messages and reads them back with the Python client, all over `tls`."""
    namesrv = f"127.0.0.1:{namesrv_port}"
    async with Producer("tls-p", namesrv, instance=ClientInstance(namesrv, tls=tls)) as producer:
        for i in range(3):
            await producer.send(Message(topic, f"m{i}".encode()))
    got: list[bytes] = []
    async with PullConsumer("tls-c", namesrv, instance=ClientInstance(namesrv, tls=tls)) as reader:
        queues = await reader.fetch_queues(topic)
        reader.assign(queues)
        for q in queues:
            await reader.seek_to_begin(q)
        async with asyncio.timeout(WAIT):
            while len(got) < 3:
                got += [m.body for m in await reader.poll(timeout=1.0)]
    return sorted(got)


def test_permissive_serves_plain_and_tls_clients_on_one_port(tmp_path: Path) -> None:
    async def main() -> None:
        ns = NameServer("127.0.0.1", 0, tls=TlsSettings())  # as `serve` and `ferromq namesrv` make it
        await ns.start()
        try:
            async with running(tmp_path, namesrv=ns) as (_, broker):
                assert broker.server is not None and broker.server.tls.mode == "permissive"  # Java's default
                assert (await call(broker.port, None)).code == R.SUCCESS
                assert (await call(broker.port, client_context())).code == R.SUCCESS
                # The whole client over TLS: routes from the name server, sends and pulls.
                assert await round_trip(ns.port, "TlsPermissive", tls=True) == [b"m0", b"m1", b"m2"]
                assert await round_trip(ns.port, "TlsPlain", tls=False) == [b"m0", b"m1", b"m2"]
        finally:
            await ns.stop()

    run(main())


def test_enforcing_closes_plain_clients(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, tls_server_mode="enforcing") as (_, broker):
            server = broker.server
            assert server is not None
            with pytest.raises(FerroMQError):
                await call(broker.port, None)
            assert server.closed_by_reason[CloseReason.TLS_REQUIRED] == 1
            assert (await call(broker.port, client_context())).code == R.SUCCESS

    run(main())


def test_disabled_closes_tls_clients(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, tls_server_mode="disabled") as (_, broker):
            with pytest.raises((ssl.SSLError, OSError, FerroMQError)):
                await call(broker.port, client_context())
            assert (await call(broker.port, None)).code == R.SUCCESS

    run(main())


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key, as PEM files."""
    cert, key = self_signed_pem("ferromq test broker", ["127.0.0.1"], days=2)
    cert_file, key_file = folder / "broker.pem", folder / "broker.key"
    cert_file.write_bytes(cert)
    key_file.write_bytes(key)
    return cert_file, key_file


def test_configured_certificate_from_tls_config_file_is_checked_by_the_client(tmp_path: Path) -> None:
    cert, key = make_certificate(tmp_path)
    props = tmp_path / "tls.properties"
    props.write_text(
        f"tls.server.mode=enforcing\ntls.test.mode.enable=false\n"
        f"tls.server.certPath={cert}\ntls.server.keyPath={key}\n"
    )

    async def main() -> None:
        # broker.conf says disabled; the tls.config.file wins, as in Java.
        async with running(tmp_path, tls_server_mode="disabled", tls_config_file=str(props)) as (_, broker):
            assert broker.server is not None and broker.server.tls.mode == "enforcing"
            verified = client_context(verify=True, trust_cert_path=str(cert))
            assert (await call(broker.port, verified)).code == R.SUCCESS
            stranger = client_context(verify=True, trust_cert_path=None)  # the system's CAs only
            with pytest.raises((ssl.SSLError, OSError, FerroMQError)):
                await call(broker.port, stranger)

    run(main())


def test_bad_tls_settings_are_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=re.escape("tls.server.mode must be disabled, permissive or enforcing")
    ):
        load_broker_config(None, tls_server_mode="sometimes")
    with pytest.raises(ConfigError, match=re.escape("tls.server.certPath names no readable file")):
        load_broker_config(
            None, tls_server_cert_path=str(tmp_path / "nope.pem"), tls_server_key_path=__file__
        )
    with pytest.raises(
        ConfigError, match=re.escape("tls.client.certPath and tls.client.keyPath go together")
    ):
        load_broker_config(None, tls_client_cert_path=__file__)
    with pytest.raises(ConfigError, match=re.escape("tls.client.keyPath names no readable file")):
        load_broker_config(
            None, tls_client_cert_path=__file__, tls_client_key_path=str(tmp_path / "nope.key")
        )


def test_client_certificate_listed_in_the_trust_file_is_trusted_while_valid(tmp_path: Path) -> None:
    """need.client.auth=require with the clients' own self-signed certificates in the trust file
    (as RocketMQ deployments do): a client showing a listed certificate is served, one showing an
    expired listed certificate or none is refused at the handshake."""
    server_cert, server_key = self_signed_pem("broker", ["127.0.0.1"], days=2)
    good_cert, good_key = self_signed_pem("good client", [], days=2)
    old_cert, old_key = self_signed_pem("expired client", [], days=-5, since_days=10)
    files = {}
    for name, data in [
        ("server.pem", server_cert),
        ("server.key", server_key),
        ("good.pem", good_cert),
        ("good.key", good_key),
        ("old.pem", old_cert),
        ("old.key", old_key),
        ("trusted.pem", good_cert + old_cert),
    ]:
        files[name] = tmp_path / name
        files[name].write_bytes(data)

    def client(cert: str | None) -> ssl.SSLContext:
        ctx = client_context()
        if cert is not None:
            ctx.load_cert_chain(files[f"{cert}.pem"], files[f"{cert}.key"])
        return ctx

    async def main() -> None:
        async with running(
            tmp_path,
            tls_server_mode="enforcing",
            tls_test_mode_enable=False,
            tls_server_cert_path=str(files["server.pem"]),
            tls_server_key_path=str(files["server.key"]),
            tls_server_need_client_auth="require",
            tls_server_trust_cert_path=str(files["trusted.pem"]),
            namesrv_addr=None,
        ) as (_, broker):
            assert (await call(broker.port, client("good"))).code == R.SUCCESS
            for refused in ("old", None):
                with pytest.raises((ssl.SSLError, OSError, FerroMQError)):
                    await call(broker.port, client(refused))
            assert broker.server is not None
            await until(
                lambda: (
                    broker.server is not None
                    and broker.server.closed_by_reason[str(CloseReason.TLS_HANDSHAKE)] >= 2
                ),
                "the two handshakes refused",
            )

    run(main())
