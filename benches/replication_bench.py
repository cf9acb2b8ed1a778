"""Replication: send latency and throughput with no slave, ASYNC_MASTER and SYNC_MASTER, the slave's
lag under that load, and how fast a slave far behind catches up; optionally the same load on an
Apache RocketMQ 4.9.7 SYNC_MASTER with its Java slave, side by side.

Every broker is its own process (`ferromq broker`, the Java broker from Maven Central) on 127.0.0.1.
The load is raw SEND_MESSAGE requests straight to the master: C connections x K in flight (closed
loop), M messages of S bytes after a warm-up; with `--rate R`, the M sends are paced at R msg/s
instead (open loop, latency from each send's scheduled time), which compares the roles' latency at
the same load rather than at each one's saturation. Lag is sampled every 20 ms from both brokers'
GET_BROKER_RUNTIME_INFO (commitLogMaxOffset): bytes behind, and how long the slave took to reach each
offset the master had. Catch-up: the slave stops, the master takes N MiB more, the slave starts again
and the time until it has all of it gives MiB/s, against this disk's sequential write rate (a file
written and fsynced in the same directory) as the goal's yardstick (>= 0.5x).

    .venv/bin/python benches/replication_bench.py [--messages 20000] [--size 1024] [--connections 4]
        [--inflight 16] [--rate 0] [--catchup-mib 1024] [--java] [--quick]

Prints one table and writes bench-results/replication_bench.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE), str(ROOT / "tools")]

from benchlib import write_results  # noqa: E402

from ferromq.jsonutil import loads_lenient  # noqa: E402
from ferromq.protocol.codes import RequestCode, ResponseCode  # noqa: E402
from ferromq.protocol.command import RemotingCommand  # noqa: E402
from ferromq.remoting.connection import Connection, open_connection  # noqa: E402
from tests.interop.replication_kit import (  # noqa: E402
    STORE_CONF,
    Process,
    master_conf,
    slave_conf,
    start_broker,
    start_namesrv,
)

TOPIC = "ReplBench"
QUEUES = 8
SAMPLE_EVERY = 0.02
BENCH_STORE = {**STORE_CONF, "mappedFileSizeCommitLog": str(256 << 20), "brokerName": "bench"}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


def send_cmd(i: int, body: bytes) -> RemotingCommand:
    ext = {
        "producerGroup": "bench",
        "topic": TOPIC,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": str(QUEUES),
        "queueId": str(i % QUEUES),
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": f"UNIQ_KEY\x01{uuid.uuid4().hex}\x02WAIT\x01true\x02",
        "reconsumeTimes": "0",
    }
    return RemotingCommand(code=RequestCode.SEND_MESSAGE, ext=ext, body=body)


async def connect(addr: str) -> Connection:
    host, _, port = addr.rpartition(":")
    return await open_connection(host, int(port), timeout=5)


async def max_offset(conn: Connection) -> int:
    reply = await conn.request(RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO), 5)
    return int(loads_lenient(reply.body)["table"]["commitLogMaxOffset"])


@contextlib.asynccontextmanager
async def senders(addr: str, connections: int, body: bytes) -> AsyncIterator[list[Connection]]:
    """`connections` to `addr`, once a first send has auto-created the topic (before anything is
    timed); closed after."""
    conns = [await connect(addr) for _ in range(connections)]
    try:
        await conns[0].request(send_cmd(0, body), 10)
        yield conns
    finally:
        for c in conns:
            await c.close()


async def send_load(
    addr: str, messages: int, size: int, connections: int, inflight: int
) -> tuple[list[float], float, dict[int, int]]:
    """Closed-loop sends; per-send latencies (ms), the seconds they took, answers by code."""
    body = os.urandom(size)
    latencies: list[float] = []
    codes: dict[int, int] = {}
    counter = itertools.count()
    async with senders(addr, connections, body) as conns:

        async def worker(conn: Connection) -> None:
            while (i := next(counter)) < messages:
                started = time.perf_counter()
                reply = await conn.request(send_cmd(i, body), 30)
                latencies.append((time.perf_counter() - started) * 1000)
                codes[reply.code] = codes.get(reply.code, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(worker(c) for c in conns for _ in range(inflight)))
        return latencies, time.perf_counter() - started, codes


async def paced_load(
    addr: str, messages: int, size: int, connections: int, rate: float
) -> tuple[list[float], float, dict[int, int]]:
    """Open-loop sends at `rate` msg/s over `connections`; each latency (ms) counts from the
    send's scheduled time, so a broker that falls behind is not flattered by waiting senders."""
    body = os.urandom(size)
    latencies: list[float] = []
    codes: dict[int, int] = {}
    async with senders(addr, connections, body) as conns:

        async def one(i: int, scheduled: float) -> None:
            reply = await conns[i % connections].request(send_cmd(i, body), 30)
            latencies.append((time.perf_counter() - scheduled) * 1000)
            codes[reply.code] = codes.get(reply.code, 0) + 1

        tasks = []
        started = time.perf_counter()
        for i in range(messages):
            scheduled = started + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, scheduled)))
        await asyncio.gather(*tasks)
        return latencies, time.perf_counter() - started, codes


