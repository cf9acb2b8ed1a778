"""The Java interop driver (tests/interop/java, a jar with the official Java client 4.9.7): built
with Maven when its sources changed, once for all pytest-xdist workers."""

from __future__ import annotations

from pathlib import Path

from apache_rocketmq import maven_package

JAVA_DIR = Path(__file__).with_name("java")
JAR = JAVA_DIR / "target" / "ferromq-interop.jar"


def build_interop_jar() -> Path:
    """The jar, rebuilt (`mvn package`) only when pom.xml or a source changed since the last build.
    On a fresh machine the first build downloads the client from Maven Central."""
    return maven_package(JAVA_DIR, JAR, timeout=540)
