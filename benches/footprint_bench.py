"""Footprint of an idle broker and of opening a store: disk, memory, time to ready.

For each profile, `ferromq serve` starts on free 127.0.0.1 ports with a fresh store; once it is
ready and its store files are settled, the bench reads the store's disk use (allocated blocks, and
the files' apparent length) and the process's RSS; then it sends a light load (1,000 messages of
1 KiB with keys, read back by a pull consumer) and measures again. The `small` profile is what
`ferromq serve` uses without a config file; `rocketmq` is RocketMQ's defaults (1 GiB CommitLog
files, a 420 MB index), what any `-c broker.conf` starts from. A second part opens a
`MessageStore` with RocketMQ's defaults in a fresh process and writes one message.

    .venv/bin/python benches/footprint_bench.py [--json bench-results/footprint_bench.json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import write_results

from ferromq.client import Message, PullConsumer
from ferromq.client.blocking import BlockingProducer

READY_LINE = "ferromq serving:"
MIB = 1024 * 1024

OPEN_STORE = """
import resource, sys, time
t0 = time.perf_counter()
from ferromq.store import MessageStore
with MessageStore(sys.argv[1]) as store:
    opened = time.perf_counter() - t0
    store.put("Bench", 0, b"x" * 1024, keys=["k"])
    put = time.perf_counter() - t0
print(opened, put, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def disk_usage(root: Path) -> tuple[int, int]:
    """(allocated bytes, apparent bytes) of every file under `root`."""
    allocated = apparent = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                st = os.stat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            allocated += st.st_blocks * 512
            apparent += st.st_size
    return allocated, apparent


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def settled(root: Path, timeout: float = 30.0) -> tuple[int, int]:
    """Disk use once two looks 0.5 s apart agree (the warmer has made its files)."""
    deadline = time.monotonic() + timeout
    last = disk_usage(root)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = disk_usage(root)
        if now == last:
            return now
        last = now
    return last


def light_load(namesrv: str, n: int = 1000) -> None:
    with BlockingProducer("footprint-bench", namesrv) as producer:
        for i in range(n):
            producer.send(Message("FootprintBench", b"x" * 1024, tags="T", keys=[f"k{i}"]))

    async def read_back() -> int:
        got = 0
        async with PullConsumer("footprint-bench-reader", namesrv) as consumer:
            consumer.assign(await consumer.fetch_queues("FootprintBench"))
            deadline = time.monotonic() + 30
            while got < n and time.monotonic() < deadline:
                got += len(await consumer.poll(timeout=1.0))
        return got

    got = asyncio.run(read_back())
    if got < n:
        raise RuntimeError(f"read back {got} of {n} messages")


def serve_profile(profile: str, work: Path) -> dict[str, object]:
    store = work / f"store-{profile}"
    log_path = work / f"serve-{profile}.log"
    ns_port, port = free_port(), free_port()
    cmd = [
        str(Path(sys.executable).with_name("ferromq")),
        "serve",
        "--store",
        str(store),
        "--namesrv-port",
        str(ns_port),
        "-p",
        str(port),
        # Its gRPC port too (any free one): `ferromq serve` as a user runs it.
        "--grpc-port",
        "0",
    ]
    if profile == "rocketmq":
        conf = work / "empty-broker.conf"
        conf.write_text("# RocketMQ's defaults\n")
        cmd += ["-c", str(conf)]
    started = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while READY_LINE not in log_path.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ferromq serve did not start:\n{log_path.read_text(errors='replace')}")
            time.sleep(0.02)
        ready_s = time.perf_counter() - started
        idle_disk, idle_apparent = settled(store)
        idle_rss = rss(proc.pid)
        light_load(f"127.0.0.1:{ns_port}")
        used_disk, used_apparent = settled(store)
        used_rss = rss(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    return {
        "case": f"ferromq serve ({profile} profile)",
        "ready_s": ready_s,
        "idle_disk_bytes": idle_disk,
        "idle_apparent_bytes": idle_apparent,
        "idle_rss_bytes": idle_rss,
        "loaded_disk_bytes": used_disk,
        "loaded_apparent_bytes": used_apparent,
        "loaded_rss_bytes": used_rss,
    }


def open_store(work: Path) -> dict[str, object]:
    root = work / "store-open"
    out = subprocess.run(
        [sys.executable, "-c", OPEN_STORE, str(root)], capture_output=True, text=True, check=True, timeout=120
    )
    opened, put, maxrss = out.stdout.split()
    disk, apparent = disk_usage(root)
    return {
        "case": "MessageStore() with RocketMQ's defaults, one put",
        "ready_s": float(opened),
        "put_done_s": float(put),
        "loaded_disk_bytes": disk,
        "loaded_apparent_bytes": apparent,
        "loaded_rss_bytes": int(maxrss),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default="bench-results/footprint_bench.json")
    ap.add_argument("--dir", help="parent of the scratch directory")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ferromq-footprint-", dir=args.dir) as tmp:
        work = Path(tmp)
        results = [serve_profile("small", work), serve_profile("rocketmq", work), open_store(work)]

    def mib(v: object) -> str:
        return "-" if v is None else f"{int(v) / MIB:,.0f}"  # type: ignore[call-overload]

    print(f"\n{'case':<50} {'ready s':>8} {'idle disk':>10} {'idle RSS':>9} {'disk':>8} {'RSS':>8}  (MiB)")
    for r in results:
        idle = f"{mib(r.get('idle_disk_bytes')):>10} {mib(r.get('idle_rss_bytes')):>9}"
        loaded = f"{mib(r['loaded_disk_bytes']):>8} {mib(r['loaded_rss_bytes']):>8}"
        print(f"{r['case']:<50} {r['ready_s']:>8.2f} {idle} {loaded}")
    print("idle: just started; disk/RSS: after 1,000 x 1 KiB sent and read back (one put for MessageStore)")
    write_results(args.json, {"bench": "footprint", "results": results})


if __name__ == "__main__":
    main()
