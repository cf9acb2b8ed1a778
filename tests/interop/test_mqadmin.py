"""The official `mqadmin` (rocketmq-tools 4.9.7, MQAdminStartup) against ferromq and the Java 4.9.7
broker side by side, after the same traffic (mqadmin_clients.py): each subcommand's output must
say the same things about both brokers once addresses, times, ids and rates are normalised.

The brokers, the mqadmin shells (one JVM per broker for all commands) and the clients are started
once for the module; tests run in file order (the later ones change what the earlier ones read)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import have_java

from ferromq.testing.waiting import wait_until
from tests.interop.mqadmin import (
    MqadminShell,
    key_values,
    rows,
    running_clients,
    scrub,
    table,
)
from tests.interop.side_by_side import BROKER_CONF, KINDS, Endpoint, first_difference, running_broker

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="java and mvn are needed for mqadmin and the Java broker"),
]

TOPIC = "MqaT"
GROUP = "MqaG"
OLD_GROUP = "MqaOld"
PRODUCER_GROUP = "MqaPG"
CLUSTER = "DefaultCluster"
BROKER = "broker-a"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
SAMPLE_WAIT = 40.0
# Keys both brokers have, with the same default values.
SHARED_CONFIG_KEYS = (
    "brokerPermission",
    "defaultTopicQueueNums",
    "longPollingEnable",
    "maxMessageSize",
    "mappedFileSizeCommitLog",
    "mappedFileSizeConsumeQueue",
    "maxHashSlotNum",
    "maxIndexNum",
    "messageIndexEnable",
    "fileReservedTime",
    "deleteWhen",
    "flushConsumerOffsetInterval",
    "registerNameServerPeriod",
    "transactionCheckMax",
    "rejectTransactionMessage",
    "traceOn",
    "regionId",
    "clusterTopicEnable",
    "brokerTopicEnable",
    "notifyConsumerIdsChangedEnable",
    "syncFlushTimeout",
    "enablePropertyFilter",
)
# broker.conf keys whose values both brokers must report alike.
BROKER_CONF_KEYS = [
    k for k in BROKER_CONF if k not in ("brokerIP1", "messageDelayLevel")
]  # stats items are sampled every 10 s


@dataclass
class Side:
    kind: str
    ep: Endpoint
    shell: MqadminShell
    sent: list[dict[str, Any]]
    created: str  # updateTopic's output

    def run(self, subcommand: str, *args: str) -> str:
        return self.shell.run(subcommand, *(a.replace("{broker}", self.ep.broker_addr) for a in args))

    def labels(self) -> dict[str, str]:
        """Ids that differ by nature, by the same label on both sides."""
        out = {self.ep.broker_addr: "<broker>", self.ep.namesrv: "<namesrv>"}
        for i, sent in enumerate(self.sent):
            out[sent["msgId"]] = f"<msgId{i}>"
            out[sent["offsetMsgId"]] = f"<offsetMsgId{i}>"
        return out


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Side]]:
    with ExitStack() as stack:
        out = {}
        for kind in KINDS:
            workdir = tmp_path_factory.mktemp(f"mqadmin-{kind}")
            ep = stack.enter_context(running_broker(kind, workdir))
            shell = MqadminShell(workdir / "mqadmin-home", ep.namesrv)
            stack.callback(shell.close)
            created = shell.run("updateTopic", "-t", TOPIC, "-c", CLUSTER, "-r", "4", "-w", "4")
            result = stack.enter_context(running_clients(ep.namesrv))
            out[kind] = Side(kind, ep, shell, result["sent"], created)
        yield out


def both(sides: dict[str, Side], subcommand: str, *args: str) -> dict[str, str]:
    """The subcommand's output on each side (run at the same time)."""
    with ThreadPoolExecutor(len(sides)) as pool:
        futures = {k: pool.submit(s.run, subcommand, *args) for k, s in sides.items()}
        return {k: f.result() for k, f in futures.items()}


def same(sides: dict[str, Side], outputs: dict[str, str], norm: Callable[[str, Side], Any]) -> Any:
    """Asserts the normalised outputs are equal; returns ferromq's."""
    got = {}
    for kind, side in sides.items():
        try:
            got[kind] = norm(outputs[kind], side)
        except (AssertionError, IndexError) as e:
            raise AssertionError(f"[{kind}, broker {side.ep.broker_addr}] {e}") from e
    diff = first_difference(got["ferromq"], got["rocketmq"])
    assert not diff, f"{diff}\n--- ferromq ---\n{outputs['ferromq']}\n--- rocketmq ---\n{outputs['rocketmq']}"
    return got["ferromq"]


