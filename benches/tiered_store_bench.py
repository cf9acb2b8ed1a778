"""Tiered storage (issue 44, RIP-57) in numbers, not tests: upload throughput, cold read-through
latency and the broker's CPU per message with tiering on and off. Everything runs against a real
S3-compatible server on 127.0.0.1 (versitygw, tools/s3_server.py, its posix backend on this disk).

1. upload: a MessageStore of this process is filled with 1 KiB messages (4 queues, KEYS and
   UNIQ_KEY as producers set them) until FILES CommitLog files of --file-mib are sealed; then
   - `server ceiling`: the same files' bytes written straight to versitygw as objects through
     pyarrow's S3 filesystem (ferromq.tables.objectstore.filesystem, 8 MiB writes, one object at a
     time), before and after the uploader's pass (their mean is the ceiling);
   - `ferromq uploader`: ferromq.tiered.uploader.Uploader (what the uploader process runs) uploads
     those sealed files: for each, index_segment (its queue units and key index), the CommitLog
     object, a size check, the keys and queues objects.
   MB/s counts CommitLog bytes (10^6 B/s) for both; CPU seconds of this process and of versitygw.
2. read-through: local retention then deletes the uploaded files (the store's retention floor set
   to what the bucket holds, files aged, DELETE_EXPIRED_COMMITLOG, clean_expired_files rounds, as
   tests/integration/test_tiered_store.py's delete_local), and pulls of 32 messages at random cold
   offsets are timed through ferromq.tiered.reader.TieredReader.read_queue (what a broker's pull
   below the local min runs): `cold` with an empty block cache (a fresh BlockCache each pull: no
   block and no object size known), `warm` the same pull again, `sequential` a consumer reading
   on from a cold offset (32 pulls in a row through the cache); against `local`, MessageStore.pull
   of 32 messages at random offsets still on local disk, in the same run.
3. broker CPU: `ferromq serve` with tieredStorageLevel=NOT_IN_DISK (bucket on versitygw) and the
   same broker without it, each sent the same N SEND_MESSAGE_V2 of 1 KiB (hot_path_bench's raw
   protocol sender, 4 connections x 16 in flight, 8 queues, this process). CPU time (utime+stime
   from /proc) of the broker process and, separately, of its uploader child, from just before the
   first send to once the bucket holds every sealed file (the tiering-off broker idles as long as
   a tiering-on broker waited for its uploader); rounds alternate which runs first. Ratios on/off
   per round, medians over rounds. The issue's goal: the broker that tiers spends <= 1.10x the
   CPU per message.

    .venv/bin/python benches/tiered_store_bench.py [--quick] [--files 8] [--file-mib 64] [--upload-rounds 3]
        [--messages 600000] [--rounds 5] [--samples 300] [--only upload,read,cpu]
        [--out benches/results/tiered_store_bench.json]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import itertools
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tools"))

import s3_server  # noqa: E402
from benchlib import cpu_seconds, free_port, loadavg, ratio, render, serving, write_results  # noqa: E402
from hot_path_bench import QUEUES as SEND_QUEUES  # noqa: E402
from hot_path_bench import TOPIC as SEND_TOPIC  # noqa: E402
from hot_path_bench import Conn, SendTemplate, _json_header  # noqa: E402

from ferromq.store import MessageStore  # noqa: E402
from ferromq.tables.objectstore import filesystem  # noqa: E402
from ferromq.tiered.bucket import QUEUES, Bucket, file_name  # noqa: E402
from ferromq.tiered.reader import READ_TIMEOUT_S, BlockCache, TieredReader  # noqa: E402
from ferromq.tiered.segments import index_segment  # noqa: E402
from ferromq.tiered.uploader import Settings, Uploader  # noqa: E402

MiB = 1024 * 1024
TOPIC = "TieredBench"
STORE_QUEUES = 4
BATCH = 64  # messages per put_batch, one queue each, queues in turn
BODY = 1024
PULL = 32
CACHE_BYTES = 64 * MiB  # tieredStoreReadCacheBytes' default
CHUNK = 8 * MiB  # Bucket.put_file's write size
CLUSTER, BROKER = "TieredBenchCluster", "tieredbench"
# A round of retention on a quiet hour and a roomy disk, after DELETE_EXPIRED_COMMITLOG.
QUIET = {"hour": 12, "physic_used_ratio": 0.1, "logics_used_ratio": 0.1}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


def ms_stats(seconds: list[float]) -> dict[str, float]:
    return {
        "n": len(seconds),
        "p50_ms": pct(seconds, 0.50) * 1000,
        "p90_ms": pct(seconds, 0.90) * 1000,
        "p99_ms": pct(seconds, 0.99) * 1000,
        "max_ms": max(seconds) * 1000 if seconds else 0.0,
        "mean_ms": statistics.fmean(seconds) * 1000 if seconds else 0.0,
    }


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def machine() -> dict[str, Any]:
    """What `write_results` does not record: CPU model, memory, the file system under /tmp."""
    import pyarrow

    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem = next(
        int(line.split()[1]) * 1024
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    fs = ""
    for line in Path("/proc/mounts").read_text().splitlines():
        dev, mount, kind, *_ = line.split()
        if mount == "/" and not fs:
            fs = f"{kind} ({dev})"
        if mount == "/tmp":
            fs = f"{kind} ({dev})"
    return {
        "cpu_model": model,
        "mem_bytes": mem,
        "tmp_fs": fs,
        "machine": platform.machine(),
        "pyarrow": pyarrow.__version__,
        "versitygw": str(s3_server.BINARY),
    }


# -- 1. upload ------------------------------------------------------------------------------------


def fill_store(store: MessageStore, files: int, file_size: int) -> int:
    """Messages until `files` CommitLog files are sealed; returns how many were put."""
    rng = random.Random(44)
    pool = [rng.randbytes(BODY) for _ in range(257)]
    n = 0
    while store.max_physical_offset < files * file_size + file_size // 2:
        q = (n // BATCH) % STORE_QUEUES
        bodies = [pool[i % len(pool)] for i in range(n, n + BATCH)]
        props = [
            f"TAGS\x01Tag{i % 4}\x02KEYS\x01order-{i}\x02UNIQ_KEY\x017F0000010000{i:020X}"
            for i in range(n, n + BATCH)
        ]
        store.put_batch(TOPIC, q, bodies, props)
        n += BATCH
    store.flush()
    return n


def raw_pass(fs: Any, prefix: str, paths: list[Path], server_pid: int) -> dict[str, Any]:
    """The files' bytes written as objects straight to the server, one after the other."""
    total = 0
    cpu0, srv0 = own_cpu(), cpu_seconds(server_pid)
    t0 = time.perf_counter()
    for path in paths:
        with open(path, "rb") as src, fs.open_output_stream(f"{prefix}/{path.name}") as dst:
            while chunk := src.read(CHUNK):
                dst.write(chunk)
                total += len(chunk)
    wall = time.perf_counter() - t0
    return {
        "bytes": total,
        "seconds": wall,
        "mb_per_s": total / wall / 1e6,
        "client_cpu_s": own_cpu() - cpu0,
        "server_cpu_s": cpu_seconds(server_pid) - srv0,
    }


