"""What a well-behaved client sees while hostile peers attack `ferromq serve` (issue 27): the same
paced 1 KiB send load (a new connection per phase, one request at a time, 3 s timeout as a
client's default) measured idle and during each attack, in one run, with the broker's peak
anonymous RSS above its idle level.

Attacks:
- pull-flood: 8 connections each pipeline 300 PULL_MESSAGE (known groups, maxMsgNums=32) over
  24 messages of ~4 MiB and read nothing;
- connection-flood: one other address (127.0.0.2) opens idle connections until refused
  (`--flood-connections`, default 3000), holding them through the phase.

The 5.x surfaces (issue 39; `--grpc`, or `--only grpc`): ferromq serve against Apache RocketMQ
5.3.3's proxy (local mode: the broker in the proxy's JVM), in the same run, each server fresh. A
paced 5.x producer (benches/grpc_bench.py's client: SendMessage of 1 KiB at `--grpc-rate`, a new
call on its schedule whatever is in flight) measured idle and during each attack of
benches/grpc_attacks.py (run in a process of its own): preface-flood (2,000 preface-only
connections from 127.0.0.2), rapid-reset, continuation-flood, not-protobuf, huge-prefix,
batch-ack-bitset and peek-million (the last two on the broker's remoting port, over a backlog of
20,000 messages); with the server's peak anonymous RSS above its level when the phase began and
its peak open descriptors.

    .venv/bin/python benches/hardening_bench.py [--seconds 10] [--rate 200]
        [--flood-connections 3000] [--only remoting|grpc] [--grpc-rate 500]
        [--out benches/results/hardening_bench.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
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

import grpc_attacks  # noqa: E402
import grpc_bench  # noqa: E402
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


def descriptors(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


@contextlib.contextmanager
def sampling(pid: int, fds: list[int] | None = None) -> Iterator[Callable[[], int]]:
    """Samples the broker's RssAnon (and, given `fds`, its open descriptors: the peak in fds[0])
    every 50 ms on a thread; yields the RSS peak so far."""
    peak = [rss_anon(pid)]
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.05):
            peak[0] = max(peak[0], rss_anon(pid))
            if fds is not None:
                fds[0] = max(fds[0], descriptors(pid))

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


def connection_flood(port: int, count: int) -> contextlib.AbstractContextManager[None]:
    return grpc_attacks.held_connections(("127.0.0.1", port), count)


GRPC_TOPIC, GRPC_BACKLOG_TOPIC = "HardeningT", "HardeningBacklogT"
GRPC_PHASES = ("idle", *grpc_attacks.ATTACKS)


async def grpc_phases(server: grpc_bench.Server, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The paced 5.x producer idle and under each attack, on one server."""
    await server.create_topic(GRPC_TOPIC)
    await server.create_topic(GRPC_BACKLOG_TOPIC)
    producers = await grpc_bench.open_sessions(
        server, 2, grpc_bench.pb.PRODUCER, [GRPC_TOPIC, GRPC_BACKLOG_TOPIC]
    )
    ids = grpc_bench.MessageIds()
    try:
        backlog = await grpc_bench.fixed_rate(producers, GRPC_BACKLOG_TOPIC, 5000, 4, b"p" * 1024, ids)
        assert backlog.ok == backlog.planned, backlog.errors[:3]
        await grpc_bench.fixed_rate(producers, GRPC_TOPIC, args.grpc_rate, 2, b"w" * 1024, ids)  # warm
        await asyncio.sleep(1.0)
        rows = []
        for name in GRPC_PHASES:
            # Each phase against the level just before it: what an attack left behind (freed
            # memory a process keeps) is not counted again in the next.
            before_rss = rss_anon(server.pid)
            fds = [descriptors(server.pid)]
            with (
                sampling(server.pid, fds) as peak,
                grpc_attacks.attacking(name, server.endpoint, server.remoting, GRPC_BACKLOG_TOPIC),
            ):
                p = await grpc_bench.fixed_rate(
                    producers, GRPC_TOPIC, args.grpc_rate, args.seconds, b"b" * 1024, ids
                )
            ms = sorted(x * 1000 for x in p.latencies)
            rows.append(
                {
                    "server": server.kind,
                    "phase": name,
                    "planned": p.planned,
                    "ok": p.ok,
                    "failed": p.failed,
                    "p50_ms": grpc_bench.pct_ms(p.latencies, 0.50),
                    "p99_ms": grpc_bench.pct_ms(p.latencies, 0.99),
                    "max_ms": round(ms[-1], 2) if ms else None,
                    "peak_rss_above_start_mib": round((peak() - before_rss) / 2**20, 1),
                    "peak_descriptors": fds[0],
                    "errors": p.errors[:3],
                }
            )
            print(f"  {server.kind} {name}: ok {p.ok}/{p.planned}, p99 {rows[-1]['p99_ms']} ms", flush=True)
            await asyncio.sleep(2.0)  # the attack's connections close
        return rows
    finally:
        await grpc_bench.close_sessions(producers)


def grpc_table(rows: list[dict[str, Any]]) -> str:
    by = {(r["server"], r["phase"]): r for r in rows}
    out = [
        f"{'phase':<20} {'server':<9} {'ok':>7} {'failed':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'RSS +MiB':>9} {'fds':>6} {'p99 x Java':>10}"
    ]
    for phase in GRPC_PHASES:
        java = by.get(("rocketmq", phase))
        for kind in grpc_bench.BROKERS:
            r = by.get((kind, phase))
            if r is None:
                continue
            vs = (
                f"{r['p99_ms'] / java['p99_ms']:.2f}"
                if kind == "ferromq" and java and r["p99_ms"] and java["p99_ms"]
                else ""
            )
            out.append(
                f"{phase:<20} {kind:<9} {r['ok']:>7} {r['failed']:>7} {r['p50_ms']!s:>8} {r['p99_ms']!s:>8} "
                f"{r['max_ms']!s:>8} {r['peak_rss_above_start_mib']:>9} {r['peak_descriptors']:>6} {vs:>10}"
            )
    return "\n".join(out)


def grpc_cases(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for kind in grpc_bench.BROKERS:
        with tempfile.TemporaryDirectory() as tmp, grpc_bench.running(kind, Path(tmp)) as server:
            rows += asyncio.run(grpc_phases(server, args))
    print(grpc_table(rows))
    return rows


def remoting_cases(args: argparse.Namespace) -> dict[str, Any]:
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
    return {"idle_rss_mib": round(idle_rss / 2**20, 1), "phases": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--flood-connections", type=int, default=3000)
    ap.add_argument("--only", choices=("remoting", "grpc"), default=None)
    ap.add_argument("--grpc-rate", type=float, default=500.0)
    ap.add_argument("--out", default=str(HERE / "results" / "hardening_bench.json"))
    args = ap.parse_args()
    results: dict[str, Any] = {"bench": "hardening", "settings": vars(args)}
    if args.only in (None, "remoting"):
        results.update(remoting_cases(args))
    if args.only in (None, "grpc"):
        results["grpc_phases"] = grpc_cases(args)
    write_results(args.out, results)


if __name__ == "__main__":
    main()
