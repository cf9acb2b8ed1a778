"""ferromq.testing: the in-process broker for other projects' tests, and its pytest plugin.

The plugin is tested the way a user meets it: `examples/pytest_project` (an application using the
official C++ client, with its own tests on the fixtures) is copied into a pytester directory and
run by pytest in a subprocess, in parallel with pytest-xdist; the plugin comes from the installed
package's `pytest11` entry point.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from pathlib import Path

import pytest

from ferromq.broker.config import ConfigError
from ferromq.client import Message, Producer, PushConsumer, ReceivedMessage
from ferromq.client.blocking import BlockingProducer
from ferromq.namesrv import NameServer
from ferromq.testing import Broker, BrokerProcess, unique_name, until, wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pytest_project"


def test_sync_broker_serves_clients_and_reads_back() -> None:
    with Broker() as broker:
        assert broker.namesrv.startswith("127.0.0.1:")
        broker.create_topic("Made", queues=2)
        with BlockingProducer("testing-sync", broker.namesrv) as producer:
            for i in range(5):
                producer.send(Message("Made", f"m{i}".encode(), tags="T", keys=[f"k{i}"]))
        stored = broker.wait_for_messages("Made", 5)
        assert sorted(m.payload() for m in stored) == [f"m{i}".encode() for i in range(5)]
        assert {m.queue_id for m in stored} == {0, 1}, "the topic was created with 2 queues"
        assert broker.count("Made") == 5
        store = broker.store_dir
        assert (store / "store" / "commitlog").is_dir()
    assert not store.exists(), "the temporary store is removed"


def test_async_broker_fast_delays_and_consumed_offsets() -> None:
    asyncio.run(asyncio.wait_for(_fast_delays_and_consumed_offsets(), 120))


async def _fast_delays_and_consumed_offsets() -> None:
    async with Broker(fast=True) as broker:
        group = unique_name("consumer")
        got: list[ReceivedMessage] = []

        async def on_messages(msgs: list[ReceivedMessage]) -> None:
            got.extend(msgs)

        consumer = PushConsumer(group, broker.namesrv, persist_interval=0.2)
        consumer.subscribe("Later", "*")
        consumer.register_listener(on_messages)
        async with Producer("testing-async", broker.namesrv) as producer:
            sent = time.time()
            # Level 4 is 30 s with RocketMQ's levels; fast=True makes every level 1 s.
            await producer.send(Message("Later", b"soon", delay_level=4))
            async with consumer:
                stored = await broker.await_messages("Later", 1, timeout=30)
                assert stored[0].payload() == b"soon"
                assert stored[0].store_timestamp / 1000 - sent >= 0.9
                await broker.await_consumed(group, "Later", timeout=30)
        assert [m.body for m in got] == [b"soon"]


def test_config_keys_are_checked_strictly() -> None:
    with pytest.raises(ConfigError, match="did you mean 'autoCreateTopicEnable'"):
        Broker({"autoCreateTopicEnabel": "false"}).start()


def test_two_brokers_in_one_process_stay_apart() -> None:
    with Broker() as a, Broker({"flushDiskType": "SYNC_FLUSH"}) as b:
        assert a.namesrv != b.namesrv
        assert b.broker.sync_flush and not a.broker.sync_flush
        with BlockingProducer("testing-two", a.namesrv) as producer:
            producer.send(Message("OnlyA", b"x"))
        assert a.count("OnlyA") == 1
        assert b.count("OnlyA") == 0


@pytest.mark.interop
def test_plugin_runs_the_example_project_in_parallel(pytester: pytest.Pytester) -> None:
    pytest.importorskip(
        "rocketmq.client", reason="the official C++ client (PyPI rocketmq) is Linux x86_64 only"
    )
    shutil.copytree(EXAMPLE, pytester.path, dirs_exist_ok=True)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", "-v", timeout=600)
    result.assert_outcomes(passed=6)
    # Two workers, each with its own session broker: the parametrized session-broker tests spread.
    # (Checked one at a time: fnmatch_lines wants its patterns in order, and either worker may
    # finish its first test first.)
    for worker in ("gw0", "gw1"):
        result.stdout.fnmatch_lines([f"*{worker}*PASSED*"])


def test_plugin_fixtures_without_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import asyncio
        import pytest
        from ferromq.client import Message
        from ferromq.client.blocking import BlockingProducer

        def test_function_broker(ferromq_broker):
            with BlockingProducer("p", ferromq_broker.namesrv) as producer:
                producer.send(Message("T", b"x"))
            assert ferromq_broker.count("T") == 1

        @pytest.mark.ferromq(config={"maxMessageSize": 1024})
        def test_marker_config(ferromq_broker):
            assert ferromq_broker.broker.config.max_message_size == 1024

        def test_session_broker_is_shared(ferromq_session_broker, ferromq_topic, ferromq_group):
            assert ferromq_topic != ferromq_group
            assert ferromq_session_broker.broker.config.message_delay_level.split() == ["1s"] * 18
        """
    )
    pytester.makeini("[pytest]\nferromq_fast = true\nferromq_config =\n    defaultTopicQueueNums=2\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(passed=3)


@pytest.mark.interop
def test_java_client_against_the_testing_broker(tmp_path: Path) -> None:
    from tests.interop.javabuild import build_interop_jar
    from tests.interop.test_java_client import HAVE_TOOLS, Server, run_scenario

    if not HAVE_TOOLS:
        pytest.skip("the Java client needs `java` and `mvn` on PATH")
    jar = build_interop_jar()
    with Broker() as broker:
        port = int(broker.broker_addr.rsplit(":", 1)[1])
        server = Server(tmp_path, broker.namesrv, port, tmp_path / "no-log")
        (tmp_path / "no-log").write_text("(the broker runs in the test process)\n")
        run = run_scenario(jar, server, "produce", topic="JavaMade", group="testing-java", run="t", n=3)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        sent = run.events("sent")
        acked = [r for r in sent if r["kind"] != "oneway"]
        assert acked and all(r["status"] == "SEND_OK" for r in acked)
        stored = broker.wait_for_messages("JavaMade", len(sent))
        assert {m.uniq_key for m in stored} >= {r["uniqId"] for r in acked}


def test_brokers_start_and_stop_repeatedly_without_leaking_threads() -> None:
    for _ in range(3):
        with Broker() as broker:
            assert broker.count("Nothing") == 0
    assert not [t for t in threading.enumerate() if t.name == "ferromq-testing-broker"]


def test_sync_broker_inside_a_running_event_loop() -> None:
    # A sync broker works from inside a running event loop too (e.g. an async test using it).
    async def inner() -> int:
        with Broker() as broker:
            async with Producer("testing-inner", broker.namesrv) as producer:
                await producer.send(Message("Inner", b"x"))
            return broker.count("Inner")

    assert asyncio.run(inner()) == 1


def test_kept_store_settings_and_a_shared_name_server(tmp_path: Path) -> None:
    async def main() -> None:
        ns = NameServer("127.0.0.1", 0)
        await ns.start()
        try:
            small = {"mapped_file_size_commitlog": 1 << 20}
            async with Broker(store_dir=tmp_path / "a", settings=small, name_server=ns) as a:
                assert a.name_server is ns and a.namesrv == f"127.0.0.1:{ns.port}"
                assert a.broker.config.mapped_file_size_commitlog == 1 << 20
                async with Broker(store_dir=tmp_path / "b", broker_name="broker-b", name_server=ns) as b:
                    assert {a.broker_addr, b.broker_addr} <= set(ns.routes.live)
                async with Producer("testing-kept", a.namesrv) as producer:
                    await producer.send(Message("Kept", b"x"))
            assert ns.port > 0, "a given name server is left running"
            async with Broker(store_dir=tmp_path / "a", settings=small, name_server=ns) as again:
                assert again.count("Kept") == 1, "the store is kept: the same broker, restarted"
        finally:
            await ns.stop()

    asyncio.run(asyncio.wait_for(main(), 120))


def test_broker_process_serves_from_a_broker_conf_and_stops_by_pid(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, {"brokerName": "broker-p", "autoCreateTopicEnable": True}) as server:
        assert (tmp_path / "ferromq.conf").read_text().splitlines() == [
            "brokerName=broker-p",
            "autoCreateTopicEnable=true",
        ]
        with BlockingProducer("testing-process", server.namesrv) as producer:
            assert producer.send(Message("Served", b"x")).message_queue.broker_name == "broker-p"
        assert server.returncode is None and server.pid > 0
    assert server.returncode == 0, server.log_tail()
    assert not server.errors()
    assert (server.store / "commitlog").is_dir()


def test_waits_time_out_as_assertions_and_timeouts() -> None:
    with pytest.raises(AssertionError, match="waiting for nothing\nstill nothing") as raised:
        wait_until(lambda: False, "nothing", timeout=0.05, why=lambda: "still nothing")
    assert isinstance(raised.value, TimeoutError)
    assert asyncio.run(until(lambda: asyncio.sleep(0, result=7), "a coroutine's value")) == 7
