"""Run the real Apache RocketMQ 4.9.7 (the default), 5.3.3 or 5.5.0 name server and broker as child
processes, for interop and store cross-compatibility tests and benchmarks.

The jars come from Maven Central: `tools/apache-rocketmq/pom.xml` (4.9.7), `tools/apache-rocketmq-5/pom.xml`
(5.3.3) and `tools/apache-rocketmq-55/pom.xml` (5.5.0, the second 5.x reference) depend on rocketmq-namesrv,
rocketmq-broker and rocketmq-tools (mqadmin), the 5.x ones also on rocketmq-proxy, and `classpath(version)`
resolves a version's runtime classpath once with `mvn dependency:build-classpath` into that project's
`target/` (rebuilt only when its pom changes). `start_rocketmq(root)` writes every file the two JVMs use
(configs, logback files, store, logs, user.home) under `root` and returns once the broker is registered
with the name server.

    with start_rocketmq(tmp_path, {"mappedFileSizeCommitLog": str(1 << 20)}) as mq:
        ...  # clients use mq.namesrv
    with start_rocketmq(tmp_path, version=ROCKETMQ_5_VERSION) as mq:
        ...  # a 5.3.3 broker (timer messages, POP) run from the same mains

`start_rocketmq_proxy(root)` starts a 5.3.3 name server and `ProxyStartup -pm local` (the broker runs inside
the proxy): what the RocketMQ 5.x clients talk to over gRPC; `version=ROCKETMQ_55_VERSION` starts 5.5.0's.
5.5.0 starts from the same mains, configs and flags as 5.3.3; its default engines are 5.3.3's files (timer
wheel and log, transaction half/op topics, index files, JSON config; timerRocksDBEnable, transRocksDBEnable,
indexRocksDBEnable false, storeType "default"), but its store always opens an (empty) RocksDB in
storePathRootDir/rocksdbstore for them. `mqadmin(root, namesrv, ...)` runs one 5.3.3
admin command. The official 5.x Python client runs in an environment of its own (`client5_python()`).

    with start_rocketmq_proxy(tmp_path) as proxy:
        proxy.create_topic("T", "FIFO")
        ...  # 5.x clients use proxy.grpc_endpoint, 4.x clients proxy.namesrv
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

# The default version: what every caller that names none runs.
ROCKETMQ_VERSION = "4.9.7"
ROCKETMQ_5_VERSION = "5.3.3"
# The second 5.x reference (issue 43): what 5.4 / 5.5 changed, run beside 5.3.3 by the tests that name it.
ROCKETMQ_55_VERSION = "5.5.0"

# Each version's Maven project (a pom whose dependencies are the distribution).
PROJECTS = {
    ROCKETMQ_VERSION: Path(__file__).resolve().parent / "apache-rocketmq",
    ROCKETMQ_5_VERSION: Path(__file__).resolve().parent / "apache-rocketmq-5",
    ROCKETMQ_55_VERSION: Path(__file__).resolve().parent / "apache-rocketmq-55",
}

PROJECT_DIR = PROJECTS[ROCKETMQ_VERSION]
POM = PROJECT_DIR / "pom.xml"
TARGET = PROJECT_DIR / "target"
CLASSPATH_FILE = TARGET / "classpath.txt"
# The pom's hash when classpath.txt was written; a changed pom means a new resolution.
CLASSPATH_STAMP = TARGET / "classpath.pom.sha256"

NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
PROXY_MAIN = "org.apache.rocketmq.proxy.ProxyStartup"
MQADMIN_MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
# Each main's log file name (root/logs/<name>.log) and logback file (root/conf/logback_<name>.xml).
_LOG_NAMES = {NAMESRV_MAIN: "namesrv", BROKER_MAIN: "broker", PROXY_MAIN: "proxy", MQADMIN_MAIN: "tools"}

# Java 17 closes the JDK internals RocketMQ 4.x reaches by reflection: MappedFile.clean unmaps through
# DirectByteBuffer.attachment()/cleaner() and jdk.internal.ref.Cleaner.clean(); netty and fastjson look
# into java.lang / java.nio / sun.nio.ch.
JAVA17_FLAGS = [
    f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
    for pkg in (
        "java.lang",
        "java.lang.reflect",
        "java.io",
        "java.net",
        "java.nio",
        "java.util",
        "java.util.concurrent",
        "sun.nio.ch",
        "jdk.internal.ref",
        "jdk.internal.misc",
    )
] + ["--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED", "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED"]

START_ATTEMPTS = 3
# Start failures worth another attempt: a port picked free was taken meanwhile; and Java's
# NetworkUtil (BrokerConfig's constructor lists the interfaces) failing on one that vanished
# while it looked, as the veth pairs of tests/cluster do ("getFlags() failed").
RETRYABLE_START_FAILURES = ("Address already in use", "Failed to obtain local address")
STOP_TIMEOUT = 60.0
GET_ROUTEINFO_BY_TOPIC = 105
GET_BROKER_CLUSTER_INFO = 106
# 5.x's periodic loggers besides the 4.x ones (RocketmqStats, ...): kept out of broker.log.
_STATS_LOGGERS_5 = (
    "RocketmqTraffic",
    "RocketmqWaterMark",
    "RocketmqProxyWatermark",
    "io.opentelemetry.exporter.logging.otlp.OtlpJsonLoggingMetricExporter",
    "io.opentelemetry.exporter.logging.LoggingMetricExporter",
)

# Our own logback configuration (not the distribution's): everything at INFO into one file per process,
# with the store's and the broker's lines included, so failures can be read from log_tail(). 4.9.7's
# BrokerStartup / NamesrvStartup load ROCKETMQ_HOME/conf/logback_{broker,namesrv}.xml themselves; 5.x logs
# through a shaded logback (org.apache.rocketmq.logging.ch.qos.logback, which reads the same XML with the
# unshaded class names) that is pointed at the same file by -Drmq.logback.configurationFile. 5.x loggers
# are the 4.x ones plus a few (RocketmqTraffic, RocketmqPop, ...); only the periodic statistics are kept
# out of the main log.
_LOGBACK = """<?xml version="1.0" encoding="UTF-8"?>
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <append>true</append>
    <encoder><pattern>%d{{yyyy-MM-dd HH:mm:ss.SSS}} %-5level [%thread] %logger - %msg%n</pattern></encoder>
  </appender>
  <appender name="STATS" class="ch.qos.logback.core.FileAppender">
    <file>{stats}</file>
    <append>true</append>
    <encoder><pattern>%d{{yyyy-MM-dd HH:mm:ss.SSS}} %msg%n</pattern></encoder>
  </appender>
  <logger name="RocketmqStats" additivity="false" level="INFO"><appender-ref ref="STATS"/></logger>
  <logger name="RocketmqCommercial" additivity="false" level="INFO"><appender-ref ref="STATS"/></logger>
  <logger name="RocketmqLockStats" additivity="false" level="INFO"><appender-ref ref="STATS"/></logger>
{extra_loggers}  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


