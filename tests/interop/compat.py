"""Records what the interop tests verified, for the docs site's "Compatibility" page
(scripts/compat_report.py renders it).

Two sources: tests call the `compat` fixture (`compat(area=..., item=..., client=..., rocketmq_version=...)`)
for each item they compared, and TEST_MAP below describes the other interop tests by node id, so their
files need no edits. Only tests that passed (setup, call and teardown) count. At the end of the session
the outcomes go to build/compat-results.json: entries of the tests that ran now replace those of the same
node ids from earlier sessions, so running one interop file updates only its part.

tests/conftest.py imports the hooks and the fixture from here (so the Spark tests count too).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(os.environ.get("FERROMQ_COMPAT_RESULTS", ROOT / "build" / "compat-results.json"))

ROCKETMQ_VERSION = "4.9.7"  # tools/apache_rocketmq.py, tests/interop/java/pom.xml
ROCKETMQ_55_VERSION = "5.5.0"  # tools/apache_rocketmq.py's second 5.x reference


def _java_client_version() -> str:
    pom = ROOT / "tests" / "interop" / "java" / "pom.xml"
    try:
        found = re.search(r"<rocketmq.version>([^<]+)</rocketmq.version>", pom.read_text())
    except OSError:
        found = None
    return found.group(1) if found else "?"


def _cpp_client_version() -> str:
    try:
        return importlib.metadata.version("rocketmq")
    except importlib.metadata.PackageNotFoundError:
        return "?"


CPP = f"C++ client (PyPI rocketmq {_cpp_client_version()})"
JAVA = f"Java client {_java_client_version()}"
PY = "ferromq Python client"
RAW = "raw protocol requests"
APACHE = f"Apache RocketMQ {ROCKETMQ_VERSION} broker"
APACHE_55 = f"Apache RocketMQ {ROCKETMQ_55_VERSION} broker"
JAVA5_CLIENT = "Java 5.x client 5.2.0 (gRPC)"
MQADMIN_55 = f"mqadmin {ROCKETMQ_55_VERSION} (rocketmq-tools)"
PY5_CLIENT = "Python 5.x client 5.1.2 (gRPC, rocketmq-python-client)"

OFFICIAL = "official clients against ferromq"
PYINTEROP = "Python client with the official clients"
STORE = "store files shared with Apache RocketMQ"

# node id without parameters -> [(area, item, client, Apache RocketMQ version or None)]
TEST_MAP: dict[str, list[tuple[str, str, str, str | None]]] = {
    "tests/interop/test_cpp_client.py::test_send_modes_then_push_consume": [
        (OFFICIAL, "sync, async and one-way sends", CPP, None),
        (OFFICIAL, "push consumer (concurrently)", CPP, None),
    ],
    "tests/interop/test_cpp_client.py::test_orderly_send_and_orderly_consumer": [
        (OFFICIAL, "orderly sends (queue selector) and an orderly push consumer", CPP, None)
    ],
    "tests/interop/test_cpp_client.py::test_batch_send_stores_each_message": [
        (OFFICIAL, "batch send", CPP, None)
    ],
    "tests/interop/test_cpp_client.py::test_large_body_is_compressed_and_restored": [
        (OFFICIAL, "compressed large bodies", CPP, None)
    ],
    "tests/interop/test_cpp_client.py::test_tags_keys_and_properties_round_trip": [
        (OFFICIAL, "tags, keys and user properties round trip", CPP, None)
    ],
    "tests/interop/test_cpp_client.py::test_clustering_two_consumers_share_the_queues": [
        (OFFICIAL, "clustering: consumers share the queues (rebalance)", CPP, None)
    ],
    "tests/interop/test_cpp_client.py::test_broadcasting_every_consumer_gets_everything": [
        (OFFICIAL, "broadcasting consumers", CPP, None)
    ],
    "tests/interop/test_cpp_client.py::test_pull_consumer_reads_all_queues": [
        (OFFICIAL, "pull consumer over all queues", CPP, None)
    ],
    "tests/interop/test_cpp_client.py::test_restarted_consumer_resumes_from_committed_offset": [
        (OFFICIAL, "committed offsets: a restarted consumer resumes", CPP, None)
    ],
    "tests/interop/test_cpp_client.py::test_failed_message_comes_back_through_retry_topic": [
        (OFFICIAL, "retry through %RETRY% after a failed delivery", CPP, None)
    ],
    "tests/interop/test_java_client.py::test_produce_sync_async_oneway_batch_large": [
        (OFFICIAL, "sync, async and one-way sends", JAVA, None),
        (OFFICIAL, "batch send", JAVA, None),
        (OFFICIAL, "compressed large bodies", JAVA, None),
    ],
    "tests/interop/test_java_client.py::test_push_consumer_concurrently": [
        (OFFICIAL, "push consumer (concurrently)", JAVA, None),
        (OFFICIAL, "tags, keys and user properties round trip", JAVA, None),
    ],
    "tests/interop/test_java_client.py::test_push_consumer_tag_filter": [
        (OFFICIAL, "tag filter", JAVA, None)
    ],
    "tests/interop/test_java_client.py::test_orderly_by_sharding_key": [
        (OFFICIAL, "orderly sends (queue selector) and an orderly push consumer", JAVA, None)
    ],
    "tests/interop/test_java_client.py::test_lite_pull_subscribe_poll_commit": [
        (OFFICIAL, "lite pull consumer: subscribe, poll, commit, read back", JAVA, None)
    ],
    "tests/interop/test_tiered_java_client.py::test_the_java_client_reads_back_from_the_bucket": [
        (
            OFFICIAL,
            "tiered storage: messages local retention deleted, pulled back from the bucket",
            JAVA,
            None,
        )
    ],
    "tests/interop/test_java_client.py::test_reconsume_later_comes_back_with_reconsume_times_1": [
        (OFFICIAL, "retry through %RETRY% after a failed delivery", JAVA, None)
    ],
    "tests/interop/test_java_transactions.py::test_commit_is_visible_at_once": [
        (OFFICIAL, "transactions: commit", JAVA, None)
    ],
    "tests/interop/test_java_transactions.py::test_rollback_is_never_visible": [
        (OFFICIAL, "transactions: rollback", JAVA, None)
    ],
    "tests/interop/test_java_transactions.py::test_unknown_then_commit_via_check_back": [
        (OFFICIAL, "transactions: check-back of an unknown state", JAVA, None)
    ],
    "tests/interop/test_python_client_interop.py::test_python_producer_to_cpp_push_consumers": [
        (PYINTEROP, "ferromq Python producer -> C++ push consumers", CPP, None)
    ],
    "tests/interop/test_python_client_interop.py::test_cpp_producer_to_python_push_and_pull_consumers": [
        (PYINTEROP, "C++ producer -> ferromq Python push and pull consumers", CPP, None)
    ],
    "tests/interop/test_python_client_interop.py::test_python_producer_to_java_push_consumer": [
        (PYINTEROP, "ferromq Python producer -> Java push consumer", JAVA, None)
    ],
    "tests/interop/test_python_client_interop.py::test_java_producer_to_python_push_consumer": [
        (PYINTEROP, "Java producer -> ferromq Python push consumer", JAVA, None)
    ],
    "tests/interop/test_python_client_interop.py"
    "::test_cpp_orderly_producer_to_python_orderly_push_consumer": [
        (PYINTEROP, "C++ orderly producer -> ferromq Python orderly push consumer", CPP, None)
    ],
    "tests/interop/test_store_crosscompat.py::test_ferromq_reads_java_store": [
        (STORE, "ferromq reads a store written by the Java broker", APACHE, ROCKETMQ_VERSION)
    ],
    "tests/interop/test_store_crosscompat.py::test_ferromq_serves_java_store": [
        (STORE, "ferromq serves a store written by the Java broker to clients", APACHE, ROCKETMQ_VERSION)
    ],
    "tests/interop/test_store_crosscompat.py::test_ferromq_recovers_java_store_after_kill9": [
        (STORE, "ferromq recovers a Java broker's store after kill -9", APACHE, ROCKETMQ_VERSION)
    ],
    "tests/spark/test_spark_java_store.py::test_spark_reads_a_store_apache_rocketmq_wrote": [
        (
            STORE,
            "the Spark source (ferromq.spark) reads a store the Java broker wrote (clean stop and kill -9)",
            APACHE,
            ROCKETMQ_VERSION,
        )
    ],
    "tests/interop/test_store_crosscompat.py::test_java_reads_ferromq_store": [
        (
            STORE,
            "the Java broker reads and serves a store ferromq wrote (clean stop and kill -9)",
            APACHE,
            ROCKETMQ_VERSION,
        ),
        (
            STORE,
            "the Java broker reads and serves a store ferromq wrote (clean stop)",
            APACHE_55,
            ROCKETMQ_55_VERSION,
        ),
    ],
    "tests/interop/test_priority_rocketmq55.py::test_remoting_sends_pops_and_refusals": [
        (
            "side by side",
            "priority messages: the queue a priority picks, the POP order, the refusals",
            RAW,
            ROCKETMQ_55_VERSION,
        )
    ],
    "tests/interop/test_priority_rocketmq55.py::test_java_client_priority_over_grpc": [
        (
            "side by side",
            "priority messages sent and received in priority order",
            JAVA5_CLIENT,
            ROCKETMQ_55_VERSION,
        )
    ],
    "tests/interop/test_lite_rocketmq55.py::test_lite_queues_side_by_side": [
        (
            "side by side",
            "lite topics: each lite topic's queue read back by PULL (bodies, offsets, properties)",
            RAW,
            ROCKETMQ_55_VERSION,
        )
    ],
    "tests/interop/test_delete_topic_side_by_side.py::test_delete_topic_refusals_and_retry_topics": [
        (
            "side by side",
            "deleting a topic: blank and system topics refused, the groups' POP retry topics deleted with it",
            RAW,
            ROCKETMQ_55_VERSION,
        )
    ],
    "tests/interop/test_delete_topic_side_by_side.py::test_delete_group_with_and_without_its_offsets": [
        (
            "side by side",
            "deleting a group with and without its offsets (cleanOffset)",
            RAW,
            ROCKETMQ_55_VERSION,
        )
    ],
    "tests/interop/test_lite_rocketmq55.py::test_lite_admin_views_side_by_side": [
        (
            "side by side",
            "lite topics: GET_PARENT_TOPIC_INFO and GET_LITE_TOPIC_INFO",
            RAW,
            ROCKETMQ_55_VERSION,
        )
    ],
    "tests/interop/test_lite_consumers_rocketmq55.py::test_lite_push_consumer": [
        (
            "side by side",
            "lite consumers: subscribeLite/unsubscribeLite, each lite topic in order, settings and refusals, "
            "in local and cluster mode and behind 5.5.0's proxy",
            JAVA5_CLIENT,
            ROCKETMQ_55_VERSION,
        )
    ],
    "tests/interop/test_lite_consumers_rocketmq55.py::test_python_client_lite_consumers": [
        (
            "side by side",
            "lite consumers: LitePushConsumer deliveries and unsubscribe; LiteSimpleConsumer (ferromq only)",
            PY5_CLIENT,
            ROCKETMQ_55_VERSION,
        )
    ],
    "tests/interop/test_mqadmin55_lite.py::test_lite_views": [
        (
            "side by side",
            "lite admin: getParentTopicInfo, getLiteTopicInfo (subscribers), getLiteClientInfo, "
            "getLiteGroupInfo (lag), triggerLiteDispatch, getBrokerLiteInfo",
            MQADMIN_55,
            ROCKETMQ_55_VERSION,
        )
    ],
    "tests/interop/test_mqadmin55_lite.py::test_lite_refusals": [
        (
            "side by side",
            "lite admin refusals: an unknown parent topic or group",
            MQADMIN_55,
            ROCKETMQ_55_VERSION,
        )
    ],
    "tests/interop/test_mqadmin55_lite.py::test_switch_timer_engine": [
        (
            "side by side",
            "switchTimerEngine: F (the file time wheel) accepted, R refused, a bad type refused by mqadmin",
            MQADMIN_55,
            ROCKETMQ_55_VERSION,
        )
    ],
    "tests/interop/test_mqadmin55_lite.py::test_delete_topic_and_group_with_semicolons": [
        (
            "side by side",
            'deleteTopic -t "a;b;c" and deleteSubGroup -g "a;b": the name sent whole, nothing deleted',
            MQADMIN_55,
            ROCKETMQ_55_VERSION,
        )
    ],
    "tests/interop/test_apache_rocketmq_launcher.py::test_launcher_roundtrip_and_clean_stop": [
        (
            PYINTEROP,
            "ferromq Python client against the Java broker (send, pull, commit)",
            APACHE,
            ROCKETMQ_VERSION,
        )
    ],
    "tests/interop/test_rocketmq55_reference.py::test_ferromq_reads_the_55_store": [
        (
            STORE,
            "ferromq reads a store written by Apache RocketMQ 5.5.0 (its default engines; "
            "its store/rocksdbstore is left alone)",
            APACHE_55,
            ROCKETMQ_55_VERSION,
        )
    ],
    "tests/interop/test_rocketmq55_reference.py::test_broker_remoting_roundtrip_and_clean_stop": [
        (
            PYINTEROP,
            "ferromq Python client against the Java broker (send, pull, commit)",
            APACHE_55,
            ROCKETMQ_55_VERSION,
        )
    ],
    "tests/interop/test_apache_rocketmq_launcher.py::test_java_send_reply_names_the_requested_queue": [
        (
            "side by side",
            "a send's reply names the requested queue (delayed and transaction half messages)",
            RAW,
            ROCKETMQ_VERSION,
        )
    ],
}

_recorded: dict[str, list[dict[str, Any]]] = {}
COMPAT_PROPERTY = "ferromq_compat"
_failed: set[str] = set()
_passed: dict[str, None] = {}  # in the order the tests ran
_ran: set[str] = set()


def base_node_id(nodeid: str) -> str:
    return nodeid.split("[", 1)[0]


def record_compat(
    nodeid: str,
    *,
    area: str,
    item: str,
    client: str,
    rocketmq_version: str | None = None,
    outcome: str = "same",
    note: str = "",
) -> None:
    """One verified item of test `nodeid`; it counts only if that test passes. `outcome` matters for side
    by side items: "same", or "differs (deliberate)" with a `note` saying how and why."""
    _recorded.setdefault(nodeid, []).append(
        {
            "area": area,
            "item": item,
            "client": client,
            "rocketmq_version": rocketmq_version,
            "outcome": outcome,
            "note": note,
        }
    )


@pytest.fixture
def compat(request: pytest.FixtureRequest) -> Callable[..., None]:
    """`compat(area=..., item=..., client=..., rocketmq_version=...)`: record a verified item."""

    def record(**kwargs: Any) -> None:
        # Through the report's user properties, so that the items reach the process that writes
        # the results also when the test ran on a pytest-xdist worker.
        request.node.user_properties.append((COMPAT_PROPERTY, kwargs))

    return record


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        for name, value in report.user_properties:
            if name == COMPAT_PROPERTY:
                record_compat(report.nodeid, **value)
    _ran.add(report.nodeid)
    if report.failed or (report.when == "call" and report.skipped):
        _failed.add(report.nodeid)
    elif report.when == "call" and report.passed:
        _passed[report.nodeid] = None


def entries_of_session() -> list[dict[str, Any]]:
    out = []
    for nodeid in _passed:
        if nodeid in _failed:
            continue
        items = list(_recorded.get(nodeid, []))
        for area, item, client, version in TEST_MAP.get(base_node_id(nodeid), []):
            items.append(
                {"area": area, "item": item, "client": client, "rocketmq_version": version, "note": ""}
            )
        for e in items:
            out.append({**e, "test": nodeid})
    return out


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Under pytest-xdist only the controller, which sees every worker's reports, writes.
    if not _ran or hasattr(session.config, "workerinput"):
        return
    previous: list[dict[str, Any]] = []
    try:
        previous = json.loads(RESULTS.read_text())["results"]
    except (OSError, ValueError, KeyError):
        previous = []
    # Entries of tests that ran now (passed or not) are replaced; the rest are kept.
    kept = [e for e in previous if e.get("test") not in _ran]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    fresh = [{**e, "verified_at": now} for e in entries_of_session()]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(
        json.dumps(
            {
                "format": 1,
                "versions": {
                    "cpp_client": _cpp_client_version(),
                    "java_client": _java_client_version(),
                    "rocketmq_broker": ROCKETMQ_VERSION,
                },
                "results": kept + fresh,
            },
            indent=1,
            ensure_ascii=False,
        )
        + "\n"
    )
    os.replace(tmp, RESULTS)