async def sample_lag(master: str, slave: str, stop: asyncio.Event) -> list[tuple[float, int, int]]:
    """(time, master offset, slave offset) every SAMPLE_EVERY seconds until `stop`."""
    m, s = await connect(master), await connect(slave)
    samples = []
    try:
        while not stop.is_set():
            t = time.perf_counter()
            mo, so = await asyncio.gather(max_offset(m), max_offset(s))
            samples.append((t, mo, so))
            await asyncio.sleep(SAMPLE_EVERY)
        # Until the slave has everything.
        end = await max_offset(m)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            t = time.perf_counter()
            so = await max_offset(s)
            samples.append((t, end, so))
            if so >= end:
                break
            await asyncio.sleep(SAMPLE_EVERY)
        return samples
    finally:
        await m.close()
        await s.close()


def lag_stats(samples: list[tuple[float, int, int]]) -> dict[str, float]:
    behind = [float(mo - so) for _, mo, so in samples]
    lag_ms = []
    for i, (t, mo, _) in enumerate(samples):
        for t2, _, so in samples[i:]:
            if so >= mo:
                lag_ms.append((t2 - t) * 1000)
                break
    return {
        "lag_bytes_p50": pct(behind, 50),
        "lag_bytes_p99": pct(behind, 99),
        "lag_bytes_max": max(behind, default=0.0),
        "lag_ms_p50": pct(lag_ms, 50),
        "lag_ms_p99": pct(lag_ms, 99),
    }


