"""The receive side of lite topics (RocketMQ 5.5): LitePushConsumers of the Java client 5.2.0 receiving
lite topics' messages from `ferromq serve` (local mode, its own gRPC port) and from Apache RocketMQ
5.5.0 (its broker behind its proxy in cluster mode: 5.5.0's local-mode proxy serves no lite consumer),
both with enableLmq and enableMultiDispatch, in the same run.

On each server: a LITE parent topic (1 queue) and a lite group bound to it (consumeMessageOrderly true,
`+lite.sub.client.quota` raised to the lite topic count); the Java driver (tests/interop/java5grpc,
LiteBench5.java) starts 8 LitePushConsumers of the group, each subscribing 1/8 of `--lites` lite topics
(10,000; --quick 1,000), sends one message to each lite topic and waits for them all (the warm-up: every
lite topic made and popped once), then 8 producer threads send `--count` messages (100,000; --quick
10,000) spread over the lite topics (round robin, 64-byte padding, the send time in ms in each body; async,
at most 32 in flight per thread, never two of one lite topic) while the consumers receive and ack them.

Measured over that phase (from the first send to the last message received): the server processes' CPU
(user + sys from /proc: `ferromq serve`; Java's broker + proxy JVMs, its name server apart) per message
received, messages/s, end-to-end latency (receive time minus the send time in the body: p50, p99), and
whether every message arrived once, per lite topic in order (missing, duplicates, order violations, with
samples, reported as they are). The phase's CPU includes the sends' handling: the consumers receive while
the producers send. Numbers, not pass/fail; the issue's goal: ferromq's CPU per message <= 0.25x Java's.

    .venv/bin/python benches/lite_consume_bench.py [--quick] [--lites N] [--count N] [--no-java]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benches"))
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT))

from benchlib import cpu_seconds, free_port, loadavg, ratio, serving, write_results  # noqa: E402

LMQ_CONF = {"enableLmq": "true", "enableMultiDispatch": "true"}
OUT = ROOT / "benches/results/lite_consume_vs_rocketmq.json"
CONSUMERS = 8
PRODUCERS = 8
WINDOW = 32
STALL_SECONDS = 30
JAVA_HEAP = "1g"


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + sys) of a process and of its living descendants."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            total += cpu_seconds(p)
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return total


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


async def prepare(broker_port: int, namesrv: str, parent: str, group: str, lites: int) -> None:
    """The LITE parent topic and the lite group (bound to it, orderly, its client quota raised to `lites`),
    over remoting as mqadmin 5.5.0's updateTopic / updateSubGroup send them; then waits for the route."""
    from apache_rocketmq import topic_routed

    from ferromq.protocol.codes import RequestCode as RC
    from ferromq.protocol.codes import ResponseCode as R
    from tests.integration.brokerkit import Client
    from tests.integration.test_topic_attributes import create_ext

    c = await Client().connect(broker_port)
    try:
        r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, create_ext(parent, "+message.type=LITE", 1))
        assert r.code == R.SUCCESS, r.remark
        body = {
            "groupName": group,
            "consumeEnable": True,
            "consumeMessageOrderly": True,
            "attributes": {"+lite.bind.topic": parent, "+lite.sub.client.quota": str(max(2000, lites))},
        }
        r = await c.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(body))
        assert r.code == R.SUCCESS, r.remark
        deadline = time.monotonic() + 60
        while not await asyncio.to_thread(topic_routed, namesrv, parent):
            assert time.monotonic() < deadline, f"no route for {parent}"
            await asyncio.sleep(0.1)
    finally:
        await c.close()


