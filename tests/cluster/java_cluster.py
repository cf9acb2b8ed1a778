"""The cluster of `harness.py` made of Apache RocketMQ 5.3.3 (name servers, DLedger controllers,
brokers in controller mode), for `benches/partition_bench.py --java`: the same hosts, load,
consumer, faults and checker, the same failure-detection settings. Differences Java imposes: its
name server has no ACL and its controllers no authentication (5.3.3 has neither), so the servers
start without them and the forger is left out (it would hold off Java's elections, as issue 41
found)."""

from __future__ import annotations

from pathlib import Path

import apache_rocketmq as apache  # tools/ (on the bench's and pytest's path)

from ferromq.testing.hosts import Hosts
from ferromq.testing.process import write_conf
from tests.cluster.harness import (
    BROKERS,
    CONTROLLER_HOSTS,
    DISK_MB,
    HEARTBEAT_TIMEOUT_MS,
    NAMESRV_HOSTS,
    Cluster,
)
from tests.interop.failover_kit import BROKER_CONF

VERSION = apache.ROCKETMQ_5_VERSION
CONTROLLER_MAIN = "org.apache.rocketmq.controller.ControllerStartup"


class JavaCluster(Cluster):
    def __init__(self, hosts: Hosts) -> None:
        super().__init__(hosts)
        # Java's DLedger controller serves brokers on its DLedger port (no port of its own).
        self.controllers = [f"{hosts.addr(i)}:9877" for i in CONTROLLER_HOSTS]

    def _java(self, root: Path, log_name: str, heap: str, main: str, conf: Path) -> list[str]:
        apache._write_logback(root, (log_name,), VERSION)
        return [
            "java",
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            *apache.JAVA17_FLAGS,
            f"-Duser.home={root}",
            f"-Drocketmq.home.dir={root}",
            f"-Drmq.logback.configurationFile={root / 'conf' / f'logback_{log_name}.xml'}",
            "-Drocketmq.broker.diskSpaceWarningLevelRatio=0.98",
            "-Drocketmq.broker.diskSpaceCleanForciblyRatio=0.97",
            "-cp",
            apache.classpath(VERSION),
            main,
            "-c",
            str(conf),
        ]

    def start(self) -> None:
        h, w = self.hosts, self.work
        for i in NAMESRV_HOSTS:
            root = w / f"java-namesrv-{i}"
            conf = write_conf(
                root / "namesrv.conf",
                {
                    "listenPort": 9876,
                    "kvConfigPath": str(root / "kvConfig.json"),
                    "configStorePath": str(root / "namesrv.properties"),
                },
            )
            h.spawn(i, f"namesrv-{i}", self._java(root, "namesrv", "256m", apache.NAMESRV_MAIN, conf))
        peers = ";".join(f"n{i}-{h.addr(i)}:9877" for i in CONTROLLER_HOSTS)
        for i in CONTROLLER_HOSTS:
            root = w / f"java-controller-n{i}"
            conf = write_conf(
                root / "controller.conf",
                {
                    "controllerDLegerGroup": "partition",
                    "controllerDLegerPeers": peers,
                    "controllerDLegerSelfId": f"n{i}",
                    "controllerStorePath": str(root / "store"),
                    "scanNotActiveBrokerInterval": 200,
                },
            )
            h.spawn(i, f"controller-n{i}", self._java(root, "controller", "256m", CONTROLLER_MAIN, conf))
        for name in BROKERS:
            self.hosts.small_disk(self.store_root(name), DISK_MB)
            self.start_broker(name)
        self.wait_in_sync(180)

    def store_root(self, name: str) -> Path:
        return self.work / f"java-{name}" / "store"

    def start_broker(self, name: str) -> None:
        store = self.store_root(name)
        root = store.parent
        conf = write_conf(
            root / "broker.conf",
            {
                **BROKER_CONF,
                "brokerIP1": self.hosts.addr(BROKERS[name]),
                "listenPort": 10911,
                "haListenPort": 10912,
                "storePathRootDir": str(store),
                "storePathCommitLog": str(store / "commitlog"),
                "storePathEpochFile": str(store / "epochFileCheckpoint"),
                "storePathBrokerIdentity": str(store / "brokerIdentity"),
                "namesrvAddr": self.namesrv,
                "controllerAddr": ";".join(self.controllers),
                "controllerHeartBeatTimeoutMills": HEARTBEAT_TIMEOUT_MS,
                "deleteWhen": "04",
                "fileReservedTime": "72",
            },
        )
        argv = self._java(root, "broker", "512m", apache.BROKER_MAIN, conf)
        self.hosts.spawn(BROKERS[name], name, argv)

    def restart_controller(self, host: int) -> None:
        root = self.work / f"java-controller-n{host}"
        argv = self._java(root, "controller", "256m", CONTROLLER_MAIN, root / "controller.conf")
        self.hosts.spawn(host, f"controller-n{host}", argv)