def no_exception(text: str) -> None:
    assert "Exception" not in text and "not supported" not in text, text


# -- the tests, in file order --------------------------------------------------------------------------


def test_update_topic(sides: dict[str, Side]) -> None:
    out = same(sides, {k: s.created for k, s in sides.items()}, lambda t, s: scrub(t, s.labels()))
    assert "create topic to <broker> success." in out


def test_cluster_list(sides: dict[str, Side]) -> None:
    outs = both(sides, "clusterList")

    def norm(text: str, side: Side) -> list[list[str]]:
        no_exception(text)
        # Cluster, broker name, broker id, address, version; the rates and disk use differ.
        return [r[:5] for r in table(scrub(text, side.labels()), "#Cluster Name")]

    assert same(sides, outs, norm) == [[CLUSTER, BROKER, "0", "<broker>", "V4_9_7"]]


def test_broker_status(sides: dict[str, Side]) -> None:
    outs = both(sides, "brokerStatus", "-b", "{broker}")

    def norm(text: str, side: Side) -> dict[str, Any]:
        no_exception(text)
        kv = {
            re.sub(r"^commitLogDiskRatio_.*", "commitLogDiskRatio_<path>", k): v
            for k, v in key_values(text, ":").items()
        }
        counted = ("msgPutTotalTodayNow", "msgGetTotalTodayNow", "brokerVersion", "brokerVersionDesc")
        # pullHeldCount is ferromq's own (the pulls long polling holds).
        return {"keys": sorted(set(kv) - {"pullHeldCount"}), **{k: kv.get(k) for k in counted}}

    out = same(sides, outs, norm)
    assert out["msgPutTotalTodayNow"] == "10" and out["msgGetTotalTodayNow"] == "20"
    assert {
        "putTps",
        "getTransferedTps",
        "commitLogDiskRatio",
        "dispatchBehindBytes",
        "pageCacheLockTimeMills",
    } <= set(out["keys"])


def test_topic_list(sides: dict[str, Side]) -> None:
    outs = both(sides, "topicList")

    def norm(text: str, side: Side) -> list[str]:
        no_exception(text)
        # Java's transaction check creates the half topic on its first round; ferromq with the first
        # half message.
        return sorted(t.strip() for t in text.splitlines() if t.strip() and t.strip() != HALF_TOPIC)

    out = same(sides, outs, norm)
    assert TOPIC in out and f"%RETRY%{GROUP}" in out


def test_topic_status(sides: dict[str, Side]) -> None:
    outs = both(sides, "topicStatus", "-t", TOPIC)
    out = same(sides, outs, lambda t, s: sorted(r[:4] for r in table(t, "#Broker Name")))
    assert out == [[BROKER, str(q), "0", "3" if q < 2 else "2"] for q in range(4)]


def test_topic_route(sides: dict[str, Side]) -> None:
    outs = both(sides, "topicRoute", "-t", TOPIC)
    out = same(sides, outs, lambda t, s: scrub(t, s.labels()))
    assert '"brokerName":"broker-a"' in out.replace(" ", "").replace("\n", "")


def test_consumer_progress(sides: dict[str, Side]) -> None:
    outs = both(sides, "consumerProgress", "-g", GROUP)

    def norm(text: str, side: Side) -> dict[str, Any]:
        no_exception(text)
        body = [r[:6] for r in table(text, "#Topic")]
        total = re.search(r"Diff Total: (\d+)", text)
        return {"rows": sorted(body), "diff": total and total.group(1), "tps": "Consume TPS:" in text}

    out = same(sides, outs, norm)
    assert out["rows"] == [[TOPIC, BROKER, str(q), n, n, "0"] for q, n in enumerate(["3", "3", "2", "2"])]
    assert out["diff"] == "0"


def test_consumer_connection(sides: dict[str, Side]) -> None:
    outs = both(sides, "consumerConnection", "-g", GROUP)

    def norm(text: str, side: Side) -> dict[str, Any]:
        no_exception(text)
        conns = [r[2:] for r in table(text, "#ClientId")]  # clientId and address differ
        subs = table(text, "#Topic")
        rest = sorted(line for line in text.splitlines() if line.startswith(("Consume", "MessageModel")))
        return {"connections": conns, "subscriptions": subs, "rest": rest}

    out = same(sides, outs, norm)
    assert out["connections"] == [["PYTHON", "V4_9_7"]]
    assert out["subscriptions"] == [[TOPIC, "*"]]