def drive(
    kind: str,
    endpoint: str,
    parent: str,
    group: str,
    work: Path,
    args: argparse.Namespace,
    cpu: Callable[[], dict[str, float]],
) -> dict[str, Any]:
    """Runs LiteBench5 against `endpoint`, reading the servers' CPU (`cpu()`, by process) at each PHASE
    line it prints: the first measured phase's row, its paced phase's as "paced"."""
    from tests.interop.java5build import build_grpc5_jar

    logs = work / "client-logs" / kind
    logs.mkdir(parents=True, exist_ok=True)
    cmd = ["java", f"-Drocketmq.log.root={logs}", f"-Duser.home={logs}", "-Xmx1g", "-XX:+UseParallelGC"]
    cmd += ["-cp", str(build_grpc5_jar()), "io.ferromq.interop5.LiteBench5", endpoint, parent, group]
    cmd += [str(args.lites), str(args.count), str(CONSUMERS), str(PRODUCERS), str(WINDOW)]
    cmd += [str(STALL_SECONDS), str(args.paced_count), str(args.rate)]
    err = open(logs / "driver.err", "w")
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, cwd=logs, bufsize=1
    )
    killer = threading.Timer(args.timeout, proc.kill)
    killer.start()
    marks: dict[str, dict[str, float]] = {}
    loads: dict[str, str] = {}
    result: dict[str, Any] = {}
    lines: list[str] = []
    try:
        assert proc.stdout is not None and proc.stdin is not None
        for line in proc.stdout:
            line = line.strip()
            lines.append(line)
            if line.startswith("PHASE "):
                name = line.split()[1]
                marks[name] = cpu()
                loads[name] = loadavg()
                print(f"{kind}: {name} at {time.strftime('%H:%M:%S')}", file=sys.stderr)
                proc.stdin.write("go\n")
                proc.stdin.flush()
            elif line.startswith("RESULT "):
                result = json.loads(line[len("RESULT ") :])
            elif line.startswith("{"):
                print(f"{kind}: {line}", file=sys.stderr)
        proc.wait()
    finally:
        killer.cancel()
        err.close()
    if not result:
        tail = (logs / "driver.err").read_text()[-4000:]
        raise SystemExit(f"{kind}: the driver gave no result (exit {proc.returncode}): {lines[-20:]}\n{tail}")

    def window(begin: str, end: str) -> dict[str, float]:
        if begin not in marks or end not in marks:
            return {}
        return {k: round(marks[end][k] - marks[begin][k], 2) for k in marks[begin]}

    send_errors = [
        json.loads(line)["send_error"]
        for line in (logs / "driver.err").read_text().splitlines()
        if line.startswith('{"send_error"')
    ]
    warm_cpu = sum(v for k, v in window("warm", "measure").items() if k != "namesrv")
    row = phase_row(kind, args, result["measured"], window("measure", "done"), args.count, None)
    row |= {
        "warm": {**result.get("warm", {}), "server_cpu_s": round(warm_cpu, 2)},
        "timing": result.get("timing", {}),
        "stale": result.get("stale"),
        "stale_sample": result.get("stale_sample"),
        "unknown": result.get("unknown"),
        "send_error_sample": send_errors,
        "loadavg_at": loads,
    }
    if "paced" in result:
        row["paced"] = phase_row(
            kind, args, result["paced"], window("paced", "paced_done"), args.paced_count, args.rate
        )
    return row


def phase_row(
    kind: str,
    args: argparse.Namespace,
    m: dict[str, Any],
    cpu_by_proc: dict[str, float],
    count: int,
    rate: float | None,
) -> dict[str, Any]:
    """One measured phase's numbers, its servers' CPU (the name server's apart) per message received."""
    server_cpu = sum(v for k, v in cpu_by_proc.items() if k != "namesrv")
    received = int(m["received_unique"])
    keys = ("sent", "send_errors", "received_total", "missing", "missing_lite_topics", "duplicates")
    keys += ("order_violations", "slow_over_5s", "slow_lite_topics", "complete", "seconds", "send_seconds")
    return {
        "server": kind,
        "lite_topics": args.lites,
        "consumers": CONSUMERS,
        "count": count,
        "rate": rate,
        "received": received,
        **{k: m[k] for k in keys},
        "msg_per_s": m["msg_per_s"],
        "latency_ms": m["latency_ms"],
        "server_cpu_s": round(server_cpu, 2),
        "cpu_by_process_s": cpu_by_proc,
        "cpu_us_per_msg": round(server_cpu / received * 1e6, 1) if received else None,
        "received_per_second": m["received_per_second"],
        "samples": {
            k: m[k] for k in ("missing_sample", "duplicate_sample", "order_sample", "slow_sample", "slowest")
        },
    }


