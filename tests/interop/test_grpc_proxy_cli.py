"""`ferromq proxy`, with Apache RocketMQ ProxyStartup's command line: `-pm local -bc broker.conf -pc
rmq-proxy.json -n NAMESRV` runs the broker inside (registered with the name server) and the 5.x clients'
gRPC port from rmq-proxy.json's grpcServerPort; the official Python 5.x client sends and receives through
it, and after a `kill -9` of the proxy what it held invisible comes back. A mode that is neither local
nor cluster is refused at start with one line (cluster mode: test_grpc_cluster_mode.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ferromq.testing import free_port, write_conf
from ferromq.testing.process import port_taken
from ferromq.testing.waiting import wait_until
from tests.interop.grpc_kit import run_client5

FERROMQ = Path(sys.executable).with_name("ferromq")
TOPIC = "ProxyCliTopic"


def refusal(cwd: Path, *args: str) -> str:
    """`ferromq proxy ARGS` refused at start: exit code 2, no traceback; its last line."""
    r = subprocess.run(
        [str(FERROMQ), "proxy", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    return r.stderr.strip().splitlines()[-1]


def test_an_unknown_mode_is_refused_with_one_line(tmp_path: Path) -> None:
    line = refusal(tmp_path, "-pm", "elsewhere", "-n", "127.0.0.1:9876")
    assert line == "ferromq: no proxy mode 'elsewhere'; choose -pm cluster or -pm local"


class LocalProxy:
    """A name server and `ferromq proxy -pm local` in front of a broker on `store`, as processes; the
    proxy may be killed and started again on the same store and ports."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ns_port = free_port()
        self.conf = root / "broker.conf"
        self.proxy_conf = root / "rmq-proxy.json"
        self._choose_ports()
        self.namesrv: subprocess.Popen[bytes] | None = None
        self.proxy: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.served = False

    def _choose_ports(self) -> None:
        """The broker's and the gRPC front's ports (free now; another process may take one before
        the proxy listens: `start_proxy` then chooses again)."""
        self.broker_port, self.grpc_port = free_port(), free_port()
        while len({self.ns_port, self.broker_port, self.broker_port + 1, self.grpc_port}) < 4:
            self.broker_port, self.grpc_port = free_port(), free_port()
        write_conf(
            self.conf,
            {
                "brokerName": "proxy-broker",
                "listenPort": self.broker_port,
                "storePathRootDir": str(self.root / "store"),
                "mappedFileSizeCommitLog": 67108864,
                "autoCreateTopicEnable": "true",
            },
        )
        self.proxy_conf.write_text(
            json.dumps({"grpcServerPort": self.grpc_port, "rocketMQClusterName": "DefaultCluster"})
        )

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def _spawn(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "wb") as out:
            return subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, cwd=self.root)

    def start_namesrv(self) -> None:
        log = self.root / "namesrv.log"
        self.namesrv = self._spawn([str(FERROMQ), "namesrv", "--port", str(self.ns_port)], log)
        wait_until(lambda: "listening" in log.read_text(), "the name server ready", 30)

    def start_proxy(self) -> None:
        """Starts the proxy; the first start chooses other ports (at most 3 times) when another
        process took one of them first. A restart keeps its ports: clients reconnect to them."""
        for attempt in range(3):
            log = self._start_once()
            if log is None:
                self.served = True
                return
            if self.served or attempt == 2 or not port_taken(log):
                break
            self._choose_ports()
        raise AssertionError(log)

    def _start_once(self) -> str | None:
        """None once the proxy serves; else its log (it has exited)."""
        self.starts += 1
        log = self.root / f"proxy-{self.starts}.log"
        argv = [str(FERROMQ), "proxy", "-pm", "local", "-bc", str(self.conf), "-pc", str(self.proxy_conf)]
        self.proxy = proc = self._spawn([*argv, "-n", f"127.0.0.1:{self.ns_port}"], log)
        ready = f"ferromq proxy (local mode) gRPC on {self.endpoint}"
        wait_until(lambda: ready in log.read_text() or proc.poll() is not None, "the proxy ready", 60)
        if ready in log.read_text():
            return None
        proc.wait(timeout=30)
        return log.read_text()

    def proxy_log(self) -> str:
        return (self.root / f"proxy-{self.starts}.log").read_text()

    def create_topic(self, topic: str) -> None:
        subprocess.run(
            [str(FERROMQ), "admin", "-n", f"127.0.0.1:{self.ns_port}", "create-topic", topic],
            check=True,
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        for proc in (self.proxy, self.namesrv):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)


@pytest.mark.timeout(300)
def test_local_mode_serves_the_python_client(tmp_path: Path) -> None:
    local = LocalProxy(tmp_path)
    try:
        local.start_namesrv()
        local.start_proxy()
        # The 5.x client asks for the route first: the topic must exist.
        local.create_topic(TOPIC)
        result = run_client5(local.endpoint, "roundtrip", TOPIC, "ProxyCliGroup", tmp_path / "client")
        assert result["ids_match"] and [m["body"] for m in result["received"]] == ["rt 0", "rt 1", "rt 2"]
    finally:
        local.stop()
    assert local.proxy is not None and local.proxy.returncode == 0, local.proxy_log()


@pytest.mark.timeout(600)
def test_kill_9_of_the_local_proxy_brings_back_what_was_invisible(tmp_path: Path) -> None:
    """Five messages received through the proxy, two acked, three invisible; `kill -9` of the proxy
    (its broker with it) and a start on the same store: the three come back (delivery attempt 2), the
    acked two never do."""
    local = LocalProxy(tmp_path)
    group = "ProxyKill9Group"
    try:
        local.start_namesrv()
        local.start_proxy()
        local.create_topic(TOPIC)
        held = run_client5(local.endpoint, "hold", TOPIC, group, tmp_path / "c1")
        assert held == {"received": [f"h{i}" for i in range(5)], "acked": ["h0", "h1"]}, held
        # Past the pop, the group's offsets reach consumerOffset.json within 5 s (as in Java); killed
        # before, all five would come back (at least once).
        offsets = tmp_path / "store" / "config" / "consumerOffset.json"
        wait_until(
            lambda: offsets.is_file() and f"{TOPIC}@{group}" in offsets.read_text(), "offsets persisted", 30
        )
        assert local.proxy is not None
        local.proxy.kill()
        assert local.proxy.wait(timeout=30) == -9
        local.start_proxy()
        back = run_client5(local.endpoint, "take_back", TOPIC, group, tmp_path / "c2")
        assert back == {"received": ["h2", "h3", "h4"], "attempts": [2, 2, 2]}, back
    finally:
        local.stop()