def test_producer_connection(sides: dict[str, Side]) -> None:
    outs = both(sides, "producerConnection", "-g", PRODUCER_GROUP, "-t", TOPIC)
    out = same(sides, outs, lambda t, s: [r[3:] for r in rows(t)])
    assert out == [["PYTHON", "V4_9_7"]]


def test_query_msg_by_id(sides: dict[str, Side]) -> None:
    outs = {k: s.run("queryMsgById", "-i", s.sent[3]["offsetMsgId"]) for k, s in sides.items()}
    out = same(sides, outs, lambda t, s: scrub(t, s.labels()))
    for line in (
        "OffsetID:            <offsetMsgId3>",
        "Keys:                [k3]",
        "Queue ID:            3",
    ):
        assert line in out
    # Who consumed it: the group online has pulled it, the other is gone.
    assert "consumerGroup=MqaG, trackType=PULL" in out and "consumerGroup=MqaOld, trackType=NOT_ONLINE" in out


def test_query_msg_by_unique_key(sides: dict[str, Side]) -> None:
    outs = {k: s.run("queryMsgByUniqueKey", "-t", TOPIC, "-i", s.sent[5]["msgId"]) for k, s in sides.items()}
    out = same(sides, outs, lambda t, s: scrub(t, s.labels()))
    assert "Keys:                [k5]" in out and "UNIQ_KEY=<msgId5>" in out


def test_query_msg_by_key(sides: dict[str, Side]) -> None:
    outs = both(sides, "queryMsgByKey", "-t", TOPIC, "-k", "k3")
    out = same(sides, outs, lambda t, s: table(scrub(t, s.labels()), "#Message ID"))
    assert out == [["<msgId3>", "3", "0"]]


def test_query_msg_by_offset(sides: dict[str, Side]) -> None:
    outs = both(sides, "queryMsgByOffset", "-t", TOPIC, "-b", BROKER, "-i", "1", "-o", "1")
    out = same(sides, outs, lambda t, s: scrub(t, s.labels()))
    assert "Keys:                [k5]" in out and "Queue Offset:        1" in out


def test_producer(sides: dict[str, Side]) -> None:
    outs = both(sides, "producer", "-b", "{broker}")

    def norm(text: str, side: Side) -> str:
        text = re.sub(r"clientId=[^,]+", "clientId=<id>", scrub(text, side.labels()))
        return re.sub(r"lastUpdateTimestamp=\d+", "lastUpdateTimestamp=<ms>", text)

    out = same(sides, outs, norm)
    assert (
        f"producer group ({PRODUCER_GROUP}) instance : clientId=<id>,remoteIP=/<addr>, language=PYTHON" in out
    )


def test_consumer_status(sides: dict[str, Side]) -> None:
    """GET_CONSUMER_RUNNING_INFO goes through the broker to the consumer and back: mqadmin lists
    the client with its version. (It then fails on both brokers analysing the Python client's
    short answer, which has no consume type: a client matter.)"""
    outs = both(sides, "consumerStatus", "-g", GROUP)
    out = same(sides, outs, lambda t, s: [r[2] for r in table(t, "#Index") if r[0].isdigit()])
    assert out == ["V4_9_7"]


def test_broker_consume_stats(sides: dict[str, Side]) -> None:
    outs = both(sides, "brokerConsumeStats", "-b", "{broker}")
    out = same(sides, outs, lambda t, s: sorted(r[:7] for r in table(t, "#Topic")) + rows(t)[-1:])
    for group in (GROUP, OLD_GROUP):
        assert [[TOPIC, group, BROKER, str(q), n, n, "0"] for q, n in enumerate("3322")] == [
            r for r in out if r[:2] == [TOPIC, group]
        ]
    assert out[-1] == ["Diff", "Total:", "0"]


def test_clone_group_offset(sides: dict[str, Side]) -> None:
    # brokerConsumeStats lists subscription groups only: make MqaClone one.
    both(sides, "updateSubGroup", "-g", "MqaClone", "-c", CLUSTER)
    outs = both(sides, "cloneGroupOffset", "-s", GROUP, "-d", "MqaClone", "-t", TOPIC)
    out = same(sides, outs, lambda t, s: t)
    assert "clone group offset success. srcGroup[MqaG], destGroup=[MqaClone], topic[MqaT]" in out
    outs = both(sides, "brokerConsumeStats", "-b", "{broker}")
    cloned = same(sides, outs, lambda t, s: sorted(r[3:6] for r in table(t, "#Topic") if r[1] == "MqaClone"))
    assert cloned == [[str(q), n, n] for q, n in enumerate("3322")]


