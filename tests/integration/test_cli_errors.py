"""The `ferromq` executable on startup problems a user can cause: one line on stderr saying what is
wrong and what to do, exit code 2, no traceback. Brokers listen on port 0 (any free port) unless a
test takes a port on purpose."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferromq.client.message import MessageQueue, SendResult, SendStatus
from ferromq.client.push_consumer import ConsumeStatus
from ferromq.client.transaction_producer import LocalTransactionState, TransactionSendResult

FERROMQ = Path(sys.executable).with_name("ferromq")
TIMEOUT = 60.0  # a bound only: each run takes about a second
STORE_HINT = "choose another store with --store / storePathRootDir"


def ferromq(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FERROMQ), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


def assert_usage_error(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines()[-1] == f"ferromq: {message}", result.stderr


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("argv", "what", "option"),
    [
        (["serve", "-p", "{port}", "--namesrv-port", "0"], "broker", "-p / listenPort"),
        (["serve", "-p", "0", "--namesrv-port", "{port}"], "name server", "--namesrv-port"),
        (["broker", "-n", "127.0.0.1:9876", "-p", "{port}"], "broker", "-p / listenPort"),
        (["namesrv", "--port", "{port}"], "name server", "--port"),
    ],
)
def test_port_in_use(tmp_path: Path, taken_port: int, argv: list[str], what: str, option: str) -> None:
    args = [a.format(port=taken_port) for a in argv]
    if args[0] != "namesrv":
        args += ["--store", str(tmp_path / "store")]
    r = ferromq(*args, cwd=tmp_path)
    assert_usage_error(
        r, f"port {taken_port} on 127.0.0.1 is in use (another {what}?); choose another with {option}"
    )
    if args[0] == "broker":
        assert not (tmp_path / "store").exists()  # the port is taken before the store is opened


def test_port_in_use_verbose_keeps_the_cause(tmp_path: Path, taken_port: int) -> None:
    # Launchers that retry on another port look for the OS's words in a `-v` log.
    r = ferromq("-v", "namesrv", "--port", str(taken_port), cwd=tmp_path)
    assert r.returncode == 2
    assert "address already in use" in r.stderr.lower()
    assert r.stderr.splitlines()[-1].startswith(f"ferromq: port {taken_port} on 127.0.0.1 is in use")


def _wait_for_line(proc: subprocess.Popen[str], prefix: str) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + TIMEOUT
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if not ready:
            break
        line = proc.stdout.readline()
        if not line:  # it exited
            break
        if line.startswith(prefix):
            return line
    raise AssertionError(f"no {prefix!r} line (exit code {proc.poll()})")


def test_store_locked_by_another_broker(tmp_path: Path) -> None:
    store = tmp_path / "store"
    serve = ["serve", "-p", "0", "--namesrv-port", "0", "--store", str(store)]
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(
            [str(FERROMQ), *serve],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
        )
    try:
        line = _wait_for_line(first, "ferromq serving:")
        assert line.rstrip().endswith(f"store {store} (profile small)")
        r = ferromq(*serve, cwd=tmp_path)
        assert_usage_error(
            r,
            f"store {store} is locked by another process (is a broker running on it?); "
            f"stop it, or {STORE_HINT}",
        )
        # The failed broker undid only its own start: it never registered, so it says nothing
        # about unregistering or stopping.
        assert "unregistered" not in r.stderr and "stopped" not in r.stderr
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGTERM)
        try:
            code = first.wait(timeout=TIMEOUT)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
            assert first.stdout is not None
            first.stdout.close()
    assert code == 0, (tmp_path / "first.log").read_text()


@pytest.mark.parametrize(
    ("store", "message"),
    [
        ("file/store", "cannot create store directory {tmp}/file/store: Not a directory"),
        ("file", "store directory {tmp}/file is a file, not a directory"),
    ],
)
def test_unusable_store_directory(tmp_path: Path, store: str, message: str) -> None:
    (tmp_path / "file").write_text("not a directory\n")
    r = ferromq("serve", "-p", "0", "--namesrv-port", "0", "--store", str(tmp_path / store), cwd=tmp_path)
    assert_usage_error(r, f"{message.format(tmp=tmp_path)}; {STORE_HINT}")


def test_store_written_with_rocketmq_sizes_and_served_with_the_small_profile(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    with open(store / "commitlog" / "00000000000000000000", "wb") as f:
        os.truncate(f.fileno(), 1 << 30)  # sparse
    r = ferromq("serve", "-p", "0", "--namesrv-port", "0", "--store", str(store), cwd=tmp_path)
    assert_usage_error(
        r,
        f"store {store} has files of other sizes than configured (profile small): "
        "CommitLog files are 1073741824 bytes (mappedFileSizeCommitLog=67108864); "
        "use --profile rocketmq, or set mappedFileSizeCommitLog=1073741824 in broker.conf",
    )


def test_value_out_of_range_in_the_conf(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\nmaxMessageSize=-1\n")
    r = ferromq("serve", "-c", str(conf), "-p", "0", "--namesrv-port", "0", cwd=tmp_path)
    assert_usage_error(r, f"{conf}:2: maxMessageSize must be > 0, not -1")


@pytest.mark.parametrize(
    ("lines", "refusal"),
    [
        (
            "authenticationEnabled=true\nauthenticationProvider=x.Y",
            "3: authenticationProvider must name org.apache.rocketmq.auth.authentication.provider."
            "DefaultAuthenticationProvider (ferromq has no other), not 'x.Y'",
        ),
        (
            "authorizationEnabled=true",
            "2: authorizationEnabled=true without authenticationEnabled=true would trust whatever user "
            "a client names: set authenticationEnabled=true too",
        ),
        (
            "aclEnable=true\nauthenticationEnabled=true",
            "2: aclEnable=true (the plain ACL of 4.x) and ACL 2.0 (authenticationEnabled/"
            "authorizationEnabled) cannot both guard one broker: keep one (migrateAuthFromV1Enabled=true "
            "imports plain_acl.yml into ACL 2.0)",
        ),
        (
            "authenticationEnabled=true\ninitAuthenticationUser=rocketmq",
            '3: initAuthenticationUser must be a JSON object {"username": ..., "password": ...}',
        ),
    ],
)
def test_acl2_configurations_that_would_open_or_confuse_the_broker_refuse_the_start(
    tmp_path: Path, lines: str, refusal: str
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b\n{lines}\n")
    r = ferromq("serve", "-c", str(conf), "-p", "0", "--namesrv-port", "0", cwd=tmp_path)
    assert_usage_error(r, f"{conf}:{refusal}")


def test_acl2_in_the_proxy_configuration_needs_what_it_reads_users_with(tmp_path: Path) -> None:
    """Cluster mode reads the brokers' users with the proxy's own keys; local mode checks the
    broker's users, so the broker must have ACL 2.0 on too."""
    pc = tmp_path / "rmq-proxy.json"
    pc.write_text('{"grpcServerPort": 0, "authenticationEnabled": true, "namesrvAddr": "127.0.0.1:1"}')
    assert_usage_error(
        ferromq("proxy", "-pc", str(pc), cwd=tmp_path),
        f"{pc}: ACL 2.0 in cluster mode reads the brokers' users with the proxy's own keys: set "
        'innerClientAuthenticationCredentials={"accessKey":"...","secretKey":"..."} (a Super user of the '
        "brokers)",
    )
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\n")
    assert_usage_error(
        ferromq("proxy", "-pm", "local", "-bc", str(conf), "-pc", str(pc), cwd=tmp_path),
        f"{pc} turns ACL 2.0 on for gRPC, whose users are the broker's: set authenticationEnabled=true "
        "(and authorizationEnabled) in the broker's broker.conf (-bc) too",
    )
    pc.write_text('{"authorizationEnabled": "true", "namesrvAddr": "127.0.0.1:1"}')
    assert_usage_error(
        ferromq("proxy", "-pc", str(pc), cwd=tmp_path),
        f"{pc}: authorizationEnabled=true without authenticationEnabled=true would trust whatever user a "
        "client names: set authenticationEnabled=true too",
    )


