"""Storage-engine benchmarks through the Python API (`ferromq.store.MessageStore`).

Numbers, not tests: nothing here asserts on timings. Prints one plain-text table and writes a
JSON file (parameters, environment, results) so that runs can be compared. Everything runs on
local files in a scratch directory under the temp dir (or --dir) that is removed at the end.

    .venv/bin/python benches/store_bench.py [--quick] [--json PATH]

See benches/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ferromq import _store
from ferromq.store import FlushDiskType, MessageStore

TOPIC = "BenchTopic"
MIB = 1024 * 1024
PROPS_PREFIX = "TAGS\x01TagA\x02KEYS\x01k123\x02UNIQ_KEY\x01"
# Record layout of RocketMQ 4.x with IPv4 hosts: fixed fields + body + topic + properties.
RECORD_FIXED = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2

GROUPS = ("put", "batch", "read", "fsync", "sync")


def record_len(body_len: int, props_len: int) -> int:
    return RECORD_FIXED + body_len + len(TOPIC) + props_len


def uniq_props(stream: int, n: int) -> str:
    """TAGS, KEYS and a 32-hex-digit UNIQ_KEY unique per (stream, n)."""
    return f"{PROPS_PREFIX}7F000001{os.getpid() & 0xFFFF:04X}{stream & 0xFFFF:04X}{n:016X}"


PROPS_LEN = len(uniq_props(0, 0))


def make_body(n: int) -> bytes:
    return bytes(ord("a") + i % 26 for i in range(n))


# ---------------------------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------------------------


@dataclass
class Params:
    quick: bool
    put_sizes: list[int]
    put_count: dict[int, int]
    batch_body: int
    batch_sizes: list[int]
    batch_messages: int
    file_size: int
    sync_body: int
    sync_threads: list[int]
    sync_seconds: float
    fsync_seconds: float
    read_batch: int
    read_max_seconds: float
    max_hash_slot_num: int
    max_index_num: int

    @classmethod
    def make(cls, quick: bool) -> Params:
        if quick:
            return cls(
                quick=True,
                put_sizes=[100, 1024],
                put_count={100: 20_000, 1024: 20_000},
                batch_body=100,
                batch_sizes=[1000, 10_000],
                batch_messages=200_000,
                file_size=16 * MIB,
                sync_body=1024,
                sync_threads=[1, 8, 64],
                sync_seconds=0.5,
                fsync_seconds=0.5,
                read_batch=32,
                read_max_seconds=2.0,
                max_hash_slot_num=100_000,
                max_index_num=1_000_000,
            )
        return cls(
            quick=False,
            put_sizes=[100, 1024],
            put_count={100: 1_000_000, 1024: 1_000_000},
            batch_body=100,
            batch_sizes=[1000, 10_000],
            batch_messages=5_000_000,
            file_size=256 * MIB,
            sync_body=1024,
            sync_threads=[1, 8, 64],
            sync_seconds=3.0,
            fsync_seconds=3.0,
            read_batch=32,
            read_max_seconds=10.0,
            max_hash_slot_num=5_000_000,
            max_index_num=20_000_000,
        )


# ---------------------------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------------------------


def _run(cmd: Sequence[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout or out.stderr).strip()


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _cpu_model() -> str | None:
    info = _read("/proc/cpuinfo") or ""
    for line in info.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def _mem_total() -> int | None:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def _filesystem(path: str) -> dict[str, str] | None:
    real = os.path.realpath(path)
    best: tuple[str, str, str, str] | None = None
    for line in (_read("/proc/mounts") or "").splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        dev, mount, fstype, opts = parts[:4]
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) > len(best[1])):
            best = (dev, mount, fstype, opts)
    if best is None:
        return None
    return {"device": best[0], "mount": best[1], "type": best[2], "options": best[3]}


def disk_stats(device: str | None) -> tuple[int, int, int] | None:
    """(writes, bytes written, flushes) of a block device; whole-device counters, so they
    include any other process's I/O on the same disk."""
    if not device:
        return None
    name = device.rsplit("/", 1)[-1]
    for line in (_read("/proc/diskstats") or "").splitlines():
        f = line.split()
        if len(f) > 7 and f[2] == name:
            flushes = int(f[18]) if len(f) > 18 else 0
            return int(f[7]), int(f[9]) * 512, flushes
    return None


