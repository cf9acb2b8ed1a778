"""Expiring lite topics at scale: N lite topics (one message each, made by crates/loadgen through
`ferromq serve`, as lite_bench.py makes them), each with a consumer offset, then all of them idle past
their expiration. In the same run, on copies of the same store:
- one by one (as the broker expired them before): `delete_topic` and `ConsumerOffsets.remove_topic` for
  each light message queue, timed on the first `--sample` of them (each call looked at every lite topic
  or offset, so the rest are extrapolated linearly: a lower bound);
- in one pass (now): `idle_lmqs` (the scan, in Rust), `delete_lmqs` (chunks of 10,000 under the put
  lock, each judged idle again) and `remove_topics`.
Numbers, not pass/fail.

    .venv/bin/python benches/lite_expiry_bench.py [--count N] [--sample N]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

from benchlib import free_port, render, serving, write_results
from lite_bench import LMQ_CONF, TOPIC, measure

from ferromq import _store
from ferromq.store import MessageStore

OUT = Path(__file__).resolve().parent / "results" / "lite_expiry_bench.json"
PREFIX = f"%LMQ%${TOPIC}$"


def make_store(work: Path, count: int) -> Path:
    store = work / "store"
    conf = work / "ferromq.conf"
    settings = {**LMQ_CONF, "storePathRootDir": store, "brokerName": "lite"}
    conf.write_text("\n".join(f"{k}={v}" for k, v in settings.items()))
    port, ns_port = free_port(), free_port()
    with serving(conf, work / "serve.log", port, ns_port) as broker:
        measure("ferromq", port, broker.pid, store, count, 900)
    return store


def offsets_of(names: list[str]) -> _store.ConsumerOffsets:
    table = _store.ConsumerOffsets()
    for name in names:
        table.commit("LiteGroup", name, 0, 1)
    return table


def one_by_one(store_dir: Path, sample: int) -> dict[str, Any]:
    store = MessageStore(store_dir, enable_lmq=True, enable_multi_dispatch=True)
    names = [name for name, *_ in store.lmq_infos(PREFIX)]
    table = offsets_of(names)
    t = time.perf_counter()
    for name in names[:sample]:
        store.delete_topic(name)
    store_s = time.perf_counter() - t
    t = time.perf_counter()
    for name in names[:sample]:
        table.remove_topic(name)
    offsets_s = time.perf_counter() - t
    store.close()
    scale = len(names) / sample
    return {
        "lite_topics": len(names),
        "sample": sample,
        "sample_s": round(store_s + offsets_s, 2),
        "store_s": round(store_s * scale, 1),
        "offsets_s": round(offsets_s * scale, 1),
        "total_s": round((store_s + offsets_s) * scale, 1),
    }


def one_pass(store_dir: Path) -> dict[str, Any]:
    store = MessageStore(store_dir, enable_lmq=True, enable_multi_dispatch=True)
    table = offsets_of([name for name, *_ in store.lmq_infos(PREFIX)])
    cutoff = int(time.time() * 1000)
    t = time.perf_counter()
    idle = store.idle_lmqs(PREFIX, cutoff)
    scan_s = time.perf_counter() - t
    t = time.perf_counter()
    deleted = store.delete_lmqs(idle, idle_until_ms=cutoff)
    store_s = time.perf_counter() - t
    t = time.perf_counter()
    table.remove_topics(set(deleted))
    offsets_s = time.perf_counter() - t
    assert store.lmq_count() == 0 and not table.snapshot(), "every lite topic expired"
    store.close()
    return {
        "lite_topics": len(deleted),
        "scan_s": round(scan_s, 2),
        "store_s": round(store_s, 2),
        "offsets_s": round(offsets_s, 2),
        "total_s": round(scan_s + store_s + offsets_s, 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=1_000_000, help="lite topics")
    p.add_argument("--sample", type=int, default=1_000, help="lite topics deleted one by one")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="lite-expiry-bench-") as tmp:
        work = Path(tmp)
        made = make_store(work, args.count)
        copy = work / "copy"
        shutil.copytree(made, copy)
        before = one_by_one(made, args.sample)
        now = one_pass(copy)
    speedup = round(before["total_s"] / now["total_s"]) if now["total_s"] else None
    head = ["way", "lite topics", "scan s", "store s", "offsets s", "total s"]

    def row(way: str, r: dict[str, Any]) -> list[str]:
        cells = [r.get("scan_s", "-"), r["store_s"], r["offsets_s"], r["total_s"]]
        return [way, f"{r['lite_topics']:,}", *map(str, cells)]

    rows = [row("one by one (extrapolated)", before), row("one pass", now)]
    print(render(head, rows))
    print(f"one pass is {speedup:,}x faster" if speedup else "")
    doc = {"benchmark": "lite_expiry_bench", "one_by_one": before, "one_pass": now, "speedup": speedup}
    write_results(args.out, doc)


if __name__ == "__main__":
    main()