async def run_case(name: str, master: str, slave: str | None, args: argparse.Namespace) -> dict[str, Any]:
    # Warm-up: page cache, connections, auto-created topic.
    await send_load(master, max(args.messages // 10, 500), args.size, args.connections, args.inflight)
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_lag(master, slave, stop)) if slave else None
    if args.rate:
        load = paced_load(master, args.messages, args.size, args.connections, args.rate)
    else:
        load = send_load(master, args.messages, args.size, args.connections, args.inflight)
    latencies, seconds, codes = await load
    stop.set()
    row: dict[str, Any] = {
        "case": name,
        "messages": len(latencies),
        "msg_per_s": len(latencies) / seconds,
        "p50_ms": pct(latencies, 50),
        "p99_ms": pct(latencies, 99),
        "mean_ms": statistics.fmean(latencies),
        "codes": {str(k): v for k, v in codes.items()},
    }
    if sampler is not None:
        row.update(lag_stats(await sampler))
    return row


def disk_write_rate(directory: Path, mib: int) -> float:
    """MiB/s of writing `mib` MiB sequentially and fsyncing (the store's disk)."""
    path = directory / "disk-rate.tmp"
    block = os.urandom(1 << 20)
    started = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    seconds = time.perf_counter() - started
    path.unlink()
    return mib / seconds


async def catch_up(
    work: Path, ns: Process, master: Process, slave: Process, mib: int, size: int
) -> tuple[dict[str, Any], Process]:
    assert slave.stop() == 0, slave.log()
    m = await connect(master.addr)
    try:
        start_offset = await max_offset(m)
    finally:
        await m.close()
    target = start_offset + (mib << 20)
    big = max(size, 64 * 1024)
    messages = (mib << 20) // (big + 200) + 1
    await send_load(master.addr, messages, big, 2, 16)
    m = await connect(master.addr)
    try:
        end = await max_offset(m)
    finally:
        await m.close()
    started = time.perf_counter()
    slave = start_broker(work, "slave", ns.addr, slave_conf(**_bench_conf()))
    s = await connect(slave.addr)
    try:
        deadline = time.monotonic() + 600
        while await max_offset(s) < end and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        got = await max_offset(s)
    finally:
        await s.close()
    seconds = time.perf_counter() - started
    behind = end - start_offset
    return {
        "case": "catch-up",
        "behind_mib": behind / (1 << 20),
        "seconds": seconds,
        "mib_per_s": behind / (1 << 20) / seconds,
        "complete": got >= end,
        "target_mib": (target - start_offset) / (1 << 20),
    }, slave


def _bench_conf() -> dict[str, str]:
    return {k: v for k, v in BENCH_STORE.items() if k not in ("storePathRootDir",)}


def ferromq_cases(work: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    ns = start_namesrv(work)
    try:
        for role, with_slave in (("ASYNC_MASTER", False), ("ASYNC_MASTER", True), ("SYNC_MASTER", True)):
            case = work / f"{role}-{'slave' if with_slave else 'alone'}"
            case.mkdir()
            master = start_broker(case, "master", ns.addr, {**_bench_conf(), **master_conf(role)})
            slave = (
                start_broker(case, "slave", ns.addr, {**_bench_conf(), **slave_conf()})
                if with_slave
                else None
            )
            try:
                if slave is not None:
                    wait_log(master, "asks for CommitLog offset")
                name = f"ferromq {role}" if with_slave else "ferromq, no slave"
                rows.append(asyncio.run(run_case(name, master.addr, slave.addr if slave else None, args)))
                if slave is not None and role == "ASYNC_MASTER" and args.catchup_mib:
                    row, slave = asyncio.run(catch_up(case, ns, master, slave, args.catchup_mib, args.size))
                    row["disk_write_mib_per_s"] = disk_write_rate(case, min(args.catchup_mib, 512))
                    row["vs_disk"] = row["mib_per_s"] / row["disk_write_mib_per_s"]
                    rows.append(row)
            finally:
                for p in (slave, master):
                    if p is not None:
                        p.stop()
    finally:
        ns.stop()
    return rows


def wait_log(p: Process, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not p.logged(text):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{p.name}: no {text!r} in its log\n{p.log()}")
        time.sleep(0.1)


def java_case(work: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    from apache_rocketmq import start_rocketmq

    from tests.interop.conftest import free_port

    port = free_port()
    conf = {k: v for k, v in BENCH_STORE.items()}
    master = start_rocketmq(
        work / "java-master", {**conf, "brokerRole": "SYNC_MASTER", "listenPort": str(port)}
    )
    slave = None
    try:
        slave_conf_java = {
            **conf,
            "brokerRole": "SLAVE",
            "brokerId": "1",
            "haMasterAddress": f"127.0.0.1:{port + 1}",
        }
        slave = start_rocketmq(work / "java-slave", slave_conf_java)
        # The Java slave reports its offset a heartbeat (5 s) after connecting; a SYNC_MASTER answers
        # SLAVE_NOT_AVAILABLE before that.
        wait_for_ok(master.broker_addr, lambda code: code == ResponseCode.SUCCESS)
        return [asyncio.run(run_case("Java 4.9.7 SYNC_MASTER", master.broker_addr, slave.broker_addr, args))]
    finally:
        if slave is not None:
            slave.stop()
        master.stop()


def wait_for_ok(addr: str, ok: Callable[[int], bool], timeout: float = 60) -> None:
    async def probe() -> None:
        conn = await connect(addr)
        try:
            deadline = time.monotonic() + timeout
            while True:
                reply = await conn.request(send_cmd(0, b"probe"), 10)
                if ok(reply.code):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{addr} still answers {reply.code}: {reply.remark}")
                await asyncio.sleep(0.5)
        finally:
            await conn.close()

    asyncio.run(probe())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--inflight", type=int, default=16)
    p.add_argument(
        "--rate", type=float, default=0, help="msg/s of open-loop paced sends instead of the closed loop"
    )
    p.add_argument("--catchup-mib", type=int, default=1024)
    p.add_argument("--java", action="store_true", help="also a Java 4.9.7 SYNC_MASTER with its Java slave")
    p.add_argument("--quick", action="store_true", help="smoke run: 2000 messages, 64 MiB catch-up")
    p.add_argument("--out", default="bench-results/replication_bench.json")
    p.add_argument("--dir", help="scratch directory (default: a new one under /tmp)")
    args = p.parse_args()
    if args.quick:
        args.messages, args.catchup_mib = 2000, 64
    with tempfile.TemporaryDirectory(prefix="replbench-", dir=args.dir) as tmp:
        work = Path(tmp)
        rows = ferromq_cases(work, args)
        if args.java:
            rows += java_case(work, args)
    base = next(r for r in rows if r["case"] == "ferromq ASYNC_MASTER")
    java = next((r for r in rows if r["case"].startswith("Java")), None)
    print(
        f"{'case':<26} {'msg/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'p99/async':>9} "
        f"{'lag ms p99':>10} {'lag KiB p99':>11}"
    )
    for r in rows:
        if r["case"] == "catch-up":
            continue
        print(
            f"{r['case']:<26} {r['msg_per_s']:>9.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
            f"{r['p99_ms'] / base['p99_ms']:>9.2f} {r.get('lag_ms_p99', float('nan')):>10.1f} "
            f"{r.get('lag_bytes_p99', float('nan')) / 1024:>11.1f}"
        )
    for r in rows:
        if r["case"] == "catch-up":
            print(
                f"catch-up: {r['behind_mib']:.0f} MiB in {r['seconds']:.1f} s = {r['mib_per_s']:.0f} MiB/s; "
                f"disk writes {r['disk_write_mib_per_s']:.0f} MiB/s; ratio {r['vs_disk']:.2f}"
            )
    sync = next(r for r in rows if r["case"] == "ferromq SYNC_MASTER")
    if java is not None:
        print(
            f"SYNC_MASTER p99: ferromq {sync['p99_ms']:.2f} ms, Java {java['p99_ms']:.2f} ms "
            f"(ratio {sync['p99_ms'] / java['p99_ms']:.2f})"
        )
    params = {k: v for k, v in vars(args).items() if k not in ("out", "dir")}
    write_results(args.out, {"benchmark": "replication", "params": params, "results": rows})


if __name__ == "__main__":
    main()
