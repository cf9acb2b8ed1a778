"""Spark scan rate of the ferromq data source, against Parquet and the Python pull consumer.

One store of N messages (default 1,000,000 x 1 KiB, 8 queues, tags/keys/UNIQ_KEY like a producer
sets them) is scanned, in the same run and the same local[2] Spark session, by:

- `ferromq`: `spark.read.format("ferromq")` over the store files (all 17 columns);
- `parquet`: Spark reading the same rows, written once to Parquet (snappy) before timing;
- `pull`: `ferromq.client.PullConsumer` draining every queue from a `ferromq serve` on the store;
- `read_topic` (table topics, unless --skip-tables): the store first tiered into its Delta table by
  the broker's tiering service (run in this process; its rows/s and rows per CPU second are
  reported), then `ferromq.spark.read_topic` (the table's Parquet files, the log's tail: empty);
- `read_topic compacted`: the same on a copy of the table compacted as the broker compacts it on
  its schedule (tableTopicCompactionIntervalSeconds; the files of its commits merged).

Four Spark scans: `rows` materializes every row into a sink that drops it (`write.format("noop")`),
`columns` aggregates every value of every column, `bodies` counts the rows and sums the bodies'
lengths, `one queue` sums the bodies' lengths of one queue of eight (a selective query). Each is run
--repeat times after a warm-up, readers interleaved, and the best run counts (page cache warm).
Each run also counts the CPU seconds of Spark's processes (the JVM, its Python daemon and workers,
live or ended): on a machine shared with other work, CPU per row varies far less than the wall
clock, so the ratio of CPU per row is reported next to the ratio of rates.
Prints a table, writes JSON and a PNG bar chart, and the ratios ferromq / parquet (target >= 0.6),
read_topic / parquet (target >= 0.9) and read_topic / ferromq (target >= 10 for `one queue`).

    .venv/bin/python benches/spark_bench.py [--messages N] [--repeat R] [--skip-tables] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import free_port, serving

TOPIC = "SparkBench"
QUEUES = 8
BATCH = 256


def build_store(root: Path, messages: int, body_size: int, tags: int = 4) -> int:
    """Writes the store with put_batch; returns the body bytes written."""
    from ferromq.store import MessageStore

    rnd = os.urandom(body_size * 64)
    written = 0
    with MessageStore(root) as store:
        n = 0
        while n < messages:
            q = (n // BATCH) % QUEUES
            count = min(BATCH, messages - n)
            bodies = [
                rnd[(i % 64) * body_size // 2 :][:body_size].ljust(body_size, b"x")
                for i in range(n, n + count)
            ]
            props = [
                f"TAGS\x01Tag{i % tags}\x02KEYS\x01order-{i}\x02UNIQ_KEY\x017F0000010000{i:020X}"
                for i in range(n, n + count)
            ]
            store.put_batch(TOPIC, q, bodies, props)
            written += sum(map(len, bodies))
            n += count
        store.flush()
    return written


def spark_session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from ferromq.spark import FerroMQDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("ferromq-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.ui.showConsoleProgress", "false")
        # Python workers stream Arrow batches to the JVM through this buffer (64 KiB by default);
        # a larger one helps any Python data source moving bulk data. Parquet does not use it.
        .config("spark.buffer.size", str(1 << 20))
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(FerroMQDataSource)
    return spark


def every_column(df: Any) -> Any:
    """An aggregate that reads every value of every column (Parquet cannot skip any)."""
    exprs = []
    for f in df.schema.fields:
        kind = f.dataType.typeName()
        if kind in ("string", "binary"):
            exprs.append(f"sum(length({f.name}))")
        elif kind == "map":
            exprs.append(f"sum(size({f.name}))")
        elif kind == "timestamp":
            exprs.append(f"max({f.name})")
        else:
            exprs.append(f"sum({f.name})")
    return df.selectExpr(*exprs)


SCANS = {
    # Every row materialized and handed to a sink that drops it.
    "rows": lambda df: df.write.format("noop").mode("overwrite").save(),
    # Every column aggregated.
    "columns": lambda df: every_column(df).collect(),
    # Issue 30's full scan: the rows counted and the bodies' lengths summed.
    "bodies": lambda df: df.selectExpr("count(*)", "sum(length(body))").collect(),
    # A selective query: one column of one queue of eight.
    "one queue": lambda df: df.where("queue_id = 3").selectExpr("sum(length(body))").collect(),
}


def tier_store(root: Path) -> dict[str, Any]:
    """Tiers the whole store into its table with the broker's tiering service (in this process,
    commits of tableTopicMaxCommitBytes, the default): rows/s and rows per CPU second."""
    from ferromq.broker.config import load_broker_config
    from ferromq.store import MessageStore
    from ferromq.tables.tiering import TieringService, TieringSettings

    cfg = load_broker_config(
        store_path_root_dir=str(root),
        table_topics=TOPIC,
        table_topic_min_rows=1,
        table_topic_compaction_interval_seconds=0,
    )
    with MessageStore(root) as store:
        service = TieringService(store.raw, TieringSettings.of(cfg, cfg.store_path_root_dir))
        c, t = time.process_time(), time.perf_counter()
        while service.run_once():
            pass
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        [progress] = service.progress()
    return {
        "rows": progress.rows_tiered,
        "commits": progress.commits,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "rows_per_s": progress.rows_tiered / wall,
        "rows_per_cpu_s": progress.rows_tiered / cpu,
    }


def tree_cpu_seconds(root_pid: int) -> float:
    """CPU seconds (user + system) of a process and its descendants, counting the ended ones
    their parents reaped: Spark's JVM, its Python daemon and the workers it forks."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
        todo.extend(children.get(pid, []))
    return total / os.sysconf("SC_CLK_TCK")


