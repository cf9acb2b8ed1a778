"""The Java interop drivers for Apache RocketMQ 5.x: tests/interop/java5 (a jar with the official Java
remoting client 5.3.3) and tests/interop/java5grpc (a jar with the official Java 5.x gRPC client,
rocketmq-client-java); each built with Maven when its sources changed, once for all pytest-xdist workers."""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apache_rocketmq import maven_package

JAVA5_DIR = Path(__file__).with_name("java5")
JAR5 = JAVA5_DIR / "target" / "ferromq-interop5.jar"
JAVA5GRPC_DIR = Path(__file__).with_name("java5grpc")
JAR5GRPC = JAVA5GRPC_DIR / "target" / "ferromq-interop5grpc.jar"


def build_interop5_jar() -> Path:
    """The jar, rebuilt (`mvn package`) only when pom.xml or a source changed since the last build.
    On a fresh machine the first build downloads the 5.3.3 client from Maven Central."""
    return maven_package(JAVA5_DIR, JAR5, timeout=540)


def build_grpc5_jar() -> Path:
    """The gRPC client's jar (main class `io.ferromq.interop5.Grpc5`), rebuilt as `build_interop5_jar`."""
    return maven_package(JAVA5GRPC_DIR, JAR5GRPC, timeout=540)


@dataclass(frozen=True)
class DriverRun:
    """One run of a driver class: its exit code, and the JSON objects it printed on each stream."""

    code: int
    out: list[dict[str, Any]]
    err: list[dict[str, Any]]
    stdout: str
    stderr: str


def run_driver(jar: Path, workdir: Path, main: str, *args: str, timeout: float) -> DriverRun:
    """Runs `io.ferromq.interop5.<main>` (Timers, Pop; Grpc5 of the gRPC jar) with its logs and user.home
    under `workdir`; AssertionError when it is still running after `timeout` seconds."""
    logs = workdir / "client-logs" / uuid.uuid4().hex[:8]
    logs.mkdir(parents=True)
    cmd = ["java", f"-Drocketmq.log.root={logs}", f"-Duser.home={logs}", "-Xmx256m", "-XX:+UseSerialGC"]
    cmd += ["-XX:TieredStopAtLevel=1", "-cp", str(jar), f"io.ferromq.interop5.{main}", *args]
    try:
        r = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=logs, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            f"{main} {' '.join(args)} still running after {timeout} s: {e.stdout!r}"
        ) from None

    def records(text: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    return DriverRun(r.returncode, records(r.stdout), records(r.stderr), r.stdout, r.stderr)