def test_topic_cluster_list_and_topic_list_by_cluster(sides: dict[str, Side]) -> None:
    outs = both(sides, "topicClusterList", "-t", TOPIC)
    assert same(sides, outs, lambda t, s: rows(t)) == [[CLUSTER]]
    outs = both(sides, "topicList", "-c")
    out = same(sides, outs, lambda t, s: sorted(r for r in table(t, "#Cluster Name") if r[1] != HALF_TOPIC))
    assert [CLUSTER, TOPIC, GROUP] in out and [CLUSTER, TOPIC, OLD_GROUP] in out


def test_wipe_and_add_write_perm(sides: dict[str, Side]) -> None:
    for subcommand, verb in (("wipeWritePerm", "wipe"), ("addWritePerm", "add")):
        outs = both(sides, subcommand, "-b", BROKER)
        # The count of topics differs by Java's half topic.
        out = same(sides, outs, lambda t, s: re.sub(r"OK, \d+", "OK, <n>", scrub(t, s.labels())))
        assert f"{verb} write perm of broker[{BROKER}] in name server[<namesrv>] OK, <n>" in out


def test_query_cq(sides: dict[str, Side]) -> None:
    outs = both(sides, "queryCq", "-t", TOPIC, "-q", "0", "-i", "0", "-c", "2")
    out = same(sides, outs, lambda t, s: t)
    # Queue 0 holds messages 0, 4 and 8 (183 bytes each, the 4th one at 4 * 183).
    assert "max: 3, min: 0" in out
    assert "ConsumeQueueData{physicOffset=732, physicSize=183, tagsCode=2598919," in out


def test_get_consumer_config(sides: dict[str, Side]) -> None:
    outs = both(sides, "getConsumerConfig", "-g", GROUP)
    out = same(sides, outs, lambda t, s: key_values(t, "="))
    assert out["groupName"] == GROUP and out["retryMaxTimes"] == "16"


def test_export_metadata_and_metrics(sides: dict[str, Side], tmp_path: Path) -> None:
    for subcommand, name in (("exportMetadata", "metadata.json"), ("exportMetrics", "metrics.json")):
        outs = {k: s.run(subcommand, "-c", CLUSTER, "-f", str(tmp_path / k)) for k, s in sides.items()}
        for kind, text in outs.items():
            assert f"export {tmp_path / kind}/{name} success" in text, text
    metadata = {k: json.loads((tmp_path / k / "metadata.json").read_text()) for k in sides}
    for kind, data in metadata.items():
        assert TOPIC in data["topicConfigTable"] and GROUP in data["subscriptionGroupTable"], kind


def test_get_namesrv_config(sides: dict[str, Side]) -> None:
    outs = both(sides, "getNamesrvConfig")
    # ferromq's name server has fewer settings; the ones it lists Java lists too, alike.
    configs = {k: key_values(v, "=") for k, v in outs.items()}
    ours, java = configs["ferromq"], configs["rocketmq"]
    assert ours["listenPort"] == sides["ferromq"].ep.namesrv.rsplit(":", 1)[1]
    assert java["listenPort"] == sides["rocketmq"].ep.namesrv.rsplit(":", 1)[1]
    assert ours["serverChannelMaxIdleTimeSeconds"] == java["serverChannelMaxIdleTimeSeconds"] == "120"


def test_clean_unused_topic(sides: dict[str, Side]) -> None:
    outs = both(sides, "cleanUnusedTopic", "-c", CLUSTER)
    assert same(sides, outs, lambda t, s: t.strip()) == "success"


def test_skip_accumulated_message(sides: dict[str, Side]) -> None:
    outs = both(sides, "skipAccumulatedMessage", "-g", OLD_GROUP, "-t", TOPIC)
    out = same(sides, outs, lambda t, s: sorted(table(t, "#brokerName")))
    # The offline group (at the queues' ends already) is set to the ends.
    assert out == sorted([BROKER, str(q), n, n, n, n] for q, n in enumerate("3322"))