def compacted_copy(root: Path, work: Path) -> tuple[Path, dict[str, Any]]:
    """A copy of the store's tables compacted as the broker's tiering compacts them on its
    schedule (tableTopicTargetFileBytes, the default): its root, and the files before and after."""
    from ferromq.broker.config import BrokerConfig
    from ferromq.tables.layout import table_root, table_uri
    from ferromq.tables.writer import TopicTable

    copy = work / "compacted"
    shutil.copytree(table_root(root), copy)
    table = TopicTable(table_uri(str(copy), TOPIC), TOPIC)
    before = len(table.table.file_uris())
    c = time.process_time()
    table.compact(BrokerConfig.table_topic_target_file_bytes)
    cpu = time.process_time() - c
    return copy, {"files_before": before, "files_after": len(table.table.file_uris()), "cpu_s": round(cpu, 3)}


def timed_scans(
    loaders: dict[str, Any], repeat: int, jvm_pid: int
) -> tuple[dict[tuple[str, str], list[float]], dict[tuple[str, str], list[float]]]:
    """Runs each scan of each reader once to warm up, then `repeat` rounds, readers interleaved
    so that noise from the machine falls on both. A fresh DataFrame each time (Spark would
    otherwise reuse a finished query's shuffle output). Returns the wall and the CPU seconds."""
    runs: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    for scan in SCANS.values():
        for load in loaders.values():
            scan(load())
    for _ in range(repeat):
        for scan_name, scan in SCANS.items():
            for reader, load in loaders.items():
                c, t = tree_cpu_seconds(jvm_pid), time.perf_counter()
                scan(load())
                runs.setdefault((reader, scan_name), []).append(time.perf_counter() - t)
                cpu.setdefault((reader, scan_name), []).append(tree_cpu_seconds(jvm_pid) - c)
    return runs, cpu