def disk_delta(before: tuple[int, int, int] | None, device: str | None, msgs: int) -> dict[str, Any]:
    after = disk_stats(device)
    if before is None or after is None:
        return {}
    w, b, fl = (after[i] - before[i] for i in range(3))
    return {
        "device_writes": w,
        "device_write_bytes": b,
        "device_flushes": fl,
        "device_write_bytes_per_msg": b / max(msgs, 1),
    }


def environment(scratch: str) -> dict[str, Any]:
    commit = _run(["git", "rev-parse", "HEAD"])
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "mem_total_bytes": _mem_total(),
        "kernel": platform.release(),
        "loadavg_at_start": _read("/proc/loadavg"),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "rustc": _run(["rustc", "--version"]),
        "ferromq_store_version": _store.__version__,
        "extension_build_profile": _store.build_profile,
        "extension_file": _store.__file__,
        "extension_mtime_utc": dt.datetime.fromtimestamp(
            os.path.getmtime(_store.__file__ or ""), dt.UTC
        ).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
        "scratch_dir": scratch,
        "filesystem": _filesystem(scratch),
    }


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------


@dataclass
class Row:
    bench: str
    body: int | None
    threads: int
    batch: int
    count: int
    seconds: float
    rate: float
    mb_per_sec: float | None
    notes: str = ""
    record: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "bench": self.bench,
            "body_bytes": self.body,
            "record_bytes": self.record,
            "threads": self.threads,
            "batch": self.batch,
            "count": self.count,
            "seconds": round(self.seconds, 6),
            "per_sec": round(self.rate, 3),
            "mb_per_sec": None if self.mb_per_sec is None else round(self.mb_per_sec, 3),
            "notes": self.notes,
            **self.extra,
        }


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.0f}"


def table(rows: list[Row]) -> str:
    header = ["benchmark", "body", "thr", "batch", "count", "secs", "msg/s", "MB/s", "notes"]
    cells = [
        [
            r.bench,
            "-" if r.body is None else str(r.body),
            str(r.threads),
            str(r.batch),
            str(r.count),
            f"{r.seconds:.2f}",
            fmt_rate(r.rate),
            "-" if r.mb_per_sec is None else f"{r.mb_per_sec:.0f}",
            r.notes,
        ]
        for r in rows
    ]
    widths = [max(len(c[i]) for c in [header, *cells]) for i in range(len(header))]

    def line(c: list[str]) -> str:
        parts = [s.ljust(widths[i]) if i in (0, len(c) - 1) else s.rjust(widths[i]) for i, s in enumerate(c)]
        return "  ".join(parts).rstrip()

    out = [line(header), "-" * (sum(widths) + 2 * (len(widths) - 1))]
    out += [line(c) for c in cells]
    return "\n".join(out) + "\n"


