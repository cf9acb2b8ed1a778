"""Helpers of test_mqadmin.py: the official `mqadmin` (rocketmq-tools 4.9.7 from Maven Central) as a
shell process, the clients that give both brokers the same traffic, and the normalising of mqadmin's
output (addresses, times, ids and rates differ by nature between two brokers; rows, keys, offsets
and counts must not)."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from apache_rocketmq import JAVA17_FLAGS, ROCKETMQ_VERSION, classpath

SHELL_SOURCE = Path(__file__).with_name("mqadmin") / "MqadminShell.java"
CLIENTS = Path(__file__).with_name("mqadmin_clients.py")
END = "\x01END "
READY = "\x01READY"
START_TIMEOUT = 120.0
COMMAND_TIMEOUT = 60.0

_LOGBACK_TOOLS = """<?xml version="1.0" encoding="UTF-8"?>
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d %-5level [%thread] %logger - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


class LineChild:
    """A child process spoken to by lines: its output is read on a thread, so every wait for a line
    is bounded; `close()` closes its stdin (the end signal of both children here) and waits."""

    def __init__(self, argv: list[str], **popen: Any) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            **popen,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.transcript: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.transcript.append(f"> {line}\n")
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def until(self, done: Callable[[str], bool], timeout: float) -> list[str] | None:
        """The lines before the first one `done` accepts; None at EOF or timeout."""
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                return None
            self.transcript.append(line)
            if done(line.rstrip("\n")):
                return out
            out.append(line)

    def tail(self) -> str:
        return "".join(self.transcript)[-4000:]

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class MqadminShell(LineChild):
    """One JVM running `MQAdminStartup.main0` for each command it is given (see MqadminShell.java),
    against one name server: rocketmq-tools 4.9.7 (the default) or `version` (5.3.3)."""

    def __init__(self, home: Path, namesrv: str, version: str = ROCKETMQ_VERSION) -> None:
        self.namesrv = namesrv
        (home / "conf").mkdir(parents=True, exist_ok=True)
        # 4.9.7's MQAdminStartup configures logback from $ROCKETMQ_HOME/conf/logback_tools.xml; 5.x's
        # (shaded) logback is told the file.
        logback = home / "conf" / "logback_tools.xml"
        logback.write_text(_LOGBACK_TOOLS.format(log=home / "tools.log"))
        five = version.startswith("5.")
        argv = [
            "java",
            "-Xmx192m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            *(JAVA17_FLAGS if five else ()),
            f"-Drocketmq.home.dir={home}",
            f"-Duser.home={home}",
            "-Drocketmq.client.logUseSlf4j=true",
            *([f"-Drmq.logback.configurationFile={logback}"] if five else ()),
            "-Dfile.encoding=UTF-8",
            "-cp",
            classpath(version),
            str(SHELL_SOURCE),
        ]
        super().__init__(argv, cwd=home)
        if self.until(lambda line: line == READY, START_TIMEOUT) is None:
            self.close()
            raise RuntimeError(f"the mqadmin shell did not start:\n{self.tail()}")

    def run(self, subcommand: str, *args: str) -> str:
        """mqadmin's output (stdout and stderr) of `mqadmin <subcommand> -n <namesrv> <args>`."""
        argv = [subcommand, "-n", self.namesrv, *args]
        self.send("\t".join(argv))
        lines = self.until(lambda line: line.startswith(END), COMMAND_TIMEOUT)
        if lines is None:
            raise AssertionError(
                f"mqadmin {' '.join(argv)}: no answer within {COMMAND_TIMEOUT} s:\n{self.tail()}"
            )
        return "".join(lines)


@contextmanager
def running_clients(namesrv: str, timeout: float = 90.0) -> Iterator[dict[str, Any]]:
    """mqadmin_clients.py against `namesrv`: its RESULT once the traffic is done; its clients stay
    online until the context ends."""
    child = LineChild([sys.executable, str(CLIENTS), namesrv], env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        if child.until(lambda line: line.startswith("RESULT "), timeout) is None:
            raise AssertionError(f"the clients did not finish within {timeout} s:\n{child.tail()}")
        result: dict[str, Any] = json.loads(child.transcript[-1][len("RESULT ") :])
        yield result
    finally:
        child.close()


# -- normalising ---------------------------------------------------------------------------------------

_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[ #]\d{2}:\d{2}:\d{2}([,.:]\d{3})?")
_ADDR = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}:\d+\b")


def rows(text: str) -> list[list[str]]:
    """The output's non-empty lines split into whitespace-separated columns."""
    return [line.split() for line in text.splitlines() if line.strip()]


def table(text: str, header: str) -> list[list[str]]:
    """The rows after the header line that starts with `header`, up to the first empty line."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(header):
            out = []
            for row in lines[i + 1 :]:
                if not row.strip():
                    break
                out.append(row.split())
            return out
    raise AssertionError(f"no {header!r} header in:\n{text}")


def key_values(text: str, sep: str) -> dict[str, str]:
    """`key <sep> value` lines (brokerStatus: ':', getBrokerConfig: '=')."""
    out = {}
    for line in text.splitlines():
        key, found, value = line.partition(sep)
        if found and key.strip():
            out[key.strip()] = value.strip()
    return out


def scrub(text: str, labels: dict[str, str]) -> str:
    """Times and host:port addresses replaced by placeholders, and each labelled value by its label."""
    for value, label in sorted(labels.items(), key=lambda kv: -len(kv[0])):
        if value:
            text = text.replace(value, label)
    text = _TIME.sub("<time>", text)
    return _ADDR.sub("<addr>", text)