def test_stats_all(sides: dict[str, Side]) -> None:
    # The minute stats show a sum once sampled (every 10 s on both brokers).
    def sampled(side: Side) -> bool:
        text = side.run("statsAll", "-t", TOPIC)
        found = [r for r in rows(text) if r[:2] == [TOPIC, GROUP]]
        return bool(found) and found[0][-2:] == ["10", "10"]

    for side in sides.values():
        wait_until(
            lambda side=side: sampled(side),
            f"the stats of {TOPIC} on {side.kind}",
            timeout=SAMPLE_WAIT,
            interval=0.5,
        )
    outs = both(sides, "statsAll")

    def norm(text: str, side: Side) -> list[list[str]]:
        no_exception(text)
        # Topic, group, accumulation and the 24 h counts (the TPS columns are rates over a window).
        out = []
        for r in table(text, "#Topic"):
            if r[-1] == "NO_CONSUMER":
                out.append([r[0], "", r[1], r[-2], r[-1]])
            else:
                out.append([r[0], r[1], r[2], r[-2], r[-1]])
        return sorted(r for r in out if r[0] != HALF_TOPIC)

    out = same(sides, outs, norm)
    assert [TOPIC, GROUP, "0", "10", "10"] in out and [TOPIC, OLD_GROUP, "0", "10", "10"] in out


def test_get_broker_config(sides: dict[str, Side]) -> None:
    outs = both(sides, "getBrokerConfig", "-b", "{broker}")
    configs = {k: key_values(v, "=") for k, v in outs.items()}
    ours, java = configs["ferromq"], configs["rocketmq"]
    # Java lists every field of its four config classes, ferromq the keys it has (some of them its
    # own, where Java has JVM properties or nothing): the keys both have must say the same where
    # the broker.conf or a default decides them.
    assert set(SHARED_CONFIG_KEYS) <= set(ours) & set(java), sorted(set(SHARED_CONFIG_KEYS) - set(ours))
    for key in (*BROKER_CONF_KEYS, *SHARED_CONFIG_KEYS):
        assert ours[key] == java[key], (key, ours[key], java[key])


def test_update_broker_config(sides: dict[str, Side]) -> None:
    outs = both(sides, "updateBrokerConfig", "-b", "{broker}", "-k", "shortPollingTimeMills", "-v", "900")
    out = same(sides, outs, lambda t, s: scrub(t, s.labels()))
    assert "update broker config success, <broker>" in out
    outs = both(sides, "getBrokerConfig", "-b", "{broker}")
    assert all(key_values(v, "=")["shortPollingTimeMills"] == "900" for v in outs.values())


def test_update_and_delete_sub_group(sides: dict[str, Side]) -> None:
    outs = both(sides, "updateSubGroup", "-g", "MqaSub", "-c", CLUSTER, "-r", "5")
    out = same(sides, outs, lambda t, s: scrub(t, s.labels()))
    assert "create subscription group to <broker> success." in out and "retryMaxTimes=5" in out
    outs = both(sides, "deleteSubGroup", "-g", "MqaSub", "-c", CLUSTER)
    out = same(sides, outs, lambda t, s: scrub(t, s.labels()))
    assert (
        "delete subscription group [MqaSub] from broker [<broker>] in cluster [DefaultCluster] success."
        in out
    )


def test_delete_topic(sides: dict[str, Side]) -> None:
    both(sides, "updateTopic", "-t", "MqaDel", "-c", CLUSTER)
    outs = both(sides, "deleteTopic", "-t", "MqaDel", "-c", CLUSTER)
    out = same(sides, outs, lambda t, s: scrub(t, s.labels()))
    assert "delete topic [MqaDel] from cluster [DefaultCluster] success." in out
    assert all("MqaDel" not in t for t in both(sides, "topicList").values())


def test_reset_offset_by_time(sides: dict[str, Side]) -> None:
    """MqaOld is offline: mqadmin falls back to reading the consume stats and committing the
    offsets found by time itself (ResetOffsetByTimeOldCommand)."""
    outs = both(sides, "resetOffsetByTime", "-g", OLD_GROUP, "-t", TOPIC, "-s", "0")
    out = same(sides, outs, lambda t, s: sorted(table(scrub(t, s.labels()), "#brokerName")))
    # broker offset, consumer offset, offset at the time, offset rolled back to
    assert out == sorted([BROKER, str(q), n, n, "0", "0"] for q, n in enumerate(["3", "3", "2", "2"]))
    outs = both(sides, "consumerProgress", "-g", OLD_GROUP)
    progress = same(sides, outs, lambda t, s: sorted(r[:6] for r in table(t, "#Topic")))
    assert progress == [[TOPIC, BROKER, str(q), n, "0", n] for q, n in enumerate(["3", "3", "2", "2"])]
