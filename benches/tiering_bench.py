"""What table topics cost per row: tiering, and the compaction that small files call for.

One store of N messages (default 1,000,000 x 1 KiB, 8 queues) whose bodies are distinct JSON order
events (snappy compresses them about 3x, as real JSON; b'x' bodies would be dictionary-encoded to
nothing) is tiered into its Delta table by the broker's tiering service, in this process, two ways:

- `whole files` (the default, tableTopicMinRows=0): each queue's rows go in as files of
  tableTopicTargetFileBytes, which compaction leaves as they are;
- `small files` (tableTopicMinRows > 0, commits of 16 MiB of records per queue, as a busy broker
  committing every second makes them): compaction then merges them, reading, decoding and encoding
  every row a second time.

Each mode's table is then compacted as the broker's schedule does (Delta optimize towards
tableTopicTargetFileBytes). CPU seconds per row (this process, every thread: delta-rs compacts on
several) for tiering, compaction and both, per codec (tableTopicCompression). Prints a table and
writes JSON.

    .venv/bin/python benches/tiering_bench.py [--messages N] [--target-mib 32] [--codecs snappy,none]
        [--repeat 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import write_results

TOPIC = "TieringBench"
QUEUES = 8
BATCH = 256
POOL = 8191  # distinct bodies, a prime: every queue gets all of them in turn


def json_bodies(size: int, count: int = POOL, seed: int = 7) -> list[bytes]:
    """Distinct JSON order events of exactly `size` bytes (a random hex note fills the rest)."""
    rng = random.Random(seed)
    products = ["Linen shirt", "Espresso beans 1kg", "Running shoes", "USB-C cable 2m", "Desk lamp"]
    out = []
    for seq in range(count):
        event = {
            "type": rng.choice(["order.created", "order.paid", "order.shipped"]),
            "orderId": f"ORD-20261126-{100_000 + seq:08d}",
            "user": {"id": f"u-{rng.randrange(10**6)}", "tier": rng.choice(["gold", "silver", "standard"])},
            "items": [
                {
                    "sku": f"SKU-{rng.randrange(40_000):05d}",
                    "name": rng.choice(products),
                    "qty": rng.randrange(1, 4),
                }
                for _ in range(rng.randrange(1, 6))
            ],
            "amount": round(rng.uniform(2, 900), 2),
            "traceId": rng.randbytes(16).hex(),
        }
        text = json.dumps(event, separators=(",", ":"))[:-1] + ',"note":"'
        note = rng.randbytes(size).hex()[: max(0, size - len(text) - 2)]
        out.append((text + note + '"}').encode()[:size])
    return out


def build_store(root: Path, messages: int, body_size: int) -> None:
    from ferromq.store import MessageStore

    pool = json_bodies(body_size)
    with MessageStore(root) as store:
        n = 0
        while n < messages:
            count = min(BATCH, messages - n)
            bodies = [pool[i % len(pool)] for i in range(n, n + count)]
            props = [
                f"TAGS\x01Tag{i % 4}\x02KEYS\x01order-{i}\x02UNIQ_KEY\x017F0000010000{i:020X}"
                for i in range(n, n + count)
            ]
            store.put_batch(TOPIC, (n // BATCH) % QUEUES, bodies, props)
            n += count
        store.flush()


def run_mode(root: Path, tables: Path, mode: str, codec: str, target_bytes: int) -> dict[str, Any]:
    """Tiers the store into a fresh table in `mode`, then compacts it: CPU per row of each."""
    from ferromq.broker.config import load_broker_config
    from ferromq.store import MessageStore
    from ferromq.tables.layout import table_uri
    from ferromq.tables.tiering import TieringService, TieringSettings
    from ferromq.tables.writer import TopicTable

    shutil.rmtree(tables, ignore_errors=True)
    keys: dict[str, Any] = {
        "store_path_root_dir": str(root),
        "table_topics": TOPIC,
        "table_topic_path": str(tables),
        "table_topic_compression": codec,
        "table_topic_max_delay_seconds": 0,  # the backlog's last rows too, once no whole file is left
        "table_topic_compaction_interval_seconds": 0,
        "table_topic_compaction_files": 0,
        "table_topic_target_file_bytes": target_bytes,
    }
    if mode == "small files":
        keys.update(table_topic_min_rows=1, table_topic_max_commit_bytes=QUEUES * (16 << 20))
    cfg = load_broker_config(**keys)
    with MessageStore(root) as store:
        service = TieringService(store.raw, TieringSettings.of(cfg, cfg.store_path_root_dir))
        c = time.process_time()
        while service.run_once():
            pass
        tier_cpu = time.process_time() - c
        [progress] = service.progress()
    table = TopicTable(table_uri(str(tables), TOPIC), TOPIC, codec)
    files = len(table.table.file_uris())
    c = time.process_time()
    merged = table.compact(cfg.table_topic_target_file_bytes)
    compaction_cpu = time.process_time() - c
    rows = progress.rows_tiered
    return {
        "mode": mode,
        "codec": codec,
        "rows": rows,
        "files": files,
        "files_compacted": merged,
        "table_bytes": sum(Path(f.removeprefix("file://")).stat().st_size for f in table.table.file_uris()),
        "tier_us_per_row": tier_cpu / rows * 1e6,
        "compaction_us_per_row": compaction_cpu / rows * 1e6,
        "total_us_per_row": (tier_cpu + compaction_cpu) / rows * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument(
        "--target-mib",
        type=int,
        default=32,
        help="tableTopicTargetFileBytes in MiB (default 32, not the broker's 128: a million rows fill "
        "a few whole files per queue)",
    )
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--codecs", default="snappy")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each case (the lowest total counts)")
    ap.add_argument("--json", default="bench-results/tiering_bench.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ferromq-tiering-") as tmp:
        root = Path(tmp) / "store"
        # Imports and first calls of pyarrow, deltalake and the store outside the timed runs.
        build_store(Path(tmp) / "warm", 2000, args.body_size)
        run_mode(Path(tmp) / "warm", Path(tmp) / "tables", "whole files", "snappy", args.target_mib << 20)
        t = time.perf_counter()
        build_store(root, args.messages, args.body_size)
        print(
            f"store of {args.messages:,} x {args.body_size} B JSON events in {time.perf_counter() - t:.1f} s"
        )
        head = f"{'mode':<13}{'codec':<8}{'files':>6}{'merged':>7}{'MB':>7}"  # MB: the table, compacted
        print(f"{head}{'tier':>8}{'compact':>9}{'total':>8}  us/row")
        results = []
        for codec in args.codecs.split(","):
            for mode in ("whole files", "small files"):
                runs = [
                    run_mode(root, Path(tmp) / "tables", mode, codec, args.target_mib << 20)
                    for _ in range(args.repeat)
                ]
                best = min(runs, key=lambda r: r["total_us_per_row"])
                best["runs_total_us_per_row"] = [round(r["total_us_per_row"], 3) for r in runs]
                results.append(best)
                print(
                    f"{mode:<13}{codec:<8}{best['files']:>6}{best['files_compacted']:>7}"
                    f"{best['table_bytes'] / 1e6:>7.0f}{best['tier_us_per_row']:>8.2f}"
                    f"{best['compaction_us_per_row']:>9.2f}{best['total_us_per_row']:>8.2f}",
                    flush=True,
                )
    for codec in args.codecs.split(","):
        whole, small = (
            next(r for r in results if r["codec"] == codec and r["mode"] == m)
            for m in ("whole files", "small files")
        )
        ratio = whole["total_us_per_row"] / small["total_us_per_row"]
        print(f"{codec}: whole files cost {ratio:.2f}x what small files and their compaction cost")
    write_results(
        args.json,
        {
            "params": vars(args) | {"machine": platform.machine(), "when": time.strftime("%Y-%m-%d")},
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