async def drain_with_pull_consumer(namesrv: str, messages: int, timeout: float) -> float:
    from ferromq.client import Admin, PullConsumer

    async with Admin(namesrv) as admin:  # the store was written directly: give the broker the topic
        await admin.create_topic(TOPIC, queue_nums=QUEUES)
        await asyncio.sleep(1.0)
    consumer = PullConsumer("spark_bench_pull", namesrv, pull_batch_size=32)
    await consumer.start()
    try:
        queues = await consumer.fetch_queues(TOPIC)
        consumer.assign(queues)
        for q in queues:
            await consumer.seek_to_begin(q)
        got = 0
        t = time.perf_counter()
        deadline = t + timeout
        while got < messages and time.perf_counter() < deadline:
            got += len(await consumer.poll(timeout=1.0))
        elapsed = time.perf_counter() - t
        if got < messages:
            raise RuntimeError(f"pull consumer got {got} of {messages} messages in {timeout} s")
        return elapsed
    finally:
        await consumer.stop()


def pull_scan(root: Path, messages: int, work: Path) -> float:
    ns_port, port = free_port(), free_port()
    # The store was written with RocketMQ's file sizes (MessageStore's defaults).
    args = ("--profile", "rocketmq", "--store", str(root))
    with serving(None, work / "serve.log", port, ns_port, args=args):
        return asyncio.run(drain_with_pull_consumer(f"127.0.0.1:{ns_port}", messages, timeout=1200))


