"""What a well-behaved client sees while hostile peers attack `ferromq serve` (issue 27): the same
paced 1 KiB send load (a new connection per phase, one request at a time, 3 s timeout as a
client's default) measured idle and during each attack, in one run, with the broker's peak
anonymous RSS above its idle level.

Attacks:
- pull-flood: 8 connections each pipeline 300 PULL_MESSAGE (known groups, maxMsgNums=32) over
  24 messages of ~4 MiB and read nothing;
- connection-flood: one other address (127.0.0.2) opens idle connections until refused
  (`--flood-connections`, default 3000), holding them through the phase.

    .venv/bin/python benches/hardening_bench.py [--seconds 10] [--rate 200]
        [--flood-connections 3000] [--out benches/results/hardening_bench.json]
"""

from __future__ import annotations

import argparse
import contextlib
import re
import resource
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import free_port, serving, write_results  # noqa: E402

from ferromq.protocol.codes import RequestCode as RC  # noqa: E402
from ferromq.protocol.command import MAX_FRAME_SIZE, RemotingCommand, decode_frame, encode  # noqa: E402

CONF = "brokerName=hardening\nmappedFileSizeCommitLog=134217728\nautoCreateTopicEnable=true\n"
BIG = 4 * 1024 * 1024 - 4096
CLIENT_TIMEOUT = 3.0


def send_ext(topic: str) -> dict[str, str]:
    return {
        "producerGroup": "BenchPG",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": "",
    }


def pull_ext(group: str, topic: str, offset: int) -> dict[str, str]:
    return {
        "consumerGroup": group,
        "topic": topic,
        "queueId": "0",
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": "6",
        "commitOffset": "0",
        "suspendTimeoutMillis": "1000",
        "subscription": "*",
        "subVersion": "0",
    }


def call(
    port: int, code: int, ext: dict[str, str], body: bytes = b"", timeout: float = 30.0
) -> RemotingCommand:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(encode(RemotingCommand(code, opaque=1, ext=ext, body=body)))
        return read_reply(s, time.monotonic() + timeout, bytearray())


def read_reply(sock: socket.socket, deadline: float, buf: bytearray) -> RemotingCommand:
    while True:
        decoded = decode_frame(buf, MAX_FRAME_SIZE)
        if decoded is not None:
            del buf[: decoded[1]]
            return decoded[0]
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no reply in time")
        sock.settimeout(left)  # (select() cannot watch descriptors past 1024: the flood has them)
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed by the server")
        buf += chunk


def rss_anon(pid: int) -> int:
    m = re.search(r"^RssAnon:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    return int(m.group(1)) * 1024 if m else 0


def paced_sends(port: int, seconds: float, rate: float) -> dict[str, Any]:
    """One connection (reconnecting after a failure), `rate` sends a second for `seconds`."""
    latencies: list[float] = []
    failures = 0
    sock: socket.socket | None = None
    buf = bytearray()
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < seconds:
        due = start + n / rate
        time.sleep(max(0.0, due - time.monotonic()))
        n += 1
        t0 = time.monotonic()
        try:
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT)
                buf = bytearray()
            sock.sendall(
                encode(RemotingCommand(RC.SEND_MESSAGE, opaque=n, ext=send_ext("Behaved"), body=b"b" * 1024))
            )
            reply = read_reply(sock, t0 + CLIENT_TIMEOUT, buf)
            if reply.code != 0:
                raise ConnectionError(reply.remark)
            latencies.append(time.monotonic() - t0)
        except (OSError, TimeoutError):
            failures += 1
            if sock is not None:
                sock.close()
            sock = None
    if sock is not None:
        sock.close()
    ms = sorted(x * 1000 for x in latencies)

    def pct(p: float) -> float | None:
        return round(ms[min(len(ms) - 1, int(p * len(ms)))], 2) if ms else None

    return {
        "sent": n,
        "ok": len(ms),
        "failed": failures,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(ms[-1], 2) if ms else None,
        "mean_ms": round(statistics.fmean(ms), 2) if ms else None,
    }


@contextlib.contextmanager
def sampling(pid: int) -> Iterator[Callable[[], int]]:
    """Samples the broker's RssAnon every 50 ms on a thread; yields the peak so far."""
    peak = [rss_anon(pid)]
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.05):
            peak[0] = max(peak[0], rss_anon(pid))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield lambda: peak[0]
    finally:
        stop.set()
        t.join()


@contextlib.contextmanager
def pull_flood(port: int) -> Iterator[None]:
    for c in range(8):
        body = f'{{"groupName": "Flood{c}"}}'.encode()
        call(port, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
    socks = []
    try:
        for c in range(8):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            s.connect(("127.0.0.1", port))
            s.setblocking(False)
            frames = b"".join(
                encode(
                    RemotingCommand(
                        RC.PULL_MESSAGE, opaque=i + 1, ext=pull_ext(f"Flood{c}", "FloodPull", i % 24)
                    )
                )
                for i in range(300)
            )
            with contextlib.suppress(BlockingIOError):
                s.send(frames)
            socks.append(s)
        yield
    finally:
        for s in socks:
            s.close()


@contextlib.contextmanager
def connection_flood(port: int, count: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 256)), hard))
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            try:
                s.connect(("127.0.0.1", port))
            except OSError:
                s.close()
                break
            socks.append(s)
        yield
    finally:
        for s in socks:
            s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--flood-connections", type=int, default=3000)
    ap.add_argument("--out", default=str(HERE / "results" / "hardening_bench.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "broker.conf"
        conf.write_text(CONF)
        port, ns_port = free_port(), free_port()
        args_serve = ["--store", str(Path(tmp) / "store"), "--profile", "small"]
        with serving(conf, Path(tmp) / "serve.log", port, ns_port, args=args_serve) as broker:
            for i in range(24):
                assert call(port, RC.SEND_MESSAGE, send_ext("FloodPull"), bytes([i]) * BIG).code == 0
            paced_sends(port, 1.0, args.rate)  # warm
            time.sleep(1.0)
            idle_rss = rss_anon(broker.pid)
            phases: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
                "idle": contextlib.nullcontext,
                "pull-flood": lambda: pull_flood(port),
                "connection-flood": lambda: connection_flood(port, args.flood_connections),
            }
            rows = []
            for name, attack in phases.items():
                with sampling(broker.pid) as peak, attack():
                    result = paced_sends(port, args.seconds, args.rate)
                    result["peak_rss_above_idle_mib"] = round((peak() - idle_rss) / 2**20, 1)
                rows.append({"phase": name, **result})
                time.sleep(1.0)
    base = rows[0]["p99_ms"] or 1.0
    header = ("phase", "ok", "failed", "p50 ms", "p99 ms", "max ms", "p99 x idle", "RSS +MiB")
    print(f"{header[0]:<18} " + " ".join(f"{h:>10}" for h in header[1:]))
    for r in rows:
        ratio = (r["p99_ms"] / base) if r["p99_ms"] else float("nan")
        cells = (r["ok"], r["failed"], r["p50_ms"], r["p99_ms"], r["max_ms"], f"{ratio:.2f}")
        print(f"{r['phase']:<18} " + " ".join(f"{c!s:>10}" for c in (*cells, r["peak_rss_above_idle_mib"])))
    write_results(
        args.out,
        {
            "bench": "hardening",
            "settings": vars(args),
            "idle_rss_mib": round(idle_rss / 2**20, 1),
            "phases": rows,
        },
    )


if __name__ == "__main__":
    main()
