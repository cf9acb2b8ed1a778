"""TLS on the gRPC port, as Apache RocketMQ's proxy has it: the official 5.x clients with TLS on (the
Java client's default) send and receive; in mode permissive TLS and plain clients share the port, in
mode enforcing plain ones are refused. The broker presents a certificate signed by a CA made here, which
the Python client (grpc.ssl_channel_credentials()) is told to trust; the Java client checks none.

Also: garbage bytes, a stalled TLS handshake and a silent connection end only their own connections,
each within the front's handshake timeout; and what Python takes as a client's address (the born host
of its sends) is the client's, whatever `x-ferromq-peer` header the client sends itself."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import os
import socket
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from apache_rocketmq import client5_python, have_java
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ferromq.broker.topics import TopicConfig
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2 as spb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2_grpc as rpc
from ferromq.testing import Broker
from ferromq.testing.waiting import closed_by_peer
from tests.interop.grpc_kit import CLIENT_TIMEOUT, arun_client5, assert_outcome
from tests.interop.java5build import build_grpc5_jar
from tests.interop.test_grpc_java_client import run_java

# The first run builds the Java driver (Maven Central).
pytestmark = [pytest.mark.timeout(900)]

RUN = uuid.uuid4().hex[:6]
CALL_TIMEOUT = 10.0
# The front closes a connection whose first byte or TLS handshake has not come within 10 s
# (crates/grpc HANDSHAKE_TIMEOUT); the wait for that is bounded with room to spare.
CLOSED_WITHIN = 30.0

# The official Python 5.x client with TLS on (a constructor flag, not in ClientConfiguration): sends
# one message, then a SimpleConsumer receives and acks it. Prints RESULT {"sent": id, "received":
# [[id, body]]}. Run by client5_python() with the CA in GRPC_DEFAULT_SSL_ROOTS_FILE_PATH.
TLS_CLIENT = """
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

endpoint, topic, group = sys.argv[1:4]
config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
producer = Producer(config, (topic,), tls_enable=True)
producer.startup()
try:
    m = Message()
    m.topic, m.body, m.tag = topic, b"over tls", "T"
    sent = producer.send(m).message_id
finally:
    producer.shutdown()
consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=5, tls_enable=True)
consumer.startup()
try:
    got, deadline = [], time.monotonic() + 60
    while not got and time.monotonic() < deadline:
        got = list(consumer.receive(1, 15))
    for m in got:
        consumer.ack(m)
finally:
    consumer.shutdown()
