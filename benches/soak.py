"""Soak: a broker left running under steady load on a small disk (issue 12).

A `ferromq serve` runs on its own small tmpfs (in a private mount namespace, `unshare -Urm`), so
retention has to delete CommitLog, consume-queue and index files to keep going: once the disk is
above diskMaxUsedSpaceRatio (75 %) files are deleted whatever their age, because the soak lowers
diskSpaceCleanForciblyRatio to 70 (as RocketMQ's CleanCommitLogService decides it). A
producer sends at a fixed rate for the whole run and a push consumer reads everything. Every minute
the table gets a row: the broker's RSS and anonymous RSS, messages sent and received, consumer lag,
disk use, files deleted so far and errors. At the end: the RSS slope per hour (least squares over
the rows after the warm-up), totals, and the JSON in benches/results/soak.json.

    .venv/bin/python benches/soak.py                     # 30 minutes, 1000 msg/s of 1 KiB
    .venv/bin/python benches/soak.py --minutes 3 --rate 500 --json /tmp/soak.json

What must hold: errors 0 (every send acknowledged, every message received once), RSS flat
(the slope is a small fraction of the RSS), lag bounded, files deleted > 0."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchlib import write_results

from ferromq.client import ConsumeStatus, Message, Producer, PushConsumer
from ferromq.client.admin import Admin

REPO = Path(__file__).resolve().parents[1]
TOPIC = "Soak"
READY = re.compile(r"name server 127\.0\.0\.1:(\d+), broker \S+ on 127\.0\.0\.1:(\d+)")
WARMUP_FRACTION = 0.2


@dataclass
class Row:
    minute: float
    rss_mib: float
    rss_anon_mib: float
    sent: int
    received: int
    lag: int
    disk_used_pct: float
    commitlog_files: int
    files_deleted: int
    errors: int


HEADER = (
    f"{'min':>6} {'RSS MiB':>8} {'anon MiB':>8} {'sent':>9} {'received':>9} {'lag':>6} "
    f"{'disk %':>6} {'CL files':>8} {'deleted':>7} {'errors':>6}"
)


def format_row(r: Row) -> str:
    return (
        f"{r.minute:>6.1f} {r.rss_mib:>8.1f} {r.rss_anon_mib:>8.1f} {r.sent:>9} {r.received:>9} {r.lag:>6} "
        f"{r.disk_used_pct:>6.1f} {r.commitlog_files:>8} {r.files_deleted:>7} {r.errors:>6}"
    )


def broker_conf(store: Path) -> str:
    return "\n".join(
        [
            "brokerClusterName=SoakCluster",
            "brokerName=soak-a",
            f"storePathRootDir={store}",
            "mappedFileSizeCommitLog=8388608",
            "mappedFileSizeConsumeQueue=120000",
            "maxHashSlotNum=20000",
            "maxIndexNum=80000",
            # Files go by disk use alone (nothing is 72 hours old): above 75 %, whatever their age.
            "diskSpaceCleanForciblyRatio=70",
            "cleanFileForciblyEnable=true",
            "cleanResourceInterval=1000",
            "deleteCommitLogFilesInterval=0",
            "deleteConsumeQueueFilesInterval=0",
            "",
        ]
    )


def proc_status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon"):
            out[key] = int(value.split()[0]) * 1024
    return out


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (minute, value), per hour."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    if den == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / den * 60


class Load:
    """A producer at a fixed rate and a push consumer that checks every message arrives once."""

    def __init__(self, namesrv: str, rate: int, size: int) -> None:
        self.namesrv, self.rate, self.size = namesrv, rate, size
        self.sent = 0
        self.acked = 0
        self.errors = 0
        self.first_error: str | None = None
        self.seen: set[int] = set()
        self.duplicates = 0
        self.stop = asyncio.Event()

    def error(self, what: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = what
            print(f"error: {what}", file=sys.stderr)

    async def produce(self) -> None:
        window = asyncio.Semaphore(256)
        pad = b"." * self.size
        async with Producer("soak-producer", self.namesrv, send_timeout=10.0) as producer:
            start = time.monotonic()
            while not self.stop.is_set():
                due = start + self.sent / self.rate
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await window.acquire()
                n = self.sent
                self.sent += 1
                body = f"{n:012d}".encode() + pad[12:]

                def done(result: Any, error: BaseException | None, n: int = n) -> None:
                    window.release()
                    if error is not None:
                        self.error(f"send {n}: {error}")
                    else:
                        self.acked += 1

                producer.send_async(Message(TOPIC, body, tags="soak", keys=[f"k{n}"]), done)
            for _ in range(256):  # every send answered (each has its own timeout)
                await window.acquire()

    def consumer(self) -> PushConsumer:
        consumer = PushConsumer("soak-consumer", self.namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        consumer.subscribe(TOPIC, "*")

        async def on_messages(msgs: list[Any]) -> ConsumeStatus:
            for m in msgs:
                n = int(m.body[:12])
                if n in self.seen:
                    self.duplicates += 1
                self.seen.add(n)
            return ConsumeStatus.CONSUME_SUCCESS

        consumer.register_listener(on_messages)
        return consumer


async def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    mount = work / "disk"
    mount.mkdir()
    store = mount / "store"
    conf = work / "broker.conf"
    conf.write_text(broker_conf(store))
    script = 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"'
    cmd = ["unshare", "-Urm", "sh", "-c", script, "sh", args.disk, str(mount)]
    cmd += [
        str(Path(sys.executable).with_name("ferromq")),
        "serve",
        "-c",
        str(conf),
        "-p",
        "0",
        "--namesrv-port",
        "0",
    ]
    log = (work / "broker.log").open("w")
    broker = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO)
    assert broker.stdout is not None
    ready = None
    deadline = time.monotonic() + 60
    while ready is None and time.monotonic() < deadline:
        line = broker.stdout.readline()
        if not line:
            break
        ready = READY.search(line)
    if ready is None:
        broker.kill()
        log.close()
        raise SystemExit("the broker did not start:\n" + (work / "broker.log").read_text()[-3000:])
    namesrv = f"127.0.0.1:{ready.group(1)}"
    disk = Path(f"/proc/{broker.pid}/root") / str(mount).lstrip("/")

    load = Load(namesrv, args.rate, args.size)
    rows: list[Row] = []
    async with Admin(namesrv) as admin:
        await admin.create_topic(TOPIC, queue_nums=4)
    consumer = load.consumer()
    started = time.monotonic()
    async with consumer:
        producing = asyncio.create_task(load.produce())
        known: set[str] = set()
        deleted_seen: set[str] = set()
        end = started + args.minutes * 60
        next_row = started
        while time.monotonic() < end:
            await asyncio.sleep(min(1.0, max(0.0, next_row - time.monotonic())))
            files = {p.name for p in (disk / "store" / "commitlog").iterdir()}
            deleted_seen |= known - files
            known |= files
            if time.monotonic() < next_row:
                continue
            next_row += args.row_seconds
            st = proc_status(broker.pid)
            vfs = os.statvfs(disk)
            used = (vfs.f_blocks - vfs.f_bfree) / vfs.f_blocks * 100
            row = Row(
                minute=round((time.monotonic() - started) / 60, 2),
                rss_mib=round(st["VmRSS"] / 2**20, 1),
                rss_anon_mib=round(st["RssAnon"] / 2**20, 1),
                sent=load.acked,
                received=len(load.seen),
                lag=load.acked - len(load.seen),
                disk_used_pct=round(used, 1),
                commitlog_files=len(files),
                files_deleted=len(deleted_seen),
                errors=load.errors,
            )
            rows.append(row)
            print(format_row(row), flush=True)
        load.stop.set()
        await producing
        drain_deadline = time.monotonic() + 60
        while len(load.seen) < load.acked and time.monotonic() < drain_deadline:
            await asyncio.sleep(0.2)
    broker.send_signal(signal.SIGTERM)
    try:
        stop_code = broker.wait(timeout=60)
    except subprocess.TimeoutExpired:
        broker.kill()
        stop_code = None
    log.close()

    missing = load.acked - len(load.seen)
    broker_log = (work / "broker.log").read_text()
    print(f"\nsoak: {args.rate} msg/s of {args.size} B on a {args.disk} disk, {args.minutes} min")
    print(HEADER)
    for r in rows:
        print(format_row(r))
    after = [r for r in rows if r.minute >= args.minutes * WARMUP_FRACTION]
    summary = {
        "rss_slope_mib_per_hour": slope_per_hour([(r.minute, r.rss_mib) for r in after]),
        "rss_anon_slope_mib_per_hour": slope_per_hour([(r.minute, r.rss_anon_mib) for r in after]),
        "rss_anon_peak_mib": max((r.rss_anon_mib for r in rows), default=None),
        "sent_acked": load.acked,
        "received_unique": len(load.seen),
        "missing": missing,
        "duplicates": load.duplicates,
        "errors": load.errors,
        "first_error": load.first_error,
        "max_lag": max((r.lag for r in rows), default=None),
        "commitlog_files_deleted": rows[-1].files_deleted if rows else 0,
        "broker_exit": stop_code,
        "broker_log_errors": [line for line in broker_log.splitlines() if "ERROR" in line][:20],
    }
    for k, v in summary.items():
        print(f"{k}: {v}")
    return {
        "params": {"minutes": args.minutes, "rate": args.rate, "size": args.size, "disk": args.disk},
        "rows": [asdict(r) for r in rows],
        "summary": summary,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=int, default=1000, help="messages per second")
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--disk", default="256m", help="tmpfs size for the store")
    ap.add_argument("--row-seconds", type=float, default=60.0, help="seconds between table rows")
    ap.add_argument("--json", default=str(REPO / "benches" / "results" / "soak.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ferromq-soak-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    write_results(args.json, result)
    s = result["summary"]
    if s["errors"] or s["missing"] or s["duplicates"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