def have_java() -> bool:
    """`java` and `mvn` are on PATH (the launcher needs both)."""
    return shutil.which("java") is not None and shutil.which("mvn") is not None


@contextlib.contextmanager
def maven_lock() -> Iterator[None]:
    """One Maven run at a time on this machine: parallel test workers share ~/.m2 and the build
    directories (two `mvn package` of one project at once leave a broken jar)."""
    with open(Path(tempfile.gettempdir()) / "ferromq-tests-maven.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _sources_digest(project: Path) -> str:
    h = hashlib.sha256()
    for path in sorted([project / "pom.xml", *(project / "src").rglob("*")]):
        if path.is_file():
            h.update(str(path.relative_to(project)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def maven_package(project: Path, artifact: Path, timeout: float = 600) -> Path:
    """`artifact`, built with `mvn package` in `project` unless it was built from the same pom.xml
    and sources already (a digest beside it says so); one Maven run at a time (`maven_lock`)."""
    stamp = artifact.with_name(artifact.name + ".sources.sha256")
    with maven_lock():
        digest = _sources_digest(project)
        if artifact.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
            return artifact
        r = subprocess.run(
            ["mvn", "-q", "-B", "-Dstyle.color=never", "package"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if r.returncode != 0 or not artifact.is_file():
            output = f"{r.stdout[-5000:]}\n{r.stderr[-5000:]}"
            raise RuntimeError(f"mvn package in {project} failed ({r.returncode}):\n{output}")
        stamp.write_text(digest + "\n")
    return artifact


def _project(version: str) -> Path:
    try:
        return PROJECTS[version]
    except KeyError:
        raise ValueError(f"no Apache RocketMQ {version!r} here; known: {', '.join(PROJECTS)}") from None


def classpath(version: str = ROCKETMQ_VERSION) -> str:
    """The broker's and name server's runtime classpath of `version`; resolved with Maven on first use and
    whenever the version's pom.xml changed since, then read from its target/classpath.txt (for 4.9.7
    tools/apache-rocketmq/target/classpath.txt, for 5.3.3 tools/apache-rocketmq-5/target/classpath.txt)."""
    target = _project(version) / "target"
    classpath_file = target / CLASSPATH_FILE.name
    stamp = target / CLASSPATH_STAMP.name
    digest = hashlib.sha256((_project(version) / "pom.xml").read_bytes()).hexdigest()
    with maven_lock():
        if not (classpath_file.is_file() and stamp.is_file() and stamp.read_text().strip() == digest):
            _resolve_classpath(version, digest)
    return classpath_file.read_text().strip()


def _resolve_classpath(version: str, digest: str) -> None:
    target = _project(version) / "target"
    target.mkdir(parents=True, exist_ok=True)
    tmp = target / f"classpath.{os.getpid()}.tmp"
    cmd = [
        "mvn",
        "-q",
        "-B",
        "-f",
        str(_project(version) / "pom.xml"),
        "dependency:build-classpath",
        f"-Dmdep.outputFile={tmp}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    if proc.returncode != 0 or not tmp.is_file():
        raise RuntimeError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}"
        )
    # Rename last, so concurrent callers see either no file or a whole one.
    os.replace(tmp, target / CLASSPATH_FILE.name)
    (target / CLASSPATH_STAMP.name).write_text(digest + "\n")


def _port_free(port: int) -> bool:
    if not 1024 < port < 65536:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _broker_port() -> int:
    """A listen port L with L-2 (the VIP channel) and L+1 (HA) free as well."""
    for _ in range(200):
        port = _free_port()
        if _port_free(port - 2) and _port_free(port + 1):
            return port
    raise RuntimeError("no free port triple (L-2, L, L+1) on 127.0.0.1")


def _write_properties(path: Path, props: dict[str, str]) -> None:
    # java.util.Properties reads ISO-8859-1 with backslash escapes; our values are paths and plain words.
    lines = [f"{k}={str(v).replace(chr(92), chr(92) * 2)}" for k, v in props.items()]
    path.write_text("\n".join(lines) + "\n", encoding="latin-1")


def _request(addr: str, code: int, timeout: float = 3.0, ext_fields: dict[str, str] | None = None) -> bytes:
    """One JSON-serialized remoting request; returns the response body. Plain sockets so it works with or
    without a running event loop."""
    host, port = addr.rsplit(":", 1)
    header = json.dumps(
        {
            "code": code,
            "flag": 0,
            "language": "PYTHON",
            "opaque": 1,
            "version": 453,
            "extFields": ext_fields or {},
        }
    ).encode()
    frame = struct.pack(">ii", 4 + len(header), len(header)) + header
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(frame)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError(f"{addr} closed the connection")
            buf += chunk
    length, type_and_len = struct.unpack_from(">ii", buf)
    header_len = type_and_len & 0xFFFFFF
    return buf[8 + header_len : 4 + length]


def broker_registered(namesrv: str, broker_addr: str) -> bool:
    """The name server's cluster info lists `broker_addr` (GET_BROKER_CLUSTER_INFO)."""
    try:
        body = _request(namesrv, GET_BROKER_CLUSTER_INFO)
    except OSError:
        return False
    return f'"{broker_addr}"'.encode() in body


def topic_routed(namesrv: str, topic: str) -> bool:
    """The name server has a route for `topic` (GET_ROUTEINFO_BY_TOPIC answers with broker data)."""
    try:
        body = _request(namesrv, GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic})
    except OSError:
        return False
    return b'"brokerDatas"' in body and b'"queueDatas"' in body


def _port_accepts(addr: str, timeout: float = 1.0) -> bool:
    host, port = addr.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def _tail(path: Path, n: int) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    return "\n".join(lines[-n:])


def _java_command(
    root: Path, heap: str, main: str, args: list[str], version: str = ROCKETMQ_VERSION
) -> list[str]:
    """`java ... -cp <classpath> main args`; 5.x logs through root/conf/logback_<main's log name>.xml."""
    logback = []
    if version.startswith("5."):
        logback = [f"-Drmq.logback.configurationFile={root / 'conf' / f'logback_{_LOG_NAMES[main]}.xml'}"]
    return [
        "java",
        "-server",
        f"-Xms{heap}",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-XX:MaxDirectMemorySize=1g",
        *JAVA17_FLAGS,
        # Everything RocketMQ derives from user.home (client logs, namesrv kv config, default store)
        # lands under root.
        f"-Duser.home={root}",
        f"-Drocketmq.home.dir={root}",
        f"-Dclient.logRoot={root / 'logs'}",
        "-Drocketmq.client.logUseSlf4j=true",
        "-Dfile.encoding=UTF-8",
        # The broker refuses every put once the disk is 90 % used ("disk is full"); test machines
        # share disks, so only a really full one should stop it.
        "-Drocketmq.broker.diskSpaceWarningLevelRatio=0.98",
        "-Drocketmq.broker.diskSpaceCleanForciblyRatio=0.97",
        *logback,
        "-cp",
        classpath(version),
        main,
        *args,
    ]


def _terminate(proc: subprocess.Popen[bytes], sig: int, timeout: float) -> int | None:
    """Signal by PID and wait; SIGKILL if it outlives `timeout`. The exit code, None if it was forced."""
    if proc.poll() is not None:
        return proc.returncode
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        return None


@dataclass
class ApacheRocketMQ:
    """One Java name server and one Java broker, both child processes of this one."""

    root: Path
    namesrv: str
    broker_addr: str
    broker_pid: int
    broker_conf: dict[str, str] = field(default_factory=dict)
    namesrv_proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    broker_proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    # Exit codes after stop(): None while running or when the process had to be killed.
    broker_exit: int | None = None
    namesrv_exit: int | None = None
    version: str = ROCKETMQ_VERSION
    # The log names (root/logs/<name>.log and .out) of the two processes: the broker's first.
    _LOGS: ClassVar[tuple[str, str]] = ("broker", "namesrv")

    @property
    def store(self) -> Path:
        return Path(self.broker_conf.get("storePathRootDir", str(self.root / "store")))

    @property
    def broker_log(self) -> Path:
        return self.root / "logs" / f"{self._LOGS[0]}.log"

    @property
    def namesrv_log(self) -> Path:
        return self.root / "logs" / "namesrv.log"

    @property
    def namesrv_pid(self) -> int:
        return self.namesrv_proc.pid if self.namesrv_proc is not None else -1

    def stop(self, kill: bool = False) -> None:
        """SIGTERM the broker and wait for its shutdown hook (checkpoint, consumer/delay offsets, no abort
        file left), then the name server; or SIGKILL both (kill -9: a crash, and the quick end of a
        reference server whose store nobody reads: a 5.3.3 broker's shutdown hook takes ~15 s)."""
        for proc, attr in ((self.broker_proc, "broker_exit"), (self.namesrv_proc, "namesrv_exit")):
            if proc is None or proc.poll() is not None:
                continue
            if kill:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
                setattr(self, attr, None)
            else:
                setattr(self, attr, _terminate(proc, signal.SIGTERM, STOP_TIMEOUT))

    def running(self) -> bool:
        return self.broker_proc is not None and self.broker_proc.poll() is None

    def _log_files(self) -> list[str]:
        return [f"{name}{ext}" for name in self._LOGS for ext in (".log", ".out")]

    def log_tail(self, n: int = 80) -> str:
        parts = []
        for name in self._log_files():
            path = self.root / "logs" / name
            if path.exists():
                parts.append(f"--- {path} (last {n} lines) ---\n{_tail(path, n)}")
        return "\n".join(parts)

    def log_errors(self) -> list[str]:
        """ERROR lines and exception stack heads in the broker's and name server's logs."""
        found = []
        for name in self._log_files():
            path = self.root / "logs" / name
            if path.exists():
                for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                    if " ERROR " in line or "Exception" in line:
                        found.append(f"{name}: {line}")
        return found

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@dataclass
class ApacheRocketMQProxy(ApacheRocketMQ):
    """A Java name server and a Java `ProxyStartup -pm local`: the proxy with its broker inside one JVM,
    both child processes of this one. `broker_proc` / `broker_pid` are that JVM (also `proxy_pid`);
    `stop()` ends it (its shutdown hook stops the broker too) and then the name server, by PID."""

    # host:port of the proxy's gRPC server (what the 5.x clients are given) and of its remoting server
    # (4.x clients through the proxy); the broker's own remoting port is broker_addr.
    grpc_endpoint: str = ""
    remoting_endpoint: str = ""
    proxy_conf: dict[str, object] = field(default_factory=dict)
    _LOGS: ClassVar[tuple[str, str]] = ("proxy", "namesrv")

    @property
    def proxy_pid(self) -> int:
        return self.broker_pid

    @property
    def proxy_log(self) -> Path:
        return self.broker_log

    @property
    def cluster(self) -> str:
        return self.broker_conf["brokerClusterName"]

    def mqadmin(self, subcommand: str, *args: str, timeout: float = 120.0) -> str:
        """`mqadmin <subcommand> -n <namesrv> <args>` with the proxy's version's tools (see `mqadmin()`)."""
        return mqadmin(self.root, self.namesrv, subcommand, *args, version=self.version, timeout=timeout)

    def create_topic(
        self, topic: str, message_type: str = "NORMAL", *, queues: int = 8, timeout: float = 120.0
    ) -> None:
        """Create `topic` on the cluster with 5.x's mqadmin (`updateTopic -c CLUSTER -t T -a
        +message.type=...`: NORMAL, FIFO, DELAY or TRANSACTION) and return once the name server routes it
        (the proxy asks the name server when a client first names the topic)."""
        deadline = time.monotonic() + timeout
        out = self.mqadmin(
            "updateTopic",
            "-c",
            self.cluster,
            "-t",
            topic,
            "-r",
            str(queues),
            "-w",
            str(queues),
            "-a",
            f"+message.type={message_type}",
            timeout=timeout,
        )
        if "success" not in out:
            raise RuntimeError(f"mqadmin updateTopic {topic} failed:\n{out}")
        while not topic_routed(self.namesrv, topic):
            if time.monotonic() >= deadline:
                raise RuntimeError(f"the name server has no route for {topic} {timeout} s after updateTopic")
            time.sleep(0.1)


def _write_logback(root: Path, names: tuple[str, ...], version: str) -> None:
    """root/conf/logback_<name>.xml for each name, logging into root/logs/<name>.log (and -stats.log)."""
    logs = root / "logs"
    conf_dir = root / "conf"
    logs.mkdir(parents=True, exist_ok=True)
    conf_dir.mkdir(parents=True, exist_ok=True)
    extra_loggers = "".join(
        f'  <logger name="{name}" additivity="false" level="INFO"><appender-ref ref="STATS"/></logger>\n'
        for name in (_STATS_LOGGERS_5 if version.startswith("5.") else ())
    )
    for name in names:
        (conf_dir / f"logback_{name}.xml").write_text(
            _LOGBACK.format(
                log=logs / f"{name}.log", stats=logs / f"{name}-stats.log", extra_loggers=extra_loggers
            )
        )


def _child_env(root: Path) -> dict[str, str]:
    """This process's environment with ROCKETMQ_HOME=root and no NAMESRV_ADDR."""
    env = {k: v for k, v in os.environ.items() if k not in ("ROCKETMQ_HOME", "NAMESRV_ADDR")}
    env["ROCKETMQ_HOME"] = str(root)
    return env


def _spawn(
    root: Path, heap: str, main: str, args: list[str], version: str, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """`main` in a JVM of its own, its stdout and stderr appended to root/logs/<log name>.out."""
    with open(root / "logs" / f"{_LOG_NAMES[main]}.out", "ab") as out:
        return subprocess.Popen(
            _java_command(root, heap, main, args, version),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=root,
            env=env,
        )


def _start_namesrv(
    root: Path, env: dict[str, str], deadline: float, version: str
) -> tuple[subprocess.Popen[bytes] | None, str]:
    """A name server of `version` on a free 127.0.0.1 port (config in root/namesrv.conf): the process and
    its address once it answers, or (None, address) once it is stopped again if it exited or did not
    answer before `deadline`."""
    ns_port = _free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    ns_conf = {
        "listenPort": str(ns_port),
        "kvConfigPath": str(root / "namesrv" / "kvConfig.json"),
        "configStorePath": str(root / "namesrv" / "namesrv.properties"),
    }
    if version.startswith("5."):
        ns_conf["bindAddress"] = "127.0.0.1"  # 5.x binds 0.0.0.0 unless told (4.9.7 cannot be told)
    _write_properties(root / "namesrv.conf", ns_conf)
    proc = _spawn(root, "256m", NAMESRV_MAIN, ["-c", str(root / "namesrv.conf")], version, env)
    while time.monotonic() < deadline and proc.poll() is None:
        if not _port_free(ns_port):
            try:
                _request(namesrv, GET_BROKER_CLUSTER_INFO, timeout=1.0)
                return proc, namesrv
            except OSError:
                pass
        time.sleep(0.1)
    if proc.poll() is None:
        _terminate(proc, signal.SIGTERM, STOP_TIMEOUT)
    return None, namesrv


def _start_once(
    root: Path, conf: dict[str, str], heap: str, deadline: float, version: str
) -> tuple[ApacheRocketMQ | None, str]:
    _write_logback(root, ("broker", "namesrv"), version)
    env = _child_env(root)
    # The name server answers once it listens; the broker registers at start, so wait for it first.
    ns_proc, namesrv = _start_namesrv(root, env, deadline, version)
    if ns_proc is None:
        return None, "the name server did not start"
    port = conf.get("listenPort") or str(_broker_port())
    conf = {**conf, "listenPort": port, "namesrvAddr": namesrv}
    _write_properties(root / "broker.conf", conf)
    mq = ApacheRocketMQ(root, namesrv, f"127.0.0.1:{port}", -1, conf, ns_proc, None, version=version)
    br_proc = _spawn(root, heap, BROKER_MAIN, ["-c", str(root / "broker.conf")], version, env)
    mq.broker_proc = br_proc
    mq.broker_pid = br_proc.pid
    while time.monotonic() < deadline and br_proc.poll() is None:
        if broker_registered(namesrv, mq.broker_addr):
            return mq, ""
        time.sleep(0.2)
    why = "the broker exited" if br_proc.poll() is not None else "the broker did not register in time"
    mq.stop(kill=True)
    return None, why


def _broker_defaults(root: Path, version: str) -> dict[str, str]:
    """The broker.conf every launched broker starts from (store under root/store, loopback only)."""
    store = root / "store"
    conf = {
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerId": "0",
        "brokerIP1": "127.0.0.1",
        "brokerIP2": "127.0.0.1",
        "storePathRootDir": str(store),
        "storePathCommitLog": str(store / "commitlog"),
        "autoCreateTopicEnable": "true",
        "autoCreateSubscriptionGroup": "true",
        "flushDiskType": "ASYNC_FLUSH",
        "brokerRole": "ASYNC_MASTER",
        # Never delete files while a test runs: deleteWhen is an hour, reservation three days.
        "deleteWhen": "04",
        "fileReservedTime": "72",
        "diskMaxUsedSpaceRatio": "95",
    }
    if version.startswith("5."):
        conf |= {
            "bindAddress": "127.0.0.1",
            # Controller-mode files, by default under user.home/store: name them next to the rest.
            "storePathEpochFile": str(store / "epochFileCheckpoint"),
            "storePathBrokerIdentity": str(store / "brokerIdentity"),
        }
    return conf


def start_rocketmq(
    root: Path,
    broker_conf: dict[str, str] | None = None,
    *,
    timeout: float = 120.0,
    heap: str = "512m",
    version: str = ROCKETMQ_VERSION,
) -> ApacheRocketMQ:
    """Start a Java name server and broker of `version` (4.9.7, 5.3.3 or 5.5.0) under `root` (store in
    root/store, logs in root/logs, config in root/broker.conf) on free 127.0.0.1 ports; returns once the
    broker is registered with the name server. `broker_conf` overrides or adds broker.conf keys (e.g.
    mappedFileSizeCommitLog, flushDiskType). 5.3.3 keeps every store file (commit log, consume queues,
    timerwheel / timerlog, config/) under storePathRootDir and everything else (rocksdb, auth) under
    user.home, which is `root`; 5.5.0 the same, plus an (empty with its default engines) RocksDB in
    storePathRootDir/rocksdbstore."""
    _project(version)
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    conf = _broker_defaults(root, version)
    if broker_conf:
        conf.update({k: str(v) for k, v in broker_conf.items()})
    deadline = time.monotonic() + timeout
    why = ""
    for _ in range(START_ATTEMPTS):
        mq, why = _start_once(root, dict(conf), heap, deadline, version)
        if mq is not None:
            return mq
        tail = ApacheRocketMQ(root, "", "", -1).log_tail()
        if not any(f in tail for f in RETRYABLE_START_FAILURES) or time.monotonic() >= deadline:
            raise RuntimeError(f"Apache RocketMQ did not start under {root}: {why}\n{tail}")
    raise RuntimeError(f"Apache RocketMQ did not start under {root}: {why}")


# -- the 5.x proxy ---------------------------------------------------------------------------------------


def _free_port_except(taken: set[int]) -> int:
    while True:
        port = _free_port()
        if port not in taken:
            return port


def _proxy_defaults(cluster: str) -> dict[str, object]:
    """The rmq-proxy.json every launched proxy starts from."""
    return {
        "rocketMQClusterName": cluster,
        # The address the proxy gives out for itself (its remoting route, its client channels): by default
        # the machine's first non-loopback address.
        "localServeAddr": "127.0.0.1",
        # A stop waits this long at most for open gRPC calls (a client's Telemetry stream) to end.
        "grpcShutdownTimeSeconds": 5,
        # No thread dumps into the log when a thread pool queues up.
        "enablePrintJstack": False,
    }


def _start_proxy_once(
    root: Path,
    broker_conf: dict[str, str],
    proxy_conf: dict[str, object],
    heap: str,
    deadline: float,
    version: str,
) -> tuple[ApacheRocketMQProxy | None, str]:
    _write_logback(root, ("proxy", "namesrv"), version)
    env = _child_env(root)
    ns_proc, namesrv = _start_namesrv(root, env, deadline, version)
    if ns_proc is None:
        return None, "the name server did not start"
    port = broker_conf.get("listenPort") or str(_broker_port())
    broker_conf = {**broker_conf, "listenPort": port, "namesrvAddr": namesrv}
    _write_properties(root / "broker.conf", broker_conf)
    taken = {int(port) - 2, int(port), int(port) + 1}
    grpc_port = int(str(proxy_conf.get("grpcServerPort") or _free_port_except(taken)))
    taken.add(grpc_port)
    remoting_port = int(str(proxy_conf.get("remotingListenPort") or _free_port_except(taken)))
    proxy_conf = {
        **proxy_conf,
        "grpcServerPort": grpc_port,
        "remotingListenPort": remoting_port,
        "namesrvAddr": namesrv,
        "proxyMode": "local",
        "brokerConfigPath": str(root / "broker.conf"),
    }
    (root / "rmq-proxy.json").write_text(json.dumps(proxy_conf, indent=2) + "\n")
    proxy = ApacheRocketMQProxy(
        root,
        namesrv,
        f"127.0.0.1:{port}",
        -1,
        broker_conf,
        ns_proc,
        None,
        version=version,
        grpc_endpoint=f"127.0.0.1:{grpc_port}",
        remoting_endpoint=f"127.0.0.1:{remoting_port}",
        proxy_conf=proxy_conf,
    )
    args = ["-pm", "local", "-bc", str(root / "broker.conf"), "-pc", str(root / "rmq-proxy.json")]
    proc = _spawn(root, heap, PROXY_MAIN, [*args, "-n", namesrv], version, env)
    proxy.broker_proc = proc
    proxy.broker_pid = proc.pid
    # The proxy starts its broker first and its gRPC server after it.
    while time.monotonic() < deadline and proc.poll() is None:
        if _port_accepts(proxy.grpc_endpoint) and broker_registered(namesrv, proxy.broker_addr):
            return proxy, ""
        time.sleep(0.2)
    if proc.poll() is not None:
        why = "the proxy exited"
    else:
        why = "the proxy's gRPC port did not open or its broker did not register in time"
    proxy.stop(kill=True)
    return None, why


def start_rocketmq_proxy(
    root: Path,
    broker_conf: dict[str, str] | None = None,
    proxy_conf: dict[str, object] | None = None,
    *,
    timeout: float = 180.0,
    heap: str = "512m",
    version: str = ROCKETMQ_5_VERSION,
) -> ApacheRocketMQProxy:
    """Start Apache RocketMQ 5.3.3 (or `version` 5.5.0) as the 5.x clients use it: a Java name server, then
    `ProxyStartup -pm local -bc root/broker.conf -pc root/rmq-proxy.json -n <name server>` (one JVM, the
    broker inside the proxy), on free 127.0.0.1 ports (the name server, the broker's listenPort, the proxy's
    grpcServerPort and remotingListenPort; Java's proxy binds its two on every interface). Returns once the
    gRPC port accepts connections and the broker is registered with the name server. `broker_conf` overrides
    or adds broker.conf keys, `proxy_conf` rmq-proxy.json keys (e.g. {"grpcServerPort": 8081} to pick the
    port). Logs in root/logs (proxy.log has the proxy's and the broker's lines), store in root/store."""
    if not version.startswith("5."):
        raise ValueError(f"Apache RocketMQ {version} has no proxy (5.x has)")
    _project(version)
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    bconf = _broker_defaults(root, version)
    if broker_conf:
        bconf.update({k: str(v) for k, v in broker_conf.items()})
    pconf = _proxy_defaults(bconf["brokerClusterName"]) | (proxy_conf or {})
    deadline = time.monotonic() + timeout
    why = ""
    for _ in range(START_ATTEMPTS):
        proxy, why = _start_proxy_once(root, dict(bconf), dict(pconf), heap, deadline, version)
        if proxy is not None:
            return proxy
        tail = ApacheRocketMQProxy(root, "", "", -1).log_tail()
        if not any(f in tail for f in RETRYABLE_START_FAILURES) or time.monotonic() >= deadline:
            raise RuntimeError(f"the Apache RocketMQ proxy did not start under {root}: {why}\n{tail}")
    raise RuntimeError(f"the Apache RocketMQ proxy did not start under {root}: {why}")


@dataclass
class ApacheRocketMQClusterProxy:
    """A Java `ProxyStartup -pm cluster`: the proxy alone, in front of the brokers a name server lists
    (any: ferromq's or Java's), a child process of this one."""

    root: Path
    namesrv: str
    grpc_endpoint: str
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def log_tail(self, n: int = 80) -> str:
        parts = []
        for name in ("proxy.log", "proxy.out"):
            path = self.root / "logs" / name
            if path.exists():
                parts.append(f"--- {path} (last {n} lines) ---\n{_tail(path, n)}")
        return "\n".join(parts)

    def stop(self, kill: bool = False) -> None:
        """SIGTERM and wait for its shutdown hook; or SIGKILL (the quick end of a reference proxy whose
        state nobody reads: its shutdown takes seconds)."""
        if self.proc is not None and self.proc.poll() is None:
            _terminate(self.proc, signal.SIGKILL if kill else signal.SIGTERM, STOP_TIMEOUT)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_rocketmq_proxy_cluster(
    root: Path,
    namesrv: str,
    *,
    cluster: str = "DefaultCluster",
    proxy_conf: dict[str, object] | None = None,
    timeout: float = 180.0,
    heap: str = "512m",
    version: str = ROCKETMQ_5_VERSION,
) -> ApacheRocketMQClusterProxy:
    """Start Apache RocketMQ 5.3.3's (or `version` 5.5.0's) `ProxyStartup -pm cluster -pc
    root/rmq-proxy.json -n <namesrv>` on free 127.0.0.1 ports (grpcServerPort, remotingListenPort); returns
    once its gRPC port accepts connections. `proxy_conf` adds to rmq-proxy.json. Logs in
    root/logs/proxy.log. 5.5.0's proxy serves lite consumers (LitePushConsumer) only in this mode."""
    if not version.startswith("5."):
        raise ValueError(f"Apache RocketMQ {version} has no proxy (5.x has)")
    _project(version)
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    _write_logback(root, ("proxy",), version)
    grpc_port = _free_port()
    pconf = (
        _proxy_defaults(cluster)
        | (proxy_conf or {})
        | {
            "grpcServerPort": grpc_port,
            "remotingListenPort": _free_port_except({grpc_port}),
            "namesrvAddr": namesrv,
            "proxyMode": "cluster",
        }
    )
    (root / "rmq-proxy.json").write_text(json.dumps(pconf, indent=2) + "\n")
    args = ["-pm", "cluster", "-pc", str(root / "rmq-proxy.json"), "-n", namesrv]
    proxy = ApacheRocketMQClusterProxy(root, namesrv, f"127.0.0.1:{grpc_port}")
    proxy.proc = _spawn(root, heap, PROXY_MAIN, args, version, _child_env(root))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proxy.proc.poll() is None:
        if _port_accepts(proxy.grpc_endpoint):
            return proxy
        time.sleep(0.2)
    tail = proxy.log_tail()
    proxy.stop()
    raise RuntimeError(f"the Apache RocketMQ proxy (cluster mode) did not start under {root}\n{tail}")


def mqadmin(
    root: Path,
    namesrv: str,
    subcommand: str,
    *args: str,
    version: str = ROCKETMQ_5_VERSION,
    timeout: float = 120.0,
) -> str:
    """`mqadmin <subcommand> -n <namesrv> <args>`: one MQAdminStartup of `version` in a JVM of its own
    (user.home and its log, root/logs/tools.log, under `root`); returns what it printed (stdout and
    stderr). mqadmin reports a failure in its output, not in its exit code."""
    root = Path(root).resolve()
    _write_logback(root, ("tools",), version)  # 4.9.7 reads ROCKETMQ_HOME/conf/logback_tools.xml itself
    cmd = _java_command(root, "192m", MQADMIN_MAIN, [subcommand, "-n", namesrv, *args], version)
    r = subprocess.run(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=root,
        env=_child_env(root),
        timeout=timeout,
    )
    return r.stdout.decode("utf-8", errors="replace")


# -- the official 5.x Python client ---------------------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent
# Where client5_python() makes the client's environment (build/ is not tracked).
CLIENT5_VENV = REPO / "build" / "client5-venv"
CLIENT5_EXTRA = "client5"


def _client5_requirements() -> list[str]:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return list(extras[CLIENT5_EXTRA])


def client5_python(timeout: float = 900.0) -> str:
    """A Python that imports the official RocketMQ 5.x client (PyPI rocketmq-python-client, module
    `rocketmq`): $FERROMQ_CLIENT5_PYTHON if set, else bin/python of build/client5-venv (or of
    $FERROMQ_CLIENT5_VENV), made with this Python's venv and pip from pyproject's `client5` extra on first
    use and again whenever that list changes (one maker at a time on this machine). An environment of its
    own: the client's package `rocketmq` is the C++ client's too (the test environment has the C++ one)."""
    explicit = os.environ.get("FERROMQ_CLIENT5_PYTHON")
    if explicit:
        return explicit
    venv = Path(os.environ.get("FERROMQ_CLIENT5_VENV", CLIENT5_VENV))
    python = venv / "bin" / "python"
    requirements = _client5_requirements()
    digest = hashlib.sha256("\n".join(requirements).encode()).hexdigest()
    stamp = venv / "requirements.sha256"
    with open(Path(tempfile.gettempdir()) / "ferromq-tests-client5.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if python.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
                return str(python)
            stamp.unlink(missing_ok=True)
            for cmd in (
                [sys.executable, "-m", "venv", str(venv)],
                [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements],
            ):
                r = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
                )
                if r.returncode != 0:
                    raise RuntimeError(
                        f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-4000:]}{r.stderr[-4000:]}"
                    )
            stamp.write_text(digest + "\n")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return str(python)
