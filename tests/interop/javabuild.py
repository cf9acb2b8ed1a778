"""The Java interop driver (tests/interop/java, a jar with the official Java client 4.9.7): built
with Maven when its sources changed, once for all pytest-xdist workers."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from apache_rocketmq import maven_lock

JAVA_DIR = Path(__file__).with_name("java")
JAR = JAVA_DIR / "target" / "ferromq-interop.jar"
_STAMP = JAVA_DIR / "target" / "ferromq-interop.sources.sha256"


def _sources_digest() -> str:
    h = hashlib.sha256()
    for path in sorted([JAVA_DIR / "pom.xml", *(JAVA_DIR / "src").rglob("*")]):
        if path.is_file():
            h.update(str(path.relative_to(JAVA_DIR)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def build_interop_jar() -> Path:
    """The jar, rebuilt (`mvn package`) only when pom.xml or a source changed since the last build.
    On a fresh machine the first build downloads the client from Maven Central."""
    with maven_lock():
        digest = _sources_digest()
        if JAR.is_file() and _STAMP.is_file() and _STAMP.read_text().strip() == digest:
            return JAR
        r = subprocess.run(
            ["mvn", "-q", "-B", "-Dstyle.color=never", "package"],
            cwd=JAVA_DIR,
            capture_output=True,
            text=True,
            timeout=540,
            stdin=subprocess.DEVNULL,
        )
        if r.returncode != 0 or not JAR.is_file():
            raise RuntimeError(
                f"mvn package failed ({r.returncode}):\n{r.stdout[-5000:]}\n{r.stderr[-5000:]}"
            )
        _STAMP.write_text(digest + "\n")
    return JAR
