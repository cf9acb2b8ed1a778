"""The README's tour, executed: every `$ command` of its console blocks runs in order and its output
must match the lines shown under it, so the page cannot go stale.

The commands run as a newcomer would type them, with two changes that keep the test on free ports
and out of the real home directory: `HOME` is a temporary directory (so `~/store` is fresh) and
`NAMESRV_ADDR`, which the examples and `ferromq admin` read, names the test's name server;
`ferromq serve` gets `--namesrv-port`, `-p` and `--grpc-port` with free ports and runs in the
background until the tour ends. Expected lines match in order, each one somewhere after the
previous (other lines may come between), and `...` in a line matches any text.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ferromq.testing import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BEGIN, END = "<!-- tour:begin -->", "<!-- tour:end -->"
READY_LINE = "ferromq serving:"
COMMAND_TIMEOUT = 180.0

# The tour ends with a Spark read (a JVM): not for `scripts/test.sh --quick`.
pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)


def tour_steps(text: str) -> list[Step]:
    """The `$ ` commands of the tour's console blocks, each with the output lines shown under it."""
    start, end = text.index(BEGIN), text.index(END)
    steps: list[Step] = []
    for block in re.findall(r"```console\n(.*?)```", text[start:end], flags=re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append(Step(line[2:].strip()))
            elif line.strip() and steps:
                steps[-1].expected.append(line.rstrip())
    return steps


def pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*?".join(re.escape(part) for part in expected.split("...")))


def assert_output(step: Step, output: str) -> None:
    """Every expected line matches a line of `output`, in order."""
    lines = output.splitlines()
    at = 0
    for want in step.expected:
        regex = pattern(want)
        while at < len(lines) and not regex.fullmatch(lines[at].rstrip()):
            at += 1
        assert at < len(lines), f"`{step.command}`: no line matches {want!r} (in order) in:\n{output}"
        at += 1


def test_tour_steps_parse() -> None:
    steps = tour_steps(README.read_text(encoding="utf-8"))
    assert steps[0].command == "ferromq serve", "the tour starts the broker first"
    assert len(steps) >= 8
    assert all(s.expected for s in steps), [s.command for s in steps if not s.expected]


def test_readme_tour(tmp_path: Path) -> None:
    steps = tour_steps(README.read_text(encoding="utf-8"))
    ns_port, broker_port, grpc_port = free_port(), free_port(), free_port()
    home = tmp_path / "home"
    home.mkdir()
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "HOME": str(home),
        "NAMESRV_ADDR": f"127.0.0.1:{ns_port}",
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONUNBUFFERED": "1",
    }
    server: subprocess.Popen[bytes] | None = None
    server_log = tmp_path / "serve.log"
    try:
        for step in steps:
            if step.command == "ferromq serve":
                # Ports picked free may be taken by a parallel test before the broker binds them:
                # then again with others (as ferromq.testing's BrokerProcess does).
                for _attempt in range(3):
                    env["NAMESRV_ADDR"] = f"127.0.0.1:{ns_port}"
                    argv = [
                        *shlex.split(step.command),
                        "--namesrv-port",
                        str(ns_port),
                        "-p",
                        str(broker_port),
                        "--grpc-port",
                        str(grpc_port),
                    ]
                    with open(server_log, "wb") as log:
                        server = subprocess.Popen(
                            argv, cwd=ROOT, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL
                        )
                    deadline = time.monotonic() + 60
                    while READY_LINE not in server_log.read_text(errors="replace") and server.poll() is None:
                        assert time.monotonic() < deadline, "ferromq serve did not get ready within 60 s"
                        time.sleep(0.05)
                    log_text = server_log.read_text(errors="replace")
                    if server.poll() is None or "is in use" not in log_text:
                        break
                    ns_port, broker_port, grpc_port = free_port(), free_port(), free_port()
                assert server.poll() is None, server_log.read_text(errors="replace")
                output = server_log.read_text(errors="replace")
                # The tour shows the defaults; the test moved the ports.
                for port, shown in ((ns_port, 9876), (broker_port, 10911), (grpc_port, 8081)):
                    output = output.replace(f":{port}", f":{shown}")
            else:
                run = subprocess.run(
                    ["bash", "-c", step.command],
                    cwd=ROOT,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=COMMAND_TIMEOUT,
                    stdin=subprocess.DEVNULL,
                )
                output = run.stdout + run.stderr
                assert run.returncode == 0, f"`{step.command}` exited with {run.returncode}:\n{output}"
                assert "Traceback" not in output, f"`{step.command}`:\n{output}"
            assert_output(step, output)
    finally:
        if server is not None and server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=30)
    assert server is not None and server.returncode == 0, server_log.read_text(errors="replace")