def uploader_pass(settings: Settings, starts: list[int], file_size: int, server_pid: int) -> dict[str, Any]:
    uploader = Uploader(settings, io.StringIO())
    uploader.sealed = set(starts)
    cpu0, srv0 = own_cpu(), cpu_seconds(server_pid)
    t0 = time.perf_counter()
    done = 0
    while uploader.work():
        done += 1
    wall = time.perf_counter() - t0
    assert done == len(starts), (done, starts)
    total = len(starts) * file_size
    return {
        "bytes": total,
        "files": done,
        "seconds": wall,
        "mb_per_s": total / wall / 1e6,
        "client_cpu_s": own_cpu() - cpu0,
        "server_cpu_s": cpu_seconds(server_pid) - srv0,
    }


def bench_upload(
    s3: s3_server.S3Server, store: MessageStore, starts: list[int], args: argparse.Namespace
) -> tuple[dict[str, Any], Settings]:
    """Passes in turn: ceiling, uploader, ceiling, uploader, ..., ceiling (--upload-rounds
    uploader passes, each into an empty bucket); each uploader pass is compared with the mean of
    the ceiling passes on either side of it, so both see the same neighbours' load."""
    options = s3.storage_options()
    commitlog = Path(store.config.root) / "commitlog"
    paths = [commitlog / file_name(s) for s in starts]
    server_pid = s3._proc.pid  # type: ignore[union-attr]
    fs, root = filesystem(s3.bucket("ceiling"), options)
    for p in paths:  # every pass reads the files from the page cache
        p.read_bytes()
    raws = [raw_pass(fs, f"{root}/pass0", paths, server_pid)]
    ups = []
    settings = None
    for k in range(args.upload_rounds):
        settings = Settings(
            uri=f"{s3.bucket(f'tiered{k}')}/ferromq",
            cluster=CLUSTER,
            broker=BROKER,
            commitlog_dir=str(commitlog),
            options=options,
            delete_enable=False,
        )
        ups.append(uploader_pass(settings, starts, args.file_size, server_pid))
        raws.append(raw_pass(fs, f"{root}/pass{k + 1}", paths, server_pid))
        print(
            f"  upload round {k}: ceiling {raws[k]['mb_per_s']:.0f} MB/s, "
            f"uploader {ups[k]['mb_per_s']:.0f} MB/s, ceiling {raws[k + 1]['mb_per_s']:.0f} MB/s",
            flush=True,
        )
    assert settings is not None
    ratios = [
        up["mb_per_s"] / ((raws[k]["mb_per_s"] + raws[k + 1]["mb_per_s"]) / 2) for k, up in enumerate(ups)
    ]
    # What the uploader does besides copying bytes: index_segment, CPU seconds for one file.
    t = time.process_time()
    indexed = index_segment(paths[0], starts[0])
    index_cpu = time.process_time() - t
    out = {
        "server_ceiling_passes": raws,
        "uploader_passes": ups,
        "server_ceiling_mb_per_s_median": statistics.median(r["mb_per_s"] for r in raws),
        "uploader_mb_per_s_median": statistics.median(r["mb_per_s"] for r in ups),
        "uploader_over_ceiling_per_round": [round(x, 3) for x in ratios],
        "uploader_over_ceiling_median": round(statistics.median(ratios), 3),
        "server_cpu_s_per_gb_ceiling": statistics.median(r["server_cpu_s"] / r["bytes"] * 1e9 for r in raws),
        "server_cpu_s_per_gb_uploader": statistics.median(r["server_cpu_s"] / r["bytes"] * 1e9 for r in ups),
        "client_cpu_s_per_gb_ceiling": statistics.median(r["client_cpu_s"] / r["bytes"] * 1e9 for r in raws),
        "client_cpu_s_per_gb_uploader": statistics.median(r["client_cpu_s"] / r["bytes"] * 1e9 for r in ups),
        "index_segment_cpu_s_per_file": index_cpu,
        "messages_per_file": None,
        "keys_object_bytes_per_file": len(indexed.keys),
        "queues_object_bytes_per_file": len(indexed.queues),
    }
    out["messages_per_file"] = sum(r.count for r in indexed.summary.runs)
    return out, settings