def test_missing_conf_file(tmp_path: Path) -> None:
    r = ferromq("serve", "-c", "missing.conf", "-p", "0", "--namesrv-port", "0", cwd=tmp_path)
    assert_usage_error(r, "config file missing.conf does not exist")


def test_broker_without_name_server(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\n")
    r = ferromq("broker", "-c", str(conf), "-p", "0", "--store", str(tmp_path / "store"), cwd=tmp_path)
    assert_usage_error(r, "no name server: pass -n host:port or set namesrvAddr")
    assert not (tmp_path / "store").exists()


def test_strict_config_with_a_typo(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\nautoCreateTopicEnabled=false\ndeleteWhen=04\n")
    args = ["-c", str(conf), "-p", "0", "--namesrv-port", "0", "--store", str(tmp_path / "store")]
    r = ferromq("serve", "--strict-config", *args, cwd=tmp_path)
    assert_usage_error(
        r,
        f"{conf}:2: unknown key 'autoCreateTopicEnabled' (did you mean 'autoCreateTopicEnable'?); "
        "unknown keys are errors with --strict-config",
    )


def test_send_result_prints_status_names() -> None:
    queue = MessageQueue("Orders", "broker-a", 0)
    result = SendResult(SendStatus.SEND_OK, "id", "offset-id", queue, 7)
    assert (str(result.status), repr(result.status), f"{result.status}") == ("SEND_OK", "SEND_OK", "SEND_OK")
    assert "status=SEND_OK," in repr(result) and int(result.status) == 0
    tx = TransactionSendResult(
        SendStatus.FLUSH_DISK_TIMEOUT,
        "id",
        "o",
        queue,
        7,
        local_transaction_state=LocalTransactionState.UNKNOW,
    )
    assert "status=FLUSH_DISK_TIMEOUT," in str(tx) and "local_transaction_state=UNKNOW)" in str(tx)
    assert (str(ConsumeStatus.RECONSUME_LATER), f"{ConsumeStatus.CONSUME_SUCCESS}") == (
        "RECONSUME_LATER",
        "CONSUME_SUCCESS",
    )


def test_controller_config_error(tmp_path: Path) -> None:
    conf = tmp_path / "controller.conf"
    conf.write_text("controllerDLegerPeers = n0-127.0.0.1:1\ncontrollerDLegerSelfId = n3\n")
    result = ferromq("controller", "-c", str(conf), cwd=tmp_path)
    assert_usage_error(result, "controllerDLegerSelfId 'n3' is not one of n0")


def test_controller_mode_without_controller_addr(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"enableControllerMode = true\nlistenPort = 0\nstorePathRootDir = {tmp_path / 'store'}\n")
    result = ferromq("broker", "-c", str(conf), "-n", "127.0.0.1:9876", cwd=tmp_path)
    assert_usage_error(result, "enableControllerMode=true needs controllerAddr (host:port;host:port)")


@pytest.mark.parametrize(
    ("argv", "what_to_set"),
    [
        (
            ["namesrv", "--port", "0"],
            "set aclEnable=true in its namesrv.conf (-c), with an admin account for the brokers",
        ),
        (
            ["serve", "-p", "0", "--namesrv-port", "0", "--store", "store"],
            "set authenticationEnabled=true (ACL 2.0), or aclEnable=true (or namesrvAclEnable=true), "
            "in broker.conf",
        ),
    ],
)
def test_a_name_server_beyond_loopback_needs_acl(tmp_path: Path, argv: list[str], what_to_set: str) -> None:
    """Refused before anything listens: an unauthenticated name server on the network lets anyone
    rewrite the routes (REGISTER_BROKER, DELETE_TOPIC_IN_NAMESRV, ...)."""
    assert_usage_error(
        ferromq(*argv, "--host", "0.0.0.0", cwd=tmp_path),
        "the name server would listen on 0.0.0.0 without ACL, so anyone who reaches it could rewrite the "
        f"routes; {what_to_set}, or listen on 127.0.0.1 with --host",
    )


def test_a_broker_listening_elsewhere_than_it_advertises_is_refused(tmp_path: Path) -> None:
    """Issue 41: with brokerIP1 set, a broker listened on 127.0.0.1 and registered brokerIP1;
    clients on other hosts got "connection refused" and nothing said why."""
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\nbrokerIP1=10.213.0.13\n")
    r = ferromq("broker", "-c", str(conf), "-n", "127.0.0.1:9876", "--host", "127.0.0.1", cwd=tmp_path)
    assert_usage_error(
        r,
        "--host 127.0.0.1 is not brokerIP1=10.213.0.13, the address the name servers tell clients: listen "
        "on 10.213.0.13 (leave --host out), or set brokerIP1=127.0.0.1",
    )
    conf.write_text("brokerName=b\n")
    r = ferromq("broker", "-c", str(conf), "-n", "127.0.0.1:9876", "--host", "0.0.0.0", cwd=tmp_path)
    assert_usage_error(
        r,
        "--host 0.0.0.0 listens on every address, but the name servers would tell clients "
        "brokerIP1=127.0.0.1: set brokerIP1 to the address clients reach this host at",
    )


def test_a_controller_beyond_loopback_needs_authentication(tmp_path: Path) -> None:
    """Issue 41: it listened on 127.0.0.1 while its Raft port used the host's address; on that
    address, unauthenticated, anyone could forge a broker's heartbeats."""
    conf = tmp_path / "controller.conf"
    conf.write_text(
        "controllerDLegerPeers=n0-10.213.0.1:9877\ncontrollerDLegerSelfId=n0\n"
        f"controllerRaftPassword=secret\ncontrollerStorePath={tmp_path / 'c'}\n"
    )
    assert_usage_error(
        ferromq("controller", "-c", str(conf), cwd=tmp_path),
        "the controller would listen on 10.213.0.1 taking any broker's word (a forged heartbeat holds off "
        "an election): set authenticationEnabled=true and innerClientAuthenticationCredentials (the "
        "brokers' own) in its controller.conf, or listen on 127.0.0.1 with --host",
    )


def test_a_name_server_whose_acl_has_no_admin_account_is_refused(tmp_path: Path) -> None:
    """Issue 41: it started with 0 accounts, and refused every broker's registration."""
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"aclEnable=true\nrocketmqHome={tmp_path / 'home'}\n")
    assert_usage_error(
        ferromq("namesrv", "-c", str(conf), "--port", "0", cwd=tmp_path),
        f"aclEnable=true in {conf} but the ACL files ({tmp_path / 'home' / 'conf' / 'plain_acl.yml'}) "
        "have no admin account, so no broker could register: add one (admin: true) for the brokers' "
        "namesrvAccessKey",
    )