def plot(results: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {
        "ferromq": "#c0392b",
        "parquet": "#2980b9",
        "pull consumer": "#7f8c8d",
        "read_topic": "#27ae60",
        "read_topic compacted": "#1e8449",
    }
    fig, axes = plt.subplots(1, 2, figsize=(max(10, len(results) * 0.9), 3.8))
    labels = [f"{r['reader']}\n{r['scan']} scan" for r in results]
    for ax, key, label in ((axes[0], "rows_per_s", "rows/s"), (axes[1], "mb_per_s", "body MB/s")):
        ax.bar(labels, [r[key] for r in results], color=[colors[r["reader"]] for r in results])
        ax.set_title(label)
        ax.tick_params(axis="x", labelsize=7)
        for i, r in enumerate(results):
            ax.annotate(f"{r[key]:,.0f}", (i, r[key]), ha="center", va="bottom", fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-pull", action="store_true", help="leave out the pull consumer")
    ap.add_argument("--skip-tables", action="store_true", help="leave out tiering and read_topic")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("results"))
    ap.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferromq-spark-bench-", dir=args.dir))
    try:
        root = work / "store"
        t = time.perf_counter()
        body_bytes = build_store(root, args.messages, args.body_size)
        print(f"store of {args.messages:,} x {args.body_size} B written in {time.perf_counter() - t:.1f} s")
        tiering = None
        if not args.skip_tables:
            tiering = tier_store(root)
            print(
                f"tiered {tiering['rows']:,} rows in {tiering['commits']} commits: "
                f"{tiering['rows_per_s']:,.0f} rows/s, {tiering['rows_per_cpu_s']:,.0f} rows per CPU second"
            )
        spark = spark_session()
        parquet_dir = work / "parquet"
        loaders = {
            "ferromq": lambda: (
                spark.read.format("ferromq").option("path", str(root)).option("topic", TOPIC).load()
            ),
            "parquet": lambda: spark.read.parquet(str(parquet_dir)),
        }
        if tiering is not None:
            from ferromq.spark import read_topic

            loaders["read_topic"] = lambda: read_topic(spark, TOPIC, path=str(root))
            compacted, tiering["compaction"] = compacted_copy(root, work)
            print(f"compacted copy: {tiering['compaction']}")
            loaders["read_topic compacted"] = lambda: read_topic(
                spark, TOPIC, path=str(root), table_path=str(compacted)
            )
        loaders["ferromq"]().write.parquet(str(parquet_dir))
        assert loaders["parquet"]().count() == args.messages
        load_before = os.getloadavg()
        runs, cpu = timed_scans(loaders, args.repeat, spark.sparkContext._gateway.proc.pid)
        load_after = os.getloadavg()
        spark.stop()
        if not args.skip_pull:
            runs[("pull consumer", "rows")] = [pull_scan(root, args.messages, work)]
        results = []
        for (reader, scan), times in runs.items():
            best = min(times)
            cpu_runs = cpu.get((reader, scan))
            results.append(
                {
                    "reader": reader,
                    "scan": scan,
                    "runs_s": [round(x, 3) for x in times],
                    "best_s": round(best, 3),
                    "rows_per_s": args.messages / best,
                    "mb_per_s": body_bytes / best / 1e6,
                    "cpu_s": None if cpu_runs is None else [round(x, 2) for x in cpu_runs],
                    "rows_per_cpu_s": None if cpu_runs is None else args.messages / min(cpu_runs),
                }
            )
        by = {(r["reader"], r["scan"]): r for r in results}
        ratios = {
            scan: by[("ferromq", scan)]["rows_per_s"] / by[("parquet", scan)]["rows_per_s"] for scan in SCANS
        }
        print(f"\n{'reader':<22}{'scan':<9}{'best s':>8}{'rows/s':>13}{'body MB/s':>11}   runs (s)")
        for r in results:
            rate = f"{r['rows_per_s']:>13,.0f}{r['mb_per_s']:>11,.1f}"
            print(f"{r['reader']:<22}{r['scan']:<9}{r['best_s']:>8.2f}{rate}   {r['runs_s']}")
        cpu_ratios = {
            scan: by[("ferromq", scan)]["rows_per_cpu_s"] / by[("parquet", scan)]["rows_per_cpu_s"]
            for scan in SCANS
        }
        for scan, ratio in ratios.items():
            target = " (target >= 0.6)" if scan in ("rows", "columns") else ""
            print(
                f"ferromq / parquet, {scan} scan: {ratio:.2f}x by rows/s, {cpu_ratios[scan]:.2f}x by rows "
                f"per CPU second{target}"
            )
        table_ratios: dict[str, dict[str, float]] = {}
        compacted_ratios: dict[str, dict[str, float]] = {}
        if tiering is not None:
            for reader, out in (("read_topic", table_ratios), ("read_topic compacted", compacted_ratios)):
                for scan in SCANS:
                    rate = by[(reader, scan)]["rows_per_s"]
                    out[scan] = {
                        "over_parquet": rate / by[("parquet", scan)]["rows_per_s"],
                        "over_parquet_by_cpu": by[(reader, scan)]["rows_per_cpu_s"]
                        / by[("parquet", scan)]["rows_per_cpu_s"],
                        "over_ferromq": rate / by[("ferromq", scan)]["rows_per_s"],
                    }
                    print(
                        f"{reader}, {scan} scan: {out[scan]['over_parquet']:.2f}x parquet "
                        f"({out[scan]['over_parquet_by_cpu']:.2f}x by CPU; target >= 0.9), "
                        f"{out[scan]['over_ferromq']:.1f}x the ferromq source"
                    )
        print(f"load average {load_before} before the scans, {load_after} after")
        if ("pull consumer", "rows") in by:
            vs_pull = by[("ferromq", "rows")]["rows_per_s"] / by[("pull consumer", "rows")]["rows_per_s"]
            print(f"ferromq rows scan / pull consumer: {vs_pull:.1f}x")
        args.out.mkdir(parents=True, exist_ok=True)
        report = {
            "bench": "spark_scan",
            "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
            },
            "params": {
                "messages": args.messages,
                "body_size": args.body_size,
                "queues": QUEUES,
                "repeat": args.repeat,
                "tables": tiering is not None,
            },
            "results": results,
            "ratio_ferromq_over_parquet": ratios,
            "ratio_ferromq_over_parquet_by_cpu": cpu_ratios,
            "tiering": tiering,
            "ratios_read_topic": table_ratios,
            "ratios_read_topic_compacted": compacted_ratios,
            "loadavg_before": load_before,
            "loadavg_after": load_after,
        }
        (args.out / "spark_bench.json").write_text(json.dumps(report, indent=2))
        plot(
            results,
            args.out / "spark_bench.png",
            f"Spark scan of {args.messages:,} x {args.body_size} B, local[2]",
        )
        print(f"wrote {args.out / 'spark_bench.json'} and {args.out / 'spark_bench.png'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
