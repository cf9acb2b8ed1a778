"""What the benchmarks share: a `ferromq serve` process to measure, its CPU time, free ports, the
environment recorded with results, and writing them."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

READY_LINE = "ferromq serving"


class Served(subprocess.Popen[str]):
    """A `ferromq serve` process and the line it said it serves with."""

    ready_line = ""

    @property
    def grpc_endpoint(self) -> str | None:
        """host:port of its gRPC port (`..., gRPC on HOST:PORT, ...` in the ready line)."""
        found = re.search(r"gRPC on ([^,\s]+)", self.ready_line)
        return found.group(1) if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds_by_thread(pid: int) -> dict[str, float]:
    """utime + stime of a process's threads, summed by thread name (/proc/PID/task/*/comm), so a
    benchmark can say which part of a server spent its CPU. Threads that ended are not counted."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # the thread ended meanwhile
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


@contextlib.contextmanager
def serving(
    conf: Path | None,
    log: Path,
    port: int,
    namesrv_port: int,
    launcher: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    args: Sequence[str] = (),
) -> Iterator[Served]:
    """`ferromq serve [-c conf] [args]` on these ports (its log lines to `log`), yielded once it
    says it serves (that line in `ready_line`, its gRPC port in `grpc_endpoint`); stopped with
    SIGTERM (SIGKILL after a minute) after. `launcher` replaces the `ferromq` command (another
    interpreter, `taskset` in front)."""
    command = [*(launcher or [str(Path(sys.executable).with_name("ferromq"))]), "serve"]
    command += [*(["-c", str(conf)] if conf is not None else []), *args]
    command += ["--namesrv-port", str(namesrv_port), "-p", str(port), "--grpc-port", "0"]
    with open(log, "w") as err:
        broker = Served(
            command, env=env, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True
        )
    try:
        assert broker.stdout is not None
        line = broker.stdout.readline()
        if not line.startswith(READY_LINE):
            raise SystemExit(f"the broker did not start: {line}{log.read_text()[-2000:]}")
        broker.ready_line = line.strip()
        yield broker
    finally:
        # Its own session: the group holds the broker alone.
        os.killpg(broker.pid, signal.SIGTERM)
        try:
            broker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(broker.pid, signal.SIGKILL)
            broker.wait(timeout=10)


def loadavg() -> str:
    """/proc/loadavg as it reads: how busy the machine was around a measurement."""
    return Path("/proc/loadavg").read_text().strip()


def client_cpu() -> float:
    """CPU seconds of this process (the benchmark's own client), user and system."""
    t = os.times()
    return t.user + t.system


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b to three places; None when either is missing (or b is 0)."""
    return round(a / b, 3) if a is not None and b else None


def render(head: list[str], rows: list[list[str]]) -> str:
    """A plain text table, columns padded to their widest cell."""
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]
    ]
    return "\n".join(lines)


def environment() -> dict[str, Any]:
    """The machine and the code a result was measured on."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "commit": commit.stdout.strip(),
        "loadavg": os.getloadavg(),
    }


def write_results(path: str | Path, doc: dict[str, Any]) -> None:
    """Writes `doc` with the environment added, as JSON, and says where."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**doc, "env": environment()}, indent=1) + "\n")
    print(f"results written to {out}")
