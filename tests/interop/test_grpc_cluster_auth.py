"""`ferromq proxy -pm cluster` with ACL 2.0 leaves loopback. In a network namespace of the test's own
(a host of its own, its address on a veth pair whose both ends stay inside it: routed nowhere): a
name server, a broker with ACL 2.0, and the cluster proxy listening on the non-loopback address with
authenticationEnabled in its rmq-proxy.json. The proxy reads the broker's users and ACLs with its
innerClientAuthenticationCredentials and signs its own requests with them; the official Python 5.x
client, signing as a user the broker's ACL allows, sends and receives through it; an unsigned client
and a user without an entry are refused; a user's new entry is served once the proxy's copy
refreshes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferromq.testing.waiting import wait_until
from tests.interop.grpc_kit import CLIENT_TIMEOUT, _client5, _result, client5_python

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None,
        reason="needs root and iproute2 to make a network namespace",
    ),
    pytest.mark.timeout(600),
]

FERROMQ = Path(sys.executable).with_name("ferromq")
ADDRESS = "10.213.77.1"  # on a link inside the namespace: reachable from nowhere else
SUPER = ("rocketmq", "12345678")
TOPIC, GROUP = "NetnsAuthTopic", "NetnsAuthGroup"


class Host:
    """A network namespace with `lo` and a veth pair (both ends inside) holding ADDRESS; processes
    run inside it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.name = f"fmq-{uuid.uuid4().hex[:8]}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        try:
            self._link()
        except BaseException:
            self.close()
            raise

    def _link(self) -> None:
        for cmd in (
            "ip link set lo up",
            "ip link add fmq0 type veth peer name fmq1",
            f"ip addr add {ADDRESS}/24 dev fmq0",
            "ip link set fmq0 up",
            "ip link set fmq1 up",
        ):
            subprocess.run(["ip", "netns", "exec", self.name, *cmd.split()], check=True)

    def argv(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *args]

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self, name: str, args: list[str], ready: str) -> None:
        with open(self.root / f"{name}.log", "wb") as out:
            proc = subprocess.Popen(
                self.argv(str(FERROMQ), *args),
                stdout=out,
                stderr=out,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
            )
        self.procs[name] = proc
        wait_until(lambda: ready in self.log(name) or proc.poll() is not None, f"{name} ready", 60)
        assert ready in self.log(name), self.log(name)

    def admin(self, *args: str) -> Any:
        r = subprocess.run(
            self.argv(
                str(FERROMQ),
                "admin",
                "-n",
                "127.0.0.1:9876",
                "--access-key",
                SUPER[0],
                "--secret-key",
                SUPER[1],
                "--json",
                *args,
            ),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def client(self, scenario: str, home: Path, keys: tuple[str, str] | None) -> dict[str, Any]:
        env = {"FERROMQ_TEST_AK": keys[0], "FERROMQ_TEST_SK": keys[1]} if keys else {}
        argv, full_env = _client5(client5_python(), f"{ADDRESS}:8081", scenario, TOPIC, GROUP, home, env)
        r = subprocess.run(
            self.argv(*argv), capture_output=True, text=True, timeout=CLIENT_TIMEOUT, env=full_env
        )
        return _result(f"{ADDRESS}:8081", scenario, r.returncode, r.stdout, r.stderr)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        subprocess.run(["ip", "netns", "del", self.name], check=False)


@pytest.fixture()
def host(tmp_path: Path) -> Iterator[Host]:
    h = Host(tmp_path)
    try:
        yield h
    finally:
        h.close()


def test_a_cluster_proxy_with_acl2_serves_signed_clients_beyond_loopback(host: Host, tmp_path: Path) -> None:
    inner = json.dumps({"accessKey": SUPER[0], "secretKey": SUPER[1]})
    (tmp_path / "broker.conf").write_text(
        "brokerName=broker-a\nbrokerIP1=127.0.0.1\nlistenPort=10911\nnamesrvAddr=127.0.0.1:9876\n"
        f"storePathRootDir={tmp_path / 'store'}\nmappedFileSizeCommitLog=67108864\n"
        "autoCreateTopicEnable=true\n"
        "authenticationEnabled=true\nauthorizationEnabled=true\n"
        f"initAuthenticationUser={json.dumps({'username': SUPER[0], 'password': SUPER[1]})}\n"
    )
    (tmp_path / "rmq-proxy.json").write_text(
        json.dumps(
            {
                "grpcServerPort": 8081,
                "authenticationEnabled": True,
                "authorizationEnabled": True,
                "innerClientAuthenticationCredentials": inner,
                "userCacheRefreshSecond": 1,
            }
        )
    )
    host.start("namesrv", ["namesrv", "--port", "9876"], "listening")
    host.start("broker", ["broker", "-c", str(tmp_path / "broker.conf")], "ferromq broker broker-a listening")
    host.admin("create-topic", TOPIC, "--queues", "4")
    host.admin("user", "create", "alice1", "-p", "alicePass1")
    host.admin("acl", "create", "User:alice1", "-r", f"Topic:{TOPIC},Group:{GROUP}", "-a", "Pub,Sub")
    host.start(
        "proxy",
        [
            "proxy",
            "-pm",
            "cluster",
            "-n",
            "127.0.0.1:9876",
            "-pc",
            str(tmp_path / "rmq-proxy.json"),
            "--host",
            ADDRESS,
        ],
        "ferromq proxy (cluster mode) gRPC on",
    )
    got = host.client("roundtrip", tmp_path / "alice", ("alice1", "alicePass1"))
    assert got["ids_match"] and len(got["received"]) == 3, got
    unsigned = host.client("signed_send", tmp_path / "anon", None)
    assert unsigned["sent"] is False and "username cannot be null." in json.dumps(unsigned), unsigned
    # A user created now is served once the proxy's copy of the users refreshes (every second here).
    host.admin("user", "create", "bob1", "-p", "bobPass1")

    def bob_refused_for_want_of_an_entry() -> bool:
        # "User:bob1 is not found." until the proxy's copy has bob.
        refused = host.client("signed_send", tmp_path / "bob", ("bob1", "bobPass1"))
        assert refused["sent"] is False, refused
        return "no matched policies" in json.dumps(refused)

    wait_until(bob_refused_for_want_of_an_entry, "the proxy's copy to know bob", 60)
    host.admin("acl", "create", "User:bob1", "-r", f"Topic:{TOPIC}", "-a", "Pub")
    wait_until(
        lambda: host.client("signed_send", tmp_path / "bob2", ("bob1", "bobPass1"))["sent"] is True,
        "bob's send through the proxy",
        60,
    )