print("RESULT " + json.dumps({"sent": sent, "received": [[m.message_id, m.body.decode()] for m in got]}))
"""


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_certs(folder: Path) -> Certs:
    """A CA, and a server certificate it signed for 127.0.0.1 and localhost, as PEM files."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("ferromq test CA"))
        .issuer_name(_name("ferromq test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    out = Certs(folder / "ca.pem", folder / "server.pem", folder / "server.key")
    out.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    out.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return out


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def serving(certs: Certs, mode: str) -> Broker:
    """A broker whose gRPC port serves TLS in `mode` with the CA-signed certificate. Used with `async
    with`, so topics are made on its own loop: `create_topic`'s plain admin client would be refused
    by an enforcing broker port."""
    return Broker(
        settings={
            "tls_server_mode": mode,
            "tls_server_cert_path": str(certs.cert),
            "tls_server_key_path": str(certs.key),
        }
    )


def new_topic(broker: Broker, name: str) -> tuple[str, str]:
    """A topic made on the broker itself (routes over gRPC come from it) and a group name."""
    topic, group = f"Tls{name}{RUN}", f"TlsG{name}{RUN}"
    broker.broker.topics.update(TopicConfig(topic, 4, 4))
    return topic, group


async def born_hosts(broker: Broker, topic: str, count: int) -> list[str]:
    return [m.born_host for m in await broker.await_messages(topic, count)]


def run_tls_client(certs: Certs, endpoint: str, topic: str, group: str, home: Path) -> dict[str, Any]:
    """TLS_CLIENT's RESULT, run by the official Python 5.x client trusting `certs.ca` only."""
    home.mkdir(parents=True, exist_ok=True)
    script = home / "tls_client.py"
    script.write_text(TLS_CLIENT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"HOME": str(home), "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(certs.ca)}
    r = subprocess.run(
        [client5_python(), str(script), endpoint, topic, group],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT,
        cwd=home,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    lines = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    assert r.returncode == 0 and lines, (
        f"TLS client failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    )
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


def channel(endpoint: str, credentials: grpc.ChannelCredentials | None = None) -> grpc.Channel:
    """A plain channel, or a TLS one with `credentials`."""
    if credentials is None:
        return grpc.insecure_channel(endpoint)
    return grpc.secure_channel(endpoint, credentials)


def query_route(endpoint: str, topic: str, credentials: grpc.ChannelCredentials | None = None) -> int:
    """The status code of a QueryRoute, plain or over TLS with `credentials`."""
    with channel(endpoint, credentials) as ch:
        reply = rpc.MessagingServiceStub(ch).QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
            metadata=[("x-mq-client-id", f"tls-test-{RUN}")],
            timeout=CALL_TIMEOUT,
        )
        return int(reply.status.code)


def trusting(certs: Certs) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes())


def send_claiming(endpoint: str, topic: str, peer: str, credentials: grpc.ChannelCredentials | None) -> int:
    """The status code of a SendMessage whose client sends its own `x-ferromq-peer` header."""
    message = pb.Message(
        topic=pb.Resource(name=topic),
        body=b"who am I",
        system_properties=pb.SystemProperties(
            message_id=uuid.uuid4().hex.upper(), message_type=pb.NORMAL, body_encoding=pb.IDENTITY
        ),
    )
    with channel(endpoint, credentials) as ch:
        reply = rpc.MessagingServiceStub(ch).SendMessage(
            spb.SendMessageRequest(messages=[message]),
            metadata=[("x-mq-client-id", f"claims-{RUN}"), ("x-ferromq-peer", peer)],
            timeout=CALL_TIMEOUT,
        )
        return int(reply.status.code)


# Each test runs its broker on its own event loop; the clients, blocking, run in threads meanwhile.


@pytest.mark.skipif(not have_java(), reason="the Java 5.x client test needs `java` and `mvn` on PATH")
def test_java_client_with_tls_on(certs: Certs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Java client's default (TLS) against a port that refuses anything else."""
    jar = build_grpc5_jar()
    monkeypatch.setenv("FERROMQ_TEST_SSL", "1")

    async def main() -> None:
        async with serving(certs, "enforcing") as b:
            topic, group = new_topic(b, "Java")
            result = await asyncio.to_thread(
                run_java, jar, tmp_path, b.grpc_endpoint, "roundtrip", topic, group
            )
            assert_outcome("roundtrip", result)
            # What Python took as the client's address: the client's, not the front's socket.
            hosts = await born_hosts(b, topic, 3)
            assert [h.rsplit(":", 1)[0] for h in hosts] == ["127.0.0.1"] * 3, hosts

    asyncio.run(main())


def test_enforcing_serves_tls_clients_and_refuses_plain_ones(certs: Certs, tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(certs, "enforcing") as b:
            endpoint = b.grpc_endpoint
            topic, group = new_topic(b, "Py")
            result = await asyncio.to_thread(run_tls_client, certs, endpoint, topic, group, tmp_path)
            assert result["received"] == [[result["sent"], "over tls"]], result
            with pytest.raises(grpc.RpcError) as refused:
                await asyncio.to_thread(query_route, endpoint, topic)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert await asyncio.to_thread(query_route, endpoint, topic, trusting(certs)) == pb.OK

    asyncio.run(main())


def test_permissive_serves_tls_and_plain_clients_on_one_port(certs: Certs, tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(certs, "permissive") as b:
            endpoint = b.grpc_endpoint
            topic, group = new_topic(b, "Both")
            result = await asyncio.to_thread(run_tls_client, certs, endpoint, topic, group, tmp_path / "tls")
            assert result["received"] == [[result["sent"], "over tls"]], result
            topic, group = new_topic(b, "Plain")
            plain = await arun_client5(endpoint, "roundtrip", topic, group, tmp_path / "plain")
            assert_outcome("roundtrip", plain)

    asyncio.run(main())


def test_garbage_and_stalled_handshakes_end_only_their_own_connections(certs: Certs) -> None:
    def misbehave_beside_others(endpoint: str, topic: str) -> None:
        host, port = endpoint.rsplit(":", 1)
        socks = [socket.create_connection((host, int(port)), timeout=5) for _ in range(3)]
        garbage, stalled, silent = socks
        try:
            garbage.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)))
            stalled.sendall(b"\x16\x03\x01")  # a TLS record header, and nothing after it
            # Other clients are served meanwhile, plain and TLS.
            assert query_route(endpoint, topic) == pb.OK
            assert query_route(endpoint, topic, trusting(certs)) == pb.OK
            assert closed_by_peer(garbage, CLOSED_WITHIN)
            assert closed_by_peer(stalled, CLOSED_WITHIN)
            assert closed_by_peer(silent, CLOSED_WITHIN)
        finally:
            for sock in socks:
                sock.close()
        assert query_route(endpoint, topic) == pb.OK

    async def main() -> None:
        async with serving(certs, "permissive") as b:
            topic, _ = new_topic(b, "Garbage")
            await asyncio.to_thread(misbehave_beside_others, b.grpc_endpoint, topic)

    asyncio.run(main())


def test_the_peer_is_the_clients_address_whatever_it_claims(certs: Certs) -> None:
    """Sends whose client names another address in the front's header are stored with the real one."""

    async def main() -> None:
        async with serving(certs, "permissive") as b:
            topic, _ = new_topic(b, "Peer")
            for credentials in (None, trusting(certs)):
                code = await asyncio.to_thread(
                    send_claiming, b.grpc_endpoint, topic, "10.9.9.9:9", credentials
                )
                assert code == pb.OK
            hosts = await born_hosts(b, topic, 2)
            assert [h.rsplit(":", 1)[0] for h in hosts] == ["127.0.0.1"] * 2, hosts

    asyncio.run(main())
