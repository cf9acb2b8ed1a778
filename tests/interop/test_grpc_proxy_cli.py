"""`ferromq proxy`, with Apache RocketMQ ProxyStartup's command line: `-pm local -bc broker.conf -pc
rmq-proxy.json -n NAMESRV` runs the broker inside (registered with the name server) and the 5.x clients'
gRPC port from rmq-proxy.json's grpcServerPort; the official Python 5.x client sends and receives through
it. `-pm cluster` (in front of other brokers) is not built: refused at start with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ferromq.testing import free_port, write_conf
from ferromq.testing.waiting import wait_until
from tests.interop.grpc_kit import run_client5

FERROMQ = Path(sys.executable).with_name("ferromq")
SCENARIOS = Path(__file__).with_name("client5_scenarios.py")
TOPIC = "ProxyCliTopic"


def test_cluster_mode_is_refused_with_one_line(tmp_path: Path) -> None:
    r = subprocess.run(
        [str(FERROMQ), "proxy", "-pm", "cluster", "-n", "127.0.0.1:9876"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2, r.stderr
    assert "ferromq proxy -pm cluster" in r.stderr and "-pm local" in r.stderr, r.stderr


@pytest.mark.timeout(300)
def test_local_mode_serves_the_python_client(tmp_path: Path) -> None:
    ns_port, broker_port, grpc_port = free_port(), free_port(), free_port()
    conf = write_conf(
        tmp_path / "broker.conf",
        {
            "brokerName": "proxy-broker",
            "listenPort": broker_port,
            "storePathRootDir": str(tmp_path / "store"),
            "mappedFileSizeCommitLog": 67108864,
            "autoCreateTopicEnable": "true",
        },
    )
    proxy_conf = tmp_path / "rmq-proxy.json"
    proxy_conf.write_text(json.dumps({"grpcServerPort": grpc_port, "rocketMQClusterName": "DefaultCluster"}))
    procs: list[subprocess.Popen[bytes]] = []
    logs = {name: tmp_path / f"{name}.log" for name in ("namesrv", "proxy")}
    try:
        with open(logs["namesrv"], "wb") as out:
            procs.append(
                subprocess.Popen(
                    [str(FERROMQ), "namesrv", "--port", str(ns_port)],
                    stdout=out,
                    stderr=out,
                    stdin=subprocess.DEVNULL,
                )
            )
        wait_until(lambda: "listening" in logs["namesrv"].read_text(), "the name server ready", 30)
        argv = [str(FERROMQ), "proxy", "-pm", "local", "-bc", str(conf), "-pc", str(proxy_conf)]
        argv += ["-n", f"127.0.0.1:{ns_port}"]
        with open(logs["proxy"], "wb") as out:
            procs.append(
                subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, cwd=tmp_path)
            )
        ready = f"ferromq proxy (local mode) gRPC on 127.0.0.1:{grpc_port}"
        wait_until(
            lambda: ready in logs["proxy"].read_text() or procs[-1].poll() is not None, "the proxy ready", 60
        )
        assert ready in logs["proxy"].read_text(), logs["proxy"].read_text()
        # The 5.x client asks for the route first: the topic must exist.
        subprocess.run(
            [str(FERROMQ), "admin", "-n", f"127.0.0.1:{ns_port}", "create-topic", TOPIC],
            check=True,
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        result = run_client5(
            f"127.0.0.1:{grpc_port}", "roundtrip", TOPIC, "ProxyCliGroup", tmp_path / "client"
        )
        assert result["ids_match"] and [m["body"] for m in result["received"]] == ["rt 0", "rt 1", "rt 2"]
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
    assert procs[-1].returncode == 0, logs["proxy"].read_text()