def percentile(sorted_values: list[float], p: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[round((len(sorted_values) - 1) * p)]


def progress(r: Row) -> None:
    body = "-" if r.body is None else r.body
    print(
        f"  {r.bench:<30} body {body:>5}  thr {r.threads:>2}  batch {r.batch:>5}: "
        f"{fmt_rate(r.rate):>10}/s  {r.notes}",
        file=sys.stderr,
        flush=True,
    )


def quiesce() -> None:
    """Writes back dirty pages so a measurement does not pay for the previous one's I/O."""
    os.sync()
    time.sleep(0.2)


# ---------------------------------------------------------------------------------------------
# Benchmarks
# ---------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, p: Params, scratch: str) -> None:
        self.p = p
        self.scratch = scratch
        self.n_stores = 0
        fs = _filesystem(scratch)
        self.device = fs["device"] if fs else None

    def open(self, flush: FlushDiskType) -> tuple[MessageStore, str]:
        self.n_stores += 1
        root = os.path.join(self.scratch, f"store-{self.n_stores}")
        store = MessageStore(
            root,
            mapped_file_size_commitlog=self.p.file_size,
            flush_disk_type=flush,
            max_hash_slot_num=self.p.max_hash_slot_num,
            max_index_num=self.p.max_index_num,
        )
        return store, root

    @staticmethod
    def dispose(store: MessageStore, root: str) -> float:
        t0 = time.perf_counter()
        store.close()
        close_secs = time.perf_counter() - t0
        shutil.rmtree(root, ignore_errors=True)
        return close_secs

    # -- single puts, then reads of the same store ------------------------------------------

    def put_single(self, body_len: int, read: bool) -> tuple[Row, Row | None]:
        n = self.p.put_count[body_len]
        body = make_body(body_len)
        props = [uniq_props(0, i) for i in range(n)]  # built before the timed region
        store, root = self.open(FlushDiskType.ASYNC_FLUSH)
        put = store.put
        t0 = time.perf_counter()
        for i in range(n):
            put(TOPIC, 0, body, properties=props[i])
        secs = time.perf_counter() - t0
        del props
        rec = record_len(body_len, PROPS_LEN)
        row = Row(
            bench="ASYNC put",
            body=body_len,
            threads=1,
            batch=1,
            count=n,
            seconds=secs,
            rate=n / secs,
            mb_per_sec=n * rec / secs / 1e6,
            notes=f"{n * rec / self.p.file_size:.1f} CommitLog files",
            record=rec,
        )
        read_row = self.read_scan(store, body_len, rec) if read else None
        row.extra["close_secs"] = self.dispose(store, root)
        return row, read_row

    def read_scan(self, store: MessageStore, body_len: int, rec: int) -> Row:
        get = store.get
        offset = msgs = nbytes = calls = 0
        deadline = time.perf_counter() + self.p.read_max_seconds
        t0 = time.perf_counter()
        while True:
            r = get(TOPIC, 0, offset, self.p.read_batch)
            if r.status != "FOUND":
                break
            calls += 1
            msgs += r.message_count
            nbytes += len(r.body)
            offset = r.next_begin_offset
            if calls % 256 == 0 and time.perf_counter() >= deadline:
                break
        secs = time.perf_counter() - t0
        return Row(
            bench="get() scan",
            body=body_len,
            threads=1,
            batch=self.p.read_batch,
            count=msgs,
            seconds=secs,
            rate=msgs / secs,
            mb_per_sec=nbytes / secs / 1e6,
            notes=f"{calls} calls",
            record=rec,
            extra={"calls": calls, "bytes": nbytes},
        )

    # -- batches ----------------------------------------------------------------------------

    def put_batch(self, batch: int, per_message_props: bool) -> Row:
        body_len = self.p.batch_body
        base = make_body(body_len)
        # Distinct bytes objects, all built before the timed region.
        bodies = [base[:-4] + (i & 0xFFFFFFFF).to_bytes(4, "big") for i in range(batch)]
        props: str | list[str]
        if per_message_props:
            props = [uniq_props(1, i) for i in range(batch)]
        else:
            props = uniq_props(1, 0)
        rounds = max(1, self.p.batch_messages // batch)
        store, root = self.open(FlushDiskType.ASYNC_FLUSH)
        put_batch = store.put_batch
        t0 = time.perf_counter()
        for _ in range(rounds):
            put_batch(TOPIC, 0, bodies, props)
        secs = time.perf_counter() - t0
        close_secs = self.dispose(store, root)
        n = rounds * batch
        rec = record_len(body_len, PROPS_LEN)
        rate = n / secs
        return Row(
            bench="ASYNC put_batch " + ("per-msg props" if per_message_props else "shared props"),
            body=body_len,
            threads=1,
            batch=batch,
            count=n,
            seconds=secs,
            rate=rate,
            mb_per_sec=n * rec / secs / 1e6,
            notes=f"{rate / 1e6:.0%} of 1 M msg/s target",
            record=rec,
            extra={
                "ratio_to_target": rate / 1e6,
                "target_msgs_per_sec": 1_000_000,
                "per_message_properties": per_message_props,
                "close_secs": close_secs,
            },
        )

    # -- fdatasync baseline and SYNC_FLUSH --------------------------------------------------

    def fdatasync(self) -> Row:
        path = os.path.join(self.scratch, "fdatasync.bin")
        rec = make_body(1024)
        lat: list[float] = []
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        disk_before = disk_stats(self.device)
        try:
            t0 = time.perf_counter()
            end = t0 + self.p.fsync_seconds
            now = t0
            while now < end:
                os.write(fd, rec)
                os.fdatasync(fd)
                after = time.perf_counter()
                lat.append(after - now)
                now = after
            secs = now - t0
            disk = disk_delta(disk_before, self.device, len(lat))
        finally:
            os.close(fd)
            os.unlink(path)
        lat.sort()
        p50, p99 = percentile(lat, 0.5) or 0.0, percentile(lat, 0.99) or 0.0
        n = len(lat)
        return Row(
            bench="baseline write+fdatasync",
            body=None,
            threads=1,
            batch=1,
            count=n,
            seconds=secs,
            rate=n / secs,
            mb_per_sec=n * 1024 / secs / 1e6,
            notes=f"p50 {p50 * 1e6:.0f} us, p99 {p99 * 1e6:.0f} us",
            record=1024,
            extra={"p50_us": p50 * 1e6, "p99_us": p99 * 1e6, **disk},
        )

    def sync_put(self, threads: int, fsync_rate: float | None) -> Row:
        body = make_body(self.p.sync_body)
        store, root = self.open(FlushDiskType.SYNC_FLUSH)
        # Warm up: first CommitLog file and consume queues exist, next file preallocated.
        for q in range(8):
            store.put(TOPIC, q, body, properties=uniq_props(999, q))
        time.sleep(0.2 if self.p.quick else 1.0)
        quiesce()
        stop = threading.Event()
        start = threading.Barrier(threads + 1)
        counts = [0] * threads
        lats: list[list[float]] = [[] for _ in range(threads)]
        errors: list[BaseException] = []

        def worker(t: int) -> None:
            put = store.put
            lat = lats[t]
            q = t % 8
            n = 0
            clock = time.perf_counter
            try:
                start.wait()
                while not stop.is_set():
                    t0 = clock()
                    put(TOPIC, q, body, properties=uniq_props(t + 1, n))
                    lat.append(clock() - t0)
                    n += 1
            except BaseException as e:  # report, don't hang the barrier
                errors.append(e)
            counts[t] = n

        pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
        for th in pool:
            th.start()
        disk_before = disk_stats(self.device)
        start.wait()
        t0 = time.perf_counter()
        time.sleep(self.p.sync_seconds)
        stop.set()
        for th in pool:
            th.join()
        secs = time.perf_counter() - t0
        disk = disk_delta(disk_before, self.device, sum(counts))
        self.dispose(store, root)
        if errors:
            raise errors[0]
        n = sum(counts)
        all_lat = sorted(x for lat in lats for x in lat)
        p50, p99 = percentile(all_lat, 0.5) or 0.0, percentile(all_lat, 0.99) or 0.0
        rate = n / secs
        ratio = rate / fsync_rate if fsync_rate else None
        rec = record_len(self.p.sync_body, PROPS_LEN)
        notes = f"{ratio:.1f}x fdatasync; " if ratio is not None else ""
        notes += f"p50 {p50 * 1e6:.0f} us, p99 {p99 * 1e6:.0f} us"
        return Row(
            bench="SYNC put (threads)",
            body=self.p.sync_body,
            threads=threads,
            batch=1,
            count=n,
            seconds=secs,
            rate=rate,
            mb_per_sec=n * rec / secs / 1e6,
            notes=notes,
            record=rec,
            extra={
                "ratio_to_fdatasync": ratio,
                "target_ratio_to_fdatasync": 20.0 if threads >= 64 else None,
                "p50_us": p50 * 1e6,
                "p99_us": p99 * 1e6,
                "max_us": (all_lat[-1] * 1e6) if all_lat else None,
                **disk,
            },
        )


def run(p: Params, scratch: str, only: set[str]) -> list[Row]:
    b = Bench(p, scratch)
    rows: list[Row] = []
    reads: list[Row] = []

    def step(fn: Callable[[], Row]) -> Row:
        quiesce()
        row = fn()
        progress(row)
        rows.append(row)
        return row

    if "put" in only or "read" in only:
        for size in p.put_sizes:
            quiesce()
            row, read = b.put_single(size, read="read" in only)
            if "put" in only:
                progress(row)
                rows.append(row)
            if read is not None:
                progress(read)
                reads.append(read)
    if "batch" in only:
        for batch in p.batch_sizes:
            for per_msg in (False, True):
                step(partial(b.put_batch, batch, per_msg))
    rows.extend(reads)
    fsync_rate = None
    if "fsync" in only:
        fsync_rate = step(b.fdatasync).rate
    if "sync" in only:
        for threads in p.sync_threads:
            step(partial(b.sync_put, threads, fsync_rate))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short smoke run with small sizes")
    ap.add_argument(
        "--json",
        default="bench-results/store_bench_python.json",
        help="where to write the results (default: %(default)s, relative to the current dir)",
    )
    ap.add_argument("--dir", default=None, help="parent of the scratch directory (default: temp dir)")
    ap.add_argument(
        "--only",
        default=",".join(GROUPS),
        help="comma-separated groups to run: put, batch, read, fsync, sync (default: all)",
    )
    ap.add_argument("--sync-seconds", type=float, default=None, help="duration of each SYNC case")
    args = ap.parse_args(argv)
    only = {g.strip() for g in args.only.split(",") if g.strip()}
    unknown = only - set(GROUPS)
    if unknown:
        ap.error(f"unknown group(s) {sorted(unknown)}; have {list(GROUPS)}")
    p = Params.make(args.quick)
    if args.sync_seconds is not None:
        p.sync_seconds = p.fsync_seconds = args.sync_seconds

    scratch = tempfile.mkdtemp(prefix="ferromq-store-bench-py-", dir=args.dir)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"store_bench.py{' (quick)' if p.quick else ''}: scratch dir {scratch}", file=sys.stderr)
    wall = time.perf_counter()
    try:
        env = environment(scratch)
        rows = run(p, scratch, only)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    total = time.perf_counter() - wall

    text = table(rows)
    print()
    print(
        f"ferromq store benchmark (Python{', --quick' if p.quick else ''}), "
        f"{os.cpu_count()} CPUs, kernel {platform.release()}, Python {sys.version.split()[0]}, {total:.0f} s"
    )
    print(text, end="")
    doc = {
        "benchmark": "ferromq store (Python, benches/store_bench.py)",
        "started_utc": started,
        "total_seconds": round(total, 3),
        "parameters": {
            "quick": p.quick,
            "topic": TOPIC,
            "properties_bytes": PROPS_LEN,
            "put_body_sizes": p.put_sizes,
            "put_count": {str(k): v for k, v in p.put_count.items()},
            "batch_body_bytes": p.batch_body,
            "batch_sizes": p.batch_sizes,
            "batch_messages": p.batch_messages,
            "mapped_file_size_commitlog": p.file_size,
            "sync_body_bytes": p.sync_body,
            "sync_threads": p.sync_threads,
            "sync_seconds": p.sync_seconds,
            "fdatasync_seconds": p.fsync_seconds,
            "read_batch": p.read_batch,
            "read_max_seconds": p.read_max_seconds,
            "max_hash_slot_num": p.max_hash_slot_num,
            "max_index_num": p.max_index_num,
            "groups": sorted(only),
        },
        "environment": env,
        "loadavg_at_end": _read("/proc/loadavg"),
        "results": [r.to_json() for r in rows],
        "table": text,
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"results written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