def run_ferromq(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    store = work / "ferromq-store"
    conf = work / "ferromq.conf"
    conf.write_text(
        "\n".join(
            f"{k}={v}" for k, v in {**LMQ_CONF, "storePathRootDir": store, "brokerName": "lite"}.items()
        )
    )
    port, ns_port = free_port(), free_port()
    log = work / "ferromq.log"
    with serving(conf, log, port, ns_port) as broker:
        endpoint = broker.grpc_endpoint
        assert endpoint, broker.ready_line
        parent, group = f"LiteC{uuid.uuid4().hex[:6]}", f"LiteCG{uuid.uuid4().hex[:6]}"
        asyncio.run(prepare(port, f"127.0.0.1:{ns_port}", parent, group, args.lites))
        row = drive("ferromq", endpoint, parent, group, work, args, lambda: {"serve": tree_cpu(broker.pid)})
        row["rss_mib"] = {"serve": rss_mib(broker.pid)}
    row["log_warnings"] = [
        line for line in log.read_text().splitlines() if " WARN" in line or "ERROR" in line
    ][-20:]
    return row


def run_java(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    from apache_rocketmq import ROCKETMQ_55_VERSION, start_rocketmq, start_rocketmq_proxy_cluster

    mq = start_rocketmq(work / "java-broker", dict(LMQ_CONF), version=ROCKETMQ_55_VERSION, heap=JAVA_HEAP)
    try:
        proxy = start_rocketmq_proxy_cluster(
            work / "java-proxy", mq.namesrv, version=ROCKETMQ_55_VERSION, heap=JAVA_HEAP
        )
        try:
            assert proxy.proc is not None
            proxy_pid = proxy.proc.pid
            port = int(mq.broker_addr.rsplit(":", 1)[1])
            parent, group = f"LiteJ{uuid.uuid4().hex[:6]}", f"LiteJG{uuid.uuid4().hex[:6]}"
            asyncio.run(prepare(port, mq.namesrv, parent, group, args.lites))

            def cpu() -> dict[str, float]:
                return {
                    "broker": tree_cpu(mq.broker_pid),
                    "proxy": tree_cpu(proxy_pid),
                    "namesrv": tree_cpu(mq.namesrv_pid),
                }

            row = drive("rocketmq-5.5.0", proxy.grpc_endpoint, parent, group, work, args, cpu)
            row["rss_mib"] = {"broker": rss_mib(mq.broker_pid), "proxy": rss_mib(proxy_pid)}
        finally:
            proxy.stop()
    finally:
        mq.stop(kill=True)
    return row


def table(rows: list[dict[str, Any]], ratios: dict[str, float | None]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"lite topics, receive side: {rows[0]['lite_topics']:,} lite topics, {CONSUMERS} consumers"
    )
    for col in ("server", "sent", "received", "missing", "dup", "order viol.", "slow >5s", "s", "msg/s"):
        t.add_column(col, justify="left" if col == "server" else "right")
    for col in ("p50 ms", "p99 ms", "server CPU s", "CPU us/msg"):
        t.add_column(col, justify="right")
    runs = [r for row in rows for r in (row, row.get("paced")) if r]
    for r in runs:
        lat = r["latency_ms"]
        t.add_row(
            r["server"] + (f" paced {r['rate']:g}/s" if r["rate"] else " max"),
            f"{r['sent']:,}",
            f"{r['received']:,}",
            f"{r['missing']:,}",
            f"{r['duplicates']:,}",
            f"{r['order_violations']:,}",
            f"{r['slow_over_5s']:,}",
            str(r["seconds"]),
            f"{r['msg_per_s']:,}" if r["msg_per_s"] is not None else "-",
            str(lat.get("p50", "-")),
            str(lat.get("p99", "-")),
            str(r["server_cpu_s"]),
            str(r["cpu_us_per_msg"]),
        )
    console = Console(width=160)
    console.print(t)
    if ratios:
        console.print("ferromq / rocketmq-5.5.0:", ratios)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1,000 lite topics, 10,000 messages")
    p.add_argument("--lites", type=int, default=None, help="lite topics (10,000)")
    p.add_argument("--count", type=int, default=None, help="messages of the measured phase (100,000)")
    p.add_argument("--rate", type=float, default=300.0, help="msg/s of the paced run (latency)")
    p.add_argument("--paced-count", type=int, default=None, help="messages of the paced run (9,000; 0: none)")
    p.add_argument("--no-java", action="store_true")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds one server's driver may take")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    args.lites = args.lites or (1_000 if args.quick else 10_000)
    args.count = args.count or (10_000 if args.quick else 100_000)
    if args.paced_count is None:
        args.paced_count = 3_000 if args.quick else 9_000
    rows: list[dict[str, Any]] = []
    load_before = loadavg()
    with tempfile.TemporaryDirectory(prefix="lite-consume-bench-") as tmp:
        work = Path(tmp)
        rows.append(run_ferromq(work, args))
        if not args.no_java:
            rows.append(run_java(work, args))
    ratios: dict[str, float | None] = {}
    if len(rows) == 2:
        f, j = rows
        ratios = {
            "cpu_us_per_msg": ratio(f["cpu_us_per_msg"], j["cpu_us_per_msg"]),
            "msg_per_s": ratio(f["msg_per_s"], j["msg_per_s"]),
            "latency_p50_ms_max": ratio(f["latency_ms"].get("p50"), j["latency_ms"].get("p50")),
            "latency_p99_ms_max": ratio(f["latency_ms"].get("p99"), j["latency_ms"].get("p99")),
        }
        if f.get("paced") and j.get("paced"):
            fp, jp = f["paced"], j["paced"]
            ratios["paced_cpu_us_per_msg"] = ratio(fp["cpu_us_per_msg"], jp["cpu_us_per_msg"])
            ratios["paced_latency_p50_ms"] = ratio(fp["latency_ms"].get("p50"), jp["latency_ms"].get("p50"))
            ratios["paced_latency_p99_ms"] = ratio(fp["latency_ms"].get("p99"), jp["latency_ms"].get("p99"))
    goal = {"cpu_us_per_msg_ratio_at_most": 0.25, "met": None}
    if ratios.get("cpu_us_per_msg") is not None:
        goal["met"] = ratios["cpu_us_per_msg"] <= 0.25  # type: ignore[operator]
    table(rows, ratios)
    write_results(
        args.out,
        {
            "benchmark": "lite_consume_bench",
            "quick": args.quick,
            "setup": {
                "lite_topics": args.lites,
                "count": args.count,
                "consumers": CONSUMERS,
                "producers": PRODUCERS,
                "window_per_producer": WINDOW,
                "stall_seconds": STALL_SECONDS,
                "paced_rate": args.rate,
                "paced_count": args.paced_count,
                "client": "rocketmq-client-java 5.2.0 (LitePushConsumer), one JVM",
                "ferromq": "ferromq serve, local mode (its own gRPC port)",
                "java": "Apache RocketMQ 5.5.0 name server + broker, proxy in cluster mode (1g heaps)",
                "loadavg_before": load_before,
            },
            "results": rows,
            "ratios": ratios,
            "goal": goal,
        },
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
