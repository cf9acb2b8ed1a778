"""Lite topics' footprint (RocketMQ 5.5, issue 43): N lite topics, each made by one message
(`__LITE_TOPIC` lt0 .. lt<N-1>, sent by crates/loadgen over remoting, 4 connections x 64 in flight,
64-byte bodies), on `ferromq serve` and on Apache RocketMQ 5.5.0's broker, both with enableLmq and
enableMultiDispatch, in the same run. For each: the time to make them (msg/s), the broker's CPU per
message, and what the N lite topics cost it: RSS, open file descriptors and disk (allocated blocks of
the store), after minus before.

Java keeps a consume-queue directory and file per lite topic (each a 6 MB mapped file by default), and
makes them slowly (here about ten a second: 1,762 of 2,000 in 180 s), so it runs the smaller count
only (`--java-count`, 2,000 by default) within `--java-timeout`, and says how many of its sends were
answered; ferromq runs that count and `--count` (1,000,000 by default). Numbers, not pass/fail.

    .venv/bin/python benches/lite_bench.py [--quick] [--count N] [--java-count N] [--no-java]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

from benchlib import cpu_seconds, free_port, render, serving, write_results
from hot_path_bench import native_loadgen

TOPIC = "LiteBench"
LMQ_CONF = {"enableLmq": "true", "enableMultiDispatch": "true"}
OUT = Path("benches/results/lite_vs_rocketmq.json")


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def disk(root: Path) -> int:
    """Bytes of blocks the files under `root` hold (sparse files count what they use)."""
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total


def measure(kind: str, port: int, pid: int, store: Path, count: int, timeout: float) -> dict[str, Any]:
    before = {"rss": rss(pid), "fds": fds(pid), "disk": disk(store)}
    cpu0 = cpu_seconds(pid)
    cmd = [str(native_loadgen()), "--port", str(port), "--topic", TOPIC, "--queues", "4", "--size", "64"]
    cmd += ["--connections", "4", "--inflight", "64", "--lite-topics", str(count), "--count", str(count)]
    cmd += ["--seconds", str(timeout)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{kind}: the load failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")
    load = json.loads(lines[-1][len("RESULT ") :])
    cpu = cpu_seconds(pid) - cpu0
    time.sleep(2)  # let the store's flushes settle before the files are measured
    after = {"rss": rss(pid), "fds": fds(pid), "disk": disk(store)}
    sent = int(load["count"])
    if sent < count:
        print(f"{kind}: {sent:,} of {count:,} sends answered in {timeout:.0f} s", file=sys.stderr)
    return {
        "broker": kind,
        "lite_topics": count,
        "acked": sent,
        "complete": sent >= count,
        "errors": load["errors"],
        "seconds": round(load["elapsed"], 2),
        "msg_per_s": round(sent / load["elapsed"]) if load["elapsed"] else None,
        "p99_ms": round(load["p99_ms"], 2),
        "cpu_us_per_msg": round(cpu / sent * 1e6, 1) if sent else None,
        "rss_mib": round(after["rss"] / 2**20, 1),
        "rss_bytes_per_lite_topic": round((after["rss"] - before["rss"]) / count),
        "fds_added": after["fds"] - before["fds"],
        "disk_mib_added": round((after["disk"] - before["disk"]) / 2**20, 1),
        "disk_bytes_per_lite_topic": round((after["disk"] - before["disk"]) / count),
    }


def run_ferromq(work: Path, count: int, timeout: float) -> dict[str, Any]:
    store = work / f"ferromq-{count}"
    shutil.rmtree(store, ignore_errors=True)
    conf = work / "ferromq.conf"
    conf.write_text(
        "\n".join(
            f"{k}={v}" for k, v in {**LMQ_CONF, "storePathRootDir": store, "brokerName": "lite"}.items()
        )
    )
    port, ns_port = free_port(), free_port()
    with serving(conf, work / f"ferromq-{count}.log", port, ns_port) as broker:
        time.sleep(1)
        return measure("ferromq", port, broker.pid, store, count, timeout)


def run_java(work: Path, count: int, timeout: float) -> dict[str, Any]:
    from apache_rocketmq import ROCKETMQ_55_VERSION, start_rocketmq

    mq = start_rocketmq(work / f"java-{count}", dict(LMQ_CONF), version=ROCKETMQ_55_VERSION, heap="1g")
    try:
        port = int(mq.broker_addr.rsplit(":", 1)[1])
        time.sleep(2)
        return measure("rocketmq-5.5.0", port, mq.broker_pid, mq.store, count, timeout)
    finally:
        mq.stop(kill=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="500 and 20,000 lite topics")
    p.add_argument("--count", type=int, default=1_000_000, help="ferromq's large count")
    p.add_argument("--java-count", type=int, default=2_000, help="the count both run")
    p.add_argument("--no-java", action="store_true")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds ferromq's load may take")
    p.add_argument("--java-timeout", type=float, default=180.0, help="seconds Java's load may take")
    args = p.parse_args()
    small, large = (500, 20_000) if args.quick else (args.java_count, args.count)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lite-bench-") as tmp:
        work = Path(tmp)
        rows.append(run_ferromq(work, small, args.timeout))
        if not args.no_java:
            rows.append(run_java(work, small, args.java_timeout))
        rows.append(run_ferromq(work, large, args.timeout))
    head = ["broker", "lite topics", "answered", "s", "msg/s", "p99 ms", "CPU us/msg", "RSS MiB"]
    head += ["RSS B/topic", "fds added", "disk MiB", "disk B/topic"]
    table = [
        [
            r["broker"],
            f"{r['lite_topics']:,}",
            f"{r['acked']:,}",
            str(r["seconds"]),
            f"{r['msg_per_s']:,}",
            str(r["p99_ms"]),
            str(r["cpu_us_per_msg"]),
            str(r["rss_mib"]),
            f"{r['rss_bytes_per_lite_topic']:,}",
            str(r["fds_added"]),
            str(r["disk_mib_added"]),
            f"{r['disk_bytes_per_lite_topic']:,}",
        ]
        for r in rows
    ]
    print(render(head, table))
    java = next((r for r in rows if r["broker"].startswith("rocketmq")), None)
    same = next(
        (r for r in rows if r["broker"] == "ferromq" and java and r["lite_topics"] == java["lite_topics"]),
        None,
    )
    ratios = {}
    if java and same:
        for key in ("rss_bytes_per_lite_topic", "disk_bytes_per_lite_topic", "cpu_us_per_msg"):
            if java[key]:
                ratios[key] = round(same[key] / java[key], 3)
        print("ferromq / rocketmq at the same count:", ratios)
    write_results(OUT, {"benchmark": "lite_bench", "quick": args.quick, "results": rows, "ratios": ratios})
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