# -- 2. read-through ------------------------------------------------------------------------------


def delete_local(store: MessageStore, uploaded_end: int) -> int:
    """Retention as a broker that tiers runs it: nothing above what the bucket holds goes."""
    store.raw.retention_floor = uploaded_end
    old = time.time() - 100 * 3600
    for p in (Path(store.config.root) / "commitlog").iterdir():
        os.utime(p, (old, old))
    store.execute_delete_files_manually()
    deleted = 0
    while True:  # at most 10 files a round
        report = store.clean_expired_files(**QUIET)
        deleted += report.commitlog_files_deleted
        if report.commitlog_files_deleted < 10:
            return deleted


def bench_read(
    store: MessageStore, settings: Settings, starts: list[int], args: argparse.Namespace
) -> dict[str, Any]:
    uploaded_end = starts[-1] + args.file_size
    deleted = delete_local(store, uploaded_end)
    bucket = Bucket(settings.uri, settings.cluster, settings.broker, settings.options, READ_TIMEOUT_S)
    reader = TieredReader.listing(bucket, CACHE_BYTES)
    rng = random.Random(7)
    cold_ranges = []
    local_ranges = []
    for q in range(STORE_QUEUES):
        local_min, local_max = store.min_offset(TOPIC, q), store.max_offset(TOPIC, q)
        tiered_min = reader.min_offset(TOPIC, q)
        assert tiered_min == 0 and local_min > PULL, (q, tiered_min, local_min)
        cold_ranges.append((q, 0, local_min - PULL))
        local_ranges.append((q, local_min, local_max - PULL))

    def pick(ranges: list[tuple[int, int, int]]) -> tuple[int, int]:
        q, lo, hi = rng.choice(ranges)
        return q, rng.randrange(lo, hi)

    def pull(q: int, offset: int) -> tuple[float, int, int]:
        t0 = time.perf_counter()
        got = reader.read_queue(TOPIC, q, offset, PULL, None, 1 << 62)
        took = time.perf_counter() - t0
        assert got is not None and got.status == "FOUND", (q, offset, got)
        return took, got.message_count, got.next_begin_offset

    cold: list[float] = []
    warm: list[float] = []
    seq: list[float] = []
    local: list[float] = []
    counts: list[int] = []
    local_counts: list[int] = []
    gets0 = 0
    # Cold, warm and local pulls in turn, so a stall of the (shared) machine hits each alike.
    for _ in range(args.samples):
        q, offset = pick(cold_ranges)
        reader.cache = BlockCache(bucket, CACHE_BYTES)  # empty: no block, no object size
        took, n, _ = pull(q, offset)
        cold.append(took)
        counts.append(n)
        gets0 += reader.cache.misses
        took, n2, _ = pull(q, offset)
        assert n2 == n
        warm.append(took)
        q, offset = pick(local_ranges)
        t0 = time.perf_counter()
        got = store.pull(TOPIC, q, offset, PULL)
        local.append(time.perf_counter() - t0)
        local_counts.append(got.message_count)
    # A consumer that starts at a cold offset and reads on: pulls in a row through the cache.
    for _ in range(max(1, args.samples // 32)):
        q, offset = pick(cold_ranges)
        reader.cache = BlockCache(bucket, CACHE_BYTES)
        for _ in range(32):
            took, _, offset = pull(q, offset)
            seq.append(took)
            if offset >= cold_ranges[q][2]:
                break
    return {
        "local_files_deleted": deleted,
        "local_min_physical_offset": store.min_physical_offset,
        "cold": ms_stats(cold),
        "warm": ms_stats(warm),
        "sequential": ms_stats(seq),
        "local": ms_stats(local),
        "cold_messages_per_pull_mean": statistics.fmean(counts),
        "cold_blocks_fetched_per_pull_mean": gets0 / len(cold),
        "local_messages_per_pull_mean": statistics.fmean(local_counts),
        "cold_p99_over_local_p99": ratio(pct(cold, 0.99), pct(local, 0.99)),
        "warm_p99_over_local_p99": ratio(pct(warm, 0.99), pct(local, 0.99)),
    }


# -- 3. broker CPU ---------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def uploader_pid(broker_pid: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in children(broker_pid):
            try:
                if b"ferromq.tiered.uploader" in Path(f"/proc/{child}/cmdline").read_bytes():
                    return child
            except OSError:
                continue
        time.sleep(0.05)
    raise SystemExit("the broker started no uploader")


async def send_n(port: int, n: int, connections: int = 4, inflight: int = 16) -> dict[str, Any]:
    conns = []
    for _ in range(connections):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        conns.append(Conn(r, w))
    op = 10**6
    ext = {
        "topic": SEND_TOPIC,
        "readQueueNums": str(SEND_QUEUES),
        "writeQueueNums": str(SEND_QUEUES),
        "perm": "6",
    }
    code, _, _ = await conns[0].send(_json_header(17, ext, op), b"", op)
    if code != 0:
        raise SystemExit(f"UPDATE_AND_CREATE_TOPIC answered {code}")
    tpl = SendTemplate("v2")
    body = b"x" * BODY
    opaque = itertools.count(1)
    left = [n]
    errors: dict[int, int] = {}
    last = [0]  # the highest CommitLog offset acknowledged (the end of an offsetMsgId)

    async def worker(conn: Conn, w: int) -> None:
        q = w % SEND_QUEUES
        while left[0] > 0:
            left[0] -= 1
            o = next(opaque)
            code, ext, _ = await conn.send(tpl.header(o, q), body, o)
            if code != 0:
                errors[code] = errors.get(code, 0) + 1
            else:
                last[0] = max(last[0], int(ext["msgId"][-16:], 16))

    t0 = time.perf_counter()
    await asyncio.gather(
        *(worker(c, i * connections + j) for j, c in enumerate(conns) for i in range(inflight))
    )
    wall = time.perf_counter() - t0
    for c in conns:
        await c.close()
    return {"seconds": wall, "msgs_per_s": n / wall, "errors": errors, "last_physical_offset": last[0]}


def wait_tiered(bucket: Bucket, last: int, file_size: int, timeout: float) -> float:
    """Seconds until the bucket holds every CommitLog file below the one `last` is in."""
    sealed = set(range(0, last // file_size * file_size, file_size))
    t0 = time.perf_counter()
    while True:
        if sealed <= set(bucket.starts(QUEUES)):
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > timeout:
            raise SystemExit(
                f"the uploader did not catch up in {timeout} s: {sorted(sealed)} vs {bucket.starts(QUEUES)}"
            )
        time.sleep(0.05)


def cpu_round(
    s3: s3_server.S3Server, tiered: bool, n_round: int, work: Path, args: argparse.Namespace, idle: float
) -> dict[str, Any]:
    home = work / f"broker-{n_round}-{'on' if tiered else 'off'}"
    home.mkdir(parents=True)
    uri = f"{s3.bucket(f'cpu{n_round}')}/ferromq"
    conf = [
        f"brokerClusterName={CLUSTER}",
        f"brokerName={BROKER}",
        f"storePathRootDir={home / 'store'}",
        f"rocketmqHome={home}",
        f"mappedFileSizeCommitLog={args.file_size}",
    ]
    if tiered:
        conf += [
            "tieredStorageLevel=NOT_IN_DISK",
            "tieredBackendServiceProvider=s3",
            f"tieredStoreFilePath={uri}",
            f"objectStoreEndpoint={s3.endpoint}",
            f"objectStoreAccessKey={s3.access_key}",
            f"objectStoreSecretKey={s3.secret_key}",
            f"objectStoreRegion={s3.region}",
        ]
    (home / "broker.conf").write_text("\n".join(conf) + "\n")
    port = free_port()
    out: dict[str, Any] = {"tiering": "on" if tiered else "off", "round": n_round, "messages": args.messages}
    with serving(home / "broker.conf", home / "broker.log", port, free_port()) as broker:
        up = uploader_pid(broker.pid) if tiered else None
        time.sleep(1.0)  # the uploader's start (an interpreter, its imports) is not the load's
        b0 = cpu_seconds(broker.pid)
        u0 = cpu_seconds(up) if up else 0.0
        out["loadavg_before"] = loadavg()
        sent = asyncio.run(send_n(port, args.messages))
        out.update(sent)
        out["broker_cpu_s_send"] = cpu_seconds(broker.pid) - b0
        if tiered:
            bucket = Bucket(uri, CLUSTER, BROKER, s3.storage_options())
            out["drain_s"] = wait_tiered(bucket, sent["last_physical_offset"], args.file_size, timeout=300)
            out["tiered_files"] = len(bucket.starts(QUEUES))
        else:
            time.sleep(idle)
            out["drain_s"] = idle
        out["broker_cpu_s"] = cpu_seconds(broker.pid) - b0
        out["uploader_cpu_s"] = (cpu_seconds(up) - u0) if up else 0.0
    out["broker_cpu_us_per_msg"] = out["broker_cpu_s"] / args.messages * 1e6
    out["broker_send_cpu_us_per_msg"] = out["broker_cpu_s_send"] / args.messages * 1e6
    out["uploader_cpu_us_per_msg"] = out["uploader_cpu_s"] / args.messages * 1e6
    out["total_cpu_us_per_msg"] = out["broker_cpu_us_per_msg"] + out["uploader_cpu_us_per_msg"]
    return out


def bench_cpu(s3: s3_server.S3Server, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    drains = [1.0]
    for n in range(args.rounds):
        # Even rounds tiering on first, odd rounds off first (neither is always first on a machine
        # whose load drifts). The tiering-off broker idles after its sends as long as a tiering-on
        # broker waited for its uploader (this round's, or the last one's when it runs first).
        order = (True, False) if n % 2 == 0 else (False, True)
        got: dict[bool, dict[str, Any]] = {}
        for tiered in order:
            r = cpu_round(s3, tiered, n, work, args, 0.0 if tiered else drains[-1])
            if tiered:
                drains.append(r["drain_s"])
            got[tiered] = r
            print(
                f"  round {n} {r['tiering']:<3}: {r['msgs_per_s']:.0f} msg/s, "
                f"broker {r['broker_cpu_us_per_msg']:.1f} us/msg, "
                f"uploader {r['uploader_cpu_us_per_msg']:.1f} us/msg, drain {r['drain_s']:.1f} s",
                flush=True,
            )
        rows += [got[True], got[False]]

    def med(key: str, which: str) -> float:
        return statistics.median(r[key] for r in rows if r["tiering"] == which)

    def paired(top: str, bottom: str = "broker_cpu_us_per_msg") -> float:
        ons = [r for r in rows if r["tiering"] == "on"]
        offs = [r for r in rows if r["tiering"] == "off"]
        return round(statistics.median(a[top] / b[bottom] for a, b in zip(ons, offs, strict=True)), 3)

    summary = {
        which: {
            k: med(k, which)
            for k in (
                "msgs_per_s",
                "broker_cpu_us_per_msg",
                "broker_send_cpu_us_per_msg",
                "uploader_cpu_us_per_msg",
                "total_cpu_us_per_msg",
            )
        }
        for which in ("on", "off")
    }
    ratios = {
        "broker_cpu_per_msg_on_over_off": paired("broker_cpu_us_per_msg"),
        "broker_send_window_cpu_per_msg_on_over_off": paired(
            "broker_send_cpu_us_per_msg", "broker_send_cpu_us_per_msg"
        ),
        "broker_plus_uploader_cpu_per_msg_on_over_off": paired("total_cpu_us_per_msg"),
        "msgs_per_s_on_over_off": paired("msgs_per_s", "msgs_per_s"),
    }
    ratios["goal_broker_le_1_10x_met"] = ratios["broker_cpu_per_msg_on_over_off"] <= 1.10
    ons = [r for r in rows if r["tiering"] == "on"]
    offs = [r for r in rows if r["tiering"] == "off"]
    ratios["broker_cpu_per_msg_on_over_off_per_round"] = [
        round(a["broker_cpu_us_per_msg"] / b["broker_cpu_us_per_msg"], 3)
        for a, b in zip(ons, offs, strict=True)
    ]
    ratios["broker_plus_uploader_on_over_off_per_round"] = [
        round(a["total_cpu_us_per_msg"] / b["broker_cpu_us_per_msg"], 3)
        for a, b in zip(ons, offs, strict=True)
    ]
    return {"rows": rows, "summary": summary, "ratios": ratios}


# -- main -----------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 16 MiB files, small counts")
    ap.add_argument("--files", type=int, default=8, help="sealed CommitLog files uploaded (part 1)")
    ap.add_argument("--file-mib", type=int, default=64, help="mappedFileSizeCommitLog in MiB")
    ap.add_argument("--upload-rounds", type=int, default=3, help="uploader passes (part 1)")
    ap.add_argument("--messages", type=int, default=600_000, help="messages sent to each broker (part 3)")
    ap.add_argument("--rounds", type=int, default=5, help="tiering on/off pairs (part 3)")
    ap.add_argument("--samples", type=int, default=300, help="timed pulls per case (part 2)")
    ap.add_argument("--only", default="upload,read,cpu")
    ap.add_argument("--dir", default=None, help="parent of the scratch directory")
    ap.add_argument("--out", default="benches/results/tiered_store_bench.json")
    args = ap.parse_args()
    if args.quick:
        args.files, args.file_mib, args.messages, args.rounds, args.samples = 4, 16, 60_000, 1, 60
        args.upload_rounds = 1
    args.file_size = args.file_mib * MiB
    only = set(args.only.split(","))
    s3_server.build()
    doc: dict[str, Any] = {
        "bench": "tiered_store",
        "params": {
            k: getattr(args, k)
            for k in ("quick", "files", "file_mib", "upload_rounds", "messages", "rounds", "samples", "only")
        }
        | {
            "body_bytes": BODY,
            "pull_messages": PULL,
            "store_queues": STORE_QUEUES,
            "read_cache_bytes": CACHE_BYTES,
            "send_queues": SEND_QUEUES,
            "send_connections": 4,
            "send_inflight_per_connection": 16,
        },
        "machine": machine(),
        "loadavg_start": loadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="tiered-store-bench-", dir=args.dir) as tmp:
        work = Path(tmp)
        with s3_server.start_s3(work / "s3") as s3:
            if only & {"upload", "read"}:
                with MessageStore(
                    work / "store",
                    mapped_file_size_commitlog=args.file_size,
                    max_hash_slot_num=500_000,
                    max_index_num=2_000_000,
                ) as store:
                    t = time.perf_counter()
                    put = fill_store(store, args.files, args.file_size)
                    print(f"filled the store: {put} messages in {time.perf_counter() - t:.1f} s", flush=True)
                    starts = [i * args.file_size for i in range(args.files)]
                    doc["messages_in_store"] = put
                    upload, settings = bench_upload(s3, store, starts, args)
                    doc["upload"] = upload
                    if "read" in only:
                        doc["read"] = bench_read(store, settings, starts, args)
                        print("read-through done", flush=True)
            if "cpu" in only:
                doc["cpu"] = bench_cpu(s3, work, args)
    doc["loadavg_end"] = loadavg()
    print()
    print(report(doc))
    write_results(args.out, doc)


def report(doc: dict[str, Any]) -> str:
    rows: list[list[str]] = []
    if "upload" in doc:
        u = doc["upload"]
        for name, passes in (
            ("upload: server ceiling (pyarrow S3 -> versitygw), median", u["server_ceiling_passes"]),
            ("upload: ferromq Uploader (index + 3 objects), median", u["uploader_passes"]),
        ):
            mbs = statistics.median(r["mb_per_s"] for r in passes)
            rows.append(
                [
                    name,
                    f"{mbs:.0f} MB/s",
                    f"{len(passes)} passes of {passes[0]['bytes'] / 1e6:.0f} MB: "
                    + ", ".join(f"{r['mb_per_s']:.0f}" for r in passes)
                    + " MB/s",
                ]
            )
        rows.append(
            [
                "upload: uploader / ceiling (median of rounds)",
                f"x{u['uploader_over_ceiling_median']:.3f}",
                f"CPU s per GB, uploader vs ceiling: client {u['client_cpu_s_per_gb_uploader']:.2f} vs "
                f"{u['client_cpu_s_per_gb_ceiling']:.2f}, versitygw "
                f"{u['server_cpu_s_per_gb_uploader']:.2f} vs {u['server_cpu_s_per_gb_ceiling']:.2f}; "
                f"index_segment {u['index_segment_cpu_s_per_file']:.2f} s CPU per file",
            ]
        )
    if "read" in doc:
        r = doc["read"]
        for name in ("cold", "warm", "sequential", "local"):
            s = r[name]
            label = {
                "cold": "pull 32 from the bucket, empty cache",
                "warm": "pull 32 from the bucket, warm cache (same pull again)",
                "sequential": "pull 32 from the bucket, consumer reading on",
                "local": "pull 32 from local disk (MessageStore.pull)",
            }[name]
            rows.append(
                [
                    f"read: {label}",
                    f"p50 {s['p50_ms']:.3f} ms",
                    f"p90 {s['p90_ms']:.3f} ms, p99 {s['p99_ms']:.3f} ms, "
                    f"max {s['max_ms']:.2f} ms (n={s['n']})",
                ]
            )
        rows.append(
            [
                "read: cold p99 / local p99",
                f"x{r['cold_p99_over_local_p99']:.1f}",
                f"{r['cold_blocks_fetched_per_pull_mean']:.1f} blocks fetched per cold pull; "
                f"{r['local_files_deleted']} local files deleted first",
            ]
        )
    if "cpu" in doc:
        c = doc["cpu"]
        for which in ("off", "on"):
            s = c["summary"][which]
            rows.append(
                [
                    f"cpu: ferromq serve, tiering {which}",
                    f"{s['broker_cpu_us_per_msg']:.2f} us/msg",
                    f"uploader {s['uploader_cpu_us_per_msg']:.2f} us/msg, {s['msgs_per_s']:.0f} msg/s",
                ]
            )
        q = c["ratios"]
        rows.append(
            [
                "cpu: broker on/off",
                f"x{q['broker_cpu_per_msg_on_over_off']:.3f}",
                f"median of rounds; goal <= 1.10x {'met' if q['goal_broker_le_1_10x_met'] else 'NOT met'}; "
                f"per round {', '.join(f'{x:.2f}' for x in q['broker_cpu_per_msg_on_over_off_per_round'])}; "
                f"send window alone x{q['broker_send_window_cpu_per_msg_on_over_off']:.3f}",
            ]
        )
        rows.append(
            [
                "cpu: broker+uploader on / broker off",
                f"x{q['broker_plus_uploader_cpu_per_msg_on_over_off']:.3f}",
                "per round "
                + ", ".join(f"{x:.2f}" for x in q["broker_plus_uploader_on_over_off_per_round"])
                + f"; msg/s on/off x{q['msgs_per_s_on_over_off']:.3f}",
            ]
        )
    return render(["case", "number", "detail"], rows)


if __name__ == "__main__":
    main()
