"""The Java interop driver for Apache RocketMQ 5.x (tests/interop/java5, a jar with the official Java
remoting client 5.3.3): built with Maven when its sources changed, once for all pytest-xdist workers."""

from __future__ import annotations

from pathlib import Path

from apache_rocketmq import maven_package

JAVA5_DIR = Path(__file__).with_name("java5")
JAR5 = JAVA5_DIR / "target" / "ferromq-interop5.jar"


def build_interop5_jar() -> Path:
    """The jar, rebuilt (`mvn package`) only when pom.xml or a source changed since the last build.
    On a fresh machine the first build downloads the 5.3.3 client from Maven Central."""
    return maven_package(JAVA5_DIR, JAR5, timeout=540)
